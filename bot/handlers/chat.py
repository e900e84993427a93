"""Telegram handlers: commands, chat text, /model callbacks; media lives in
bot/handlers/media/media.py.

A stranger's update never reaches them (bot/handlers/guard.py stops it first), so a stranger
costs no model call and leaves no row in the database. Handlers only translate updates into
calls on `Services` and `bot.turns`.
"""

from __future__ import annotations

import structlog
from telegram import Update
from telegram.error import TelegramError
from telegram.ext import CallbackQueryHandler, CommandHandler, MessageHandler, filters

from bot.handlers.access import say, user_language
from bot.handlers.media.media import media_message
from bot.handlers.media.voice import RETRY_PREFIX, retry_callback
from bot.incoming import (
    clean_text,
    is_addressed_to_bot,
    is_group,
    strip_bot_mentions,
)
from bot.services import App, Context, Services
from bot.turns.request import turn_request_for
from bot.turns.turn import MessageSavedError, run_chat_turn
from bot.ui.commands import menu_commands, registered_commands
from bot.ui.i18n import t
from bot.ui.keyboards import is_model_callback, model_keyboard, resolve_model_callback

log = structlog.get_logger("bot.handlers")

UNKNOWN_GROUP = 10  # handler group of the "unknown command" answer, after every feature


def _services(context: Context) -> Services:
    return context.bot_data.services


def _commands_text(application: App, lang: str | None) -> str:
    return "\n".join(f"/{name} — {t(key, lang)}" for name, key in menu_commands(application))


async def start_command(update: Update, context: Context) -> None:
    message = update.effective_message
    if message is None:
        return
    user = update.effective_user
    name = user.first_name if user else ""
    lang = user_language(update)
    await say(
        message, t("start", lang, name=name, commands=_commands_text(context.application, lang))
    )


async def help_command(update: Update, context: Context) -> None:
    message = update.effective_message
    if message is None:
        return
    lang = user_language(update)
    await say(message, t("help", lang, commands=_commands_text(context.application, lang)))


async def model_command(update: Update, context: Context) -> None:
    """`/model` shows the keyboard; `/model ID` switches directly (same checks)."""
    message = update.effective_message
    if message is None:
        return
    services = _services(context)
    lang = user_language(update)
    available = services.available_models()
    if not available:
        await say(message, t("model_none", lang))
        return
    if context.args:
        wanted = context.args[0].strip()
        if not services.is_available(wanted):
            await say(message, t("model_unknown", lang, model_id=wanted[:64]))
            return
        await services.store.set_chat_model(message.chat_id, wanted)
        log.info("model_chosen", model=wanted, via="command")
        await say(message, t("model_set", lang, label=services.label(wanted)))
        return
    current = await services.chat_model(message.chat_id)
    await say(
        message,
        t("model_menu", lang, label=current.label),
        reply_markup=model_keyboard(available, current.id, lang),
    )


async def model_callback(update: Update, context: Context) -> None:
    """A press on the /model keyboard. The key is re-checked against the models available now."""
    query = update.callback_query
    if query is None:
        return
    services = _services(context)
    lang = user_language(update)
    entry = resolve_model_callback(query.data or "", services.available_models())
    if entry is None:
        log.warning("model_callback_refused", data=(query.data or "")[:64])
        await query.answer(t("model_refused", lang), show_alert=True)
        return
    message = query.message
    if message is None:
        await query.answer(t("model_refused", lang), show_alert=True)
        return
    chat_id = message.chat.id
    await services.store.set_chat_model(chat_id, entry.id)
    log.info("model_chosen", model=entry.id, via="keyboard")
    await query.answer(t("model_set", lang, label=entry.label))
    try:
        await query.edit_message_text(
            t("model_menu", lang, label=entry.label),
            reply_markup=model_keyboard(services.available_models(), entry.id, lang),
        )
    except TelegramError as exc:  # "message is not modified" when pressed twice
        log.debug("model_menu_not_edited", error=str(exc))


async def new_command(update: Update, context: Context) -> None:
    """Cancel a running reply in this chat, then close the session and open a fresh one."""
    message = update.effective_message
    if message is None:
        return
    services = _services(context)
    # Under the session gate: a question stored before this point has its reply registered,
    # so it is cancelled here (what it showed is stored in the old session before it closes);
    # a question that comes later waits and goes into the new session.
    async with services.turns.session_gate(message.chat_id):
        await services.turns.cancel(message.chat_id)
        result = await services.store.start_new_session(message.chat_id)
    log.info(
        "session_started",
        closed_session=result.closed_session_id,
        session=result.new_session_id,
    )
    await say(message, t("new_session", user_language(update)))


async def cancel_command(update: Update, context: Context) -> None:
    message = update.effective_message
    if message is None:
        return
    cancelled = await _services(context).turns.cancel(message.chat_id)
    await say(message, t("cancelled" if cancelled else "nothing_to_cancel", user_language(update)))


