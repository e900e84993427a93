"""Operations in the bot: /usage, /stats (and the admins' command list that shows it), and the
chat's remembered language. The turn guard and the graceful-stop wiring: bot/turn_guard.py.

`set_admin_commands` runs in post_init (bot/app.py); `register_operations_handlers` adds the
commands when the application is built.
"""

from __future__ import annotations

import re
from collections.abc import Collection

import structlog
from telegram import BotCommandScopeChat, Update
from telegram.error import TelegramError
from telegram.ext import CommandHandler, TypeHandler, filters

from bot.handlers.access import say, user_allowed, user_language
from bot.handlers.reminders import reminder_stats_text
from bot.handlers.tasks import task_stats_text
from bot.incoming import is_group
from bot.services import App, Context, Services
from bot.ui.commands import AdminCommandHandler, bot_commands
from bot.ui.i18n import t
from bot.ui.stats import build_stats_text, everyone_text, usage_text
from memory.mcp_calls import McpCalls
from memory.web_calls import WebCalls

log = structlog.get_logger("bot.ops")


async def set_admin_commands(application: App, admin_ids: Collection[int]) -> None:
    """Admins see /stats in their command list; everyone else does not (run in post_init)."""
    commands = bot_commands(application, "en", admin=True)
    for admin_id in admin_ids:
        try:
            await application.bot.set_my_commands(commands, scope=BotCommandScopeChat(admin_id))
        except TelegramError as exc:  # e.g. the admin never opened a chat with the bot
            log.info("admin_commands_not_set", admin_id=admin_id, error=str(exc))


def _is_admin(services: Services, user_id: int | None) -> bool:
    return user_id is not None and user_id in services.settings.ADMIN_USER_IDS


async def _reply(update: Update, text: str) -> None:
    if update.effective_message is not None:
        await say(update.effective_message, text)


async def remember_language(update: Update, context: Context) -> None:
    """Keep the chat's language (the last sender's Telegram language) for replies sent later
    without an update at hand, e.g. by background work. Written only when it changes."""
    user, chat = update.effective_user, update.effective_chat
    if user is None or chat is None or not user.language_code:
        return
    services = context.bot_data.services
    if not user_allowed(services.settings, user.id):
        return  # a group's move to a supergroup passes the guard, whoever made it
    known = services.languages
    if known.get(chat.id) == user.language_code:
        return
    await services.store.set_chat_language(chat.id, user.language_code)
    known[chat.id] = user.language_code


def _private(update: Update) -> bool:
    """Admin views (everyone's spend, /stats) are for the admin's eyes: every member of a group
    would see them there."""
    message = update.effective_message
    return message is not None and not is_group(message)


# A Telegram user id: ASCII digits only ("²".isdigit() is true, int("²") raises), and within
# SQLite's 64-bit integers.
_USER_ID = re.compile(r"-?[0-9]{1,18}")


async def usage_command(update: Update, context: Context) -> None:
    """/usage: your own spend; admins also see everyone, and `/usage USER_ID` for one user —
    those two only in a private chat."""
    services = context.bot_data.services
    user = update.effective_user
    if user is None:
        return
    lang = user_language(update)
    ledger = services.ledger
    args = context.args or []
    admin = _is_admin(services, user.id)
    if args:
        if not admin:
            await _reply(update, t("usage_admin_only", lang))
            return
        if not _private(update):
            await _reply(update, t("admin_private_only", lang))
            return
        if not _USER_ID.fullmatch(args[0]):
            await _reply(update, t("usage_bad_args", lang))
            return
        other = int(args[0])
        web = await _web_calls(services, other)
        text = usage_text(await ledger.report(other), lang, own=False, web_calls=web)
        await _reply(update, text + await _mcp_calls(services, other, lang))
        return
    web = await _web_calls(services, user.id)
    text = usage_text(await ledger.report(user.id), lang, web_calls=web)
    text += await _mcp_calls(services, user.id, lang)
    if admin:
        if _private(update):
            everyone = everyone_text(await ledger.per_user(), await ledger.report(None), lang)
            text = f"{text}\n\n{everyone}"
        else:
            text = f"{text}\n\n{t('admin_private_only', lang)}"
    await _reply(update, text)


async def _web_calls(services: Services, user_id: int) -> tuple[int, int] | None:
    """The user's web calls today and their WEB_DAILY_CALLS, when web use is on: what the cap
    counts (memory/web_calls.py), read from the same table."""
    cap = services.settings.WEB_DAILY_CALLS
    if cap <= 0:
        return None
    return await WebCalls(services.db, services.store.clock).today(user_id), cap


async def _mcp_calls(services: Services, user_id: int, lang: str | None) -> str:
    """The line of the user's MCP calls today against MCP_USER_DAILY_CALLS, when MCP is on
    (each call is also a line of the report above, per server and tool)."""
    if services.mcp is None:
        return ""
    calls = await McpCalls(services.db, services.store.clock).today(user_id)
    cap = services.settings.MCP_USER_DAILY_CALLS
    return "\n" + t("usage_mcp_calls", lang, calls=calls, cap=cap)


async def stats_command(update: Update, context: Context) -> None:
    """/stats for ADMIN_USER_IDS, in a private chat: memory queue, failures per model,
    breakers, spend today."""
    services = context.bot_data.services
    user = update.effective_user
    if user is None:
        return
    lang = user_language(update)
    if not _is_admin(services, user.id):
        await _reply(update, t("admin_only", lang))
        return
    if not _private(update):
        await _reply(update, t("admin_private_only", lang))
        return
    text = await build_stats_text(
        services.db,
        services.transport.status(),
        lang,
        turns_in_flight=services.turns.running_count(),
    )
    text = f"{text}\n{await reminder_stats_text(services, lang)}"
    text = f"{text}\n{await task_stats_text(services, lang)}"
    await _reply(update, text)


def register_operations_handlers(application: App) -> None:
    new_messages = filters.UpdateType.MESSAGE
    # Group -1 runs before the command and chat handlers of group 0, for every update.
    application.add_handler(TypeHandler(Update, remember_language), group=-1)
    application.add_handler(CommandHandler("usage", usage_command, filters=new_messages))
    application.add_handler(AdminCommandHandler("stats", stats_command, filters=new_messages))
