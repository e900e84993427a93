"""/mcp: the state of the operator's MCP servers, for ADMIN_USER_IDS in a private chat; anyone
else is refused politely. (The servers themselves: mcp_client/; their tools in a turn:
agent/tools/mcp.py.)"""

from __future__ import annotations

from telegram import Update
from telegram.ext import filters

from bot.handlers.access import say, user_language
from bot.incoming import is_group
from bot.services import App, Context
from bot.ui.commands import AdminCommandHandler
from bot.ui.i18n import t
from bot.ui.mcp_status import mcp_status_text


async def mcp_command(update: Update, context: Context) -> None:
    services = context.bot_data.services
    user, message = update.effective_user, update.effective_message
    if user is None or message is None:
        return
    lang = user_language(update)
    if user.id not in services.settings.ADMIN_USER_IDS:
        await say(message, t("admin_only", lang))
        return
    if is_group(message):
        await say(message, t("admin_private_only", lang))
        return
    hub = services.mcp
    if hub is None:
        await say(message, t("mcp_none", lang))
        return
    await say(message, mcp_status_text(await hub.status(), hub.warnings, lang))


def register_mcp_handlers(application: App) -> None:
    application.add_handler(
        AdminCommandHandler("mcp", mcp_command, filters=filters.UpdateType.MESSAGE)
    )
