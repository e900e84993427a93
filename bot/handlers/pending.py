"""The ✅ / ❌ message of a memory or reminder write held for confirmation, and its buttons.

A write the model proposed with untrusted content in view (agent/untrusted.py) waits in
`pending_writes` (memory/pending_writes.py). After the answer the bot shows one message per such
write naming exactly what would be written, with ✅ (keep) and ❌ (drop). Only the asker's press
counts; another member's is refused with a short alert and changes nothing. ✅ runs the very
call the model made, through the same tool (agent/tools/held.py), and the message is edited to
the receipt or to the tool's refusal; ❌ edits it to say it was dropped; a press after
PENDING_TTL says it expired. The callback data carries only the row's id: the row itself says
whose it is, what it does and whether it still waits. A ✅ is checked and carried out in one
transaction (`keep_held`), so a /forget racing it either ran first (the press finds nothing) or
after (it forgets what the press wrote).
"""

from __future__ import annotations

from typing import Any

import structlog
from telegram import Update
from telegram.error import TelegramError
from telegram.ext import CallbackQueryHandler

from agent.tools.held import keep_held
from bot.handlers.access import admit, user_language
from bot.services import App, Context
from bot.turns.turn import receipt_line
from bot.ui.i18n import t
from bot.ui.pending_texts import (
    DROP_PREFIX,
    KEEP_PREFIX,
    NO_PREVIEW,
    short,
    ttl_hours,
    write_line,
)
from memory.pending_writes import Claim, Kept

log = structlog.get_logger("bot.pending")


def is_pending_callback(data: object) -> bool:
    return isinstance(data, str) and data.startswith((KEEP_PREFIX, DROP_PREFIX))


async def pending_callback(update: Update, context: Context) -> None:
    """A press of ✅ or ❌ under a held write."""
    query = update.callback_query
    services = context.bot_data.services
    if query is None or not await admit(
        update, services.settings, addressed=False, refusals=services.refusals
    ):
        return
    lang = user_language(update)
    data = query.data or ""
    keep = data.startswith(KEEP_PREFIX)
    raw = data.removeprefix(KEEP_PREFIX if keep else DROP_PREFIX)
    message = query.message
    if not raw.isdecimal() or message is None or query.from_user is None:
        await query.answer(t("pending_gone", lang), show_alert=True)
        return
    pending = services.agent.pending_writes
    chat_id, user_id = message.chat.id, query.from_user.id
    if keep:
        tapped = await keep_held(services.agent.tools, pending, int(raw), chat_id, user_id)
    else:
        tapped = await pending.tap(int(raw), chat_id, user_id, keep=False)
    write = tapped.write
    if tapped.claim is Claim.NOT_ASKER:
        await query.answer(t("pending_not_yours", lang), show_alert=True)
        return
    if tapped.claim is Claim.MISSING or write is None:
        await query.answer(t("pending_gone", lang), show_alert=True)
        await _edit(query, t("pending_gone", lang))
        return
    if tapped.claim is Claim.SETTLED:
        await query.answer(t("pending_settled", lang))
        return
    line = write_line(write, lang)
    if tapped.claim is Claim.EXPIRED:
        await query.answer()
        await _edit(query, f"{t('pending_expired', lang, hours=ttl_hours())}\n{line}")
        return
    if not keep:
        log.info("pending_write_dropped", chat_id=write.chat_id, tool=write.tool)
        await query.answer()
        await _edit(query, f"{t('pending_dropped', lang)}\n{line}")
        return
    outcome = tapped.result if isinstance(tapped, Kept) else None
    assert outcome is not None  # a ✅ that claimed the write ran it
    log.info("pending_write_kept", chat_id=write.chat_id, tool=write.tool, done=outcome.ok)
    await query.answer()
    if outcome.receipt is not None:
        await _edit(query, f"{t('pending_kept', lang)}\n{receipt_line(outcome.receipt, lang)}")
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
