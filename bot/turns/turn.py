"""One chat turn: hand the user's words to the agent, which stores them, then show its answer."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

import structlog
from telegram import Bot
from telegram.error import TelegramError

from bot import BotError
from bot.turns.answer import answer_turn
from bot.turns.request import TurnRequest
from bot.ui.i18n import t
from memory.store import StoredMessage, TurnStart

if TYPE_CHECKING:
    from bot.services import Services

log = structlog.get_logger("bot.turns")


class MessageSavedError(BotError):
    """A chat turn broke after the user's message was stored; the error is its `__cause__`.

    What the handler learns from the turn, so that the error reply (bot/handlers/chat.py,
    `on_error`) says the message is saved exactly when it is."""


# A coroutine, not any awaitable: it runs as the chat's cancellable task (ChatTurns.begin).
Prepare = Callable[[TurnRequest], Coroutine[Any, Any, TurnRequest | None]]
OnStored = Callable[[StoredMessage], Awaitable[None]]


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
    """Have the agent store the user's message and answer it; stream the answer into Telegram.

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
            if await _over_budget(services, bot, request):
                return False
            if prepare is not None:
                prepared = await _prepared(services, request, prepare)
                if prepared is None:
                    return False
                request = prepared
            turns = services.turns
            # The question is stored and the reply registered (cancellable) under the session
            # gate, which /new and /forget hold while they cancel and close: see ChatTurns.
            async with turns.session_gate(request.chat_id):
                # The agent stores the whole turn, its question first (agent/record.py).
                started = await services.agent.ask(request.question())
                saved = True  # from here on, an error reply may say the message is saved
                if started is None:
                    log.info(
                        "turn_duplicate_skipped", chat_id=request.chat_id, key=request.turn_key
                    )
                    return True
                _log_start(request, started)
                if on_stored is not None:
                    await on_stored(started.message)
                reply = turns.begin(request.chat_id, answer_turn(services, bot, request, started))
            await turns.join(request.chat_id, reply)
    except Exception as error:
        if saved:
            raise MessageSavedError("the turn broke after the user's message was stored") from error
        raise
    return True


async def _over_budget(services: Services, bot: Bot, request: TurnRequest) -> bool:
    """Whether a budget refuses the turn (the user is told which); what the chat's previous
    turn cost is recorded by now, so the cap holds."""
    refused = await services.guard.check_budget(request.user_id)
    if refused is None or refused.reply_key is None:
        return False
    await send_plain(bot, request, t(refused.reply_key, request.language, **refused.reply_values))
    log.info("turn_refused_budget", chat_id=request.chat_id, cap=refused.reply_key)
    return True


async def _prepared(
    services: Services, request: TurnRequest, prepare: Prepare
) -> TurnRequest | None:
    """The request `prepare` makes ready (a voice note transcribed), or None: nothing to
    answer, an input handled before, or a stop that cut the preparation short."""
    if request.turn_key is not None and await services.agent.answered(request.turn_key):
        # Handled before (a held update Telegram sent again): not transcribed again; a
        # text turn needs no extra read, storing its question skips it.
        log.info("turn_duplicate_skipped", chat_id=request.chat_id, key=request.turn_key)
        return None
    # The preparation is the chat's turn in progress, like the reply after it: /cancel and
    # /new stop it, a graceful stop gives it the grace and then cancels it.
    turns = services.turns
    preparing = turns.begin(request.chat_id, prepare(request))
    await turns.join(request.chat_id, preparing)
    if preparing.cancelled():
        if held_on_stop(services, request):
            # Cut short by a stop: the update is kept and handled afresh at the next start
            # (bot/lifecycle.py), so the note, photo or document is not lost.
            await services.lifecycle.hold_current()
        return None
    return preparing.result()


def _log_start(request: TurnRequest, started: TurnStart) -> None:
    """A resumed question (a crash cut its first answer short) and an idle session closed
    by it are logged."""
    if started.resumed:
        log.info("turn_resumed_unanswered", chat_id=request.chat_id, key=request.turn_key)
    if started.idle_closed_session_id is not None:
        log.info(
            "session_idle_closed",
            chat_id=request.chat_id,
            closed_session=started.idle_closed_session_id,
            session=started.message.session_id,
            job_id=started.job_id,
        )
