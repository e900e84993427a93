"""The archive: a chat's consolidated messages, kept searchable after they leave the session.

A summary keeps the gist of a session, not the name of the book or the city of the cousin, so
the words themselves are kept: the consolidation commit moves its messages here in the same
transaction that saves the history entry (memory/consolidation/jobs.py). They keep where words
that are not the user's came from (`provenance`), so recall brings such words back framed as
what they are, never as the user's. They never return to a prompt; `recall` searches them
(memory/recall/search.py). `/forget` deletes them with everything else (memory/forget.py),
`ARCHIVE_DAYS` deletes those older than that many days, daily.

Search terms are computed in Python (SQLite cannot stem) before the commit's transaction and
off the event loop: a long document's text takes a while to cut into terms.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import structlog

from memory.db import Database
from memory.recall.terms import text_terms
from memory.store import StoredMessage, to_iso
from primitives.clock import Clock
from primitives.tasks import stop_task

log = structlog.get_logger("memory.recall.archive")

# Only so much of one message is indexed (a document can be megabytes; its head names it).
MAX_INDEXED_CHARS = 50_000
PURGE_EVERY = timedelta(days=1)
_SEARCHED_ROLES = ("user", "assistant")
CHAT_SEPARATOR = "\ue000"  # private use: a token character of the index, never in a term
# Archived rows indexed per transaction: about 0.1 ms each under the consolidation benchmark,
# so a slice holds the writer for a few milliseconds.
INDEX_SLICE_ROWS = 32


@dataclass(frozen=True)
class ArchivedRow:
    message: StoredMessage
    terms: str
    content: str  # the words kept (`archived_text`)


def archived_text(message: StoredMessage) -> str:
    """The words the archive keeps of a message: its text, after the text it quoted (kept
    beside it in the session, memory/messages.py `quoted`), so recall finds both."""
    quoted = message.quoted
    return message.content if quoted is None else f"{quoted}\n{message.content}"


def index_messages(messages: Sequence[StoredMessage]) -> list[ArchivedRow]:
    """The rows to archive, with their search terms (CPU work: call it in a thread)."""
    rows = []
    for message in messages:
        content = archived_text(message)
        searched = message.role in _SEARCHED_ROLES and content.strip()
        terms = " ".join(text_terms(content[:MAX_INDEXED_CHARS])) if searched else ""
        rows.append(ArchivedRow(message, terms, content))
    return rows


async def prepare_archive(messages: Sequence[StoredMessage]) -> list[ArchivedRow]:
    return await asyncio.to_thread(index_messages, messages)


def chat_token(chat_id: int, term: str) -> str:
    """A chat's term as the archive's index holds it (migrations/0018_archive_per_chat.sql:
    the same text as the view `archive_fts_rows` writes), so a search reads its own chat's
    posting lists only."""
    return f"{chat_id}".replace("-", "n") + CHAT_SEPARATOR + term


def archive_in(conn: sqlite3.Connection, rows: Sequence[ArchivedRow], now: str) -> None:
    """Insert the rows inside the caller's transaction (the consolidation commit), waiting to
    be indexed (`index_pending_in`): the words are kept in this transaction, the index and the
    term counts follow in short ones of their own, so a user's write never waits behind them
    (migrations/0023_archive_index_later.sql)."""
    conn.executemany(
        "INSERT INTO archived_messages(id, chat_id, session_id, role, content, tool_calls, "
        "tool_call_id, user_id, model_id, terms, created_at, archived_at, provenance, indexed) "
        "SELECT id, chat_id, session_id, role, ?, tool_calls, tool_call_id, user_id, "
        "model_id, ?, created_at, ?, provenance, 0 FROM messages WHERE id = ?",
        [(row.content, row.terms, now, row.message.id) for row in rows],
    )


def index_pending_in(conn: sqlite3.Connection, limit: int = INDEX_SLICE_ROWS) -> int:
    """Index up to `limit` archived rows still waiting, oldest first, inside the caller's
    transaction; returns how many. The flag flips in the same transaction as the index entry
    and the term counts, so a crash indexes a row once or not yet, never twice. The counts go
    under the chat the row belongs to now (a chat move may have changed it since the commit)."""
    waiting = conn.execute(
        "SELECT id, chat_id, terms FROM archived_messages WHERE indexed = 0 ORDER BY id LIMIT ?",
        (limit,),
    ).fetchall()
    if not waiting:
        return 0
    conn.execute(
        "UPDATE archived_messages SET indexed = 1 WHERE id IN (SELECT value FROM json_each(?))",
        (json.dumps([int(r[0]) for r in waiting]),),
    )
    _count_terms(conn, [(int(r[1]), str(r[2])) for r in waiting if r[2]], +1)
    return len(waiting)


async def index_pending(db: Database) -> int:
    """Index every archived row still waiting, a slice per background transaction (each a few
    milliseconds, so /new and a chat's message wait for at most one); returns how many."""
    total = 0
    while indexed := await db.run_in_transaction(index_pending_in, background=True):
        total += indexed
    return total


def delete_archived_in(conn: sqlite3.Connection, where: str, params: Sequence[Any]) -> int:
    """Delete the archived messages `where` selects inside the caller's transaction (/forget,
    the purge), and their terms' counts; returns how many went. The caller then scrubs the
    indexes (`scrub_indexes_in`) and checkpoints the WAL (`Database.checkpoint`)."""
    cursor = conn.execute(
        f"DELETE FROM archived_messages WHERE {where} RETURNING chat_id, terms, indexed", params
    )
    deleted = cursor.fetchall()
    # Only an indexed row was counted (`index_pending_in`).
    _count_terms(conn, [(int(row[0]), str(row[1])) for row in deleted if row[2]], -1)
    return len(deleted)


def scrub_indexes_in(conn: sqlite3.Connection) -> None:
    """Rewrite the full-text indexes without what was deleted, inside the caller's transaction.

    An FTS5 delete only adds a tombstone: the deleted turn's terms (stems, trigrams) stay
    readable in the old index segments until a merge rewrites them. 'optimize' merges every
    segment into one, leaving the deleted terms out; the pages it frees are zeroed, because
    every connection sets secure_delete (memory/db.py). It rewrites the whole index, once per
    /forget or daily purge.
    """
    for table in ("archive_fts", "history_fts"):
        conn.execute(f"INSERT INTO {table}({table}) VALUES ('optimize')")


def _count_terms(conn: sqlite3.Connection, rows: Iterable[tuple[int, str]], sign: int) -> None:
    """Add (or take away) the rows (chat id, terms) to `archive_terms`: per chat, one per row
    holding a term, and one per row with terms under the empty term (the chat's searched
    turns). A count that reaches 0 is deleted (a forgotten chat's words leave no trace)."""
    counts: Counter[tuple[int, str]] = Counter()
    for chat_id, terms in rows:
        if terms:
            counts.update((chat_id, term) for term in {"", *terms.split()})
    conn.executemany(
        "INSERT INTO archive_terms(chat_id, term, docs) VALUES (?, ?, ?) "
        "ON CONFLICT(chat_id, term) DO UPDATE SET docs = docs + excluded.docs",
        [(chat_id, term, sign * n) for (chat_id, term), n in counts.items()],
    )
    if sign < 0:
        conn.executemany(
            "DELETE FROM archive_terms WHERE chat_id = ? AND term = ? AND docs <= 0", list(counts)
        )


async def purge_older_than(db: Database, cutoff: str) -> int:
    """Delete archived messages written before `cutoff` (ISO); returns how many went. Their
    words are then gone from the database file and its WAL too (see `scrub_indexes_in`)."""

    def purge(conn: sqlite3.Connection) -> int:
        removed = delete_archived_in(conn, "created_at < ?", (cutoff,))
        if removed:
            scrub_indexes_in(conn)
        return removed

    removed = await db.run_in_transaction(purge)
    if removed:
        await db.checkpoint()
    return removed


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

    def __init__(self, db: Database, days: float, clock: Clock[datetime]) -> None:
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
        await stop_task(self._task)  # _run logs each failed purge; it never raises
        self._task = None
