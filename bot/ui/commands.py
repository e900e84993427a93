"""The bot's command list, as Telegram shows it in the menu (`set_my_commands`).

Each feature appends its commands to `BOT_COMMANDS` when it registers its handlers; the list
is sent once the application has started, in English and in every language that translates
all of the descriptions.
"""

from __future__ import annotations

from typing import Any

from telegram import BotCommand
from telegram.ext import Application

from bot.ui.i18n import SUPPORTED_LANGUAGES, has_text, t

# (command, i18n key of its description), in the order Telegram shows them. Other features
# append their commands here before the application starts.
BOT_COMMANDS: list[tuple[str, str]] = [
    ("start", "cmd_start"),
    ("help", "cmd_help"),
    ("model", "cmd_model"),
    ("new", "cmd_new"),
    ("cancel", "cmd_cancel"),
]


def bot_commands(lang: str | None) -> list[BotCommand]:
    return [BotCommand(name, t(key, lang)) for name, key in BOT_COMMANDS]


async def register_commands(application: Application[Any, Any, Any, Any, Any, Any]) -> None:
    """English as the default list, plus each language that has its own descriptions."""
    await application.bot.set_my_commands(bot_commands("en"))
    for lang in SUPPORTED_LANGUAGES:
        if lang != "en" and all(has_text(key, lang) for _, key in BOT_COMMANDS):
            await application.bot.set_my_commands(bot_commands(lang), language_code=lang)
