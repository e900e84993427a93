"""Long-term memory and the searchable history, per chat.

The memory carries a version number that grows on every write. A consolidation remembers the
version it started from and may only commit while it is unchanged, so a slow job can never
overwrite an update (or a /forget) it did not see.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import aiosqlite

from memory.db import Database

# FTS5's trigram tokenizer cannot match anything shorter than three characters.
_MIN_TRIGRAM_CHARS = 3


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


def _row_to_entry(row: aiosqlite.Row) -> HistoryEntry:
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


async def read_memory(conn: aiosqlite.Connection, chat_id: int) -> LongTermMemory:
    """Memory as seen inside an open transaction (the commit re-reads it here)."""
    cursor = await conn.execute(
        "SELECT content, version, over_budget, updated_at FROM long_term_memory WHERE chat_id = ?",
        (chat_id,),
    )
    row = await cursor.fetchone()
    if row is None:
        return LongTermMemory(chat_id=chat_id)
    return LongTermMemory(
        chat_id, row["content"], row["version"], bool(row["over_budget"]), row["updated_at"]
    )


async def write_memory(
    conn: aiosqlite.Connection, chat_id: int, content: str, *, over_budget: bool, now: str
) -> int:
    """Replace the memory and bump its version; returns the new version."""
    cursor = await conn.execute(
        "INSERT INTO long_term_memory(chat_id, content, version, over_budget, updated_at) "
        "VALUES (?, ?, 1, ?, ?) "
        "ON CONFLICT(chat_id) DO UPDATE SET content = excluded.content, "
        "version = long_term_memory.version + 1, over_budget = excluded.over_budget, "
        "updated_at = excluded.updated_at RETURNING version",
        (chat_id, content, int(over_budget), now),
    )
    row = await cursor.fetchone()
    assert row is not None
    return int(row["version"])


_UNSEARCHABLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")


def fts_query(query: str) -> str | None:
    """An FTS5 MATCH expression: every word of 3+ characters as a quoted phrase, OR-ed.

    Quoting makes user input inert (no FTS5 operators); OR plus bm25 ranking puts entries that
    contain more of the words first. None means no word is long enough for trigrams.
    """
    words = [w for w in re.split(r"\s+", query.strip()) if len(w) >= _MIN_TRIGRAM_CHARS]
    if not words:
        return None
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in words)


def _like_pattern(query: str) -> str:
    escaped = query.strip().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


class MemoryRepository:
    """Reads and user-driven writes (/forget) of memory and history."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def get(self, chat_id: int) -> LongTermMemory:
        row = await self.db.fetchone(
            "SELECT content, version, over_budget, updated_at FROM long_term_memory "
            "WHERE chat_id = ?",
            (chat_id,),
        )
        if row is None:
            return LongTermMemory(chat_id=chat_id)
        return LongTermMemory(
            chat_id, row["content"], row["version"], bool(row["over_budget"]), row["updated_at"]
        )

    async def content(self, chat_id: int) -> str:
        """What goes into the chat's system prompt."""
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

    async def search(self, chat_id: int, query: str, *, limit: int = 5) -> list[HistoryEntry]:
        """Best-matching history entries: FTS5 trigram + bm25, LIKE for very short queries.

        Control characters are no search terms (a NUL even ends SQLite's parse of the FTS5
        expression: "unterminated string"), nor are lone surrogates (SQLite cannot encode
        them): both become spaces, whoever asked (a user's /recall or a model's tool call).
        """
        query = _UNSEARCHABLE.sub(" ", query)
        if not query.strip():
            return []
        match = fts_query(query)
        if match is None:
            rows = await self.db.fetchall(
                "SELECT * FROM history_entries WHERE chat_id = ? AND entry LIKE ? ESCAPE '\\' "
                "ORDER BY id DESC LIMIT ?",
                (chat_id, _like_pattern(query), limit),
            )
        else:
            rows = await self.db.fetchall(
                "SELECT h.* FROM history_fts JOIN history_entries h ON h.id = history_fts.rowid "
                "WHERE history_fts MATCH ? AND h.chat_id = ? "
                "ORDER BY bm25(history_fts), h.id DESC LIMIT ?",
                (match, chat_id, limit),
            )
        return [_row_to_entry(r) for r in rows]

    async def forget(self, chat_id: int, now: str) -> None:
        """Clear memory and history. The version bump stops any in-flight consolidation that
        read the old memory from committing it back."""
        async with self.db.transaction() as conn:
            await conn.execute(
                "INSERT INTO chats(chat_id, created_at, updated_at) VALUES (?, ?, ?) "
                "ON CONFLICT(chat_id) DO NOTHING",
                (chat_id, now, now),
            )
            await write_memory(conn, chat_id, "", over_budget=False, now=now)
            await conn.execute("DELETE FROM history_entries WHERE chat_id = ?", (chat_id,))
            # Facts the chat tools wrote or removed are kept for replay; they go too.
            await conn.execute("DELETE FROM memory_edits WHERE chat_id = ?", (chat_id,))
