"""A chat's move to its new id (a group upgraded to a supergroup), in step with its turns.

The move (memory/chat_move.py: ONE transaction, idempotent) waits for the old chat's running
turn, so that turn's answer is stored before its rows move; a turn of the old chat that meets
ChatMigrated itself cannot wait for itself and starts the move for after it ends instead
(`migrate_later`). The service messages that announce an upgrade are handled in
bot/handlers/migration.py.
"""

from __future__ import annotations

import structlog

from bot.turns.chat_turns import ChatTurns
from memory.chat_move import ChatMove, move_chat
from memory.store import Store, to_iso

log = structlog.get_logger("bot.migration")


async def migrate_chat(
    turns: ChatTurns, store: Store, old_chat_id: int, new_chat_id: int, *, via: str
) -> ChatMove:
    """Move the chat's data to its new id once the old chat's running turn is over."""
    async with turns.serialised(old_chat_id):
        moved = await move_chat(store.db, old_chat_id, new_chat_id, to_iso(store.clock()))
    if moved.anything:
        log.info(
            "chat_migrated",
            old_chat_id=old_chat_id,
            new_chat_id=new_chat_id,
            via=via,
            merged=moved.merged,
            closed_session=moved.closed_session_id,
            rows={table: count for table, count in moved.moved.items() if count},
        )
    else:
        log.info("chat_migration_nothing_left", old_chat_id=old_chat_id,
                 new_chat_id=new_chat_id, via=via)  # fmt: skip
    return moved


def migrate_later(
    turns: ChatTurns, store: Store, old_chat_id: int, new_chat_id: int, *, via: str
) -> None:
    """From inside a turn of the old chat (which holds its lock): move once that turn ends."""
    turns.after_turn(migrate_chat(turns, store, old_chat_id, new_chat_id, via=via))
