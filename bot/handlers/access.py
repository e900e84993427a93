"""Who may talk to the bot, and whether a group message is meant for it.

Both checks run before anything is stored or any model is called: a stranger costs nothing,
and group chatter the bot was not asked about is never read into a session. `admit` is the one
preamble every handler module runs, so all commands refuse strangers the same way.
"""

from __future__ import annotations

import re
import time
from collections import OrderedDict
from collections.abc import Callable, Collection
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import structlog
from telegram import Message, MessageEntity, Update
from telegram.error import BadRequest, TelegramError

from bot.ui.i18n import t

if TYPE_CHECKING:
    from bot.app.config import Settings

log = structlog.get_logger("bot.access")

GROUP_TYPES = ("group", "supergroup")

# Telegram's stand-ins for people who write on behalf of a chat: GroupAnonymousBot (anonymous
# group admins) and Channel_Bot (channels). Every anonymous admin of every group has the same
# id, so such an id must never be allowed, nor suggested to an owner.
ANONYMOUS_SENDER_IDS = frozenset({1087968824, 136817688})

REFUSAL_INTERVAL_S = 3600.0  # at most one refusal per stranger per hour
REFUSAL_MEMORY = 10_000  # strangers remembered at once (oldest forgotten first)


class RefusalThrottle:
    """At most one refusal per sender per `interval`, in bounded memory.

    A stranger who keeps writing would otherwise get a refusal for every message, each one a
    message of ours that shares Telegram's send limits with the real replies.
    """

    def __init__(
        self,
        interval: float = REFUSAL_INTERVAL_S,
        capacity: int = REFUSAL_MEMORY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval = interval
        self.capacity = capacity
        self._clock = clock
        self._last: OrderedDict[int, float] = OrderedDict()  # oldest refusal first

    def allow(self, sender_id: int) -> bool:
        """True (and remembered) if `sender_id` may be told again now."""
        now = self._clock()
        while self._last and now - next(iter(self._last.values())) >= self.interval:
            self._last.popitem(last=False)
        if sender_id in self._last:
            return False
        self._last[sender_id] = now
        if len(self._last) > self.capacity:
            self._last.popitem(last=False)
        return True

    def __len__(self) -> int:
        return len(self._last)


# Whether the update being handled had its user message stored (set by the chat turn), so an
# error reply says "your message is saved" only when it is true. Each update is handled in its
# own task, which starts from a copy of the context where this is False.
_message_saved: ContextVar[bool] = ContextVar("message_saved", default=False)


def mark_message_saved() -> None:
    _message_saved.set(True)


def message_saved() -> bool:
    return _message_saved.get()


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """`text` with lone UTF-16 surrogates replaced by U+FFFD.

    Telegram's JSON may carry a lone "\\ud83d" (a client cut an emoji in half); Python keeps it
    as a lone surrogate, which UTF-8 and UTF-16 encoders (SQLite, offsets) refuse. U+FFFD is
    one UTF-16 unit like the surrogate, so entity offsets stay right.
    """
    return _LONE_SURROGATE.sub("\ufffd", text)


def is_anonymous(update: Update) -> bool:
    """Sent on behalf of a group or channel: no person we could check against the allowlist."""
    message = update.effective_message
    if message is not None and message.sender_chat is not None:
        return True
    user = update.effective_user
    return user is not None and user.id in ANONYMOUS_SENDER_IDS


def is_allowed(user_id: int | None, allowed: Collection[int], admins: Collection[int]) -> bool:
    """An empty allowlist means nobody: a fresh bot must not answer (and bill) the world."""
    return user_id is not None and (user_id in allowed or user_id in admins)


def user_allowed(settings: Settings, user_id: int | None) -> bool:
    return is_allowed(user_id, settings.ALLOWED_USER_IDS, settings.ADMIN_USER_IDS)


def user_language(update: Update) -> str | None:
    """The sender's Telegram language, which every reply is written in."""
    user = update.effective_user
    return user.language_code if user else None


async def say(message: Message, text: str, **kwargs: Any) -> bool:
    """A plain-text reply; True if Telegram took it. Never raised into PTB, never silent:
    a refused send is logged, and when Telegram refused the message itself (too long, bad
    text) rather than the connection, the user is told that a reply is missing."""
    try:
        await message.reply_text(text, do_quote=False, **kwargs)
        return True
    except TelegramError as exc:
        log.warning("reply_failed", chat_id=message.chat_id, error=str(exc),
                    units=len(text.encode("utf-16-le", "surrogatepass")) // 2)  # fmt: skip
        if not isinstance(exc, BadRequest):
            return False
    lang = message.from_user.language_code if message.from_user else None
    try:
        await message.reply_text(t("send_failed", lang), do_quote=False)
    except TelegramError as exc:
        log.warning("reply_failed_notice_failed", chat_id=message.chat_id, error=str(exc))
    return False


async def admit(
    update: Update,
    settings: Settings,
    *,
    addressed: bool = True,
    refusals: RefusalThrottle | None = None,
) -> bool:
    """True if the sender may use the bot; a stranger gets one polite line with their id.

    A button press is answered with an alert. In groups a stranger is told only when they
    addressed the bot, so group chatter does not make the bot talk; and with `refusals`, at
    most once an hour. Someone writing as a group or channel is asked to write as themselves:
    their id is Telegram's shared stand-in, which must never be suggested to the owner.
    """
    user = update.effective_user
    anonymous = is_anonymous(update)
    if not anonymous and user_allowed(settings, user.id if user else None):
        return True
    lang = user_language(update)
    if anonymous:
        refusal = t("anonymous_refused", lang)
    else:
        refusal = t("not_allowed", lang, user_id=user.id if user else "?")
    message = update.effective_message
    sender = _sender_id(update)
    tell = refusals is None or sender is None or refusals.allow(sender)
    if update.callback_query is not None:
        # A press must be answered (or the client spins); the alert only once an hour.
        await update.callback_query.answer(refusal if tell else None, show_alert=tell)
    elif message is not None and addressed and (user is not None or anonymous):
        log.info("stranger_refused", user_id=sender, chat_id=message.chat_id, told=tell,
                 anonymous=anonymous)  # fmt: skip
        if tell:
            await say(message, refusal)
    return False


def _sender_id(update: Update) -> int | None:
    """Who a refusal is counted against: the chat written as, else the person."""
    message = update.effective_message
    if message is not None and message.sender_chat is not None:
        return message.sender_chat.id
    user = update.effective_user
    return user.id if user is not None else None


def is_group(message: Message) -> bool:
    return message.chat.type in GROUP_TYPES


def _entities(message: Message) -> tuple[list[MessageEntity], str]:
    if message.text is not None:
        return list(message.entities), clean_text(message.text)
    return list(message.caption_entities), clean_text(message.caption or "")


def _mentions_bot(entity: MessageEntity, text: str, bot_username: str, bot_id: int) -> bool:
    if entity.type == MessageEntity.MENTION:
        mention = _utf16_slice(text, entity.offset, entity.length)
        return mention.lstrip("@").lower() == bot_username.lower()
    if entity.type == MessageEntity.TEXT_MENTION:
        return entity.user is not None and entity.user.id == bot_id
    return False


def is_addressed_to_bot(message: Message, bot_username: str, bot_id: int) -> bool:
    """In groups the bot answers only when mentioned or when a user replies to it."""
    reply = message.reply_to_message
    if reply is not None and reply.from_user is not None and reply.from_user.id == bot_id:
        return True
    entities, text = _entities(message)
    return any(_mentions_bot(e, text, bot_username, bot_id) for e in entities)


def strip_bot_mentions(message: Message, bot_username: str, bot_id: int) -> str:
    """The message text without the mentions of the bot, which the model need not see.

    Entity offsets count UTF-16 code units, so the cut is done on the UTF-16 encoding.
    """
    entities, text = _entities(message)
    units = text.encode("utf-16-le")
    for entity in sorted(entities, key=lambda e: e.offset, reverse=True):
        if _mentions_bot(entity, text, bot_username, bot_id):
            start, end = entity.offset * 2, (entity.offset + entity.length) * 2
            units = units[:start] + units[end:]
    stripped = units.decode("utf-16-le")
    return stripped.strip().lstrip(",:").strip()


def _utf16_slice(text: str, offset: int, length: int) -> str:
    units = text.encode("utf-16-le")
    return units[offset * 2 : (offset + length) * 2].decode("utf-16-le", errors="replace")


def quoted_text(message: Message) -> str | None:
    """The text the user replied to: the part they quoted (Telegram's `quote`), else the whole
    replied-to message's text or caption. None for a plain message, and for the implicit
    "reply" to the topic-creation message that every message in a forum topic carries."""
    if message.quote is not None and message.quote.text:
        return message.quote.text
    replied = message.reply_to_message
    if replied is None or replied.forum_topic_created is not None:
        return None
    return replied.text or replied.caption or None
