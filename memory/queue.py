"""Putting consolidation jobs on the durable queue, inside the caller's transaction.

The store calls these from the transactions that close a session or grow one past the memory
window, so the job exists exactly when the change that needs it does. They only insert rows;
`memory/consolidation/jobs.py` builds the queue on them, `memory/consolidation/worker.py` the
worker that drains it. Kept apart so the store (which the worker reads) never imports the
worker: the imports point one way, worker → jobs → store → queue.

They are synchronous (plain sqlite3) so that they can run inside the body of a
`Database.run_in_transaction` on the writer's thread.
"""

from __future__ import annotations

import sqlite3


def enqueue_consolidation(
    conn: sqlite3.Connection,
    chat_id: int,
    session_id: int,
    now: str,
    *,
    kind: str = "session_closed",
    upto_message_id: int | None = None,
) -> int | None:
    """Queue consolidation of a session's messages; None if it has nothing to consolidate."""
    row = conn.execute(
        "SELECT EXISTS(SELECT 1 FROM messages WHERE session_id = ? "
        "AND (? IS NULL OR id <= ?)) AS has",
        (session_id, upto_message_id, upto_message_id),
    ).fetchone()
    if row is None or not row["has"]:
        return None
    cursor = conn.execute(
        "INSERT INTO consolidation_jobs(chat_id, session_id, kind, upto_message_id, "
        "next_attempt_at, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (chat_id, session_id, kind, upto_message_id, now, now, now),
    )
    return cursor.lastrowid


def maybe_enqueue_window(
    conn: sqlite3.Connection,
    chat_id: int,
    session_id: int,
    now: str,
    *,
    window: int,
    keep_recent: int,
) -> int | None:
    """Automatic consolidation: past `window` messages, queue all but the last `keep_recent`.

    At most one window job per session is open at a time; the next one is queued when the
    session passes the window again after that job removed its messages.
    """
    count = int(
        conn.execute(
            "SELECT COUNT(*) AS n FROM messages WHERE session_id = ?", (session_id,)
        ).fetchone()["n"]
    )
    if count <= window:
        return None
    open_job = conn.execute(
        "SELECT 1 FROM consolidation_jobs WHERE session_id = ? AND kind = 'window' "
        "AND state != 'done' LIMIT 1",
        (session_id,),
    ).fetchone()
    if open_job is not None:
        return None
    last = conn.execute(
        "SELECT id FROM messages WHERE session_id = ? ORDER BY id LIMIT 1 OFFSET ?",
        (session_id, count - keep_recent - 1),
    ).fetchone()
    if last is None:
        return None
    upto = int(last["id"])
    # Never split a tool call from its results: a kept tail starting with a tool result would
    # be refused by the providers. Take the results along.
    for row in conn.execute(
        "SELECT id, role FROM messages WHERE session_id = ? AND id > ? ORDER BY id",
        (session_id, upto),
    ).fetchall():
        if row["role"] != "tool":
            break
        upto = int(row["id"])
    return enqueue_consolidation(
        conn, chat_id, session_id, now, kind="window", upto_message_id=upto
    )
