"""Moving everything a chat has to another chat id, in ONE transaction.

A front end may learn that a chat now lives under another id (Telegram gives a group a new id
when it becomes a supergroup). The chat's settings, sessions and messages, memory, history,
archive, consolidation queue, reminders, deliveries and spend then follow it, so in its new
home the chat remembers what it remembered and its reminders still fire. Nothing here knows
why the id changed.

Idempotent: the front end may hear of the same move several times (two service messages, each
possibly delivered twice, a failed send): a move finds nothing left under the old id and
changes nothing. When the new id already has rows of its own (the chat was used there before
the move was heard of), both are kept; where only one value can stay:
- a setting (model, language, time zone) set under the new id wins, the old one fills a gap;
- the memories are joined: the old memory's lines, then those of the new one not already in it
  (the version moves past both, so a consolidation that read either runs again);
- the new id's open session stays open; the old open session is closed and queued for
  consolidation, as /new would, so its words reach the memory and stay in the archive.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from memory.chats import CHAT_SETTINGS
from memory.db import Database
from memory.queue import enqueue_consolidation

# Every table with a chat_id column besides `chats` and `long_term_memory` (whose chat_id is
# the primary key, merged below) and `sessions` (open sessions merged below). A test compares
# this list with the schema, so a table added later cannot be forgotten here.
MOVED_TABLES = (
    "sessions",
    "messages",
    "usage",
    "history_entries",
    "consolidation_jobs",
    "consolidation_attempts",
    "memory_edits",
    "media_inbox",
    "turn_keys",
    "archived_messages",
    "reminders",
    "reminder_deliveries",
    "task_runs",
    "pending_writes",
)
# Tables keyed by (chat_id, something) whose counts are added together on a merge.
MERGED_COUNTS = ("archive_terms",)


@dataclass(frozen=True)
class ChatMove:
    """What a move did: rows moved per table (none: nothing was left under the old id)."""

    old_chat_id: int
    new_chat_id: int
    moved: dict[str, int]
    merged: bool  # the new id already had rows of its own
    closed_session_id: int | None  # the old open session closed because the new id had one

    @property
    def anything(self) -> bool:
        return any(self.moved.values())


def _has_rows(conn: sqlite3.Connection, chat_id: int) -> bool:
    probes = ("chats", "long_term_memory", *MOVED_TABLES)
    return any(
        conn.execute(f"SELECT 1 FROM {table} WHERE chat_id = ? LIMIT 1", (chat_id,)).fetchone()
        for table in probes
    )


def _move_chat_row(conn: sqlite3.Connection, old: int, new: int) -> int:
    """The chats row: created under the new id from the old one, or the new one's gaps filled."""
    keep = ", ".join(f"{c} = COALESCE(chats.{c}, excluded.{c})" for c in CHAT_SETTINGS)
    columns = ", ".join(CHAT_SETTINGS)
    cursor = conn.execute(
        f"INSERT INTO chats(chat_id, {columns}, created_at, updated_at) "
        f"SELECT ?, {columns}, created_at, updated_at FROM chats WHERE chat_id = ? "
        f"ON CONFLICT(chat_id) DO UPDATE SET {keep}, "
        "created_at = MIN(chats.created_at, excluded.created_at), "
        "updated_at = MAX(chats.updated_at, excluded.updated_at)",
        (new, old),
    )
    return cursor.rowcount


def _joined(old: str, new: str) -> str:
    """The old memory, then the lines of the new one it does not hold yet."""
    held = {line.strip() for line in old.splitlines() if line.strip()}
    extra = [line for line in new.splitlines() if line.strip() and line.strip() not in held]
    return "\n".join([old.rstrip("\n"), *extra]) if extra else old


