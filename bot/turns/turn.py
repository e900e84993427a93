"""One chat turn: store the user's words, stream the model's answer, store the answer."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog
from telegram import Bot, Message, User
from telegram.constants import ChatType
from telegram.error import TelegramError

from agent.events import (
    AgentDone,
    PendingWrite,
    Receipt,
    ToolRound,
    ToolsStarting,
    UntrustedContent,
)
from agent.loop import MAX_KEPT_TOOL_CALLS, AgentTurn
from agent.prompt import with_forward, with_quote
from bot import BotError
from bot.handlers.incoming import (
    forward_origin_of,
    is_group,
    plain_name,
    quoted_author,
    quoted_text,
    quotes_others,
    replies_to,
)
from bot.handlers.migration import migrate_later
from bot.turns.chat_turns import StopSwitch
from bot.ui.i18n import t
from bot.ui.pending_texts import send_pending
from bot.ui.reminder_texts import reminder_receipt_line
from bot.ui.render import utf16_len
from bot.ui.streaming import StreamingReply
from memory.facts import MAX_FACT_CHARS
from memory.longterm import MemoryNotice, memory_notice_shown
from memory.provenance import FORWARD, QUOTE, Provenance
from memory.store import StoredMessage, TurnStart
from models.catalog import ModelEntry
from models.types import Outcome, StreamRestart, TextDelta, TransportError

if TYPE_CHECKING:
    from bot.services import Services

log = structlog.get_logger("bot.turns")

# UTF-16 units the receipt lines of one answer may take: with the answer's last piece cut to
# leave room for them, a message never passes Telegram's 4096.
RECEIPTS_MAX_UNITS = 1500


class MessageSavedError(BotError):
    """A chat turn broke after the user's message was stored; the error is its `__cause__`.

    What the handler learns from the turn, so that the error reply (bot/handlers/chat.py,
    `on_error`) says the message is saved exactly when it is."""


@dataclass(frozen=True)
class TurnRequest:
    """What a handler extracted from an update; no Telegram objects beyond the Bot."""

    chat_id: int
    user_id: int
    text: str
    language: str | None
    reply_to_message_id: int | None
    private: bool
    message_thread_id: int | None = None
    # How the message came if not as text (kind, Telegram file id, caption): stored with it.
    media: dict[str, object] | None = None
    # A photo for this turn only, as a data URL: sent as an image part, never stored.
    image_url: str | None = None
    # The text of the message this one replies to (or the part the user quoted), plain text.
    quoted_text: str | None = None
    # Identifies the input across deliveries (a replayed update); the turn runs once per key.
    turn_key: str | None = None
    # Who wrote it, in a group ("Ana (id 101)"): stored beside the text, so the consolidation
    # transcript names the speaker and memory lines can say whom they are about.
    speaker: str | None = None
    # The sender's name as Telegram shows it (a reminder set in a group mentions them).
    user_name: str | None = None
    # A forwarded message: whose words it holds (bot.handlers.incoming.forward_origin_of),
    # stored with it and shown as theirs, never as the sender's own statement.
    forward_origin: dict[str, object] | None = None
    # The message quotes words that are not the sender's own (another member's, the bot's).
    quotes_others: bool = False
    # ... and they are not the bot's either: stored as a quote of others (stored_provenance).
    quotes_people: bool = False
    # Who wrote the quoted message, as a stub names them ("Ana (id 101)").
    quoted_author: str | None = None
    # Where the message's words came from when they are not the sender's (a document, a photo,
    # an audio file: set by the media handler that read it). A forward or a quote of others
    # is recorded from the fields above (stored_provenance).
    provenance: Provenance | None = None

    @property
    def others_words(self) -> bool:
        """This turn's message carries words of others: forwarded, or quoting someone else.
        Such content writes nothing by itself (see AgentTurn.others_words)."""
        return self.forward_origin is not None or self.quotes_others

    def stored_text(self) -> str:
        """What is stored and sent to the model: the text (framed as its origin's words if
        forwarded), framed with its quote if any."""
        text = self.text
        if self.forward_origin is not None:
            text = with_forward(text, str(self.forward_origin.get("name") or "someone else"))
        if self.quoted_text and self.quoted_text.strip():
            return with_quote(text, self.quoted_text)
        return text

    def stored_media(self) -> dict[str, object] | None:
        """The JSON stored beside the text: how it came, and who said it in a group."""
        media = dict(self.media or {})
        if self.speaker is not None:
            media["speaker"] = self.speaker
        return media or None

    def stored_provenance(self) -> Provenance | None:
        """Where the stored words came from, when not from the sender: a forward is its
        origin's words whatever it holds; then a document, photo or audio file; then a quote
        of someone else, whose reply is the sender's own. Kept with the message: while it stays
        in the model's view, later turns' writes wait for a ✅ too (agent/untrusted.py), and the
        memory writer sees a stub. Not for a quote of the bot's own answer: what that answer
        read from the web stays in view as its tool round, which counts already, and a group
        that talks to the bot by replying would otherwise confirm every write."""
        if self.forward_origin is not None:
            origin = str(self.forward_origin.get("name") or "someone else")
            return Provenance(FORWARD, origin)
        if self.provenance is not None:
            return self.provenance
        if self.quotes_people and self.quoted_text and self.quoted_text.strip():
            author = self.quoted_author or "someone else"
            return Provenance(QUOTE, author, own=self.text)
        return None


def speaker_label(user: User) -> str:
    """A group member as the transcript names them: the name they chose (one line, no
    brackets or colons, which the transcript's own lines use) and their id, which is unique."""
    name = plain_name(user.full_name)
    return f"{name} (id {user.id})" if name else f"id {user.id}"


# A coroutine, not any awaitable: it runs as the chat's cancellable task (ChatTurns.begin).
Prepare = Callable[[TurnRequest], Coroutine[Any, Any, TurnRequest | None]]
OnStored = Callable[[StoredMessage], Awaitable[None]]


def turn_request_for(
    message: Message, user_id: int, bot: Bot, update_id: int, *, text: str, lang: str | None
) -> TurnRequest:
    """The turn a user's message asks for, text or media alike: in groups the answer replies to
    the message, in forum topics it stays in the topic, a quote travels along, and the update's
    id keys the turn so a replay is answered once."""
    group = is_group(message)
    return TurnRequest(
        chat_id=message.chat_id,
        user_id=user_id,
        text=text,
        language=lang,
        reply_to_message_id=message.message_id if group else None,
        private=message.chat.type == ChatType.PRIVATE,
        message_thread_id=message.message_thread_id if message.is_topic_message else None,
        quoted_text=quoted_text(message),
        forward_origin=forward_origin_of(message),
        quotes_others=quotes_others(message),
        quotes_people=quotes_others(message) and not replies_to(message, bot.id),
        quoted_author=quoted_author(message),
        turn_key=f"tg:{bot.id}:{update_id}",
        speaker=speaker_label(message.from_user) if group and message.from_user else None,
        user_name=message.from_user.first_name if message.from_user else None,
    )


def failure_reason(error: TransportError, lang: str | None) -> str:
    outcome = error.last_outcome
    known = {
        Outcome.RATE_LIMIT: "reason_rate_limit",
        Outcome.QUOTA: "reason_quota",
        Outcome.AUTH: "reason_auth",
        Outcome.UNAVAILABLE: "reason_unavailable",
        Outcome.TIMEOUT: "reason_timeout",
        Outcome.EMPTY: "reason_empty",
        Outcome.BAD_REQUEST: "reason_bad_request",
    }
    return t(known.get(outcome, "reason_other"), lang) if outcome else t("reason_other", lang)


async def send_plain(bot: Bot, request: TurnRequest, text: str, **kwargs: Any) -> None:
    """A plain reply to the turn's message; a Telegram error is logged, not raised."""
    try:
        await bot.send_message(
            request.chat_id,
            text,
            reply_to_message_id=request.reply_to_message_id,
            message_thread_id=request.message_thread_id,
            **kwargs,
        )
    except TelegramError as exc:
        log.warning("reply_failed", chat_id=request.chat_id, error=str(exc))


def held_on_stop(services: Services, request: TurnRequest) -> bool:
    """Whether a turn whose preparation a stop cut short is held for the next start: only one
    keyed by its update (a message), which the next start replays once; a Retry press has no
    update worth replaying (Telegram has long forgotten the query by then)."""
    return services.lifecycle.closing and request.turn_key is not None


async def run_chat_turn(
    services: Services,
    bot: Bot,
    request: TurnRequest,
    *,
    prepare: Prepare | None = None,
    on_stored: OnStored | None = None,
) -> bool:
    """Store the user's message, stream the model's answer into Telegram, store the answer.

    The user's message is written before any model is called, so an outage, a crash or a
    /cancel never loses it. Serialised per chat; the streaming part is cancellable.

    `prepare` runs inside the chat's turn, before anything is stored: a voice note is
    transcribed there, so it is answered in the order it was sent. It returns the request to
    store and answer, or None when there is nothing to answer (it has told the user why). It
    runs as the chat's running work (`ChatTurns.begin`), cancellable as a reply is; if a stop
    cancels it, the update is held (`held_on_stop`).
    `on_stored` is told the stored user message (a voice note's inbox row points at it).

    Returns whether the user's message is stored (by this turn, or by an earlier delivery of
    the same update). An error after it was stored is raised as `MessageSavedError` (from the
    error), so the error reply can say the message is kept, and never says so when it is not.
    """
    saved = False
    try:
        # While the bot is stopping, a turn that has not started is held back (bot/lifecycle).
        async with services.lifecycle.admitted_turn(services.turns, request.chat_id) as admitted:
            if not admitted:
                return False  # held: handled after the restart
            store, turns = services.store, services.turns
            refused = await services.guard.check_budget(request.user_id)
            if refused is not None and refused.reply_key is not None:
                # What the chat's previous turn cost is recorded by now: the cap holds.
                await send_plain(
                    bot, request, t(refused.reply_key, request.language, **refused.reply_values)
                )
                log.info("turn_refused_budget", chat_id=request.chat_id, cap=refused.reply_key)
                return False
            if (
                prepare is not None
                and request.turn_key is not None
                and await store.turn_answered(request.turn_key)
            ):
                # Handled before (a held update Telegram sent again): not transcribed again; a
                # text turn needs no extra read, store_user_turn below skips it.
                log.info("turn_duplicate_skipped", chat_id=request.chat_id, key=request.turn_key)
                return False
            if prepare is not None:
                # The preparation is the chat's turn in progress, like the reply after it: /cancel
                # and /new stop it, a graceful stop gives it the grace and then cancels it.
                preparing = turns.begin(request.chat_id, prepare(request))
                await turns.join(request.chat_id, preparing)
                if preparing.cancelled():
                    if held_on_stop(services, request):
                        # Cut short by a stop: the update is kept and handled afresh at the next
                        # start (bot/lifecycle.py), so the note, photo or document is not lost.
                        await services.lifecycle.hold_current()
                    return False
                prepared = preparing.result()
                if prepared is None:
                    return False
                request = prepared
            # The question is stored and the reply registered (cancellable) under the session
            # gate, which /new and /forget hold while they cancel and close: see ChatTurns.
            async with turns.session_gate(request.chat_id):
                # One transaction: the idempotency key, the idle-session check (close, open,
                # enqueue) and the message, so a restart at any point loses or repeats nothing.
                started = await store.store_user_turn(
                    request.chat_id,
                    request.stored_text(),
                    user_id=request.user_id,
                    key=request.turn_key,
                    media=request.stored_media(),
                    forward_origin=request.forward_origin,
                    provenance=request.stored_provenance(),
                )
                saved = True  # from here on, an error reply may say the message is saved
                if started is None:
                    log.info(
                        "turn_duplicate_skipped", chat_id=request.chat_id, key=request.turn_key
                    )
                    return True
                if started.resumed:
                    log.info(
                        "turn_resumed_unanswered", chat_id=request.chat_id, key=request.turn_key
                    )
                if started.idle_closed_session_id is not None:
                    log.info(
                        "session_idle_closed",
                        chat_id=request.chat_id,
                        closed_session=started.idle_closed_session_id,
                        session=started.message.session_id,
                        job_id=started.job_id,
                    )
                if on_stored is not None:
                    await on_stored(started.message)
                reply = turns.begin(request.chat_id, _answer(services, bot, request, started))
            await turns.join(request.chat_id, reply)
    except Exception as error:
        if saved:
            raise MessageSavedError("the turn broke after the user's message was stored") from error
        raise
    return True


async def _answer(services: Services, bot: Bot, request: TurnRequest, start: TurnStart) -> None:
    """Turn what the agent loop yields into Telegram messages: streamed text, restart notes,
    and at the end the formatted answer with one receipt line per memory write."""
    started = time.monotonic()
    lang = request.language
    session_id = start.message.session_id
    reply = StreamingReply(
        bot,
        request.chat_id,
        reply_to_message_id=request.reply_to_message_id,
        edit_interval=services.edit_interval,
        use_drafts=services.settings.TELEGRAM_DRAFT_STREAMING and request.private,
        message_thread_id=request.message_thread_id,
        # The group became a supergroup: the reply goes there, and once this turn is over
        # (its answer stored) the chat's data follows.
        on_migrated=lambda old, new: migrate_later(
            services.turns, services.store, old, new, via="reply"
        ),
    )
    # The model the chat chose, read with the turn's start: no round trip of its own on the
    # way to the provider. A stop before any model is asked (/cancel, or /new or /forget
    # right after the question) lands in the loop's first read, below: the user still learns
    # that this message got no answer.
    model = services.model_or_default(start.chat_model)
    agent = services.agent
    done: AgentDone | None = None
    # Filled by the loop as each memory write happens: shown whichever way the turn ends.
    receipts: list[Receipt] = []
    # Filled the same way with each write held for the asker's ✅: its buttons follow the
    # answer, however the turn ends.
    held: list[PendingWrite] = []
    if request.others_words:
        # Forwarded or quoted words of someone else: no previews from the very first message.
        reply.disable_previews()
    # A Stop pressed on one of this reply's drafts (bot/handlers/stop.py) ends it.
    switch = StopSwitch(reply.owns_draft)
    outcome = "ok"
    attempts = 0
    restarts = 0
    steps = 0
    try:
        await reply.start()
        turn = AgentTurn(
            request.chat_id,
            request.user_id,
            session_id,
            model.id,
            start.chat_zone,
            image_url=request.image_url,
            user_name=request.user_name,
            topic_id=request.message_thread_id,
            # Read from the stored message too: a resumed turn answers what was stored.
            others_words=request.others_words or start.message.provenance is not None,
            stop=switch.requested,
        )
        # aclosing: a cancel while we handle a piece closes the loop at once, so it stores
        # what the user saw of the round.
        with services.turns.stoppable(request.chat_id, switch):
            async with aclosing(agent.run(turn, receipts=receipts, pending=held)) as events:
                async for event in events:
                    if isinstance(event, TextDelta):
                        await reply.append(event.text)
                    elif isinstance(event, StreamRestart):
                        restarts += 1
                        await reply.restart(
                            t(
                                "model_restarted",
                                lang,
                                from_label=services.label(event.from_model),
                                to_label=services.label(event.to_model),
                            )
                        )
                    elif isinstance(event, ToolsStarting):
                        # A Stop from now on waits for the running tool call to end.
                        switch.tools_running = True
                        # The round's text becomes a real message: a draft would vanish while
                        # the tools run.
                        await reply.seal()
                    elif isinstance(event, ToolRound):
                        switch.tools_running = False
                        steps = event.step
                    elif isinstance(event, UntrustedContent):
                        # A page, results, a document or someone else's words are in the model's
                        # view: nothing it writes from here on may unfurl a link.
                        reply.disable_previews()
                    elif isinstance(event, AgentDone):
                        done = event
        if done is None:  # the loop always ends with AgentDone; be safe anyway
            raise TransportError("the agent loop ended without an answer", [])
        if done.stopped:
            # Stopped while tools ran: the round is stored and billed; what was shown stays,
            # marked as stopped, as after a Stop while streaming.
            outcome = "stopped"
            attempts = done.attempts
            await reply.cancelled(_with_receipts(t("reply_cancelled", lang), receipts, lang))
            return
        reply.ended()  # no partial update now: the formatted answer follows at once
        attempts = done.attempts
        text = done.text.strip() or t("agent_no_answer", lang)
        footer = _footer(services, done, receipts, model, lang)
        notice = start.memory_notice  # read with the turn's start
        if notice is not None:
            # A consolidation changed the memory since the last reply: say so, once.
            line = t("memory_updated", lang, added=notice.added, removed=notice.removed)
            footer = f"{footer}\n{line}" if footer else line
        if done.time_limit_reached:
            seconds = f"{services.settings.MAX_ANSWER_SECONDS:g}"
            cut = t("answer_time_limit", lang, seconds=seconds)
            footer = f"{footer}\n{cut}" if footer else cut
        if done.size_limit_reached:
            chars = f"{services.settings.MAX_ANSWER_CHARS:,}"
            cut = t("answer_size_limit", lang, chars=chars, calls=MAX_KEPT_TOOL_CALLS)
            footer = f"{footer}\n{cut}" if footer else cut
        if start.idle_closed_session_id is not None:
            idle = t("idle_new_session", lang)
            footer = f"{footer}\n{idle}" if footer else idle
        await reply.finish(text, footer=footer)
    except asyncio.CancelledError:
        # The same note for /cancel and Stop: what was shown stays, marked as stopped.
        outcome = "stopped" if switch.requested.is_set() else "cancelled"
        # Cut off by a stop of the bot (after the grace period), by the user's /cancel or by
        # Stop on the draft; the loop has stored what the user saw.
        note = "reply_interrupted" if services.lifecycle.closing else "reply_cancelled"
        await reply.cancelled(_with_receipts(t(note, lang), receipts, lang))
    except TransportError as exc:
        outcome = "failed"
        attempts = len(exc.attempts)
        log.warning(
            "turn_failed",
            chat_id=request.chat_id,
            model_requested=model.id,
            attempts=[f"{a.model_id}@{a.gateway}:{a.outcome}" for a in exc.attempts],
        )
        failed = t("all_models_failed", lang, reason=failure_reason(exc, lang))
        await reply.fail(_with_receipts(failed, receipts, lang))
    else:
        if start.memory_notice is not None:
            await _notice_shown(services, request.chat_id, start.memory_notice)
    finally:
        if held:
            await send_pending(
                bot,
                held,
                lang,
                agent.held,
                reply_to_message_id=request.reply_to_message_id,
                message_thread_id=request.message_thread_id,
            )
        usage = done.usage if done else None
        log.info(
            "turn_finished",
            chat_id=request.chat_id,
            outcome=outcome,
            model_requested=model.id,
            model_answered=done.model_id if done else None,
            attempts=attempts,
            restarts=restarts,
            tool_rounds=done.steps if done else steps,
            latency_ms=round((time.monotonic() - started) * 1000),
            queued_ms=round(done.queued_s * 1000) if done else None,
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
            cost_usd=round(usage.cost_usd, 6) if usage else 0.0,
            usage_estimated=usage.estimated if usage else False,
            untrusted_in_view=done.untrusted if done else None,
            writes_held=len(held),
        )


async def _notice_shown(services: Services, chat_id: int, notice: MemoryNotice) -> None:
    """The answer showed the memory notice: it is announced. Only now, so a turn cut short
    before (a failure, a /cancel, a crash) leaves it to the next reply instead of losing it.
    If this write fails, the next reply shows the notice again: better twice than never, and
    the answer the user already has is not followed by an error."""
    try:
        await memory_notice_shown(services.db, chat_id, notice)
    except Exception:
        log.exception("memory_notice_not_marked_shown", chat_id=chat_id)


def receipt_line(receipt: Receipt, lang: str | None) -> str:
    """The bot's own words for a memory or reminder write, from the executed tool call.

    A remembered fact is shown whole: the tool refuses one longer than MAX_FACT_CHARS, so what
    is saved is never longer than what the receipt shows. A forgotten text (memory lines, which
    a consolidation may have written long) is shortened past that: it names what is gone."""
    reminder = reminder_receipt_line(receipt, lang)
    if reminder is not None:
        return reminder
    key = "receipt_remembered" if receipt.kind == "remembered" else "receipt_forgotten"
    fact = receipt.text
    if len(fact) > MAX_FACT_CHARS:
        fact = fact[: MAX_FACT_CHARS - 1] + "…"
    return t(key, lang, fact=fact)


def receipt_lines(receipts: Sequence[Receipt], lang: str | None) -> list[str]:
    """One line per write while they fit RECEIPTS_MAX_UNITS (a message holds 4096), then one
    line saying how many more there are and where to see them: receipts never make an answer
    undeliverable, and no write goes unmentioned."""
    lines: list[str] = []
    used = 0
    for index, receipt in enumerate(receipts):
        line = receipt_line(receipt, lang)
        cost = utf16_len(line) + 1
        if used + cost > RECEIPTS_MAX_UNITS:
            lines.append(t("receipts_more", lang, count=len(receipts) - index))
            break
        lines.append(line)
        used += cost
    return lines


def _with_receipts(note: str, receipts: Sequence[Receipt], lang: str | None) -> str:
    """A cancel or failure note, followed by the receipts of the writes done before it."""
    return "\n".join([note, *receipt_lines(receipts, lang)])


def _footer(
    services: Services,
    done: AgentDone,
    receipts: Sequence[Receipt],
    model: ModelEntry,
    lang: str | None,
) -> str | None:
    lines = receipt_lines(receipts, lang)
    if done.model_id != model.id:
        lines.append(
            t("answered_by", lang, label=services.label(done.model_id), requested=model.label)
        )
    return "\n".join(lines) or None
