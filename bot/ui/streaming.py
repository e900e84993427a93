"""StreamingReply: a model's answer growing in a Telegram chat, within Telegram's limits.

While the model generates, the reply is shown as PLAIN text (partial markdown is usually
invalid HTML) by editing the message at most once per `edit_interval` per message, from a
background task, so the model stream never waits on Telegram. When the text outgrows one
message, it continues in a new one. At the end the whole answer is rendered from markdown to
Telegram HTML and split into pieces that fit; each piece falls back to plain text if Telegram
refuses its HTML.

The first message waits a short hold (`first_hold`, 1.5 edit intervals by default) after the
first text, unless the text is already long (`FIRST_SEND_CHARS`): every streamed message makes
the final text wait up to one edit interval for its last edit, so an answer complete within the
hold is sent once, formatted, the moment it is complete; a long or slow one starts showing
after the hold. The typing indicator stays on until the first message is shown.

In a private chat the text streams into a native draft instead (`use_drafts`, sendMessageDraft
with a Stop button: `can_stop`, `keep_on_stop`). A draft is an ephemeral preview that vanishes
when the bot sends a message, so every draft ends in a sendMessage: text past one message's
limit goes out as real messages at the same safe split points, `seal()` (a tool round starts)
sends the text so far as a finished message and starts a new draft id, and the final text's
last piece is always sent, never edited in, while a draft may be showing. Every draft id the
reply used is kept (`owns_draft`): a Stop press names one. A draft call Telegram refuses turns
the reply to edits for the rest of it; the real message that follows hides the draft, so
nothing shows twice.

An answer written with untrusted content in view (`disable_previews`) is sent and edited with
link previews off: a page could otherwise have the model write a link whose preview Telegram's
servers fetch, with what it read in the URL. sendMessageDraft has no preview setting, so such a
reply stops drafting and streams into a real message instead.

Telegram's flood control punishes retrying during a penalty by extending it, so a RetryAfter
is never retried early (bot/ui/flood.py): intermediate updates are skipped until the penalty
ends, the final text waits it out and is then sent once. "Message is not modified" is success.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial

import structlog
from telegram import Bot, LinkPreviewOptions, ReplyParameters
from telegram.constants import ChatAction, ParseMode
from telegram.error import BadRequest, ChatMigrated, Forbidden, RetryAfter, TelegramError

from bot.ui.flood import MAX_PENALTY_WAITS, penalty_seconds
from bot.ui.render import (
    TELEGRAM_TEXT_LIMIT,
    plain_text,
    render_html,
    split_for_telegram,
    utf16_len,
)
from bot.ui.segments import plain_segments
from primitives.backoff import Backoff
from primitives.waits import wait_or_timeout

log = structlog.get_logger("bot.streaming")

TYPING_REPEAT_S = 4.0  # Telegram shows a chat action for about 5 s
FINAL_ATTEMPTS = 3  # network errors on the final text: tries per piece
FINAL_BACKOFF = Backoff((0.5, 1.0, 2.0))
FIRST_HOLD_INTERVALS = 1.5  # default hold before the first streamed message, in edit intervals
FIRST_SEND_CHARS = 500  # text this long is shown at once: worth reading before the answer ends
# "Chat migrated" answers followed per reply. A group becomes a supergroup once; answers that
# keep moving the chat (back and forth between two ids, from a proxy or a broken server) would
# otherwise be followed without end, one request each, by the typing and final-send loops.
MAX_MIGRATIONS = 2


@dataclass
class _Shown:
    """One Telegram message of this reply and the text it currently shows."""

    message_id: int
    text: str
    changed_at: float  # when it was sent or last edited (monotonic)


@dataclass(frozen=True)
class _FinalPiece:
    plain: str
    html: str | None = None


class StreamingReply:
    """Show one streamed answer in a chat; see the module docstring for the rules."""

    def __init__(
        self,
        bot: Bot,
        chat_id: int,
        *,
        reply_to_message_id: int | None = None,
        edit_interval: float = 1.0,
        use_drafts: bool = False,
        message_thread_id: int | None = None,
        limit: int = TELEGRAM_TEXT_LIMIT,
        first_hold: float | None = None,
        on_migrated: Callable[[int, int], None] | None = None,
    ) -> None:
        self._bot = bot
        self._chat_id = chat_id
        # Told (old id, new id) when the chat turns out to have become a supergroup.
        self._on_migrated = on_migrated
        self._reply_to = reply_to_message_id
        self._interval = edit_interval
        self._use_drafts = use_drafts
        self._thread_id = message_thread_id
        self._limit = limit
        self._first_hold = (
            FIRST_HOLD_INTERVALS * edit_interval if first_hold is None else first_hold
        )
        self._first_text_at: float | None = None  # when the first text arrived (monotonic)
        self._draft_id = _new_draft_id()
        self._draft_ids: set[int] = set()  # every draft id this reply sent (a Stop names one)
        self._draft_visible = False  # a draft may be on screen (no message sent since)

        self._text = ""  # everything appended since the last restart
        self._base = 0  # where in `_text` the live part starts: what comes before is sealed
        self._sealed: list[str] = []  # markdown of the parts sealed since the last restart
        # The last sealed message and what it shows: a stop right after a seal adds its note
        # there instead of sending it alone.
        self._last_sealed: tuple[_Shown, _FinalPiece] | None = None
        self._prefix = ""  # a restart note shown above the new text while streaming
        self._shown: list[_Shown] = []
        self._draft_shown = ""
        self._draft_at = float("-inf")
        self._last_send_at = float("-inf")
        self._blocked_until = 0.0  # end of a flood-control penalty (monotonic)
        self._visible = asyncio.Event()  # a message (or draft) of this reply is on screen
        self._dirty = asyncio.Event()
        self._closing = asyncio.Event()
        self._io = asyncio.Lock()  # one change of the screen at a time: the flusher's or seal's
        self._flusher: asyncio.Task[None] | None = None
        self._typing: asyncio.Task[None] | None = None
        self._done = False
        self._migrations = 0  # "chat migrated" answers followed so far
        self._ended = False  # the model finished: only the final text is still to come
        self._previews: LinkPreviewOptions | None = None  # None: Telegram's default

    # ---- public API -------------------------------------------------------------------------

    async def start(self) -> None:
        """Show "typing…" until the first message is shown, and start the background flusher."""
        self._typing = asyncio.create_task(self._keep_typing())
        self._flusher = asyncio.create_task(self._flush_loop())

    @property
    def typing(self) -> bool:
        """Whether "typing…" is still being repeated (it stops at the first text)."""
        return self._typing is not None and not self._typing.done()

    def owns_draft(self, thread_id: int | None, draft_id: int) -> bool:
        """Whether a Stop pressed on draft `draft_id` in `thread_id` stops this reply: one of
        its drafts, in its thread, while the model is still writing (after the end, the
        complete answer is on its way and a late Stop changes nothing)."""
        return (
            not self._done
            and not self._ended
            and thread_id == self._thread_id
            and draft_id in self._draft_ids
        )

    def disable_previews(self) -> None:
        """From now on every send and edit of this reply, the final text included, shows no
        link preview; drafts (which cannot say so) are no longer used."""
        self._previews = LinkPreviewOptions(is_disabled=True)
        self._use_drafts = False

    async def append(self, text_piece: str) -> None:
        """Add streamed text; it appears with the next allowed edit."""
        if not text_piece or self._done:
            return
        if self._first_text_at is None:
            self._first_text_at = time.monotonic()
        self._text += text_piece
        self._dirty.set()

    def ended(self) -> None:
        """The model has finished: stop intermediate updates, the final text comes next.

        An update made now would be replaced at once by the final text, and each edit makes
        that final edit wait another interval; an answer that ended within the first-message
        hold stays one single message.
        """
        self._ended = True

    async def restart(self, note: str) -> None:
        """The model failed mid-stream and another one starts over: drop the shown text.

        The note is kept whenever the failed model produced text, even if its first message is
        still on its way: the user may see it land and must then learn why it was replaced.
        """
        had_text = bool(self._text) or bool(self._shown) or bool(self._draft_shown)
        self._text = ""
        self._base = 0
        # Sealed messages stay on screen (they are stored as their tool round's text), but the
        # answer that follows no longer contains them.
        self._sealed.clear()
        self._last_sealed = None
        self._prefix = f"{note}\n\n" if had_text else ""
        self._dirty.set()

    async def seal(self) -> list[int]:
        """Tools are about to run: while drafting, the text so far becomes finished, formatted
        messages and later text streams into a new draft. A draft lives about 30 seconds and
        a tool call may take longer; a real message stays. With edits there is nothing to do:
        the streamed messages are real already. Returns the ids of the sealed messages."""
        async with self._io:
            live = self._text[self._base :]
            if not self._use_drafts or not live.strip():
                return []
            pieces = await asyncio.to_thread(_render_pieces, live, self._limit)
            if self._prefix.strip() and pieces:
                first = pieces[0]
                note = self._prefix.strip()
                pieces[0] = _FinalPiece(
                    plain=f"{note}\n\n{first.plain}",
                    html=f"{html.escape(note, quote=False)}\n\n{first.html}",
                )
            ids = await self._deliver(pieces)
            if self._shown and len(self._shown) == len(pieces):
                self._last_sealed = (self._shown[-1], pieces[-1])
            self._sealed.append(live.strip())
            self._base = len(self._text)
            self._prefix = ""
            self._shown.clear()
            self._draft_shown = ""
            self._draft_id = _new_draft_id()
            self._dirty.set()
            return ids

    async def finish(self, final_markdown: str, footer: str | None = None) -> list[int]:
        """Replace the streamed text by the formatted answer; returns the final message ids."""
        await self._stop_background()
        final_markdown = self._unsealed(final_markdown)
        # A footer that would leave the answer too little room gets messages of its own.
        alone = bool(footer) and utf16_len(footer or "") + 2 > self._limit // 2
        budget = self._limit - (utf16_len(footer) + 2 if footer and not alone else 0)
        # Rendering a long answer takes a while (~0.1 s for 16 kB): keep other chats moving.
        pieces = await asyncio.to_thread(_render_pieces, final_markdown, budget)
        if footer and alone:
            pieces += [_FinalPiece(plain=p) for p in plain_segments(footer, self._limit)]
        elif footer:
            if pieces:
                pieces[-1] = _with_note(pieces[-1], footer)
            else:
                pieces = [_FinalPiece(plain=footer, html=None)]
        if not pieces:
            log.warning("empty_final_text", chat_id=self._chat_id)
            return [m.message_id for m in self._shown]
        return await self._deliver(pieces)

    async def fail(self, note: str) -> list[int]:
        """Stop with an error note, keeping the text shown so far."""
        return await self._finish_plain(note)

    async def cancelled(self, note: str) -> list[int]:
        """The user pressed /cancel: keep what was shown and say it was stopped."""
        return await self._finish_plain(note)

    def _unsealed(self, final_markdown: str) -> str:
        """The part of the whole answer that is not sealed yet. The answer is the rounds'
        texts joined, so it starts with the sealed parts; if it does not (a text the caller
        chose instead), the live streamed text is what remains to be shown."""
        sealed = "\n\n".join(part for part in self._sealed if part)
        if not sealed:
            return final_markdown
        answer = final_markdown.strip()
        if answer.startswith(sealed):
            return answer[len(sealed) :].strip()
        log.warning("final_text_not_after_sealed_parts", chat_id=self._chat_id)
        return self._text[self._base :].strip()

    # ---- streaming (background) -------------------------------------------------------------

    def _display(self) -> str:
        """What the live part shows: the restart note, then the text since the last seal."""
        return self._prefix + self._text[self._base :]

    async def _keep_typing(self) -> None:
        while not self._visible.is_set() and not self._closing.is_set():
            if time.monotonic() < self._blocked_until:
                await self._sleep(self._blocked_until - time.monotonic())
                continue
            try:
                await self._bot.send_chat_action(
                    self._chat_id, ChatAction.TYPING, message_thread_id=self._thread_id
                )
            except ChatMigrated as error:
                if not self._migrated(error):
                    return
                continue
            except TelegramError as error:
                log.info("typing_action_failed", chat_id=self._chat_id, error=str(error))
            await wait_or_timeout(self._visible, self._closing, timeout=TYPING_REPEAT_S)

    async def _flush_loop(self) -> None:
        """Bring Telegram in line with the text, one request at a time, within the limits."""
        while not self._closing.is_set():
            await self._wait_for(self._dirty)
            if self._closing.is_set():
                return
            async with self._io:
                planned = self._plan()
                if planned is None:
                    self._dirty.clear()
                    continue
                ready, action = planned
                if ready <= time.monotonic():
                    await self._step(action)
                    continue
            await self._sleep(ready - time.monotonic())

    def _migrated(self, error: ChatMigrated) -> bool:
        """The group became a supergroup: the reply goes on there. Nothing of it can be on
        screen in the old chat (Telegram refuses every request naming it), so the new chat gets
        the whole text, as a new message, without the reply-to (that message id is the old
        chat's) or a topic (an upgraded group had none).

        False, and the reply stops, past MAX_MIGRATIONS moves: the chat has no place to go."""
        self._migrations += 1
        if self._migrations > MAX_MIGRATIONS:
            log.error(
                "reply_chat_migrated_too_often",
                chat_id=self._chat_id,
                new_chat_id=error.new_chat_id,
                migrations=self._migrations,
            )
            self._closing.set()  # the typing and the streamed updates stop
            return False
        log.warning("reply_chat_migrated", chat_id=self._chat_id, new_chat_id=error.new_chat_id)
        if self._on_migrated is not None:
            self._on_migrated(self._chat_id, error.new_chat_id)
        self._chat_id = error.new_chat_id
        self._reply_to = None
        self._thread_id = None
        self._use_drafts = False
        self._shown.clear()
        self._dirty.set()
        return True

    def _hold_until(self) -> float:
        """Earliest moment the first message (or draft) may appear; -inf once one has."""
        if self._shown or self._draft_shown or self._first_text_at is None:
            return float("-inf")
        if len(self._display()) >= FIRST_SEND_CHARS:
            return float("-inf")
        return self._first_text_at + self._first_hold

    def _segments(self) -> list[str]:
        return [s for s in plain_segments(self._display(), self._limit) if s.strip()]

    def _plan(self) -> tuple[float, Callable[[], Awaitable[None]]] | None:
        """The most useful request to make next and the moment it is allowed; None if the
        screen is up to date. With drafts, every full segment but the last is a real message
        and the last one is the draft; with edits, every segment is a real message."""
        if self._ended:
            return None
        segments = self._segments()
        drafting = self._use_drafts
        real = segments[:-1] if drafting else segments
        options: list[tuple[float, Callable[[], Awaitable[None]]]] = []
        for index, segment in enumerate(real):
            if index < len(self._shown):
                shown = self._shown[index]
                if shown.text.strip() != segment.strip():
                    ready = shown.changed_at + self._interval
                    options.append((ready, partial(self._edit_plain, shown, segment)))
            else:
                ready = max(self._last_send_at + self._interval, self._hold_until())
                options.append((ready, partial(self._send_plain, segment)))
                break
        if len(self._shown) > len(real):
            options.append((float("-inf"), self._delete_stale))  # after a restart
        if drafting and segments and len(self._shown) == len(real):
            tail = segments[-1]
            if tail.strip() != self._draft_shown.strip():
                ready = max(self._draft_at + self._interval, self._hold_until())
                options.append((ready, partial(self._send_draft, tail)))
        if not options:
            return None
        ready, action = min(options, key=lambda option: option[0])
        return max(ready, self._blocked_until), action

    async def _step(self, action: Callable[[], Awaitable[None]]) -> None:
        """Make one request; a refusal is logged and the stream goes on."""
        try:
            await action()
        except RetryAfter as error:
            self._penalise(error)
        except ChatMigrated as error:
            self._migrated(error)
        except BadRequest as error:
            log.info("stream_update_refused", chat_id=self._chat_id, error=error.message)
        except Forbidden as error:
            log.warning("stream_forbidden", chat_id=self._chat_id, error=error.message)
            self._closing.set()
        except TelegramError as error:
            # Intermediate text is best effort: the final text is what must arrive.
            log.info("stream_update_failed", chat_id=self._chat_id, error=str(error))

    async def _delete_stale(self) -> None:
        stale = self._shown.pop()
        with contextlib.suppress(TelegramError):
            await self._bot.delete_message(self._chat_id, stale.message_id)

    async def _send_draft(self, text: str) -> None:
        self._draft_at = time.monotonic()
        self._draft_ids.add(self._draft_id)
        try:
            await self._bot.send_message_draft(
                self._chat_id,
                self._draft_id,
                text,
                message_thread_id=self._thread_id,
                # Bot API 10.3: a Stop button (its press arrives as stopped_message_generation),
                # and the draft stays on screen after it until the stopped text is sent.
                api_kwargs={"can_stop": True, "keep_on_stop": True},
            )
        except RetryAfter:
            raise
        except TelegramError as error:
            # The real message that streams from now on hides any draft shown before.
            log.info("drafts_unavailable_using_edits", chat_id=self._chat_id, error=str(error))
            self._use_drafts = False
            self._dirty.set()
            return
        self._draft_at = time.monotonic()
        self._draft_shown = text
        self._draft_visible = True
        self._visible.set()

    def _message_sent(self) -> None:
        """Telegram hides the chat's draft when the bot sends a message: later text starts a
        new draft, under a new id."""
        if self._draft_shown or self._draft_visible:
            self._draft_id = _new_draft_id()
        self._draft_visible = False
        self._draft_shown = ""

    async def _send_plain(self, text: str) -> None:
        self._last_send_at = time.monotonic()
        message = await self._bot.send_message(
            self._chat_id,
            text,
            reply_parameters=self._reply_parameters(first=not self._shown),
            message_thread_id=self._thread_id,
            link_preview_options=self._previews,
        )
        self._last_send_at = time.monotonic()
        self._message_sent()
        self._shown.append(_Shown(message.message_id, text, self._last_send_at))
        self._visible.set()

    async def _edit_plain(self, shown: _Shown, text: str) -> None:
        shown.changed_at = time.monotonic()  # a failed edit is not retried at once either
        try:
            await self._bot.edit_message_text(
                text, self._chat_id, shown.message_id, link_preview_options=self._previews
            )
        except BadRequest as error:
            if _is_not_modified(error):
                shown.text = text
                return
            if _is_gone(error):
                # The user deleted it; later text goes to a fresh message.
                self._shown.remove(shown)
                return
            raise
        # Count the interval from the answer, not the request: Telegram sees the edit at some
        # point in between, so this keeps its view of the spacing at least `edit_interval`.
        shown.changed_at = time.monotonic()
        shown.text = text

    # ---- the final text ---------------------------------------------------------------------

    async def _finish_plain(self, note: str) -> list[int]:
        await self._stop_background()
        kept = self._display().rstrip()
        if not kept.strip() and self._last_sealed is not None and not self._draft_visible:
            # Nothing was shown since the last seal: the note goes under the sealed text.
            shown, last = self._last_sealed
            noted = _with_note(last, note)
            if utf16_len(noted.plain) <= self._limit:
                message_id = await self._deliver_piece(noted, shown)
                if message_id is not None:
                    return [message_id]
        text = f"{kept}\n\n{note}" if kept.strip() else note
        pieces = [_FinalPiece(plain=s) for s in plain_segments(text, self._limit) if s.strip()]
        return await self._deliver(pieces)

    async def _stop_background(self) -> None:
        """Stop typing and the flusher, letting an in-flight request finish (cancelling a
        send midway could leave a message we do not know about: a duplicate later)."""
        self._done = True
        self._closing.set()
        background = [task for task in (self._typing, self._flusher) if task is not None]
        if not background:
            return
        # Not cancelled and not shielded: `asyncio.wait` leaves the tasks alone when the
        # caller is cancelled (a /cancel during the final edit), and that cancellation still
        # reaches the caller instead of being swallowed with the tasks' own.
        await asyncio.wait(background)
        for task in background:
            error = None if task.cancelled() else task.exception()
            if error is not None:
                raise error

    async def _deliver(self, pieces: list[_FinalPiece]) -> list[int]:
        """Edit the streamed messages into the final pieces, send the rest, drop extras.

        While a draft may be showing, the last piece is sent, never edited in: only a sent
        message hides the draft, which would otherwise repeat the end of the answer."""
        reused = len(self._shown)
        if self._draft_visible:
            reused = min(reused, len(pieces) - 1)
        kept, stale = self._shown[:reused], self._shown[reused:]
        self._shown = list(kept)
        ids: list[int] = []
        for index, piece in enumerate(pieces):
            # Not after a move to a supergroup, which forgets every message of the old chat.
            shown = kept[index] if index < len(kept) and kept[index] in self._shown else None
            message_id = await self._deliver_piece(piece, shown)
            if message_id is not None:
                ids.append(message_id)
        for message in stale:
            try:
                await self._bot.delete_message(self._chat_id, message.message_id)
            except TelegramError as error:
                log.info("stale_message_not_deleted", chat_id=self._chat_id, error=str(error))
        return ids

    async def _deliver_piece(self, piece: _FinalPiece, shown: _Shown | None) -> int | None:
        use_html = piece.html is not None
        failures = 0
        penalties = 0
        while self._migrations <= MAX_MIGRATIONS:
            await self._wait_allowed(shown)
            text = piece.html if use_html and piece.html is not None else piece.plain
            mode = ParseMode.HTML if use_html else None
            # A refused request changes nothing on screen: it must not delay the retry.
            previous_change = shown.changed_at if shown is not None else self._last_send_at
            try:
                if shown is not None:
                    shown.changed_at = time.monotonic()
                    await self._bot.edit_message_text(
                        text,
                        self._chat_id,
                        shown.message_id,
                        parse_mode=mode,
                        link_preview_options=self._previews,
                    )
                    shown.changed_at = time.monotonic()
                    shown.text = piece.plain
                    return shown.message_id
                self._last_send_at = time.monotonic()
                message = await self._bot.send_message(
                    self._chat_id,
                    text,
                    parse_mode=mode,
                    reply_parameters=self._reply_parameters(first=not self._shown),
                    message_thread_id=self._thread_id,
                    link_preview_options=self._previews,
                )
                self._last_send_at = time.monotonic()
                self._message_sent()
                self._shown.append(_Shown(message.message_id, piece.plain, self._last_send_at))
                return message.message_id
            except RetryAfter as error:
                self._penalise(error)
                penalties += 1
                if penalties > MAX_PENALTY_WAITS:
                    log.error("final_text_given_up_flood", chat_id=self._chat_id)
                    return None
            except ChatMigrated as error:
                if not self._migrated(error):
                    return None
                shown = None
            except BadRequest as error:
                if shown is not None and _is_not_modified(error):
                    return shown.message_id
                if shown is not None:
                    shown.changed_at = previous_change
                else:
                    self._last_send_at = previous_change
                if shown is not None and _is_gone(error):
                    self._shown.remove(shown)
                    shown = None
                    continue
                if use_html:
                    # Can't parse entities (or anything else about the HTML): plain text.
                    log.info("final_html_refused", chat_id=self._chat_id, error=error.message)
                    use_html = False
                    continue
                log.error("final_text_refused", chat_id=self._chat_id, error=error.message)
                return None
            except Forbidden as error:
                log.warning("final_text_forbidden", chat_id=self._chat_id, error=error.message)
                return None
            except TelegramError as error:
                failures += 1
                log.warning(
                    "final_text_send_failed",
                    chat_id=self._chat_id,
                    attempt=failures,
                    error=str(error),
                )
                if failures >= FINAL_ATTEMPTS:
                    return None
                await asyncio.sleep(FINAL_BACKOFF.after(failures))
        return None  # the chat kept "migrating": an earlier piece already said so in the log

    async def _wait_allowed(self, shown: _Shown | None) -> None:
        """Sleep until the penalty is over and this message (or this chat) may change again."""
        if shown is not None:
            ready = shown.changed_at + self._interval
        else:
            ready = self._last_send_at + self._interval
        delay = max(ready, self._blocked_until) - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)

    # ---- helpers ----------------------------------------------------------------------------

    def _penalise(self, error: RetryAfter) -> None:
        seconds = penalty_seconds(error)
        self._blocked_until = max(self._blocked_until, time.monotonic() + seconds)
        log.warning("telegram_flood_control", chat_id=self._chat_id, retry_after_s=seconds)

    def _reply_parameters(self, *, first: bool) -> ReplyParameters | None:
        if not first or self._reply_to is None:
            return None
        return ReplyParameters(self._reply_to, allow_sending_without_reply=True)

    async def _wait_for(self, event: asyncio.Event) -> None:
        """Wait for `event` or for closing, whichever comes first."""
        await wait_or_timeout(event, self._closing, timeout=None)

    async def _sleep(self, seconds: float) -> None:
        await wait_or_timeout(self._closing, timeout=seconds)


def _with_note(piece: _FinalPiece, note: str) -> _FinalPiece:
    """`piece` with a line of the bot's own below it, in italics when formatted."""
    escaped = html.escape(note, quote=False)
    return _FinalPiece(
        plain=f"{piece.plain}\n\n{note}",
        html=f"{piece.html}\n\n<i>{escaped}</i>" if piece.html is not None else None,
    )


def _new_draft_id() -> int:
    """A draft id: non-zero (the Bot API's rule), random, so a Stop pressed on an earlier
    reply's draft never matches this one."""
    return secrets.randbelow(2**31 - 2) + 1


def _render_pieces(markdown: str, limit: int) -> list[_FinalPiece]:
    pieces = [
        _FinalPiece(plain=plain_text(part), html=render_html(part))
        for part in split_for_telegram(markdown, limit)
    ]
    return [piece for piece in pieces if piece.plain]


def _is_not_modified(error: BadRequest) -> bool:
    return "message is not modified" in error.message.lower()


def _is_gone(error: BadRequest) -> bool:
    return "message to edit not found" in error.message.lower()
