"""One chat turn: store the user's words, stream the model's answer, store the answer."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import structlog
from telegram import Bot

from bot.i18n import t
from bot.streaming import StreamingReply
from memory.context import build_chat_messages
from models.types import (
    ChatResult,
    Outcome,
    StreamDone,
    StreamRestart,
    TextDelta,
    TransportError,
)

if TYPE_CHECKING:
    from bot.app import Services

log = structlog.get_logger("bot.turns")


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


async def run_chat_turn(services: Services, bot: Bot, request: TurnRequest) -> None:
    """Store the user's message, stream the model's answer into Telegram, store the answer.

    The user's message is written before any model is called, so an outage, a crash or a
    /cancel never loses it. Serialised per chat; the streaming part is cancellable.
    """
    # While the bot is stopping, a turn that has not started is held back (see bot/lifecycle).
    async with services.lifecycle.admitted_turn(services.turns, request.chat_id) as admitted:
        if not admitted:
            return  # held: handled after the restart
        stored = await services.store.add_message(
            request.chat_id, "user", request.text, user_id=request.user_id
        )
        await services.turns.run_cancellable(
            request.chat_id, _answer(services, bot, request, stored.session_id)
        )


async def _answer(services: Services, bot: Bot, request: TurnRequest, session_id: int) -> None:
    started = time.monotonic()
    lang = request.language
    # Independent reads, queued together: each read waits its turn for the one database lock,
    # and under load (many chats at once) three queue passes in a row were most of the time
    # between the update and the model request.
    model, session, memory_text = await asyncio.gather(
        services.chat_model(request.chat_id),
        services.store.session_messages(session_id),
        services.memory_text(request.chat_id),
    )
    now_text = datetime.now(UTC).strftime("%Y-%m-%d %H:%M")
    messages = build_chat_messages(session, memory_text, now_text=now_text)

    reply = StreamingReply(
        bot,
        request.chat_id,
        reply_to_message_id=request.reply_to_message_id,
        edit_interval=services.edit_interval,
        use_drafts=services.settings.TELEGRAM_DRAFT_STREAMING and request.private,
        message_thread_id=request.message_thread_id,
    )
    shown: list[str] = []
    answering = model.id
    result: ChatResult | None = None
    outcome = "ok"
    attempts = 0
    answer_stored = False
    restarts = 0
    try:
        await reply.start()
        stream = services.transport.stream(
            model.id, messages, timeout=services.settings.CHAT_TIMEOUT
        )
        async for event in stream:
            if isinstance(event, TextDelta):
                shown.append(event.text)
                await reply.append(event.text)
            elif isinstance(event, StreamRestart):
                shown.clear()
                restarts += 1
                answering = event.to_model
                await reply.restart(
                    t(
                        "model_restarted",
                        lang,
                        from_label=services.label(event.from_model),
                        to_label=services.label(event.to_model),
                    )
                )
            elif isinstance(event, StreamDone):
                result = event.result
        if result is None:  # the transport always ends with StreamDone; be safe anyway
            raise TransportError("stream ended without a result", [])
        reply.ended()  # no more partial updates while the answer is stored and formatted
        attempts = len(result.attempts)
        text = result.text or "".join(shown)
        # The answer and its usage in one transaction: one wait for the writer, not two.
        await services.store.add_answer(
            request.chat_id,
            request.user_id,
            text,
            model_id=result.model_id,
            usage=result.usage,
            session_id=session_id,
        )
        answer_stored = True
        footer = None
        if result.model_id != model.id:
            footer = t(
                "answered_by",
                lang,
                label=services.label(result.model_id),
                requested=model.label,
            )
        await reply.finish(text, footer=footer)
    except asyncio.CancelledError:
        outcome = "cancelled"
        partial = "".join(shown)
        if partial and not answer_stored:
            # Keep what the user saw, so the next turn's context matches the chat on screen.
            await services.store.add_message(
                request.chat_id,
                "assistant",
                partial,
                model_id=answering,
                session_id=session_id,
            )
        # Cut off by a stop of the bot (after the grace period) or by the user's /cancel.
        note = "reply_interrupted" if services.lifecycle.closing else "reply_cancelled"
        await reply.cancelled(t(note, lang))
    except TransportError as exc:
        outcome = "failed"
        attempts = len(exc.attempts)
        log.warning(
            "turn_failed",
            chat_id=request.chat_id,
            model_requested=model.id,
            attempts=[f"{a.model_id}@{a.gateway}:{a.outcome}" for a in exc.attempts],
        )
        await reply.fail(t("all_models_failed", lang, reason=failure_reason(exc, lang)))
    finally:
        usage = result.usage if result else None
        log.info(
            "turn_finished",
            chat_id=request.chat_id,
            outcome=outcome,
            model_requested=model.id,
            model_answered=result.model_id if result else None,
            attempts=attempts,
            restarts=restarts,
            latency_ms=round((time.monotonic() - started) * 1000),
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
            cost_usd=round(usage.cost_usd, 6) if usage else 0.0,
        )
