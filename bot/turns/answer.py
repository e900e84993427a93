"""A turn's answer in Telegram: what the agent loop yields, shown as it comes, then the end.

`answer_turn` runs the agent loop for a stored question and hands every event to one small
handler of `AnswerView` (streamed text, a restart note, the tool phase, untrusted words in view,
the end); the turn's ending (answered, stopped, cancelled, failed) is one method each, and the
writes held for a ✅ and the turn's log line follow however it ended.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

import structlog
from telegram import Bot

from agent.events import (
    AgentDone,
    AgentEvent,
    PendingWrite,
    Receipt,
    ToolRound,
    ToolsStarting,
    UntrustedContent,
)
from agent.loop import MAX_KEPT_TOOL_CALLS, AgentTurn
from bot.turns.chat_turns import StopSwitch
from bot.turns.migrate import migrate_later
from bot.turns.request import TurnRequest
from bot.ui.i18n import t
from bot.ui.pending_texts import send_pending
from bot.ui.streaming import StreamingReply
from bot.ui.turn_texts import failure_reason, receipt_lines, with_receipts
from memory.longterm import MemoryNotice, memory_notice_shown
from memory.store import TurnStart
from models.types import StreamRestart, TextDelta, TransportError

if TYPE_CHECKING:
    from bot.services import Services

log = structlog.get_logger("bot.turns")


async def answer_turn(services: Services, bot: Bot, request: TurnRequest, start: TurnStart) -> None:
    """Turn what the agent loop yields into Telegram messages: streamed text, restart notes,
    and at the end the formatted answer with one receipt line per memory write."""
    view = AnswerView(services, bot, request, start)
    try:
        answered = await view.stream()
    except asyncio.CancelledError:
        await view.cancelled()
    except TransportError as exc:
        await view.failed(exc)
    else:
        if answered and start.memory_notice is not None:
            await _notice_shown(services, request.chat_id, start.memory_notice)
    finally:
        await view.send_held()
        view.log_finished()


class AnswerView:
    """One turn's reply as it is shown, and what the turn's end reports."""

    def __init__(
        self, services: Services, bot: Bot, request: TurnRequest, start: TurnStart
    ) -> None:
        self.services, self.bot, self.request, self.start = services, bot, request, start
        self.lang = request.language
        self.started = time.monotonic()
        self.reply = StreamingReply(
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
        # The model the chat chose, read with the turn's start: no round trip of its own on
        # the way to the provider. A stop before any model is asked (/cancel, or /new or
        # /forget right after the question) lands in the loop's first read: the user still
        # learns that this message got no answer.
        self.model = services.model_or_default(start.chat_model)
        # Filled by the loop as each memory write happens: shown whichever way the turn ends.
        self.receipts: list[Receipt] = []
        # Filled the same way with each write held for the asker's ✅: its buttons follow the
        # answer, however the turn ends.
        self.held: list[PendingWrite] = []
        # A Stop pressed on one of this reply's drafts (bot/handlers/stop.py) ends it.
        self.switch = StopSwitch(self.reply.owns_draft)
        self.done: AgentDone | None = None
        self.outcome = "ok"
        self.attempts = 0
        self.restarts = 0
        self.steps = 0
        self._handlers: dict[type[Any], Callable[[Any], Awaitable[None]]] = {
            TextDelta: self._on_text,
            StreamRestart: self._on_restart,
            ToolsStarting: self._on_tools_starting,
            ToolRound: self._on_tool_round,
            UntrustedContent: self._on_untrusted,
            AgentDone: self._on_done,
        }
        if request.others_words:
            # Forwarded or quoted words of someone else: no previews from the very first message.
            self.reply.disable_previews()

    def agent_turn(self) -> AgentTurn:
        request, start = self.request, self.start
        return AgentTurn(
            request.chat_id,
            request.user_id,
            start.message.session_id,
            self.model.id,
            start.chat_zone,
            image_url=request.image_url,
            user_name=request.user_name,
            topic_id=request.message_thread_id,
            # Read from the stored message too: a resumed turn answers what was stored.
            others_words=request.others_words or start.message.provenance is not None,
            stop=self.switch.requested,
        )

    async def stream(self) -> bool:
        """Run the agent loop into the reply; True when it ended with an answer shown (not a
        stop while tools ran)."""
        await self.reply.start()
        turn = self.agent_turn()
        run = self.services.agent.run(turn, receipts=self.receipts, pending=self.held)
        # aclosing: a cancel while we handle a piece closes the loop at once, so it stores
        # what the user saw of the round.
        with self.services.turns.stoppable(self.request.chat_id, self.switch):
            async with aclosing(run) as events:
                async for event in events:
                    await self.on_event(event)
        done = self.done
        if done is None:  # the loop always ends with AgentDone; be safe anyway
            raise TransportError("the agent loop ended without an answer", [])
        self.attempts = done.attempts
        if done.stopped:
            await self.stopped()
            return False
        await self.finish(done)
        return True

    async def on_event(self, event: AgentEvent) -> None:
        handler = self._handlers.get(type(event))
        if handler is not None:
            await handler(event)

    async def _on_text(self, event: TextDelta) -> None:
        await self.reply.append(event.text)

    async def _on_restart(self, event: StreamRestart) -> None:
        self.restarts += 1
        label = self.services.label
        await self.reply.restart(
            t(
                "model_restarted",
                self.lang,
                from_label=label(event.from_model),
                to_label=label(event.to_model),
            )
        )

    async def _on_tools_starting(self, event: ToolsStarting) -> None:
        # A Stop from now on waits for the running tool call to end.
        self.switch.tools_running = True
        # The round's text becomes a real message: a draft would vanish while the tools run.
        await self.reply.seal()

    async def _on_tool_round(self, event: ToolRound) -> None:
        self.switch.tools_running = False
        self.steps = event.step

    async def _on_untrusted(self, event: UntrustedContent) -> None:
        # A page, results, a document or someone else's words are in the model's view:
        # nothing it writes from here on may unfurl a link.
        self.reply.disable_previews()

    async def _on_done(self, event: AgentDone) -> None:
        self.done = event

    async def stopped(self) -> None:
        """Stopped while tools ran: the round is stored and billed; what was shown stays,
        marked as stopped, as after a Stop while streaming."""
        self.outcome = "stopped"
        await self.reply.cancelled(
            with_receipts(t("reply_cancelled", self.lang), self.receipts, self.lang)
        )

    async def finish(self, done: AgentDone) -> None:
        """The formatted answer, with its footer."""
        self.reply.ended()  # no partial update now: the formatted answer follows at once
        text = done.text.strip() or t("agent_no_answer", self.lang)
        await self.reply.finish(text, footer=self.footer(done))

    def footer(self, done: AgentDone) -> str | None:
        """The receipts, who answered if not the chosen model, the memory notice, the limits
        the answer reached, and a session the idle time closed."""
        services, lang, start = self.services, self.lang, self.start
        lines = receipt_lines(self.receipts, lang)
        if done.model_id != self.model.id:
            lines.append(
                t(
                    "answered_by",
                    lang,
                    label=services.label(done.model_id),
                    requested=self.model.label,
                )
            )
        notice = start.memory_notice  # read with the turn's start
        if notice is not None:
            # A consolidation changed the memory since the last reply: say so, once.
            lines.append(t("memory_updated", lang, added=notice.added, removed=notice.removed))
        if done.time_limit_reached:
            seconds = f"{services.settings.MAX_ANSWER_SECONDS:g}"
            lines.append(t("answer_time_limit", lang, seconds=seconds))
        if done.size_limit_reached:
            chars = f"{services.settings.MAX_ANSWER_CHARS:,}"
            lines.append(t("answer_size_limit", lang, chars=chars, calls=MAX_KEPT_TOOL_CALLS))
        if start.idle_closed_session_id is not None:
            lines.append(t("idle_new_session", lang))
        return "\n".join(lines) or None

    async def cancelled(self) -> None:
        """Cut off by a stop of the bot (after the grace period), by the user's /cancel or by
        Stop on the draft; the loop has stored what the user saw. The same note for /cancel
        and Stop: what was shown stays, marked as stopped."""
        self.outcome = "stopped" if self.switch.requested.is_set() else "cancelled"
        note = "reply_interrupted" if self.services.lifecycle.closing else "reply_cancelled"
        await self.reply.cancelled(with_receipts(t(note, self.lang), self.receipts, self.lang))

    async def failed(self, exc: TransportError) -> None:
        """Every model failed: say why, with the receipts of the writes done before."""
        self.outcome = "failed"
        self.attempts = len(exc.attempts)
        log.warning(
            "turn_failed",
            chat_id=self.request.chat_id,
            model_requested=self.model.id,
            attempts=[f"{a.model_id}@{a.gateway}:{a.outcome}" for a in exc.attempts],
        )
        failed = t("all_models_failed", self.lang, reason=failure_reason(exc, self.lang))
        await self.reply.fail(with_receipts(failed, self.receipts, self.lang))

    async def send_held(self) -> None:
        """The writes held for a ✅, one message each, however the turn ended."""
        if self.held:
            await send_pending(
                self.bot,
                self.held,
                self.lang,
                self.services.agent.held,
                reply_to_message_id=self.request.reply_to_message_id,
                message_thread_id=self.request.message_thread_id,
            )

    def log_finished(self) -> None:
        done = self.done
        usage = done.usage if done else None
        log.info(
            "turn_finished",
            chat_id=self.request.chat_id,
            outcome=self.outcome,
            model_requested=self.model.id,
            model_answered=done.model_id if done else None,
            attempts=self.attempts,
            restarts=self.restarts,
            tool_rounds=done.steps if done else self.steps,
            latency_ms=round((time.monotonic() - self.started) * 1000),
            queued_ms=round(done.queued_s * 1000) if done else None,
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
            cost_usd=round(usage.cost_usd, 6) if usage else 0.0,
            usage_estimated=usage.estimated if usage else False,
            untrusted_in_view=done.untrusted if done else None,
            writes_held=len(self.held),
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
