"""The presses of ✅ / ❌ under a tool call held for confirmation.

A call the model made that must not run on its word alone (agent/tools/held.py: a write with
untrusted content in view, a web call that would carry words out) waits in `pending_writes`
(memory/pending_writes.py). After the answer the bot shows one message per such call naming
exactly what it would do, with ✅ and ❌. Only the asker's press counts; another member's is
refused with a short alert and changes nothing. ✅ runs the very call the model made, once,
through the same tool, and the message is edited to the receipt, to a short view of the result
(which the next turn reads from the session), or to the tool's refusal; ❌ edits it to say it
was dropped; a press after PENDING_TTL says it expired. The callback data carries only the
row's id: the row itself says whose it is, what it does and whether it still waits. A write's ✅
is checked and carried out in one transaction (`HeldCalls.keep`), so a /forget racing it either
ran first (the press finds nothing) or after (it forgets what the press wrote).
"""

from __future__ import annotations

from typing import Any

import structlog
from telegram import Update
from telegram.error import TelegramError
from telegram.ext import CallbackQueryHandler

from agent.tools.held import HeldRun
from bot.handlers.access import user_language
from bot.services import App, Context
from bot.ui.i18n import t
from bot.ui.pending_texts import (
    DROP_PREFIX,
    KEEP_PREFIX,
    NO_PREVIEW,
    short,
    ttl_hours,
    write_line,
)
from bot.ui.turn_texts import receipt_line
from memory.pending_writes import Kept, TapFound, Tapped

log = structlog.get_logger("bot.pending")


def is_pending_callback(data: object) -> bool:
    return isinstance(data, str) and data.startswith((KEEP_PREFIX, DROP_PREFIX))


async def pending_callback(update: Update, context: Context) -> None:
    """A press of ✅ or ❌ under a held write."""
    query = update.callback_query
    services = context.bot_data.services
    if query is None:
        return
    lang = user_language(update)
    data = query.data or ""
    keep = data.startswith(KEEP_PREFIX)
    raw = data.removeprefix(KEEP_PREFIX if keep else DROP_PREFIX)
    message = query.message
    if not raw.isdecimal() or message is None or query.from_user is None:
        await query.answer(t("pending_gone", lang), show_alert=True)
        return
    pending, held = services.agent.pending_writes, services.agent.held
    chat_id, user_id = message.chat.id, query.from_user.id
    if keep:
        tapped: Tapped | Kept[HeldRun] = await held.keep(int(raw), chat_id, user_id)
    else:
        tapped = await pending.tap(int(raw), chat_id, user_id, keep=False)
    write = tapped.write
    if tapped.found is TapFound.NOT_ASKER:
        await query.answer(t("pending_not_yours", lang), show_alert=True)
        return
    if tapped.found is TapFound.MISSING or write is None:
        await query.answer(t("pending_gone", lang), show_alert=True)
        await _edit(query, t("pending_gone", lang))
        return
    if tapped.found is TapFound.SETTLED:
        await query.answer(t("pending_settled", lang))
        return
    line = write_line(write, lang, held)
    texts = held.texts(write)
    if tapped.found is TapFound.EXPIRED:
        await query.answer()
        await _edit(query, f"{t(f'{texts}_expired', lang, hours=ttl_hours())}\n{line}")
        return
    if not keep:
        log.info("pending_write_dropped", tool=write.tool)
        await query.answer()
        await _edit(query, f"{t(f'{texts}_dropped', lang)}\n{line}")
        return
    ran = tapped.result if isinstance(tapped, Kept) else None
    assert ran is not None  # a ✅ that claimed the call ran it
    outcome = ran.outcome
    log.info("pending_write_kept", tool=write.tool, done=ran.done)
    await query.answer()
    if outcome.receipt is not None:
        await _edit(query, f"{t('pending_kept', lang)}\n{receipt_line(outcome.receipt, lang)}")
    elif ran.done and ran.shown is not None:
        await _edit(query, f"{t('held_ran', lang)}\n{line}\n\n{ran.shown}")
    else:
        reason = outcome.content.removeprefix("error: ")
        await _edit(query, f"{t('pending_failed', lang, reason=short(reason))}\n{line}")


async def _edit(query: Any, text: str) -> None:
    """The question becomes what was done, without its buttons."""
    try:
        await query.edit_message_text(text, link_preview_options=NO_PREVIEW)
    except TelegramError as exc:
        log.info("pending_message_not_edited", error=str(exc))


def register_pending_handlers(application: App) -> None:
    application.add_handler(CallbackQueryHandler(pending_callback, pattern=is_pending_callback))