def _move_memory(conn: sqlite3.Connection, old: int, new: int, now: str) -> int:
    row_old = conn.execute("SELECT * FROM long_term_memory WHERE chat_id = ?", (old,)).fetchone()
    if row_old is None:
        return 0
    row_new = conn.execute("SELECT * FROM long_term_memory WHERE chat_id = ?", (new,)).fetchone()
    if row_new is None:
        # Version kept: a consolidation that read the old memory still commits here.
        conn.execute("UPDATE long_term_memory SET chat_id = ? WHERE chat_id = ?", (new, old))
        return 1
    content = _joined(row_old["content"], row_new["content"])
    conn.execute(
        "UPDATE long_term_memory SET content = ?, version = ?, over_budget = ?, "
        "unreported_added = unreported_added + ?, unreported_removed = unreported_removed + ?, "
        "updated_at = ? WHERE chat_id = ?",
        (
            content,
            max(row_old["version"], row_new["version"]) + 1,
            int(bool(row_old["over_budget"] or row_new["over_budget"])),
            row_old["unreported_added"],
            row_old["unreported_removed"],
            now,
            new,
        ),
    )
    # Edits a consolidation of the old memory would replay: it runs again instead (their
    # versions would also collide with the new id's).
    conn.execute("DELETE FROM memory_edits WHERE chat_id = ?", (old,))
    conn.execute("DELETE FROM long_term_memory WHERE chat_id = ?", (old,))
    return 1


def _merge_term_counts(conn: sqlite3.Connection, old: int, new: int) -> int:
    """The old chat's archive term counts added to the new one's: its archived turns move with
    it (and are indexed again under the new id by the archive's triggers)."""
    cursor = conn.execute(
        "INSERT INTO archive_terms(chat_id, term, docs) "
        "SELECT ?, term, docs FROM archive_terms WHERE chat_id = ? "
        "ON CONFLICT(chat_id, term) DO UPDATE SET docs = docs + excluded.docs",
        (new, old),
    )
    conn.execute("DELETE FROM archive_terms WHERE chat_id = ?", (old,))
    return cursor.rowcount


def _close_second_open_session(
    conn: sqlite3.Connection, old: int, new: int, now: str
) -> int | None:
    """Only one session per chat may be open: the new id's stays, the old one is closed and
    queued for consolidation (its messages are kept until a consolidation commits them)."""
    if (
        conn.execute(
            "SELECT 1 FROM sessions WHERE chat_id = ? AND closed_at IS NULL", (new,)
        ).fetchone()
        is None
    ):
        return None
    row = conn.execute(
        "UPDATE sessions SET closed_at = ? WHERE chat_id = ? AND closed_at IS NULL RETURNING id",
        (now, old),
    ).fetchone()
    return int(row["id"]) if row is not None else None


def move_chat_rows(conn: sqlite3.Connection, old: int, new: int, now: str) -> ChatMove:
    """The move, inside the caller's transaction (see the module docstring)."""
    if old == new or not _has_rows(conn, old):
        return ChatMove(old, new, {}, merged=False, closed_session_id=None)
    merged = _has_rows(conn, new)
    moved = {"chats": _move_chat_row(conn, old, new)}
    closed = _close_second_open_session(conn, old, new, now)
    moved["long_term_memory"] = _move_memory(conn, old, new, now)
    moved["archive_terms"] = _merge_term_counts(conn, old, new)
    for table in MOVED_TABLES:
        cursor = conn.execute(f"UPDATE {table} SET chat_id = ? WHERE chat_id = ?", (new, old))
        moved[table] = cursor.rowcount
    conn.execute("DELETE FROM chats WHERE chat_id = ?", (old,))
    if closed is not None:
        enqueue_consolidation(conn, new, closed, now)
    return ChatMove(old, new, moved, merged=merged, closed_session_id=closed)


async def move_chat(db: Database, old_chat_id: int, new_chat_id: int, now: str) -> ChatMove:
    """Move everything of `old_chat_id` to `new_chat_id` in ONE transaction."""
    return await db.run_in_transaction(
        lambda conn: move_chat_rows(conn, old_chat_id, new_chat_id, now)
    )
