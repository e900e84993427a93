"""The archive: a chat's consolidated messages, kept searchable after they leave the session.

A summary keeps the gist of a session, not the name of the book or the city of the cousin, so
the words themselves are kept: the consolidation commit moves its messages here in the same
transaction that saves the history entry (memory/consolidation/jobs.py). They never return to a
prompt; `recall` searches them (memory/recall/search.py). `/forget` deletes them with everything
else (memory/forget.py), `ARCHIVE_DAYS` deletes those older than that many days, daily.

Search terms are computed in Python (SQLite cannot stem) before the commit's transaction and
off the event loop: a long document's text takes a while to cut into terms.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import structlog

from memory.db import Database
from memory.recall.terms import text_terms
from memory.store import StoredMessage, to_iso

log = structlog.get_logger("memory.recall.archive")

# Only so much of one message is indexed (a document can be megabytes; its head names it).
MAX_INDEXED_CHARS = 50_000
PURGE_EVERY = timedelta(days=1)
_SEARCHED_ROLES = ("user", "assistant")


@dataclass(frozen=True)
class ArchivedRow:
    message: StoredMessage
    terms: str


def index_messages(messages: Sequence[StoredMessage]) -> list[ArchivedRow]:
    """The rows to archive, with their search terms (CPU work: call it in a thread)."""
    rows = []
    for message in messages:
        searched = message.role in _SEARCHED_ROLES and message.content.strip()
        terms = " ".join(text_terms(message.content[:MAX_INDEXED_CHARS])) if searched else ""
        rows.append(ArchivedRow(message, terms))
    return rows


async def prepare_archive(messages: Sequence[StoredMessage]) -> list[ArchivedRow]:
    return await asyncio.to_thread(index_messages, messages)


def archive_in(conn: sqlite3.Connection, rows: Sequence[ArchivedRow], now: str) -> None:
    """Insert the rows inside the caller's transaction (the consolidation commit), and count
    their terms."""
    _count_terms(conn, (row.terms for row in rows), +1)
    conn.executemany(
        "INSERT INTO archived_messages(id, chat_id, session_id, role, content, tool_calls, "
        "tool_call_id, user_id, model_id, terms, created_at, archived_at) "
        "SELECT id, chat_id, session_id, role, content, tool_calls, tool_call_id, user_id, "
        "model_id, ?, created_at, ? FROM messages WHERE id = ?",
        [(row.terms, now, row.message.id) for row in rows],
    )


def delete_archived_in(conn: sqlite3.Connection, where: str, params: Sequence[Any]) -> int:
    """Delete the archived messages `where` selects inside the caller's transaction (/forget,
    the purge), and their terms' counts; returns how many went."""
    cursor = conn.execute(f"DELETE FROM archived_messages WHERE {where} RETURNING terms", params)
    deleted = [str(row[0]) for row in cursor.fetchall()]
    _count_terms(conn, deleted, -1)
    return len(deleted)


def _count_terms(conn: sqlite3.Connection, terms_of_rows: Iterable[str], sign: int) -> None:
    """Add (or take away) the rows to `archive_terms`: one per row holding a term. A term no
    row holds any more is deleted (a forgotten chat's words leave no trace there)."""
    counts: Counter[str] = Counter()
    for terms in terms_of_rows:
        counts.update(set(terms.split()))
    conn.executemany(
        "INSERT INTO archive_terms(term, docs) VALUES (?, ?) "
        "ON CONFLICT(term) DO UPDATE SET docs = docs + excluded.docs",
        [(term, sign * n) for term, n in counts.items()],
    )
    if sign < 0:
        conn.executemany(
            "DELETE FROM archive_terms WHERE term = ? AND docs <= 0", [(t,) for t in counts]
        )


async def purge_older_than(db: Database, cutoff: str) -> int:
    """Delete archived messages written before `cutoff` (ISO); returns how many went."""
    return await db.run_in_transaction(
        lambda conn: delete_archived_in(conn, "created_at < ?", (cutoff,))
    )


@dataclass(frozen=True)
class ArchivedMessage:
    id: int
    session_id: int
    role: str
    content: str
    created_at: str


async def archived_messages(db: Database, chat_id: int) -> list[ArchivedMessage]:
    """Every archived message of a chat with text, oldest first (the export)."""
    rows = await db.fetchall(
        "SELECT id, session_id, role, content, created_at FROM archived_messages "
        "WHERE chat_id = ? AND content != '' ORDER BY id",
        (chat_id,),
    )
    return [
        ArchivedMessage(r["id"], r["session_id"], r["role"], r["content"], r["created_at"])
        for r in rows
    ]


class ArchivePurger:
    """Deletes archived messages older than `days` at start-up and then once a day."""

    def __init__(self, db: Database, days: float, clock: Callable[[], datetime]) -> None:
        self.db = db
        self.days = days
        self.clock = clock
        self._task: asyncio.Task[None] | None = None

    async def purge_once(self) -> int:
        cutoff = to_iso(self.clock() - timedelta(days=self.days))
        removed = await purge_older_than(self.db, cutoff)
        if removed:
            log.info("archive_purged", removed=removed, before=cutoff)
        return removed

    async def start(self) -> None:
        """Purge now (before the bot answers anyone), then daily in the background."""
        if self.days <= 0 or self._task is not None:
            return
        await self._purge_logged()
        self._task = asyncio.create_task(self._run(), name="archive-purge")

    async def _purge_logged(self) -> None:
        try:
            await self.purge_once()
        except Exception:
            log.exception("archive_purge_failed")  # tried again tomorrow; nothing lost

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(PURGE_EVERY.total_seconds())
            await self._purge_logged()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
