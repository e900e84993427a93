"""Reminders in the database: the chat's time zone, making, listing and cancelling reminders, and
the scheduler's claims (reminders/scheduler.py).

A reminder belongs to the chat that made it: every read and write here names the chat, so one
chat can neither see nor cancel another's. Each occurrence is claimed in ONE transaction that
writes a `reminder_deliveries` row and moves the reminder on (to its next occurrence after
now, so a repeating reminder missed several times while the bot was down is sent once, then
on time); the send's outcome is written after it. A claim without an outcome at start-up is
an occurrence that may or may not have reached the chat: it is sent again (at least once).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Required, TypedDict, Unpack

from memory.chats import set_chat_setting
from memory.db import Database
from memory.store import from_iso, to_iso
from memory.timezones import ChatZone, canonical_zone, chat_zone_of, zone
from primitives.clock import Clock, utc_now
from reminders import RemindersError
from reminders.rules import (
    REPEATS,
    WhenError,
    first_occurrence,
    format_local,
    latest_occurrence,
    next_occurrence,
    parse_local,
    parse_when,
)

MAX_PENDING_PER_CHAT = 50
MAX_TEXT_CHARS = 1000
DEFAULT_TASKS_PER_CHAT = 10  # TASKS_PER_CHAT
REMINDER = "reminder"
TASK = "task"
KINDS = (REMINDER, TASK)
PAUSED = "paused"  # a task's stop_reason after failed runs in a row; it can be resumed


@dataclass(frozen=True)
class Reminder:
    id: int
    chat_id: int
    user_id: int | None
    user_name: str | None
    text: str
    time_zone: str
    zone_known: bool
    local_start: datetime
    repeat: str
    next_at: datetime | None
    state: str
    # The forum topic it was set in (migration 0013); None: the chat itself.
    topic_id: int | None = None
    # "reminder": a message at its time; "task": a model turn at its time (migration 0019).
    kind: str = "reminder"
    # A task's failed runs in a row; three pause a repeating one (reminders/task_runs.py).
    failures: int = 0
    # Why it stopped (blocked, chat_not_found, not_allowed; "paused" for a task).
    stop_reason: str | None = None

    @property
    def is_task(self) -> bool:
        return self.kind == TASK

    @property
    def paused(self) -> bool:
        return self.state == "stopped" and self.stop_reason == PAUSED


@dataclass(frozen=True)
class Claim:
    """One occurrence to send: its delivery row, its reminder, the time it was due."""

    delivery_id: int
    reminder: Reminder
    due_at: datetime


@dataclass(frozen=True)
class ReminderStats:
    pending: int
    sent_today: int
    late_today: int
    stopped_reminders: int
    stopped_chats: int
    in_flight: int


class NewReminder(TypedDict, total=False):
    """What `schedule` takes besides the chat: `when` and `text` always."""

    when: Required[str]
    text: Required[str]
    repeat: str
    user_id: int | None
    user_name: str | None
    topic_id: int | None
    kind: str


class ScheduleRefusedError(RemindersError, ValueError):
    """A reminder that is not stored; str(self) tells the model what to do instead."""


def _refuse_past_cap(conn: sqlite3.Connection, chat_id: int, kind: str, tasks: int) -> None:
    """ScheduleRefusedError when the chat has as many of `kind` as it may: 50 pending reminders, or
    TASKS_PER_CHAT active tasks (paused ones count: a tap resumes them)."""
    if kind == TASK:
        (active,) = conn.execute(
            "SELECT COUNT(*) FROM reminders WHERE chat_id = ? AND kind = 'task' AND (state = "
            "'pending' OR (state = 'stopped' AND stop_reason = ?))",
            (chat_id, PAUSED),
        ).fetchone()
        if active >= tasks:
            raise ScheduleRefusedError(
                f"this chat already has {active} scheduled tasks, the limit; nothing was "
                "scheduled. Tell the user to cancel one (/reminders) first."
            )
        return
    (pending,) = conn.execute(
        "SELECT COUNT(*) FROM reminders WHERE chat_id = ? AND state = 'pending' "
        "AND kind = 'reminder'",
        (chat_id,),
    ).fetchone()
    if pending >= MAX_PENDING_PER_CHAT:
        raise ScheduleRefusedError(
            f"this chat already has {pending} pending reminders, the limit; nothing "
            "was scheduled. Tell the user to cancel some (/reminders) first."
        )


def reminder_of_row(row: sqlite3.Row) -> Reminder:
    return Reminder(
        id=int(row["id"]),
        chat_id=int(row["chat_id"]),
        user_id=row["user_id"],
        user_name=row["user_name"],
        text=row["text"],
        time_zone=row["time_zone"],
        zone_known=bool(row["zone_known"]),
        local_start=parse_local(row["local_start"]),
        repeat=row["repeat"],
        next_at=from_iso(row["next_at"]) if row["next_at"] else None,
        state=row["state"],
        topic_id=row["topic_id"],
        kind=row["kind"],
        failures=int(row["failures"]),
        stop_reason=row["stop_reason"],
    )


class ReminderBook:
    """The reminders of every chat in one database."""

    def __init__(
        self,
        db: Database,
        clock: Clock[datetime] = utc_now,
        *,
        on_change: Callable[[], None] | None = None,
        tasks_per_chat: int = DEFAULT_TASKS_PER_CHAT,
    ) -> None:
        self.db = db
        self.clock = clock
        # Told after a reminder was made or cancelled (the schedulers' wake-up).
        self.on_change = on_change
        self.tasks_per_chat = tasks_per_chat
        # Told the id of each reminder or task cancelled: a task's run under way stops.
        self.on_cancel: list[Callable[[int], None]] = []

    def changed(self) -> None:
        """Wake the schedulers: a reminder was made or cancelled (after that write's commit)."""
        if self.on_change is not None:
            self.on_change()

    def cancelled(self, reminder_id: int) -> None:
        """A task (or reminder) was cancelled, after that write's commit: a run under way stops."""
        for listener in self.on_cancel:
            listener(reminder_id)

    # time zone -------------------------------------------------------------------------------

    async def chat_zone(self, chat_id: int) -> ChatZone:
        row = await self.db.fetchone("SELECT time_zone FROM chats WHERE chat_id = ?", (chat_id,))
        return chat_zone_of(row["time_zone"] if row is not None else None)

    async def set_chat_zone(self, chat_id: int, name: str) -> str | None:
        """Set the chat's zone; returns its IANA name, or None (nothing changed) if unknown."""
        canonical = canonical_zone(name)
        if canonical is None:
            return None
        now = to_iso(self.clock())

        def write(conn: sqlite3.Connection) -> None:
            set_chat_setting(conn, chat_id, "time_zone", canonical, now)

        await self.db.run_in_transaction(write)
        return canonical

    # making, listing, cancelling ---------------------------------------------------------------

    async def schedule(self, chat_id: int, **fields: Unpack[NewReminder]) -> Reminder:
        """Store a reminder, sent back into `topic_id` (the forum topic it was set in) when it
        fires; ScheduleRefusedError (with what to do) for past times, more than a year ahead, an
        unknown rule, or the chat's 50 pending reminders."""
        reminder = await self.db.run_in_transaction(
            lambda conn: self.schedule_in(conn, chat_id, **fields)
        )
        self.changed()
        return reminder

    def schedule_in(
        self,
        conn: sqlite3.Connection,
        chat_id: int,
        *,
        when: str,
        text: str,
        repeat: str = "none",
        user_id: int | None = None,
        user_name: str | None = None,
        topic_id: int | None = None,
        kind: str = REMINDER,
    ) -> Reminder:
        """Store a reminder (or, `kind` "task", a task whose text is the instruction) inside
        the caller's transaction (a held write kept by its ✅ runs in the transaction that
        settles it); the caller calls `changed()` after the commit. Sent back into `topic_id`
        (the forum topic it was set in) when it fires; ScheduleRefusedError (with what to do) for
        past times, more than a year ahead, an unknown rule, or the chat's 50 pending
        reminders (TASKS_PER_CHAT active tasks)."""
        if kind not in KINDS:
            raise ValueError(kind)
        noun = "task" if kind == TASK else "text"
        if repeat not in REPEATS:
            raise ScheduleRefusedError(f"'repeat' must be one of {', '.join(REPEATS)}")
        cleaned = " ".join(text.split())
        if not cleaned:
            raise ScheduleRefusedError(
                f"'{noun}' is empty: say what to remind the user of"
                if kind == REMINDER
                else "'task' is empty: say what to do"
            )
        if len(cleaned) > MAX_TEXT_CHARS:
            raise ScheduleRefusedError(f"'{noun}' is over {MAX_TEXT_CHARS} characters; shorten it")
        row = conn.execute("SELECT time_zone FROM chats WHERE chat_id = ?", (chat_id,)).fetchone()
        chat_zone = chat_zone_of(row["time_zone"] if row is not None else None)
        tz = zone(chat_zone.name)
        now = self.clock()
        try:
            parsed = parse_when(when, tz, now)
        except WhenError as exc:
            raise ScheduleRefusedError(str(exc)) from None
        first = first_occurrence(parsed.local, tz, repeat)
        stamp = to_iso(now)
        _refuse_past_cap(conn, chat_id, kind, self.tasks_per_chat)
        stored = conn.execute(
            "INSERT INTO reminders(chat_id, user_id, user_name, text, time_zone, zone_known, "
            "local_start, repeat, next_at, state, created_at, updated_at, topic_id, kind) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?) RETURNING *",
            (
                chat_id, user_id, user_name, cleaned, chat_zone.name, int(chat_zone.known),
                format_local(parsed.local), repeat, to_iso(first), stamp, stamp, topic_id, kind,
            ),
        ).fetchone()  # fmt: skip
        return reminder_of_row(stored)

    async def get(self, chat_id: int, reminder_id: int) -> Reminder | None:
        row = await self.db.fetchone(
            "SELECT * FROM reminders WHERE id = ? AND chat_id = ?", (reminder_id, chat_id)
        )
        return reminder_of_row(row) if row is not None else None

    async def pending(self, chat_id: int) -> list[Reminder]:
        """The chat's pending reminders and tasks, next first, then its paused tasks (which
        /reminders lists too: they can be resumed or cancelled)."""
        rows = await self.db.fetchall(
            "SELECT * FROM reminders WHERE chat_id = ? AND (state = 'pending' OR (state = "
            "'stopped' AND stop_reason = ? AND kind = ?)) "
            "ORDER BY state = 'stopped', next_at, id",
            (chat_id, PAUSED, TASK),
        )
        return [reminder_of_row(r) for r in rows]

    def get_in(self, conn: sqlite3.Connection, chat_id: int, reminder_id: int) -> Reminder | None:
        row = conn.execute(
            "SELECT * FROM reminders WHERE id = ? AND chat_id = ?", (reminder_id, chat_id)
        ).fetchone()
        return reminder_of_row(row) if row is not None else None

    async def cancel(self, chat_id: int, reminder_id: int) -> Reminder | None:
        """Cancel one of THIS chat's pending reminders; None if it has no such reminder."""
        reminder = await self.db.run_in_transaction(
            lambda conn: self.cancel_in(conn, chat_id, reminder_id)
        )
        if reminder is not None:
            self.changed()
            self.cancelled(reminder.id)
        return reminder

    def cancel_in(
        self, conn: sqlite3.Connection, chat_id: int, reminder_id: int
    ) -> Reminder | None:
        """`cancel` inside the caller's transaction; the caller calls `changed()` after it
        (and `cancelled()` for a task, whose run under way stops).

        A one-off reminder is done once claimed, but until a send of it is known to have
        landed it still waits to be delivered (a send retried after a 5xx or a flood penalty):
        it can be cancelled too, and the retry then finds it withdrawn and sends nothing. So
        can a one-off task whose run is under way, and a paused task."""
        row: sqlite3.Row | None = conn.execute(
            "UPDATE reminders SET state = 'cancelled', updated_at = ? "
            "WHERE id = ? AND chat_id = ? AND (state = 'pending' OR (state = 'done' AND EXISTS "
            "(SELECT 1 FROM reminder_deliveries d WHERE d.reminder_id = reminders.id "
            "AND d.outcome IS NULL)) OR (state = 'stopped' AND stop_reason = ? AND kind = ?)) "
            "RETURNING *",
            (to_iso(self.clock()), reminder_id, chat_id, PAUSED, TASK),
        ).fetchone()
        return reminder_of_row(row) if row is not None else None

    # the scheduler's side ----------------------------------------------------------------------

    async def next_due(self, kind: str = REMINDER) -> datetime | None:
        row = await self.db.fetchone(
            "SELECT MIN(next_at) AS next_at FROM reminders WHERE state = 'pending' AND kind = ?",
            (kind,),
        )
        return from_iso(row["next_at"]) if row is not None and row["next_at"] else None

    async def claim_due(self, now: datetime, limit: int, kind: str = REMINDER) -> list[Claim]:
        """Claim up to `limit` occurrences of `kind` due by `now`, oldest first, in ONE
        transaction: each gets its delivery row and its reminder moves on to its first
        occurrence after `now` (a one-off one is done). Nothing is sent yet."""
        stamp = to_iso(now)

        def write(conn: sqlite3.Connection) -> list[Claim]:
            rows = conn.execute(
                "SELECT * FROM reminders WHERE state = 'pending' AND kind = ? AND next_at <= ? "
                "ORDER BY next_at, id LIMIT ?",
                (kind, stamp, limit),
            ).fetchall()
            claims = []
            for row in rows:
                reminder = reminder_of_row(row)
                assert reminder.next_at is not None
                due_at = reminder.next_at
                if kind == TASK:
                    # A task missed several times (the bot was down) runs once, for the
                    # latest of those times: how late it is decides whether it still runs.
                    latest = latest_occurrence(
                        reminder.local_start, zone(reminder.time_zone), reminder.repeat, now
                    )
                    due_at = max(due_at, latest) if latest is not None else due_at
                following = None
                if reminder.repeat != "none":
                    following = next_occurrence(
                        reminder.local_start, zone(reminder.time_zone), reminder.repeat, now
                    )
                conn.execute(
                    "UPDATE reminders SET next_at = ?, state = ?, updated_at = ? WHERE id = ?",
                    (
                        to_iso(following) if following else None,
                        "pending" if following else "done",
                        stamp,
                        reminder.id,
                    ),
                )
                delivered = conn.execute(
                    "INSERT INTO reminder_deliveries(reminder_id, chat_id, due_at, claimed_at) "
                    "VALUES (?, ?, ?, ?) ON CONFLICT(reminder_id, due_at) DO NOTHING "
                    "RETURNING id",
                    (reminder.id, reminder.chat_id, to_iso(due_at), stamp),
                ).fetchone()
                if delivered is not None:  # else: this occurrence was claimed before
                    claims.append(Claim(int(delivered["id"]), reminder, due_at))
            return claims

        return await self.db.run_in_transaction(write)

    async def unfinished(self, kind: str = REMINDER) -> list[Claim]:
        """Occurrences of `kind` claimed by an earlier run whose send has no outcome (a crash
        between claim and mark): the scheduler sends them again at start."""
        rows = await self.db.fetchall(
            "SELECT d.id AS delivery_id, d.due_at AS due_at, r.* FROM reminder_deliveries d "
            "JOIN reminders r ON r.id = d.reminder_id WHERE d.outcome IS NULL AND r.kind = ? "
            "ORDER BY d.id",
            (kind,),
        )
        return [
            Claim(int(r["delivery_id"]), reminder_of_row(r), from_iso(r["due_at"])) for r in rows
        ]

    async def drop_if_withdrawn(self, claim: Claim) -> bool:
        """Before a retry: if the reminder was cancelled (or its chat stopped) since this
        occurrence was claimed, close the claim without a send and say so. A claim waiting
        out a 5xx or a flood penalty otherwise went out minutes after the user's ❌."""
        now = to_iso(self.clock())

        def write(conn: sqlite3.Connection) -> bool:
            row = conn.execute(
                "SELECT state FROM reminders WHERE id = ?", (claim.reminder.id,)
            ).fetchone()
            if row is not None and row["state"] in ("pending", "done"):
                return False
            conn.execute(
                "UPDATE reminder_deliveries SET outcome = 'stopped', finished_at = ? "
                "WHERE id = ? AND outcome IS NULL",
                (now, claim.delivery_id),
            )
            return True

        return await self.db.run_in_transaction(write)

    @staticmethod
    def mark_sent(
        conn: sqlite3.Connection, claim: Claim, message_id: int, *, late: bool, now: str
    ) -> None:
        """Inside the caller's transaction (which also stores the message in the session)."""
        conn.execute(
            "UPDATE reminder_deliveries SET outcome = 'sent', message_id = ?, late = ?, "
            "finished_at = ? WHERE id = ?",
            (message_id, int(late), now, claim.delivery_id),
        )

    async def mark_failed(self, claim: Claim) -> None:
        """This occurrence could not be sent (a message Telegram refuses); the reminder stays."""
        await self._finish(claim, "failed")

    async def mark_unknown(self, claim: Claim) -> None:
        """This occurrence's send may have landed (its answer was lost): it is not sent again."""
        await self._finish(claim, "unknown")

    async def _finish(self, claim: Claim, outcome: str) -> None:
        now = to_iso(self.clock())
        await self.db.run_in_transaction(
            lambda conn: conn.execute(
                "UPDATE reminder_deliveries SET outcome = ?, finished_at = ? WHERE id = ?",
                (outcome, now, claim.delivery_id),
            )
        )

    async def settle(self, claim: Claim, outcome: str) -> None:
        """Close this occurrence's delivery row without a message of the scheduler's."""
        now = to_iso(self.clock())
        await self.db.run_in_transaction(
            lambda conn: conn.execute(
                "UPDATE reminder_deliveries SET outcome = ?, finished_at = ? "
                "WHERE id = ? AND outcome IS NULL",
                (outcome, now, claim.delivery_id),
            )
        )

    async def stop_chat(self, claim: Claim, reason: str) -> int:
        """The chat can no longer be written to (blocked the bot, deleted, the setter no longer
        allowed): this occurrence and every pending reminder of the chat stop. Returns how many
        reminders stopped besides this one."""
        now = to_iso(self.clock())
        chat_id = claim.reminder.chat_id

        def write(conn: sqlite3.Connection) -> int:
            conn.execute(
                "UPDATE reminder_deliveries SET outcome = 'stopped', finished_at = ? WHERE id = ?",
                (now, claim.delivery_id),
            )
            conn.execute(
                "UPDATE reminders SET state = 'stopped', stop_reason = ?, next_at = NULL, "
                "updated_at = ? WHERE id = ?",
                (reason, now, claim.reminder.id),
            )
            if reason == "not_allowed":  # only this setter's reminders
                cursor = conn.execute(
                    "UPDATE reminders SET state = 'stopped', stop_reason = ?, next_at = NULL, "
                    "updated_at = ? WHERE chat_id = ? AND user_id IS ? AND state = 'pending'",
                    (reason, now, chat_id, claim.reminder.user_id),
                )
            else:
                cursor = conn.execute(
                    "UPDATE reminders SET state = 'stopped', stop_reason = ?, next_at = NULL, "
                    "updated_at = ? WHERE chat_id = ? AND state = 'pending'",
                    (reason, now, chat_id),
                )
            return cursor.rowcount

        stopped = await self.db.run_in_transaction(write)
        self.changed()
        return stopped

    async def stats(self, now: datetime) -> ReminderStats:
        day_start = to_iso(now.replace(hour=0, minute=0, second=0, microsecond=0))
        day_end = to_iso(now.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(1))
        row = await self.db.fetchone(
            "SELECT "
            "(SELECT COUNT(*) FROM reminders WHERE state = 'pending' AND kind = 'reminder') "
            " AS pending, "
            "(SELECT COUNT(*) FROM reminders WHERE state = 'stopped' AND kind = 'reminder') "
            " AS stopped, "
            "(SELECT COUNT(DISTINCT chat_id) FROM reminders WHERE state = 'stopped' "
            " AND kind = 'reminder') AS chats, "
            "(SELECT COUNT(*) FROM reminder_deliveries WHERE outcome IS NULL) AS in_flight, "
            "(SELECT COUNT(*) FROM reminder_deliveries d JOIN reminders r ON r.id = "
            " d.reminder_id WHERE outcome = 'sent' AND r.kind = 'reminder' "
            " AND finished_at >= ? AND finished_at < ?) AS sent, "
            "(SELECT COUNT(*) FROM reminder_deliveries d JOIN reminders r ON r.id = "
            " d.reminder_id WHERE outcome = 'sent' AND late = 1 AND r.kind = 'reminder' "
            " AND finished_at >= ? AND finished_at < ?) AS late",
            (day_start, day_end, day_start, day_end),
        )
        assert row is not None
        return ReminderStats(
            pending=row["pending"],
            sent_today=row["sent"],
            late_today=row["late"],
            stopped_reminders=row["stopped"],
            stopped_chats=row["chats"],
            in_flight=row["in_flight"],
        )
