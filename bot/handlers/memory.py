"""The memory feature in the Telegram surface: /memory, /forget, /recall and the worker's
lifecycle (the `export` subcommand is bot/cli/export.py).

The store (automatic consolidation, idle sessions), the consolidation worker and the daily
purge of the archive (ARCHIVE_DAYS) are built in bot/app.py and reach these handlers as
`services.memory`. The chat prompt reads the long-term memory itself (the agent loop,
`Store.round_context`).
"""

from __future__ import annotations

import re

import structlog
from telegram import InlineKeyboardButton, InlineKeyboardMarkup, Update
from telegram.error import TelegramError
from telegram.ext import CallbackQueryHandler, CommandHandler

from bot.handlers.access import say, user_language
from bot.incoming import clean_text
from bot.services import App, Context
from bot.turns.chat_turns import FORGETTING
from bot.ui.i18n import t
from bot.ui.render import split_plain
from memory.forget import forget_chat
from memory.recall.search import Recall, RecallHit
from memory.store import to_iso

log = structlog.get_logger("bot.memory")

# Button data: "fg:y:<asker's user id>". The asker's id travels with the button, so in a group
# only the member who asked can confirm (or cancel) their /forget.
FORGET_YES = "fg:y"
FORGET_NO = "fg:n"
_FORGET_DATA = re.compile(r"^fg:([yn]):(\d+)$")
RECALL_MAX_QUERY = 200
RECALL_RESULTS = 5

# Control characters are no search terms (a NUL even breaks SQLite's FTS5 parse).
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")

# --- text helpers ------------------------------------------------------------------------------


def format_hit(hit: RecallHit, lang: str | None = None) -> str:
    """One result block: '• 2026-03-01 09:00 — summary' (our own
    timestamp, the model's stamp removed), or '💬 2026-03-01 09:00 — you: words' for what was
    said itself, followed by the turns before (↑) and after (↓) it."""
    moment = hit.at[:16].replace("T", " ")
    text = hit.text.strip()
    if hit.source == "history":
        if text.startswith("[") and "]" in text[:40]:
            text = text[text.index("]") + 1 :].strip()
        return f"• {moment} — {text}"
    lines = [f"💬 {moment} — {_who(hit.role, lang)}: {text}"]
    lines += [f"   ↑ {_who(turn.role, lang)}: {turn.text}" for turn in hit.before]
    lines += [f"   ↓ {_who(turn.role, lang)}: {turn.text}" for turn in hit.after]
    return "\n".join(lines)


def _who(role: str | None, lang: str | None) -> str:
    return t("recall_role_assistant" if role == "assistant" else "recall_role_user", lang)


# --- handlers ----------------------------------------------------------------------------------


async def memory_command(update: Update, context: Context) -> None:
    message = update.effective_message
    if message is None:
        return
    lang = user_language(update)
    feature = context.bot_data.services.memory
    memory = await feature.repo.get(message.chat_id)
    pending = await feature.worker.queue.open_jobs(message.chat_id)
    lines = []
    if memory.content.strip():
        lines.append(t("memory_header", lang) + "\n\n" + memory.content.strip())
    else:
        lines.append(t("memory_empty", lang))
    if pending:
        lines.append(t("memory_pending", lang, count=pending))
    for part in split_plain("\n\n".join(lines)):
        if not await say(message, part):
            break  # say() told the user; the rest would arrive out of context


async def forget_command(update: Update, context: Context) -> None:
    message = update.effective_message
    if message is None:
        return
    lang = user_language(update)
    asker = update.effective_user.id if update.effective_user else 0
    keyboard = InlineKeyboardMarkup(
        [
            [
                InlineKeyboardButton(t("forget_yes", lang), callback_data=f"{FORGET_YES}:{asker}"),
                InlineKeyboardButton(t("forget_no", lang), callback_data=f"{FORGET_NO}:{asker}"),
            ]
        ]
    )
    text = t("forget_confirm", lang) + await _reminders_stay(context, message.chat_id, lang)
    await say(message, text, reply_markup=keyboard)


