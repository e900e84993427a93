"""A COMMIT that SQLite refuses leaves the transaction open; the database must roll it back, so
the shared connection is usable for the next write.

The failure is real, not simulated: with `PRAGMA defer_foreign_keys` a dangling reference is
only checked at COMMIT, and SQLite then fails the COMMIT statement itself ("FOREIGN KEY
constraint failed") and keeps the transaction open — the same state an I/O error or
SQLITE_BUSY at COMMIT leaves. (`PRAGMA max_page_count` was tried first: the full disk is
reported by the INSERT that needs the page, not by the COMMIT, so it never reached the bug.)
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from memory.db import Database
from memory.store import Store


async def test_a_failed_commit_is_rolled_back_and_later_writes_work(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "commit.sqlite3")
    try:
        store = Store(db)
        kept = await store.add_message(7, "user", "stored before the failure")

        with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
            async with db.transaction() as conn:
                await conn.execute("PRAGMA defer_foreign_keys = ON")
                await conn.execute(
                    "INSERT INTO messages(session_id, chat_id, role, content, created_at) "
                    "VALUES (987654, 7, 'user', 'points at no session', '2026-01-01T00:00:00Z')"
                )
                # Leaving the block runs COMMIT, which SQLite refuses.

        # Nothing of the failed transaction is there, and the next writes go through.
        after = await store.add_message(7, "assistant", "stored after the failure")
        await store.set_chat_model(7, "gpt-5")
        rows = await db.fetchall("SELECT content FROM messages ORDER BY id")
        assert [r["content"] for r in rows] == [kept.content, after.content]
        assert await store.get_chat_model(7) == "gpt-5"
    finally:
        await db.close()
