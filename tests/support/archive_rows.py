"""Consolidated sessions written straight into the archive, for the recall and archive-index
tests that need words in the archive without running a consolidation for each.

The rows are written as the consolidation commit writes them (memory/recall/archive.py: the
terms, the insert, the session's messages deleted), so a change to that commit is followed here
once, not in every test that seeds the archive.
"""

from __future__ import annotations

import sqlite3

from memory.chats import ensure_chat
from memory.db import Database
from memory.recall.archive import archive_in, index_messages, index_pending
from memory.store import StoredMessage


def closed_session(conn: sqlite3.Connection, chat_id: int, at: str) -> int:
    """A session of `chat_id` opened and closed at `at` (its chat row made first); its id."""
    ensure_chat(conn, chat_id, at)
    return int(
        conn.execute(
            "INSERT INTO sessions(chat_id, opened_at, closed_at) VALUES (?, ?, ?) RETURNING id",
            (chat_id, at, at),
        ).fetchone()[0]
    )


async def archive_unindexed(
    db: Database, chat_id: int, texts: list[str], at: str, *, archived_at: str | None = None
) -> None:
    """`texts` (user messages written at `at`) archived in `chat_id` as one consolidated
    session, at `archived_at` (default `at`), and not indexed yet: the database as a commit
    leaves it when the process dies before the index transaction."""
    when = archived_at or at

    def write(conn: sqlite3.Connection) -> None:
        session = closed_session(conn, chat_id, when)
        stored = []
        for text in texts:
            message_id = conn.execute(
                "INSERT INTO messages(session_id, chat_id, role, content, created_at) "
                "VALUES (?, ?, 'user', ?, ?) RETURNING id",
                (session, chat_id, text, at),
            ).fetchone()[0]
            stored.append(StoredMessage(message_id, session, chat_id, "user", text, at))
        archive_in(conn, index_messages(stored), when)
        conn.execute("DELETE FROM messages WHERE session_id = ?", (session,))

    await db.run_in_transaction(write)


async def archive_turns(db: Database, chat_id: int, texts: list[str], at: str) -> None:
    """`archive_unindexed`, then indexed: the archive as a finished consolidation leaves it."""
    await archive_unindexed(db, chat_id, texts, at)
    await index_pending(db)
