"""Pending reminders written straight into the database, for the tests and benchmarks that need
many of them due at a chosen time (a storm, a burst, a freeze) without asking the agent for each.

One INSERT for all of them, so a change to the reminders table is made here once, not in every
test and benchmark that seeds it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from datetime import UTC, datetime

from memory.store import to_iso

_INSERT = (
    "INSERT INTO reminders(chat_id, user_id, user_name, text, time_zone, zone_known, "
    "local_start, repeat, next_at, state, created_at, updated_at, kind) "
    "VALUES (?, ?, 'Ann', ?, 'UTC', 1, ?, 'none', ?, 'pending', ?, ?, ?)"
)


def add_pending(
    conn: sqlite3.Connection,
    reminders: Iterable[tuple[int, str, datetime]],
    *,
    kind: str = "reminder",
) -> None:
    """One-off reminders (or, `kind` "task", tasks) `(chat id, text, due)`, each of user Ann in
    a private chat (her user id is the chat id), in UTC, pending. Not committed: the caller's
    transaction holds them."""
    now = to_iso(datetime.now(UTC))
    rows = [
        (chat, chat, text, local_time(at), to_iso(at), now, now, kind)
        for chat, text, at in reminders
    ]
    conn.executemany(_INSERT, rows)


def local_time(at: datetime) -> str:
    """The reminder's wall-clock start as the table keeps it (UTC here: no zone, no offset)."""
    return at.replace(tzinfo=None).strftime("%Y-%m-%dT%H:%M:%S")
