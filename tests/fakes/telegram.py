"""A fake Telegram Bot API on 127.0.0.1, for driving the real python-telegram-bot in tests.

Why a server and not a mocked `Bot`: the bot's behaviour under Telegram's rules (flood limits,
"message is not modified", HTML that does not parse, 4096 UTF-16 units) is exactly what we want
to prove, and those rules live on the wire. The fake therefore answers with Telegram's own error
texts and validates Telegram's HTML subset the way tdlib's `parse_html` does, so a reply that
passes here has a fair chance of passing the real thing.

PTB 22.8 posts `application/x-www-form-urlencoded` bodies in which strings are sent as is and every
other value is JSON-encoded; JSON bodies and multipart forms are decoded too.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aiohttp import ClientSession, ClientTimeout, web

from primitives.tasks import stop_task
from primitives.waits import wait_or_timeout

MAX_TEXT_UTF16 = 4096
# A draft is a preview: it vanishes this long after its last update unless a message replaces it.
DRAFT_LIFETIME_S = 30.0
# Telegram's answer to sendMessageDraft outside a private chat (nullclaw/nullclaw#626).
DRAFT_PEER_INVALID = "Bad Request: TEXTDRAFT_PEER_INVALID"
# Bots may download files up to 20 MB through getFile on the public Bot API.
MAX_DOWNLOAD_BYTES = 20 * 1024 * 1024

# A real callback_query update (telegram-rs/telegram-bot's update assets, see
# ../shared/testdata/tg-updates/SOURCE.txt): the shape button presses are built on.
REAL_CALLBACK_UPDATE = (
    Path(__file__).resolve().parents[2].parent
    / "shared"
    / "testdata"
    / "tg-updates"
    / "telegram-rs_update_assets"
    / "regression_test_208.json"
)

NOT_MODIFIED = (
    "Bad Request: message is not modified: specified new message content and reply markup are "
    "exactly the same as a current content and reply markup of the message"
)

# Parameters that are strings on the wire even when they look like JSON ("123", "true").
_STRING_PARAMS = frozenset(
    {
        "text",
        "parse_mode",
        "caption",
        "callback_query_id",
        "url",
        "secret_token",
        "language_code",
        "inline_message_id",
        "emoji",
        "action",
        "name",
        "description",
        "short_description",
        "ip_address",
        "business_connection_id",
        "message_effect_id",
        "file_id",
    }
)


def utf16_units(text: str) -> int:
    """Telegram measures text in UTF-16 code units: astral characters count twice."""
    return len(text.encode("utf-16-le")) // 2


# --------------------------------------------------------------------------------------------
# Telegram's HTML subset (a port of the rules in tdlib's parse_html)
# --------------------------------------------------------------------------------------------


class EntityParseError(ValueError):
    """The HTML is not valid Telegram HTML; str(self) is the text after "can't parse entities: "."""


_TAG_TYPES = {
    "b": "bold",
    "strong": "bold",
    "i": "italic",
    "em": "italic",
    "u": "underline",
    "ins": "underline",
    "s": "strikethrough",
    "strike": "strikethrough",
    "del": "strikethrough",
    "code": "code",
    "pre": "pre",
    "a": "text_link",
    "blockquote": "blockquote",
    "tg-spoiler": "spoiler",
    "span": "spoiler",
}
_NAMED_ENTITIES = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}


def _decode_entity(text: str, start: int) -> tuple[str, int] | None:
    """Decode the HTML entity at text[start] == '&'; None when it is not a supported one.

    Like tdlib, an '&' that does not start a supported entity is kept as a literal character.
    """
    end = text.find(";", start + 1, start + 12)
    if end < 0:
        return None
    body = text[start + 1 : end]
    if body.startswith("#"):
        try:
            code = int(body[2:], 16) if body[1:2] in ("x", "X") else int(body[1:], 10)
        except ValueError:
            return None
        if code <= 0 or code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
            return None
        return chr(code), end - start + 1
    if body in _NAMED_ENTITIES:
        return _NAMED_ENTITIES[body], end - start + 1
    return None


def _byte_offset(text: str, index: int) -> int:
    return len(text[:index].encode("utf-8"))


@dataclass
class _OpenTag:
    name: str
    offset: int  # UTF-16 offset in the parsed text
    attrs: dict[str, str]


def parse_html(html: str) -> tuple[str, list[dict[str, Any]]]:
    """Parse Telegram HTML into (plain text, entities with UTF-16 offsets), or raise."""
    out: list[str] = []
    pos = 0  # UTF-16 length of the text produced so far
    stack: list[_OpenTag] = []
    entities: list[dict[str, Any]] = []
    i, n = 0, len(html)

    def emit(piece: str) -> None:
        nonlocal pos
        out.append(piece)
        pos += utf16_units(piece)

    while i < n:
        char = html[i]
        if char == "&":
            decoded = _decode_entity(html, i)
            if decoded is None:
                emit("&")
                i += 1
            else:
                emit(decoded[0])
                i += decoded[1]
            continue
        if char != "<":
            emit(char)
            i += 1
            continue

        begin = i
        i += 1
        if i < n and html[i] == "/":
            i += 1
            name_start = i
            while i < n and html[i] not in " \t\r\n>":
                i += 1
            name = html[name_start:i].lower()
            while i < n and html[i] in " \t\r\n":
                i += 1
            if i >= n or html[i] != ">":
                raise EntityParseError(
                    f"Unclosed end tag at byte offset {_byte_offset(html, begin)}"
                )
            i += 1
            if not stack:
                raise EntityParseError(
                    f"Unexpected end tag at byte offset {_byte_offset(html, begin)}"
                )
            open_tag = stack[-1]
            if name and name != open_tag.name:
                raise EntityParseError(
                    f"Unmatched end tag at byte offset {_byte_offset(html, begin)}, "
                    f'expected "</{open_tag.name}>", found "</{name}>"'
                )
            stack.pop()
            _close_entity(open_tag, pos, stack, entities)
            continue

        name_start = i
        while i < n and (html[i].isascii() and (html[i].isalnum() or html[i] == "-")):
            i += 1
        name = html[name_start:i].lower()
        if name not in _TAG_TYPES:
            raise EntityParseError(
                f'Unsupported start tag "{name}" at byte offset {_byte_offset(html, begin)}'
            )
        attrs: dict[str, str] = {}
        while True:
            while i < n and html[i] in " \t\r\n":
                i += 1
            if i >= n:
                raise EntityParseError(
                    f"Unclosed start tag at byte offset {_byte_offset(html, begin)}"
                )
            if html[i] == ">":
                i += 1
                break
            attr_start = i
            while i < n and html[i] not in " \t\r\n=>":
                i += 1
            attr = html[attr_start:i].lower()
            if not attr:
                raise EntityParseError(
                    f'Empty attribute name in the tag "{name}" at byte offset '
                    f"{_byte_offset(html, begin)}"
                )
            while i < n and html[i] in " \t\r\n":
                i += 1
            if i >= n or html[i] != "=":
                attrs[attr] = ""
                continue
            i += 1
            while i < n and html[i] in " \t\r\n":
                i += 1
            if i >= n:
                raise EntityParseError(
                    f"Unclosed start tag at byte offset {_byte_offset(html, begin)}"
                )
            if html[i] in "'\"":
                quote = html[i]
                end = html.find(quote, i + 1)
                if end < 0:
                    raise EntityParseError(
                        f"Unclosed start tag at byte offset {_byte_offset(html, begin)}"
                    )
                raw_value = html[i + 1 : end]
                i = end + 1
            else:
                value_start = i
                while i < n and html[i] not in " \t\r\n>":
                    i += 1
                raw_value = html[value_start:i]
            attrs[attr] = _decode_attribute(raw_value)
        if name == "span" and attrs.get("class") != "tg-spoiler":
            raise EntityParseError(
                f'Tag "span" must have class "tg-spoiler" at byte offset '
                f"{_byte_offset(html, begin)}"
            )
        stack.append(_OpenTag(name, pos, attrs))

    if stack:
        raise EntityParseError(f'Can\'t find end tag corresponding to start tag "{stack[-1].name}"')
    entities.sort(key=lambda e: (e["offset"], -e["length"]))
    return "".join(out), entities


def _decode_attribute(raw: str) -> str:
    pieces: list[str] = []
    i = 0
    while i < len(raw):
        if raw[i] == "&":
            decoded = _decode_entity(raw, i)
            if decoded is not None:
                pieces.append(decoded[0])
                i += decoded[1]
                continue
        pieces.append(raw[i])
        i += 1
    return "".join(pieces)


def _close_entity(
    tag: _OpenTag, end: int, stack: list[_OpenTag], entities: list[dict[str, Any]]
) -> None:
    length = end - tag.offset
    if length <= 0:
        return
    kind = _TAG_TYPES[tag.name]
    entity: dict[str, Any] = {"type": kind, "offset": tag.offset, "length": length}
    if kind == "text_link":
        url = tag.attrs.get("href", "")
        if not url:
            return
        entity["url"] = url
    elif kind == "blockquote" and "expandable" in tag.attrs:
        entity["type"] = "expandable_blockquote"
    elif kind == "code" and stack and stack[-1].name == "pre":
        language = tag.attrs.get("class", "")
        if language.startswith("language-") and stack[-1].offset == tag.offset:
            stack[-1].attrs["language"] = language[len("language-") :]
            return
    elif kind == "pre" and tag.attrs.get("language"):
        entity["language"] = tag.attrs["language"]
    entities.append(entity)


def _strip_text(text: str, entities: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """Telegram trims leading and trailing whitespace from message text; entities follow."""
    stripped = text.strip()
    if not stripped:
        return "", []
    lead = utf16_units(text[: len(text) - len(text.lstrip())])
    size = utf16_units(stripped)
    kept = []
    for entity in entities:
        start = max(entity["offset"] - lead, 0)
        end = min(entity["offset"] + entity["length"] - lead, size)
        if end > start:
            kept.append({**entity, "offset": start, "length": end - start})
    return stripped, kept


# --------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------


@dataclass
class Call:
    """One Bot API request as the fake received it (failed ones included)."""

    method: str
    params: dict[str, Any]
    at: float
    ok: bool = True
    error: str | None = None
    # It took effect although it was answered with an error (`inject_error`'s delivered_every).
    delivered: bool = False


@dataclass
class BotMessage:
    """A message the bot sent, with its CURRENT content after edits."""

    chat_id: int
    message_id: int
    text: str
    raw_text: str
    parse_mode: str | None
    entities: list[dict[str, Any]]
    reply_markup: dict[str, Any] | None
    reply_to_message_id: int | None = None
    message_thread_id: int | None = None
    edits: int = 0
    deleted: bool = False
    sent_at: float = 0.0
    edit_times: list[float] = field(default_factory=list)

    def button_data(self) -> list[str]:
        """The callback data of its inline buttons, in reading order (what a press sends)."""
        rows = (self.reply_markup or {}).get("inline_keyboard", [])
        return [button["callback_data"] for row in rows for button in row]


@dataclass
class StoredFile:
    """A file the fake Bot API can hand out: getFile answers with it, /file/ serves it."""

    file_id: str
    file_unique_id: str
    file_path: str
    data: bytes

    @property
    def file_size(self) -> int:
        return len(self.data)


@dataclass
class FloodViolation:
    method: str
    chat_id: int
    message_id: int | None
    at: float
    retry_after: int
    during_penalty: bool = False  # the client retried before the previous penalty ended


@dataclass
class _InjectedError:
    count: int
    retry_after: int | None
    description: str | None
    status: int | None = None
    every: int = 1  # fail one call in `every` (the every-th, the 2×every-th, ...)
    # One fault in `delivered_every` (0: none) comes after the call took effect: Telegram
    # delivered the message, and the answer the client gets is the error (a gateway that lost
    # the Bot API's reply).
    delivered_every: int = 0
    seen: int = 0
    failed: int = 0


class _ApiError(Exception):
    def __init__(self, code: int, description: str, parameters: dict[str, Any] | None = None):
        super().__init__(description)
        self.code = code
        self.description = description
        self.parameters = parameters


# --------------------------------------------------------------------------------------------
# The fake server
# --------------------------------------------------------------------------------------------


class FakeTelegram:
    """The Bot API subset mnemobot uses, with Telegram's answers and error texts."""

    def __init__(self, token: str = "123456:TEST-TOKEN", bot_username: str = "mnemo_test_bot"):
        self.token = token
        self.bot_username = bot_username
        self.bot_id = int(token.split(":", 1)[0])
        self.calls: list[Call] = []
        self.flood_violations: list[FloodViolation] = []
        self.enforce_flood_limits = False
        # Telegram's bot-wide limit (about 30 messages per second across all chats), enforced
        # when set: more sendMessage calls than this within one second earn a 429.
        self.global_messages_per_second: int | None = None
        self._global_sends: list[float] = []
        # Chats whose user blocked the bot: sendMessage gets Telegram's 403 for them.
        self.blocked_chats: set[int] = set()
        # Groups upgraded to supergroups (old id -> new id): any method naming the old id gets
        # the Bot API's 400 with `parameters.migrate_to_chat_id` (PTB raises ChatMigrated);
        # the body as reported in TwiN/gatus#179.
        self.migrated_chats: dict[int, int] = {}
        # Forums: the topic ids that exist in each (a chat not listed takes any thread id), and
        # the (chat, topic) pairs an admin closed. Texts: "Bad Request: message thread not
        # found" (tdlib/telegram-bot-api#472), "Bad Request: TOPIC_CLOSED" (PTB shows it as
        # "Topic_closed", Matt0550/TagEveryoneTelegramBot#26).
        self.forum_topics: dict[int, set[int]] = {}
        self.closed_topics: set[tuple[int, int]] = set()
        self.commands: dict[str, list[dict[str, Any]]] = {}
        self.webhook_url = ""
        self.webhook_secret: str | None = None
        # Where pushed updates are POSTed while a webhook is set (default: the webhook URL itself,
        # only if it is on 127.0.0.1/localhost: the fake never reaches the network).
        self.webhook_delivery_url: str | None = None
        self.webhook_deliveries: list[tuple[int, int]] = []  # (update_id, HTTP status)

        self._updates: list[dict[str, Any]] = []
        self._last_update_id = 0
        self._new_update = asyncio.Event()
        self._closing = False
        self._messages: dict[int, dict[int, BotMessage]] = {}
        self._message_ids: dict[int, itertools.count[int]] = {}
        self._chats: dict[int, dict[str, Any]] = {}
        self._drafts: dict[int, list[dict[str, Any]]] = {}  # every draft call accepted, per chat
        # What each chat shows now: its drafts by draft_id (a sent message clears them).
        self._current_drafts: dict[int, dict[int, dict[str, Any]]] = {}
        # The update types getUpdates and setWebhook were last asked for (None: all).
        self.allowed_updates: list[str] | None = None
        self._injected: dict[str, _InjectedError] = {}
        self._holds: dict[str, int] = {}  # method -> calls still to hold (`hold`)
        self._holds_after: dict[str, int] = {}  # method -> calls to do, then hold
        self.holds_cut = 0  # held calls the client gave up on
        self._last_send: dict[int, float] = {}
        self._penalty_until: dict[tuple[int, int | None], float] = {}
        self._callback_ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self._port = 0
        self._webhook_task: asyncio.Task[None] | None = None
        self._webhook_wakeup = asyncio.Event()
        self._delivered_upto = 0
        self._files: dict[str, StoredFile] = {}
        self._announced_sizes: dict[str, int] = {}
        self._unknown_sizes: set[str] = set()
        self.downloads: list[str] = []  # file_path of every file download served
        # getChatMember: (chat id, user id) -> status ("creator", "administrator", "member",
        # "restricted", "left", "kicked"); anyone not listed is a "member".
        self.member_status: dict[tuple[int, int], str] = {}

    # ---- lifecycle --------------------------------------------------------------------------

    async def start(self) -> FakeTelegram:
        self._closing = False  # a stopped fake can be started again (same state, new port)
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        app.router.add_get("/file/bot{token}/{file_path:.+}", self._download)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._port = self._runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        self._closing = True
        self._new_update.set()
        await stop_task(self._webhook_task)
        self._webhook_task = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeTelegram:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}/bot"

    @property
    def port(self) -> int:
        return self._port

    # ---- test-side helpers ------------------------------------------------------------------

    def push(self, update: dict[str, Any]) -> int:
        """Enqueue an update for getUpdates (or webhook delivery); returns its update_id."""
        update = dict(update)
        if "update_id" not in update:
            update["update_id"] = self._last_update_id + 1
        self._last_update_id = max(self._last_update_id, int(update["update_id"]))
        for chat in _chats_in(update):
            self._chats.setdefault(chat["id"], chat)
        self._updates.append(update)
        self._new_update.set()
        self._webhook_wakeup.set()
        return int(update["update_id"])

    def make_text_update(
        self,
        chat_id: int,
        user_id: int,
        text: str,
        *,
        chat_type: str = "private",
        language_code: str = "en",
        first_name: str = "Ann",
        reply_to_bot: bool = False,
        entities: list[dict[str, Any]] | None = None,
        quote: str | None = None,
        topic_id: int | None = None,
    ) -> dict[str, Any]:
        """An update carrying a user's text message, with the entities Telegram would add.

        `reply_to_bot` makes it a reply to the bot's last message; `quote` (with it) the part
        of that message the user selected, as Telegram's `quote` object (Bot API 7.0);
        `topic_id` writes it inside that topic of a forum (Bot API 6.3's `message_thread_id`
        and `is_topic_message`, the chat's `is_forum`)."""
        chat = self._chat_dict(chat_id, chat_type, first_name)
        if topic_id is not None:
            chat["is_forum"] = True
        self._chats[chat_id] = chat
        message: dict[str, Any] = {
            "message_id": self._next_message_id(chat_id),
            "date": int(time.time()),
            "chat": chat,
            "from": {
                "id": user_id,
                "is_bot": False,
                "first_name": first_name,
                "language_code": language_code,
            },
            "text": text,
        }
        if topic_id is not None:
            message["message_thread_id"] = topic_id
            message["is_topic_message"] = True
        found = entities if entities is not None else self._auto_entities(text)
        if found:
            message["entities"] = found
        if reply_to_bot:
            message["reply_to_message"] = self._reply_target(chat_id, chat)
            if quote is not None:
                replied = message["reply_to_message"]["text"]
                if quote not in replied:
                    raise ValueError("Telegram only quotes text of the replied-to message")
                message["quote"] = {
                    "text": quote,
                    "position": utf16_units(replied[: replied.index(quote)]),
                    "is_manual": True,
                }
        return {"message": message}

    def add_file(
        self,
        data: bytes,
        *,
        file_path: str,
        size: int | None = None,
        file_id: str | None = None,
        size_unknown: bool = False,
    ) -> StoredFile:
        """Register a file users "sent"; getFile and the download serve it.

        `size` lets a test announce a size other than the real one (a 30 MB file without
        30 MB in memory): getFile then refuses it the way Telegram does. `size_unknown`: the
        update and getFile omit `file_size` (it is optional in the Bot API). `file_id` keeps
        the id a real recorded update carries.
        """
        digest = hashlib.sha256(data + file_path.encode()).hexdigest()
        stored = StoredFile(file_id or f"BQAC{digest[:40]}", f"AgAD{digest[:12]}", file_path, data)
        self._files[stored.file_id] = stored
        if size is not None:
            self._announced_sizes[stored.file_id] = size
        if size_unknown:
            self._unknown_sizes.add(stored.file_id)
        return stored

    def file_fields(self, stored: StoredFile) -> dict[str, Any]:
        """The file fields an update carries (file_id, file_unique_id, file_size)."""
        fields: dict[str, Any] = {
            "file_id": stored.file_id,
            "file_unique_id": stored.file_unique_id,
        }
        if stored.file_id not in self._unknown_sizes:
            fields["file_size"] = self._announced_sizes.get(stored.file_id, stored.file_size)
        return fields

    def make_media_update(
        self,
        chat_id: int,
        user_id: int,
        media: dict[str, Any],
        *,
        caption: str | None = None,
        chat_type: str = "private",
        language_code: str = "en",
        reply_to_bot: bool = False,
    ) -> dict[str, Any]:
        """An update carrying a voice note, audio, video note, photo or document.

        `media` is the message field(s) as Telegram sends them, e.g.
        ``{"voice": {**tg.file_fields(f), "duration": 3, "mime_type": "audio/ogg"}}``.
        """
        update = self.make_text_update(
            chat_id,
            user_id,
            "",
            chat_type=chat_type,
            language_code=language_code,
            reply_to_bot=reply_to_bot,
            entities=[],
        )
        message = update["message"]
        del message["text"]
        message.update(media)
        if caption is not None:
            message["caption"] = caption
            found = self._auto_entities(caption)
            if found:
                message["caption_entities"] = found
        return update

    def make_callback_update(
        self, chat_id: int, user_id: int, data: str, *, message_id: int
    ) -> dict[str, Any]:
        """An update for a press of an inline button on the bot's message `message_id`.

        Built on a real callback_query (REAL_CALLBACK_UPDATE): its presser (with username and
        language_code), its message layout and chat_instance, with our ids, chat and data.
        """
        real = json.loads(REAL_CALLBACK_UPDATE.read_text(encoding="utf-8"))["callback_query"]
        chat = self._chats.get(chat_id) or self._chat_dict(chat_id, None, "Ann")
        shown = self._messages.get(chat_id, {}).get(message_id)
        message: dict[str, Any] = {
            **real["message"],
            "message_id": message_id,
            "date": int(time.time()),
            "chat": chat,
            "from": self._bot_user(),
            "text": shown.text if shown else "",
        }
        message.pop("reply_markup", None)
        if shown and shown.reply_markup:
            message["reply_markup"] = shown.reply_markup
        return {
            "callback_query": {
                **real,
                "id": str(next(self._callback_ids)),
                "from": {**real["from"], "id": user_id},
                "data": data,
                "message": message,
            }
        }

    def bot_messages(self, chat_id: int) -> list[BotMessage]:
        return [m for m in self._messages.get(chat_id, {}).values() if not m.deleted]

    def drafts(self, chat_id: int) -> list[dict[str, Any]]:
        """Every draft update the chat received, in order (each with its `draft_id`)."""
        return list(self._drafts.get(chat_id, []))

    def current_drafts(self, chat_id: int) -> dict[int, dict[str, Any]]:
        """The drafts the chat shows now, by draft_id: the latest text of each, until a message
        is sent to the chat or DRAFT_LIFETIME_S pass without an update."""
        now = time.monotonic()
        shown = self._current_drafts.get(chat_id, {})
        return {k: d for k, d in shown.items() if now - d["at"] < DRAFT_LIFETIME_S}

    def push_stop(self, chat_id: int, draft_id: int, *, thread_id: int | None = None) -> int:
        """A `stopped_message_generation` update (Bot API 10.3's MessageGenerationStopped) for
        `draft_id`, whether or not that draft is shown: a press that raced the answer's end.
        Returns its update_id."""
        chat = self._chats.get(chat_id) or self._chat_dict(chat_id, "private", "Ann")
        stopped: dict[str, Any] = {"chat": chat, "draft_id": draft_id}
        if thread_id is not None:
            stopped["message_thread_id"] = thread_id
        return self.push({"stopped_message_generation": stopped})

    def press_stop(self, chat_id: int) -> int:
        """The user presses Stop on the draft the chat shows now (it must offer the button:
        `can_stop`); without `keep_on_stop` the draft goes at once. Returns its draft_id."""
        shown = self.current_drafts(chat_id)
        stoppable = [d for d in shown.values() if d.get("can_stop")]
        if not stoppable:
            raise AssertionError(f"chat {chat_id} shows no draft with a Stop button")
        draft = max(stoppable, key=lambda d: d["at"])
        draft_id = int(draft["draft_id"])
        if not draft.get("keep_on_stop"):
            del self._current_drafts[chat_id][draft_id]
        self.push_stop(chat_id, draft_id, thread_id=draft.get("message_thread_id"))
        return draft_id

    def calls_of(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method == method]

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 60.0) -> None:  # noqa: ASYNC109
        """Until `predicate` holds; `timeout` bounds a hang (generous: a loaded machine is slow)."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not met within {timeout}s")
            await asyncio.sleep(0.01)

    def inject_error(
        self,
        method: str,
        *,
        count: int = 1,
        retry_after: int | None = None,
        description: str | None = None,
        status: int | None = None,
        every: int = 1,
        delivered_every: int = 0,
    ) -> None:
        """Make the next `count` calls of `method` fail (429 with retry_after, else 400).

        `status` (e.g. 502) answers that HTTP status instead, as a broken proxy in front of the
        Bot API would: PTB turns it into a NetworkError. `every` spreads the faults: one call
        in `every` fails (every=10: the 10th, 20th, ... — 10 % of them, in a fixed order so a
        benchmark run can be repeated), until `count` have failed. `delivered_every` makes one
        of those faults in that many (the first, then every delivered_every-th) happen after the
        call took effect, as Telegram's 502 can: the message is in the chat, the client only
        hears the error.
        """
        self._injected[method] = _InjectedError(
            count, retry_after, description, status, every, delivered_every
        )

    def hold(self, method: str, *, count: int = 1) -> None:
        """Hold the next `count` calls of `method` unanswered until the client hangs up (a
        Telegram that stopped answering): the bot's turn waits there, where a stop can cut
        in. Each hang-up is counted in `holds_cut`."""
        self._holds[method] = count

    def hold_after(self, method: str, *, count: int = 1) -> None:
        """Carry out the next `count` calls of `method` (the message is sent, the edit made)
        and then hold the answer until the client hangs up: the bot is left between a call
        that took effect and the answer that would tell it so (a kill -9 there)."""
        self._holds_after[method] = count

    # ---- HTTP -------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params = await _read_params(request)
        if request.match_info["token"] != self.token:
            return _error_response(_ApiError(401, "Unauthorized"))
        call = Call(method=method, params=params, at=time.monotonic())
        self.calls.append(call)
        if self._holds.get(method, 0) > 0:
            self._holds[method] -= 1
            # aiohttp tells a handler nothing when its client hangs up, so the fake looks.
            while request.transport is not None and not request.transport.is_closing():  # noqa: ASYNC110
                await asyncio.sleep(0.05)
            self.holds_cut += 1
            call.ok = False
            return web.Response(status=504)
        try:
            after = self._maybe_injected(method)
            handler = getattr(self, f"_api_{method.lower()}", None)
            if handler is None:
                raise _ApiError(404, "Not Found")
            result = await handler(params)
            if after is not None:
                call.delivered = True
                raise after
        except _ApiError as error:
            call.ok = False
            call.error = error.description
            return _error_response(error)
        if self._holds_after.get(method, 0) > 0:
            self._holds_after[method] -= 1
            while request.transport is not None and not request.transport.is_closing():  # noqa: ASYNC110
                await asyncio.sleep(0.05)
            self.holds_cut += 1
            return web.Response(status=504)
        return web.json_response({"ok": True, "result": result})

    async def _download(self, request: web.Request) -> web.Response:
        """GET <base>/file/bot<token>/<file_path>: the file's bytes, as the Bot API serves them."""
        if request.match_info["token"] != self.token:
            return web.Response(status=401, text="Unauthorized")
        file_path = request.match_info["file_path"]
        self.downloads.append(file_path)
        for stored in self._files.values():
            if stored.file_path == file_path:
                return web.Response(body=stored.data, content_type="application/octet-stream")
        return _error_response(_ApiError(404, "Not Found"))

    def _maybe_injected(self, method: str) -> _ApiError | None:
        """Raises the injected fault that comes before the call takes effect; returns the one
        to answer after it did (`delivered_every`)."""
        injected = self._injected.get(method)
        if injected is None or injected.count <= 0:
            return None
        injected.seen += 1
        if injected.seen % injected.every:
            return None
        injected.count -= 1
        injected.failed += 1
        if (
            injected.status is not None
            and injected.delivered_every
            and (injected.failed - 1) % injected.delivered_every == 0
        ):
            return _ApiError(injected.status, injected.description or "Bad Gateway")
        if injected.retry_after is not None:
            raise _ApiError(
                429,
                f"Too Many Requests: retry after {injected.retry_after}",
                {"retry_after": injected.retry_after},
            )
        if injected.status is not None:
            raise _ApiError(injected.status, injected.description or "Bad Gateway")
        raise _ApiError(400, injected.description or "Bad Request: injected error")

    # ---- methods ----------------------------------------------------------------------------

    async def _api_getme(self, params: dict[str, Any]) -> dict[str, Any]:
        return {
            **self._bot_user(),
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
            "can_connect_to_business": False,
            "has_main_web_app": False,
        }

    async def _api_getchatmember(self, params: dict[str, Any]) -> dict[str, Any]:
        """A ChatMember in the Bot API's exact shape for its status: ChatMemberOwner,
        ChatMemberAdministrator (every can_* field it must carry), ChatMemberMember,
        ChatMemberLeft (https://core.telegram.org/bots/api#chatmember)."""
        chat_id, user_id = self._chat_id(params), int(params["user_id"])
        if chat_id > 0 and chat_id != user_id:
            raise _ApiError(400, "Bad Request: PARTICIPANT_ID_INVALID")
        status = self.member_status.get((chat_id, user_id), "member")
        if chat_id > 0:
            status = "member"  # a private chat: its user is a member of it
        user = {"id": user_id, "is_bot": False, "first_name": f"User {user_id}"}
        member: dict[str, Any] = {"user": user, "status": status}
        if status == "creator":
            member["is_anonymous"] = False
        elif status == "administrator":
            member.update(
                can_be_edited=False,
                is_anonymous=False,
                can_manage_chat=True,
                can_delete_messages=True,
                can_manage_video_chats=True,
                can_restrict_members=True,
                can_promote_members=False,
                can_change_info=True,
                can_invite_users=True,
                can_post_stories=False,
                can_edit_stories=False,
                can_delete_stories=False,
                can_pin_messages=True,
                can_manage_topics=False,
            )
        elif status == "restricted":
            member.update(
                is_member=True,
                can_send_messages=True,
                can_send_audios=True,
                can_send_documents=True,
                can_send_photos=True,
                can_send_videos=True,
                can_send_video_notes=True,
                can_send_voice_notes=True,
                can_send_polls=True,
                can_send_other_messages=True,
                can_add_web_page_previews=True,
                can_change_info=False,
                can_invite_users=False,
                can_pin_messages=False,
                can_manage_topics=False,
                until_date=0,
            )
        elif status == "kicked":
            member["until_date"] = 0
        return member

    async def _api_getupdates(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        if self.webhook_url:
            raise _ApiError(
                409,
                "Conflict: can't use getUpdates method while webhook is active; "
                "use deleteWebhook to delete the webhook first",
            )
        offset = int(params.get("offset") or 0)
        limit = min(max(int(params.get("limit") or 100), 1), 100)
        timeout = float(params.get("timeout") or 0)
        if offset > 0:
            self._updates = [u for u in self._updates if u["update_id"] >= offset]
        if "allowed_updates" in params:
            self._allow(params.get("allowed_updates"))
        deadline = time.monotonic() + timeout
        while not self._closing:
            # Also an update pushed during the long poll: one the bot did not ask for is dropped.
            self._updates = [u for u in self._updates if self._allowed(u)]
            remaining = deadline - time.monotonic()
            if self._updates or remaining <= 0:
                break
            self._new_update.clear()
            await wait_or_timeout(self._new_update, timeout=remaining)
        return self._updates[:limit]

    async def _api_sendmessage(self, params: dict[str, Any]) -> dict[str, Any]:
        chat_id = self._chat_id(params)
        if chat_id in self.blocked_chats:
            raise _ApiError(403, "Forbidden: bot was blocked by the user")
        self._check_global_rate()
        text, entities = self._parse_text(params, too_long="Bad Request: message is too long")
        self._check_flood("sendMessage", chat_id, None, self._last_send.get(chat_id))
        reply_to = (params.get("reply_parameters") or {}).get("message_id") or params.get(
            "reply_to_message_id"
        )
        message = BotMessage(
            chat_id=chat_id,
            message_id=self._next_message_id(chat_id),
            text=text,
            raw_text=params.get("text", ""),
            parse_mode=params.get("parse_mode"),
            entities=entities,
            reply_markup=params.get("reply_markup"),
            reply_to_message_id=reply_to,
            message_thread_id=params.get("message_thread_id"),
            sent_at=time.monotonic(),
        )
        self._last_send[chat_id] = message.sent_at
        self._messages.setdefault(chat_id, {})[message.message_id] = message
        self._current_drafts.pop(chat_id, None)  # a sent message replaces the chat's draft
        return self._message_dict(message)

    async def _api_editmessagetext(self, params: dict[str, Any]) -> dict[str, Any]:
        chat_id = self._chat_id(params)
        message = self._find_message(chat_id, params.get("message_id"), "message to edit not found")
        text, entities = self._parse_text(params, too_long="Bad Request: MESSAGE_TOO_LONG")
        markup = params.get("reply_markup")
        if text == message.text and entities == message.entities and markup == message.reply_markup:
            raise _ApiError(400, NOT_MODIFIED)
        last = message.edit_times[-1] if message.edit_times else message.sent_at
        self._check_flood("editMessageText", chat_id, message.message_id, last)
        message.text, message.entities, message.reply_markup = text, entities, markup
        message.raw_text = params.get("text", "")
        message.parse_mode = params.get("parse_mode")
        message.edits += 1
        message.edit_times.append(time.monotonic())
        return {**self._message_dict(message), "edit_date": int(time.time())}

    async def _api_editmessagereplymarkup(self, params: dict[str, Any]) -> dict[str, Any]:
        chat_id = self._chat_id(params)
        message = self._find_message(chat_id, params.get("message_id"), "message to edit not found")
        markup = params.get("reply_markup")
        if markup == message.reply_markup:
            raise _ApiError(400, NOT_MODIFIED)
        message.reply_markup = markup
        return {**self._message_dict(message), "edit_date": int(time.time())}

    async def _api_deletemessage(self, params: dict[str, Any]) -> bool:
        chat_id = self._chat_id(params)
        message = self._find_message(
            chat_id, params.get("message_id"), "message to delete not found"
        )
        message.deleted = True
        return True

    async def _api_sendmessagedraft(self, params: dict[str, Any]) -> bool:
        """Bot API 9.5's draft, with 10.3's `can_stop` and `keep_on_stop`: private chats only
        (a group, with a Stop button or without, gets Telegram's refusal), 0-4096 characters
        (empty: a "Thinking…" placeholder). The chat shows the latest text of each draft_id
        until a message is sent to it."""
        chat_id = self._chat_id(params)
        chat = self._chats.get(chat_id)
        if chat_id < 0 or (chat is not None and chat.get("type") != "private"):
            raise _ApiError(400, DRAFT_PEER_INVALID)
        draft_id = params.get("draft_id")
        if not draft_id or isinstance(draft_id, bool) or not isinstance(draft_id, int):
            raise _ApiError(400, "Bad Request: TEXTDRAFT_ID_INVALID")
        if params.get("text"):
            text, entities = self._parse_text(params, too_long="Bad Request: message is too long")
        else:
            text, entities = "", []
        draft = {**params, "parsed_text": text, "parsed_entities": entities, "at": time.monotonic()}
        self._drafts.setdefault(chat_id, []).append(draft)
        self._current_drafts.setdefault(chat_id, {})[draft_id] = draft
        return True

    async def _api_getfile(self, params: dict[str, Any]) -> dict[str, Any]:
        stored = self._files.get(str(params.get("file_id") or ""))
        if stored is None:
            raise _ApiError(400, "Bad Request: invalid file_id")
        size = self._announced_sizes.get(stored.file_id, stored.file_size)
        if size > MAX_DOWNLOAD_BYTES:
            raise _ApiError(400, "Bad Request: file is too big")
        answer = {
            "file_id": stored.file_id,
            "file_unique_id": stored.file_unique_id,
            "file_size": size,
            "file_path": stored.file_path,
        }
        if stored.file_id in self._unknown_sizes:
            del answer["file_size"]
        return answer

    async def _api_sendchataction(self, params: dict[str, Any]) -> bool:
        self._chat_id(params)
        if not params.get("action"):
            raise _ApiError(400, "Bad Request: wrong parameter action in request")
        return True

    async def _api_answercallbackquery(self, params: dict[str, Any]) -> bool:
        if not params.get("callback_query_id"):
            raise _ApiError(400, "Bad Request: query is too old and response timeout expired")
        return True

    async def _api_setmycommands(self, params: dict[str, Any]) -> bool:
        self.commands[_scope_key(params)] = list(params.get("commands") or [])
        return True

    async def _api_deletemycommands(self, params: dict[str, Any]) -> bool:
        self.commands.pop(_scope_key(params), None)
        return True

    async def _api_getmycommands(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        return self.commands.get(_scope_key(params), [])

    async def _api_setwebhook(self, params: dict[str, Any]) -> bool:
        self.webhook_url = params.get("url") or ""
        if "allowed_updates" in params:
            self._allow(params.get("allowed_updates"))
        self.webhook_secret = params.get("secret_token")
        if params.get("drop_pending_updates"):
            self._updates.clear()
        if self.webhook_url and self._webhook_task is None:
            self._webhook_task = asyncio.get_running_loop().create_task(self._deliver_webhooks())
        self._webhook_wakeup.set()
        return True

    async def _api_deletewebhook(self, params: dict[str, Any]) -> bool:
        self.webhook_url = ""
        self.webhook_secret = None
        if params.get("drop_pending_updates"):
            self._updates.clear()
        return True

    async def _api_getwebhookinfo(self, params: dict[str, Any]) -> dict[str, Any]:
        return {
            "url": self.webhook_url,
            "has_custom_certificate": False,
            "pending_update_count": len(self._updates),
        }

    async def _api_close(self, params: dict[str, Any]) -> bool:
        return True

    async def _api_logout(self, params: dict[str, Any]) -> bool:
        return True

    # ---- webhook delivery -------------------------------------------------------------------

    async def _deliver_webhooks(self) -> None:
        """POST pending updates one at a time, in order, retrying until the bot accepts them."""
        async with ClientSession(timeout=ClientTimeout(total=10)) as session:
            while True:
                target = self._webhook_target()
                self._updates = [u for u in self._updates if self._allowed(u)]
                pending = [u for u in self._updates if u["update_id"] > self._delivered_upto]
                if target is None or not pending:
                    self._webhook_wakeup.clear()
                    await self._webhook_wakeup.wait()
                    continue
                update = pending[0]
                headers = {}
                if self.webhook_secret:
                    headers["X-Telegram-Bot-Api-Secret-Token"] = self.webhook_secret
                try:
                    async with session.post(target, json=update, headers=headers) as response:
                        status = response.status
                except OSError:
                    status = 0
                self.webhook_deliveries.append((update["update_id"], status))
                if 200 <= status < 300:
                    self._delivered_upto = update["update_id"]
                    self._updates.remove(update)
                else:
                    await asyncio.sleep(0.2)

    def _allow(self, kinds: Any) -> None:
        """Telegram keeps the last list it was given; an empty one means every kind again."""
        self.allowed_updates = list(kinds) if isinstance(kinds, list) and kinds else None

    def _allowed(self, update: dict[str, Any]) -> bool:
        """Whether Telegram would deliver `update` under the allowed_updates asked for: an
        update of a kind the bot did not ask for is dropped, never sent."""
        if self.allowed_updates is None:
            return True
        return any(kind in update for kind in self.allowed_updates)

    def _webhook_target(self) -> str | None:
        if not self.webhook_url:
            return None
        target = self.webhook_delivery_url or self.webhook_url
        if urlsplit(target).hostname not in ("127.0.0.1", "localhost"):
            return None
        return target

    # ---- internals --------------------------------------------------------------------------

    def _bot_user(self) -> dict[str, Any]:
        return {
            "id": self.bot_id,
            "is_bot": True,
            "first_name": "Mnemo",
            "username": self.bot_username,
        }

    @staticmethod
    def _chat_dict(chat_id: int, chat_type: str | None, first_name: str) -> dict[str, Any]:
        kind = chat_type or ("private" if chat_id > 0 else "supergroup")
        if kind == "private":
            return {"id": chat_id, "type": "private", "first_name": first_name}
        return {"id": chat_id, "type": kind, "title": f"Test {kind} {chat_id}"}

    def _next_message_id(self, chat_id: int) -> int:
        counter = self._message_ids.setdefault(chat_id, itertools.count(1))
        return next(counter)

    def _auto_entities(self, text: str) -> list[dict[str, Any]]:
        """bot_command and @mention entities, found the way tdlib finds them."""
        found = [
            {
                "type": "bot_command",
                "offset": utf16_units(text[:start]),
                "length": utf16_units(text[start:end]),
            }
            for start, end in _bot_commands(text)
        ]
        mention = f"@{self.bot_username}"
        covered = [(e["offset"], e["offset"] + e["length"]) for e in found]
        start = text.find(mention)
        while start >= 0:
            offset = utf16_units(text[:start])
            # A command like /help@bot is already covered by its bot_command entity.
            if not any(a <= offset < b for a, b in covered):
                found.append({"type": "mention", "offset": offset, "length": utf16_units(mention)})
            start = text.find(mention, start + len(mention))
        found.sort(key=lambda e: e["offset"])
        return found

    def _reply_target(self, chat_id: int, chat: dict[str, Any]) -> dict[str, Any]:
        shown = self.bot_messages(chat_id)
        if shown:
            last = shown[-1]
            return {
                "message_id": last.message_id,
                "date": int(time.time()),
                "chat": chat,
                "from": self._bot_user(),
                "text": last.text,
            }
        return {
            "message_id": self._next_message_id(chat_id),
            "date": int(time.time()),
            "chat": chat,
            "from": self._bot_user(),
            "text": "(earlier bot message)",
        }

    def _chat_id(self, params: dict[str, Any]) -> int:
        chat_id = params.get("chat_id")
        if isinstance(chat_id, bool) or not isinstance(chat_id, int):
            raise _ApiError(400, "Bad Request: chat not found")
        if chat_id in self.migrated_chats:
            raise _ApiError(
                400,
                "Bad Request: group chat was upgraded to a supergroup chat",
                {"migrate_to_chat_id": self.migrated_chats[chat_id]},
            )
        thread = params.get("message_thread_id")
        if thread is not None and chat_id in self.forum_topics:
            if thread not in self.forum_topics[chat_id]:
                raise _ApiError(400, "Bad Request: message thread not found")
            if (chat_id, thread) in self.closed_topics:
                raise _ApiError(400, "Bad Request: TOPIC_CLOSED")
        return chat_id

    def _find_message(self, chat_id: int, message_id: Any, missing: str) -> BotMessage:
        message = self._messages.get(chat_id, {}).get(message_id) if message_id else None
        if message is None or message.deleted:
            raise _ApiError(400, f"Bad Request: {missing}")
        return message

    def _parse_text(
        self, params: dict[str, Any], *, too_long: str
    ) -> tuple[str, list[dict[str, Any]]]:
        raw = params.get("text")
        if not isinstance(raw, str) or not raw.strip():
            raise _ApiError(400, "Bad Request: message text is empty")
        parse_mode = params.get("parse_mode")
        if parse_mode and str(parse_mode).lower() == "html":
            try:
                text, entities = parse_html(raw)
            except EntityParseError as error:
                raise _ApiError(400, f"Bad Request: can't parse entities: {error}") from None
        elif parse_mode:
            # MarkdownV2 is not used by mnemobot; keep the text as is rather than pretend.
            text, entities = raw, []
        else:
            text, entities = raw, list(params.get("entities") or [])
        text, entities = _strip_text(text, entities)
        if not text:
            raise _ApiError(400, "Bad Request: message text is empty")
        if utf16_units(text) > MAX_TEXT_UTF16:
            raise _ApiError(400, too_long)
        return text, entities

    def _check_global_rate(self) -> None:
        """When set: more than `global_messages_per_second` messages in any one second, bot-wide,
        is answered with Telegram's 429 (retry after 1)."""
        limit = self.global_messages_per_second
        if limit is None:
            return
        now = time.monotonic()
        recent = self._global_sends
        while recent and now - recent[0] >= 1.0:
            recent.pop(0)
        if len(recent) >= limit:
            self.flood_violations.append(FloodViolation("sendMessage", 0, None, now, 1))
            raise _ApiError(429, "Too Many Requests: retry after 1", {"retry_after": 1})
        recent.append(now)

    def _check_flood(
        self, method: str, chat_id: int, message_id: int | None, last: float | None
    ) -> None:
        """When enforced: >1 message/s per chat or >1 edit/s per message earns a penalty.

        Like Telegram, a request during a running penalty is refused again (and counted): the
        bot must wait the penalty out, not retry into it.
        """
        if not self.enforce_flood_limits:
            return
        now = time.monotonic()
        key = (chat_id, message_id)
        penalty_end = self._penalty_until.get(key, 0.0)
        during_penalty = now < penalty_end
        if during_penalty:
            retry_after = max(1, math.ceil(penalty_end - now))
        elif last is not None and now - last < 1.0:
            retry_after = 1
            self._penalty_until[key] = now + retry_after
        else:
            return
        self.flood_violations.append(
            FloodViolation(method, chat_id, message_id, now, retry_after, during_penalty)
        )
        raise _ApiError(
            429, f"Too Many Requests: retry after {retry_after}", {"retry_after": retry_after}
        )

    def _message_dict(self, message: BotMessage) -> dict[str, Any]:
        chat = self._chats.get(message.chat_id) or self._chat_dict(message.chat_id, None, "Ann")
        result: dict[str, Any] = {
            "message_id": message.message_id,
            "from": self._bot_user(),
            "chat": chat,
            "date": int(time.time()),
            "text": message.text,
        }
        if message.entities:
            result["entities"] = message.entities
        if message.reply_markup:
            result["reply_markup"] = message.reply_markup
        if message.message_thread_id:
            result["message_thread_id"] = message.message_thread_id
        return result


def _is_word_char(char: str) -> bool:
    return char.isalnum() or char == "_"


def _bot_commands(text: str) -> list[tuple[int, int]]:
    """(start, end) of each bot command: "/" + 1-64 of [A-Za-z0-9_], optional "@username",
    not glued to a word, "/", "<" or ">" on either side (tdlib's match_bot_commands), so
    "/dev/null" is no command while "/start", "/help@bot" and "hi /new" contain one."""
    commands = []
    for match in re.finditer(r"/([A-Za-z0-9_]{1,64})(@[A-Za-z0-9_]{3,32})?", text):
        start, end = match.span()
        before = text[start - 1] if start > 0 else ""
        after = text[end] if end < len(text) else ""
        if before and (_is_word_char(before) or before in "/<>"):
            continue
        if after and (_is_word_char(after) or after in "/<>"):
            continue
        commands.append((start, end))
    return commands


def _chats_in(update: dict[str, Any]) -> list[dict[str, Any]]:
    chats = []
    for value in update.values():
        if isinstance(value, dict):
            message = value.get("message", value)
            chat = message.get("chat") if isinstance(message, dict) else None
            if isinstance(chat, dict) and isinstance(chat.get("id"), int):
                chats.append(chat)
    return chats


def _scope_key(params: dict[str, Any]) -> str:
    scope = params.get("scope") or {"type": "default"}
    return json.dumps([scope, params.get("language_code") or ""], sort_keys=True)


def _decode_value(name: str, value: str) -> Any:
    if name in _STRING_PARAMS:
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


async def _read_params(request: web.Request) -> dict[str, Any]:
    """Decode PTB's form fields (JSON-encoded non-strings), JSON bodies and query strings."""
    params: dict[str, Any] = {k: _decode_value(k, v) for k, v in request.query.items()}
    if request.method != "POST" or not request.can_read_body:
        return params
    if request.content_type == "application/json":
        body = await request.json()
        if isinstance(body, dict):
            params.update(body)
        return params
    if request.content_type == "multipart/form-data":
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            if part.name and part.filename is None:
                params[part.name] = _decode_value(part.name, await part.text())
        return params
    form = await request.post()
    for key, value in form.items():
        if isinstance(value, str):
            params[key] = _decode_value(key, value)
    return params


def _error_response(error: _ApiError) -> web.Response:
    body: dict[str, Any] = {
        "ok": False,
        "error_code": error.code,
        "description": error.description,
    }
    if error.parameters:
        body["parameters"] = error.parameters
    return web.json_response(body, status=error.code)
