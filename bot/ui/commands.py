"""The bot's commands, read from the handlers the application registered: one source for the
menu Telegram shows (`set_my_commands`), the /start and /help lists, the admins' menu and
the check that answers a command the bot does not have.

A command's description is the locale's `cmd_<name>`. A command for admins only is
registered with `AdminCommandHandler`: it is listed in the admins' menu, not in everyone's.
The menu is sent once the application has started, in English and in every language that
translates all of the descriptions.
"""

from __future__ import annotations

from typing import Any

from telegram import BotCommand
from telegram.ext import Application, CommandHandler

from bot.ui.i18n import SUPPORTED_LANGUAGES, has_text, t

AnyApplication = Application[Any, Any, Any, Any, Any, Any]


class AdminCommandHandler(CommandHandler[Any, Any]):
    """A command for ADMIN_USER_IDS: in their menu only (the handler still says no to others,
    who can type it all the same)."""


def command_handlers(application: AnyApplication) -> list[CommandHandler[Any, Any]]:
    """Every CommandHandler, in the order updates meet them (by group, then as registered)."""
    return [
        handler
        for group in sorted(application.handlers)
        for handler in application.handlers[group]
        if isinstance(handler, CommandHandler)
    ]


def registered_commands(application: AnyApplication) -> set[str]:
    """Every command some handler takes (PTB keeps them lower-cased)."""
    return {command for handler in command_handlers(application) for command in handler.commands}


def menu_commands(application: AnyApplication, *, admin: bool = False) -> list[tuple[str, str]]:
    """(command, i18n key of its description) in registration order; admins' commands only
    with `admin`."""
    listed: list[tuple[str, str]] = []
    for handler in command_handlers(application):
        if isinstance(handler, AdminCommandHandler) and not admin:
            continue
        for command in sorted(handler.commands):
            if command not in (name for name, _ in listed):
                listed.append((command, f"cmd_{command}"))
    return listed


def bot_commands(
    application: AnyApplication, lang: str | None, *, admin: bool = False
) -> list[BotCommand]:
    return [BotCommand(name, t(key, lang)) for name, key in menu_commands(application, admin=admin)]


async def register_commands(application: AnyApplication) -> None:
    """English as the default list, plus each language that has its own descriptions."""
    await application.bot.set_my_commands(bot_commands(application, "en"))
    keys = [key for _, key in menu_commands(application)]
    for lang in SUPPORTED_LANGUAGES:
        if lang != "en" and all(has_text(key, lang) for key in keys):
            await application.bot.set_my_commands(
                bot_commands(application, lang), language_code=lang
            )
