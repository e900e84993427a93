"""Where each run of a scheduled task stands, so that a crash at any point resumes it without
a second answer, and what failed runs do to their task.

A task's occurrence is claimed like a reminder's (reminders/book.py: a delivery row, the task
moved on to its next time, in one transaction). Its run then goes through `task_runs`, one row
per delivery row: running → answered (the answer stored) → sending (the message that carries
it exists) → a final state written together with the delivery row's outcome. A run found
'running' after a crash is run again (nothing reached the chat); one found 'answered' is sent;
one found 'sending' is completed by editing its message, which Telegram answers "message is
not modified" when the edit had been made: the answer appears once.

Failures count in a row per task: three pause a repeating task (state 'stopped', stop_reason
'paused', listed by /reminders with a resume button), and any good run starts the count again.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timedelta

from memory.db import Database
from memory.store import to_iso
from memory.timezones import zone
from primitives.clock import Clock
from reminders.book import PAUSED, Claim, Reminder, ReminderBook, reminder_of_row
from reminders.rules import next_occurrence

# Failed runs in a row that pause a repeating task.
PAUSE_AFTER_FAILURES = 3
FINAL_STATES = frozenset(
    {"delivered", "nothing", "skipped_late", "skipped_budget", "failed", "cancelled", "stopped"}
)


@dataclass(frozen=True)
class TaskRun:
    delivery_id: int
    task_id: int
    state: str
    answer: str | None
    untrusted: bool
    held: tuple[int, ...]
    message_id: int | None
    reason: str | None


@dataclass(frozen=True)
class FailureCount:
    """A failed run's effect on its task: failures in a row, and whether it is paused now."""

    failures: int
    paused: bool


@dataclass(frozen=True)
class TaskStats:
    """/stats: tasks waiting, paused, and today's runs by how they ended (UTC day)."""

    scheduled: int
    paused: int
    ran_today: int
    skipped_today: int
    failed_today: int


def _run(row: sqlite3.Row) -> TaskRun:
    return TaskRun(
        delivery_id=int(row["delivery_id"]),
        task_id=int(row["task_id"]),
        state=str(row["state"]),
        answer=row["answer"],
        untrusted=bool(row["untrusted"]),
        held=tuple(json.loads(row["held"])) if row["held"] else (),
        message_id=row["message_id"],
        reason=row["reason"],
    )


def finish_in(
    conn: sqlite3.Connection,
    delivery_id: int,
    state: str,
    now: str,
    *,
    message_id: int | None = None,
    reason: str | None = None,
) -> None:
    """Write a run's final state inside the caller's transaction (the one that marks its
    delivery row). A good run starts its task's failure count again."""
    assert state in FINAL_STATES, state
    row = conn.execute(
        "UPDATE task_runs SET state = ?, finished_at = ?, message_id = COALESCE(?, message_id), "
        "reason = COALESCE(?, reason) WHERE delivery_id = ? RETURNING task_id",
        (state, now, message_id, reason, delivery_id),
    ).fetchone()
    if row is not None and state in ("delivered", "nothing"):
        conn.execute("UPDATE reminders SET failures = 0 WHERE id = ?", (row["task_id"],))


