"""A group that becomes a supergroup keeps its memory, its settings and its reminders.

Telegram gives the upgraded group a new chat id. It says so twice — a service message with
`migrate_to_chat_id` in the old chat, one with `migrate_from_chat_id` in the new — and a send
to the old id fails with ChatMigrated naming the new one. Any of these moves the chat's data
to the new id (memory/chat_move.py: ONE transaction, idempotent, so hearing it three or four
times is harmless). The move waits for the old chat's running turn, so that turn's answer is
stored before its rows move; a turn of the old chat that meets ChatMigrated itself cannot wait
for itself and starts the move in the background instead.

The service messages are handled whoever upgraded the group: they cost nothing and only move
what the bot already holds for that group.
"""

from __future__ import annotations

from telegram import Update
from telegram.ext import MessageHandler, filters

from bot.services import App, Context
from bot.turns.migrate import migrate_chat


async def migration_message(update: Update, context: Context) -> None:
    """`migrate_to_chat_id` (in the old group) or `migrate_from_chat_id` (in the supergroup)."""
    message = update.effective_message
    if message is None:
        return
    services = context.bot_data.services
    turns, store = services.turns, services.store
    if message.migrate_to_chat_id is not None:
        await migrate_chat(turns, store, message.chat_id, message.migrate_to_chat_id,
                           via="migrate_to_chat_id")  # fmt: skip
    elif message.migrate_from_chat_id is not None:
        await migrate_chat(turns, store, message.migrate_from_chat_id, message.chat_id,
                           via="migrate_from_chat_id")  # fmt: skip


def register_migration_handlers(application: App) -> None:
    application.add_handler(MessageHandler(filters.StatusUpdate.MIGRATE, migration_message))
