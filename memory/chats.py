"""The `chats` row: one per chat, made the first time anything of the chat is written.

Every write that needs the row (a message, a setting, a memory edit, /forget, a time zone) makes
it here, inside its own transaction, so the row's defaults are written in one place.
"""

from __future__ import annotations

import sqlite3
from typing import Literal, get_args

# The chats row's columns besides its id and times, each a setting of the chat (a chat's
# move carries them all; a test holds them to the schema).
ChatSetting = Literal["model_id", "language", "time_zone"]
CHAT_SETTINGS: tuple[ChatSetting, ...] = get_args(ChatSetting)


def ensure_chat(conn: sqlite3.Connection, chat_id: int, now: str) -> None:
    """The chat's row, made if it is not there yet (inside the caller's transaction)."""
    conn.execute(
        "INSERT INTO chats(chat_id, created_at, updated_at) VALUES (?, ?, ?) "
        "ON CONFLICT(chat_id) DO NOTHING",
        (chat_id, now, now),
    )


def set_chat_setting(
    conn: sqlite3.Connection, chat_id: int, column: ChatSetting, value: str | None, now: str
) -> None:
    """One setting of the chat, its row made first if needed (inside the caller's
    transaction)."""
    ensure_chat(conn, chat_id, now)
    conn.execute(
        f"UPDATE chats SET {column} = ?, updated_at = ? WHERE chat_id = ?",
        (value, now, chat_id),
    )
