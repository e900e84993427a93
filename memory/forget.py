"""/forget: everything the bot keeps about what a chat said, gone in one transaction.

What goes: the long-term memory (including facts a chat tool wrote into it, and the
`memory_edits` log of those writes), every history entry, every consolidation job not yet
done (pending and running), the archive (the words of consolidated sessions, and their
counts in `archive_terms` as far as they came from this chat), the stored
messages of closed sessions not yet consolidated, the current session's messages, voice
notes waiting for a transcript (`media_inbox`), and writes waiting for a ✅ (`pending_writes`).
What stays: the chat's settings (model, language), the usage ledger (tokens and cost, no text) and
the web calls (usage rows of purpose `web`: who, which tool, when — what WEB_DAILY_CALLS counts).

Why it cannot come back:
- A running consolidation read messages that no longer exist and a memory version that no
  longer holds; with its job row deleted, its commit finds no claim and is refused
  (CommitResult.NOT_OURS), and no row is left to be retried or resumed after a restart.
- The memory row is kept empty with its version bumped (not deleted), so nothing that read an
  older version can pass the version guard.
- The active session is replaced by a fresh one and the old session rows are deleted, so a
  chat turn still writing its answer into its session is refused (SessionClosedError) instead
  of putting a piece of the forgotten conversation back.
- It is one transaction on the one connection: a /new (close + open + enqueue) runs entirely
  before or entirely after it, and either way ends up empty.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from memory.chats import ensure_chat
from memory.db import Database
from memory.longterm import write_memory
from memory.recall.archive import delete_archived_in, scrub_indexes_in


@dataclass(frozen=True)
class Forgotten:
    """What one /forget removed (for the log; the user gets one line)."""

    history_entries: int
    messages: int
    archived: int
    jobs: int
    new_session_id: int


async def forget_chat(db: Database, chat_id: int, now: str) -> Forgotten:
    """/forget, then the forgotten words scrubbed from the full-text indexes (in the same
    transaction) and from the WAL (after it): nothing of them is left readable in the
    database's files. Backups made before keep them until they age out."""

    def forget(conn: sqlite3.Connection) -> Forgotten:
        forgotten = forget_chat_in(conn, chat_id, now)
        scrub_indexes_in(conn)
        return forgotten

    forgotten = await db.run_in_transaction(forget)
    await db.checkpoint()
    return forgotten


def forget_chat_in(conn: sqlite3.Connection, chat_id: int, now: str) -> Forgotten:
    """The body of `forget_chat`, inside the caller's transaction."""
    ensure_chat(conn, chat_id, now)
    write_memory(conn, chat_id, "", over_budget=False, now=now)
    # Nothing is left to announce either.
    conn.execute(
        "UPDATE long_term_memory SET unreported_added = 0, unreported_removed = 0 "
        "WHERE chat_id = ?",
        (chat_id,),
    )
    history = _count(conn, "DELETE FROM history_entries WHERE chat_id = ? RETURNING id", chat_id)
    # Facts the chat tools wrote or removed, kept for a consolidation to replay: gone too.
    conn.execute("DELETE FROM memory_edits WHERE chat_id = ?", (chat_id,))
    # Voice notes waiting for (or failed at) transcription: file ids and captions are content.
    conn.execute("DELETE FROM media_inbox WHERE chat_id = ?", (chat_id,))
    # Writes waiting for a ✅: their facts are content, and a tap after /forget finds nothing.
    conn.execute("DELETE FROM pending_writes WHERE chat_id = ?", (chat_id,))
    jobs = _count(
        conn,
        "DELETE FROM consolidation_jobs WHERE chat_id = ? AND state != 'done' RETURNING id",
        chat_id,
    )
    messages = _count(conn, "DELETE FROM messages WHERE chat_id = ? RETURNING id", chat_id)
    archived = delete_archived_in(conn, "chat_id = ?", (chat_id,))
    conn.execute("DELETE FROM sessions WHERE chat_id = ?", (chat_id,))
    row = conn.execute(
        "INSERT INTO sessions(chat_id, opened_at) VALUES (?, ?) RETURNING id", (chat_id, now)
    ).fetchone()
    assert row is not None
    return Forgotten(history, messages, archived, jobs, int(row["id"]))


def _count(conn: sqlite3.Connection, sql: str, chat_id: int) -> int:
    return len(conn.execute(sql, (chat_id,)).fetchall())
