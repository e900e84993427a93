"""Telegram's Stop button on a streamed draft (Bot API 10.3).

A draft sent with `can_stop` shows the user a Stop button; pressing it hides nothing by itself
(`keep_on_stop` keeps the draft on screen) and sends the bot a `stopped_message_generation`
update naming the chat, the topic and the draft. The model call is ours to end: the update is
offered to the chat's running reply, which takes it only for one of its own drafts
(`ChatTurns.stop`), and then ends as after /cancel.

PTB 22.8 does not know the update: it arrives in `update.api_kwargs`, with no effective chat
or user, so a TypeHandler sees it. It needs no access check: only the chat's user can press a
Stop on a draft the bot showed there, and a press that matches no running reply of that chat
changes nothing.
"""

from __future__ import annotations

from typing import Any, TypeGuard

import structlog
from telegram import Update
from telegram.ext import TypeHandler

from bot.services import App, Context

log = structlog.get_logger("bot.handlers.stop")

STOPPED_UPDATE = "stopped_message_generation"
# A handler group of its own: a TypeHandler sees every update, and within a group only the
# first matching handler runs, so sharing one would starve the others.
STOP_GROUP = -2


def stop_of(update: Update) -> tuple[int, int | None, int] | None:
    """(chat id, topic id, draft id) of a Stop press, or None for any other update or a
    malformed one."""
    stopped: Any = update.api_kwargs.get(STOPPED_UPDATE)
    if not isinstance(stopped, dict):
        return None
    chat = stopped.get("chat")
    chat_id = chat.get("id") if isinstance(chat, dict) else None
    draft_id = stopped.get("draft_id")
    thread_id = stopped.get("message_thread_id")
    if not _is_int(chat_id) or not _is_int(draft_id):
        return None
    if thread_id is not None and not _is_int(thread_id):
        return None
    return chat_id, thread_id, draft_id


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


async def stop_generation(update: Update, context: Context) -> None:
    pressed = stop_of(update)
    if pressed is None:
        return
    chat_id, thread_id, draft_id = pressed
    stopped = context.bot_data.services.turns.stop(chat_id, thread_id, draft_id)
    log.info("stop_pressed", chat_id=chat_id, thread_id=thread_id, stopped=stopped)


def register_stop_handler(application: App) -> None:
    application.add_handler(TypeHandler(Update, stop_generation), group=STOP_GROUP)