async def chat_message(update: Update, context: Context) -> None:
    """A text message: in groups only when addressed; then one serialised chat turn."""
    message = update.effective_message
    if message is None or message.text is None:
        return
    bot = context.bot
    text = clean_text(message.text)
    group = is_group(message)
    if group:
        if is_addressed_to_bot(message, bot.username, bot.id):
            text = strip_bot_mentions(message, bot.username, bot.id)
        elif not _continues_split_message(update, context):
            return
    lang = user_language(update)
    if not text.strip():
        await say(message, t("empty_message", lang))
        return
    user = update.effective_user
    assert user is not None
    # Split parts of a long message become one turn; size, rate and budget limits apply to it.
    screened = await _services(context).guard.screen(
        message.chat_id, user.id, text, update.update_id
    )
    if screened.reply_key is not None:
        await say(message, t(screened.reply_key, lang, **screened.reply_values))
    if screened.text is None:
        return
    text = screened.text
    request = turn_request_for(message, user.id, bot, update.update_id, text=text, lang=lang)
    services = _services(context)
    if await run_chat_turn(services, bot, request):
        services.lifecycle.tracker.mark_stored(update.update_id)


def _continues_split_message(update: Update, context: Context) -> bool:
    """A later part of a client-split message: only the first part carries the @mention, so
    in a group a part is ours when the same user's first part addressed the bot and its
    group is still open in the joiner."""
    message, user = update.effective_message, update.effective_user
    if message is None or user is None:
        return False
    return _services(context).guard.joiner.leader_ref((message.chat_id, user.id)) is not None


async def unknown_command(update: Update, context: Context) -> None:
    """A "/word" that is no command of ours: say so, rather than silently ignoring it.

    In groups only commands addressed to this bot ("/word@bot") are answered; other bots'
    commands are none of our business.
    """
    message = update.effective_message
    if message is None or message.text is None:
        return
    command, _, addressee = message.text.split(maxsplit=1)[0][1:].partition("@")
    if command.lower() in registered_commands(context.application):
        return  # handled by its own CommandHandler in the first group
    if addressee and addressee.lower() != context.bot.username.lower():
        return
    if is_group(message) and not addressee:
        return
    await say(message, t("unknown_command", user_language(update)))


async def stray_callback(update: Update, context: Context) -> None:
    """A press whose data no handler recognises (forged, or a keyboard from an older version):
    answered with nothing, so the client's spinner stops and no error is logged. Registered
    last (bot/app.py), so it only sees what every other callback handler turned down."""
    query = update.callback_query
    if query is None:
        return
    log.info("callback_unknown")
    try:
        await query.answer()
    except TelegramError as exc:  # too old to answer: nothing a user waits for
        log.debug("callback_not_answered", error=str(exc))


async def on_error(update: object, context: Context) -> None:
    """Log handler errors with the chat id, and tell the user whether their message was
    stored — never claim it was when it was not. The turn says so: it raises
    `MessageSavedError` when it broke after storing the message, and a handler whose turn
    stored it marks the update, for an error later in the same update."""
    chat_id = None
    if isinstance(update, Update) and update.effective_chat is not None:
        chat_id = update.effective_chat.id
    error: BaseException | None = context.error
    saved = isinstance(error, MessageSavedError) or (
        isinstance(update, Update)
        and context.bot_data.services.lifecycle.tracker.stored(update.update_id)
    )
    if isinstance(error, MessageSavedError):
        error = error.__cause__  # what broke; the wrapper only carries "saved"
    log.error("handler_error", chat_id=chat_id, message_saved=saved, exc_info=error)
    if isinstance(update, Update) and update.effective_message is not None:
        key = "internal_error" if saved else "internal_error_unsaved"
        await say(update.effective_message, t(key, user_language(update)))


def register_handlers(application: App) -> None:
    new_messages = filters.UpdateType.MESSAGE
    application.add_handler(CommandHandler("start", start_command, filters=new_messages))
    application.add_handler(CommandHandler("help", help_command, filters=new_messages))
    application.add_handler(CommandHandler("model", model_command, filters=new_messages))
    application.add_handler(CommandHandler("new", new_command, filters=new_messages))
    application.add_handler(CommandHandler("cancel", cancel_command, filters=new_messages))
    application.add_handler(CallbackQueryHandler(model_callback, pattern=is_model_callback))
    application.add_handler(
        MessageHandler(new_messages & filters.TEXT & ~filters.COMMAND, chat_message)
    )
    # Features add their CommandHandlers after this function runs, so unknown commands are
    # answered from a later group, which checks every registered command first.
    application.add_handler(
        MessageHandler(new_messages & filters.COMMAND, unknown_command), group=UNKNOWN_GROUP
    )
    # Anything else a user can send (service messages such as "X joined" are not answered): voice,
    # audio, video notes, photos and documents are read (bot/handlers/media/media.py); the rest get
    # a polite line saying what the bot reads.
    application.add_handler(
        MessageHandler(
            new_messages & ~filters.TEXT & ~filters.StatusUpdate.ALL,
            media_message,
        )
    )
    application.add_handler(CallbackQueryHandler(retry_callback, pattern=f"^{RETRY_PREFIX}"))
    application.add_error_handler(on_error)