async def _reminders_stay(context: Context, chat_id: int, lang: str | None) -> str:
    """/forget leaves reminders alone (they are the user's orders, not memory): the prompt and
    the receipt say how many stay pending and where to cancel them, so no one believes a
    forgotten chat has nothing left that will speak up."""
    listed = await context.bot_data.services.reminders.book.pending(chat_id)
    reminders = sum(1 for r in listed if not r.is_task)
    tasks = len(listed) - reminders
    text = "\n\n" + t("forget_reminders_stay", lang, count=reminders) if reminders else ""
    # Tasks too: they are orders the user gave, not memory; they keep running.
    return text + ("\n\n" + t("forget_tasks_stay", lang, count=tasks) if tasks else "")


async def forget_callback(update: Update, context: Context) -> None:
    """The confirmation press. Access is checked again: a button is no credential."""
    query = update.callback_query
    if query is None:
        return
    lang = user_language(update)
    message = query.message
    if message is None:
        await query.answer()
        return
    chat_id = message.chat.id
    parsed = _FORGET_DATA.match(query.data or "")
    if parsed is None or int(parsed.group(2)) != query.from_user.id:
        # Someone else's /forget (a group): only its asker decides. Told privately, no effect.
        log.info("forget_press_refused", user_id=query.from_user.id)
        await query.answer(t("forget_not_yours", lang), show_alert=True)
        return
    if parsed.group(1) == "y":
        feature = context.bot_data.services.memory
        # A reply being written would store its answer (or what it showed) after the
        # forgetting: stop it first, under the session gate, as /new does. Should it outlive
        # the wait, its session is gone and the store refuses the write.
        turns = context.bot_data.services.turns
        async with turns.session_gate(chat_id):
            await turns.cancel(chat_id, reason=FORGETTING)
            forgotten = await forget_chat(feature.repo.db, chat_id, to_iso(feature.worker.clock()))
            web = context.bot_data.services.agent.web
            if web is not None:
                web.forget_chat(chat_id)  # the pages and searches it read go too
        log.info(
            "memory_forgotten",
            history_entries=forgotten.history_entries,
            messages=forgotten.messages,
            archived=forgotten.archived,
            jobs=forgotten.jobs,
        )
        text = t("forget_done", lang) + await _reminders_stay(context, chat_id, lang)
    else:
        text = t("forget_kept", lang)
    await query.answer()
    try:
        await query.edit_message_text(text)
    except TelegramError as exc:  # pressed twice: "message is not modified"
        log.debug("forget_not_edited", error=str(exc))


async def recall_command(update: Update, context: Context) -> None:
    message = update.effective_message
    if message is None:
        return
    lang = user_language(update)
    user_id = update.effective_user.id if update.effective_user else 0
    refused = context.bot_data.services.guard.check_rate(user_id)
    if refused is not None:
        if refused.reply_key is not None:  # the first refusal of a burst only
            await say(message, t(refused.reply_key, lang, **refused.reply_values))
        return
    query = clean_text(" ".join(context.args or [])).strip()
    if not query:
        await say(message, t("recall_usage", lang))
        return
    if _CONTROL.search(query):
        await say(message, t("recall_bad_query", lang))
        return
    if len(query) > RECALL_MAX_QUERY:
        await say(message, t("recall_too_long", lang, limit=RECALL_MAX_QUERY))
        return
    # The same search the model's `recall` tool uses: the archive, history entries and the
    # messages of closed sessions not consolidated yet, so the user finds what the model can
    # find. The open session is on screen already and is left out.
    store = context.bot_data.services.store
    shown = await store.open_session_message_ids(message.chat_id)
    hits = await Recall(store.db).search(
        message.chat_id, query, limit=RECALL_RESULTS, exclude_message_ids=shown
    )
    if not hits:
        await say(message, t("recall_none", lang, query=query))
        return
    text = t("recall_header", lang, query=query) + "\n\n"
    text += "\n\n".join(format_hit(hit, lang) for hit in hits)
    for part in split_plain(text):
        if not await say(message, part):
            break


def register_memory_handlers(application: App) -> None:
    """Add the commands before the application starts (the menu and /help read them)."""
    application.add_handler(CommandHandler("memory", memory_command))
    application.add_handler(CommandHandler("forget", forget_command))
    application.add_handler(CommandHandler("recall", recall_command))
    application.add_handler(CallbackQueryHandler(forget_callback, pattern=r"^fg:[yn]"))
