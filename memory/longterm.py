"""Long-term memory and the history entries, per chat (memory/recall/search.py searches them).

The memory carries a version number that grows on every write. A consolidation remembers the
version it started from and may only commit while it is unchanged, so a slow job can never
overwrite an update (or a /forget) it did not see.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from memory.db import Database
from memory.facts import is_content_line, normalise


@dataclass(frozen=True)
class LongTermMemory:
    chat_id: int
    content: str = ""
    version: int = 0
    over_budget: bool = False
    updated_at: str | None = None


@dataclass(frozen=True)
class HistoryEntry:
    id: int
    chat_id: int
    entry: str
    model_id: str
    created_at: str
    session_id: int | None = None
    first_message_at: str | None = None
    last_message_at: str | None = None
    message_count: int = 0


def _row_to_entry(row: sqlite3.Row) -> HistoryEntry:
    return HistoryEntry(
        id=row["id"],
        chat_id=row["chat_id"],
        entry=row["entry"],
        model_id=row["model_id"],
        created_at=row["created_at"],
        session_id=row["session_id"],
        first_message_at=row["first_message_at"],
        last_message_at=row["last_message_at"],
        message_count=row["message_count"],
    )


_MEMORY_ROW = (
    "SELECT content, version, over_budget, updated_at FROM long_term_memory WHERE chat_id = ?"
)


def _memory_from(chat_id: int, row: sqlite3.Row | None) -> LongTermMemory:
    if row is None:
        return LongTermMemory(chat_id=chat_id)
    return LongTermMemory(
        chat_id, row["content"], row["version"], bool(row["over_budget"]), row["updated_at"]
    )


def memory_of(conn: sqlite3.Connection, chat_id: int) -> LongTermMemory:
    """The chat's memory, read on a database thread: through `Database.read` the agent loop reads
    it with the session's messages in one round trip (memory/store.py `round_context`); inside a
    `Database.run_in_transaction` body a write sees it as of its own transaction."""
    return _memory_from(chat_id, conn.execute(_MEMORY_ROW, (chat_id,)).fetchone())


def write_memory(
    conn: sqlite3.Connection, chat_id: int, content: str, *, over_budget: bool, now: str
) -> int:
    """Replace the memory and bump its version; returns the new version (inside the caller's
    `Database.run_in_transaction` body)."""
    row = conn.execute(
        "INSERT INTO long_term_memory(chat_id, content, version, over_budget, updated_at) "
        "VALUES (?, ?, 1, ?, ?) "
        "ON CONFLICT(chat_id) DO UPDATE SET content = excluded.content, "
        "version = long_term_memory.version + 1, over_budget = excluded.over_budget, "
        "updated_at = excluded.updated_at RETURNING version",
        (chat_id, content, int(over_budget), now),
    ).fetchone()
    assert row is not None
    return int(row["version"])


@dataclass(frozen=True)
class MemoryNotice:
    """Lines consolidations added to and removed from the memory since the user was told."""

    added: int
    removed: int


def changed_lines(before: str, after: str) -> MemoryNotice:
    """How many content lines `after` has that `before` lacks, and the reverse (compared
    case- and punctuation-insensitively, so a reformatted line is not a change)."""
    old = {normalise(line) for line in before.splitlines() if is_content_line(line)}
    new = {normalise(line) for line in after.splitlines() if is_content_line(line)}
    return MemoryNotice(len(new - old), len(old - new))


def add_unreported(conn: sqlite3.Connection, chat_id: int, change: MemoryNotice) -> None:
    """Count a consolidation's change for the next reply to announce (inside its commit)."""
    if change.added or change.removed:
        conn.execute(
            "UPDATE long_term_memory SET unreported_added = unreported_added + ?, "
            "unreported_removed = unreported_removed + ? WHERE chat_id = ?",
            (change.added, change.removed, chat_id),
        )


def unreported_notice(conn: sqlite3.Connection, chat_id: int) -> MemoryNotice | None:
    """The change no reply has announced yet, or None; read inside the transaction that starts
    a turn (memory/store.py), so the turn makes no round trip of its own for it. Reading does
    not mark it announced: a turn that fails before its reply shows it leaves it for the next
    reply (see `memory_notice_shown`)."""
    row = conn.execute(
        "SELECT unreported_added, unreported_removed FROM long_term_memory WHERE chat_id = ?",
        (chat_id,),
    ).fetchone()
    if row is None or not (row["unreported_added"] or row["unreported_removed"]):
        return None
    return MemoryNotice(int(row["unreported_added"]), int(row["unreported_removed"]))


async def memory_notice_shown(db: Database, chat_id: int, notice: MemoryNotice) -> None:
    """A reply has shown `notice`: those counts are announced. Only they are taken off, so a
    consolidation that committed while the turn ran is announced by the next reply; the floor
    at 0 covers a /forget that zeroed them meanwhile."""

    def write(conn: sqlite3.Connection) -> None:
        conn.execute(
            "UPDATE long_term_memory SET "
            "unreported_added = MAX(0, unreported_added - ?), "
            "unreported_removed = MAX(0, unreported_removed - ?) WHERE chat_id = ?",
            (notice.added, notice.removed, chat_id),
        )

    await db.run_in_transaction(write)


class MemoryRepository:
    """Reads of memory and history (/forget lives in memory/forget.py)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def get(self, chat_id: int) -> LongTermMemory:
        return await self.db.read(lambda conn: memory_of(conn, chat_id))

    async def content(self, chat_id: int) -> str:
        return (await self.get(chat_id)).content

    async def history(self, chat_id: int, *, limit: int | None = None) -> list[HistoryEntry]:
        """History entries, oldest first (the last `limit` if given)."""
        if limit is None:
            rows = await self.db.fetchall(
                "SELECT * FROM history_entries WHERE chat_id = ? ORDER BY id", (chat_id,)
            )
        else:
            rows = await self.db.fetchall(
                "SELECT * FROM (SELECT * FROM history_entries WHERE chat_id = ? "
                "ORDER BY id DESC LIMIT ?) ORDER BY id",
                (chat_id, limit),
            )
        return [_row_to_entry(r) for r in rows]