class TaskRuns:
    """The runs of every chat's tasks in one database."""

    def __init__(self, book: ReminderBook, clock: Clock[datetime] | None = None) -> None:
        self.book = book
        self.db: Database = book.db
        self.clock = clock or book.clock

    async def get(self, delivery_id: int) -> TaskRun | None:
        row = await self.db.fetchone(
            "SELECT * FROM task_runs WHERE delivery_id = ?", (delivery_id,)
        )
        return _run(row) if row is not None else None

    async def begin(self, claim: Claim) -> TaskRun:
        """The run of this occurrence: a new one ('running'), or the one a crash left."""
        now = to_iso(self.clock())
        task = claim.reminder

        def write(conn: sqlite3.Connection) -> TaskRun:
            conn.execute(
                "INSERT INTO task_runs(delivery_id, task_id, chat_id, user_id, state, started_at) "
                "VALUES (?, ?, ?, ?, 'running', ?) ON CONFLICT(delivery_id) DO NOTHING",
                (claim.delivery_id, task.id, task.chat_id, task.user_id, now),
            )
            row = conn.execute(
                "SELECT * FROM task_runs WHERE delivery_id = ?", (claim.delivery_id,)
            ).fetchone()
            return _run(row)

        return await self.db.run_in_transaction(write)

    async def answered(
        self,
        delivery_id: int,
        answer: str,
        *,
        untrusted: bool,
        held: list[int],
        cost_usd: float,
    ) -> None:
        """The model's answer, kept before anything is sent: a crash from here on sends it,
        never runs the model again."""
        await self.db.run_in_transaction(
            lambda conn: conn.execute(
                "UPDATE task_runs SET state = 'answered', answer = ?, untrusted = ?, held = ?, "
                "cost_usd = ? WHERE delivery_id = ? AND state = 'running'",
                (answer, int(untrusted), json.dumps(held), cost_usd, delivery_id),
            )
        )

    async def sending(self, delivery_id: int, message_id: int) -> None:
        """The message that carries the answer exists: from here on it is only edited."""
        await self.db.run_in_transaction(
            lambda conn: conn.execute(
                "UPDATE task_runs SET state = 'sending', message_id = ? "
                "WHERE delivery_id = ? AND state = 'answered'",
                (message_id, delivery_id),
            )
        )

    async def message_lost(self, delivery_id: int) -> None:
        """The answer's message is gone before the answer reached it: back to 'answered'."""
        await self.db.run_in_transaction(
            lambda conn: conn.execute(
                "UPDATE task_runs SET state = 'answered', message_id = NULL "
                "WHERE delivery_id = ? AND state = 'sending'",
                (delivery_id,),
            )
        )

    async def finish(
        self, delivery_id: int, state: str, *, reason: str | None = None, cost_usd: float = 0.0
    ) -> None:
        now = to_iso(self.clock())

        def write(conn: sqlite3.Connection) -> None:
            if cost_usd:
                conn.execute(
                    "UPDATE task_runs SET cost_usd = cost_usd + ? WHERE delivery_id = ?",
                    (cost_usd, delivery_id),
                )
            finish_in(conn, delivery_id, state, now, reason=reason)

        await self.db.run_in_transaction(write)

    async def failed(self, claim: Claim, reason: str, *, cost_usd: float = 0.0) -> FailureCount:
        """A run that failed after its retries, in ONE transaction: its state, the task's
        count of failures in a row, and a repeating task paused at PAUSE_AFTER_FAILURES. A
        crash after this and before the line reaches the chat sends the line again, without
        counting twice (the run is no longer 'running')."""
        now = to_iso(self.clock())
        task = claim.reminder

        def write(conn: sqlite3.Connection) -> FailureCount:
            changed = conn.execute(
                "UPDATE task_runs SET state = 'failed', reason = ?, finished_at = ?, "
                "cost_usd = cost_usd + ? WHERE delivery_id = ? AND state = 'running'",
                (reason[:500], now, cost_usd, claim.delivery_id),
            ).rowcount
            row = conn.execute(
                "UPDATE reminders SET failures = failures + ? WHERE id = ? "
                "RETURNING failures, repeat, state",
                (1 if changed else 0, task.id),
            ).fetchone()
            failures = int(row["failures"]) if row is not None else 0
            pause = (
                row is not None
                and row["repeat"] != "none"
                and row["state"] == "pending"
                and failures >= PAUSE_AFTER_FAILURES
            )
            if pause:
                conn.execute(
                    "UPDATE reminders SET state = 'stopped', stop_reason = ?, next_at = NULL, "
                    "updated_at = ? WHERE id = ?",
                    (PAUSED, now, task.id),
                )
            return FailureCount(failures, pause)

        counted = await self.db.run_in_transaction(write)
        if counted.paused:
            self.book.changed()
        return counted

    async def resume(self, chat_id: int, task_id: int) -> Reminder | None:
        """A paused task of THIS chat runs again from its next time; None if it is not paused."""
        now = self.clock()
        stamp = to_iso(now)

        def write(conn: sqlite3.Connection) -> Reminder | None:
            row = conn.execute(
                "SELECT * FROM reminders WHERE id = ? AND chat_id = ? AND kind = 'task' "
                "AND state = 'stopped' AND stop_reason = ?",
                (task_id, chat_id, PAUSED),
            ).fetchone()
            if row is None:
                return None
            task = reminder_of_row(row)
            following = next_occurrence(task.local_start, zone(task.time_zone), task.repeat, now)
            if following is None:
                return None
            updated = conn.execute(
                "UPDATE reminders SET state = 'pending', stop_reason = NULL, next_at = ?, "
                "failures = 0, updated_at = ? WHERE id = ? RETURNING *",
                (to_iso(following), stamp, task_id),
            ).fetchone()
            return reminder_of_row(updated)

        resumed = await self.db.run_in_transaction(write)
        if resumed is not None:
            self.book.changed()
        return resumed

    async def active_count(self, chat_id: int) -> int:
        """The chat's tasks that will still run (pending or paused): /forget names them."""
        row = await self.db.fetchone(
            "SELECT COUNT(*) AS n FROM reminders WHERE chat_id = ? AND kind = 'task' AND "
            "(state = 'pending' OR (state = 'stopped' AND stop_reason = ?))",
            (chat_id, PAUSED),
        )
        return int(row["n"]) if row is not None else 0

    async def stats(self, now: datetime) -> TaskStats:
        day = now.replace(hour=0, minute=0, second=0, microsecond=0)
        since, until = to_iso(day), to_iso(day + timedelta(days=1))
        row = await self.db.fetchone(
            "SELECT "
            "(SELECT COUNT(*) FROM reminders WHERE kind = 'task' AND state = 'pending') AS sched, "
            "(SELECT COUNT(*) FROM reminders WHERE kind = 'task' AND state = 'stopped' "
            " AND stop_reason = ?) AS paused, "
            "(SELECT COUNT(*) FROM task_runs WHERE state IN ('delivered', 'nothing') "
            " AND finished_at >= ? AND finished_at < ?) AS ran, "
            "(SELECT COUNT(*) FROM task_runs WHERE state IN ('skipped_late', 'skipped_budget') "
            " AND finished_at >= ? AND finished_at < ?) AS skipped, "
            "(SELECT COUNT(*) FROM task_runs WHERE state = 'failed' "
            " AND finished_at >= ? AND finished_at < ?) AS failed",
            (PAUSED, since, until, since, until, since, until),
        )
        assert row is not None
        return TaskStats(
            scheduled=int(row["sched"]),
            paused=int(row["paused"]),
            ran_today=int(row["ran"]),
            skipped_today=int(row["skipped"]),
            failed_today=int(row["failed"]),
        )
