"""A reminder send whose outcome is unknown is never repeated, and a one-off reminder whose send
waits for its retry can still be cancelled (the scheduler against a real database, with an
injected clock and a recording `Deliver`; tests/e2e/test_e2e_reminders.py has the Telegram side)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from telegram.error import NetworkError, TimedOut

from bot.handlers.reminders import never_left
from memory.db import Database
from memory.store import Store
from reminders.book import ReminderBook
from reminders.scheduler import ReminderScheduler, RetryLater, Unknown
from tests.reminders.test_reminder_scheduler import CHAT, Recorder, until
from tests.support.clocks import SettableClock


@asynccontextmanager
async def fallen_due(
    db: Database, clock: SettableClock[datetime], recorder: Recorder, text: str
) -> AsyncIterator[tuple[ReminderScheduler, ReminderBook, int]]:
    """A one-off reminder for 08:01, the clock moved past it, the scheduler woken; stopped
    when the block ends. Yields the scheduler, the book and the reminder's id."""
    book = ReminderBook(db, clock)
    made = await book.schedule(CHAT, when="2026-12-01T08:01", text=text)
    scheduler = ReminderScheduler(book, Store(db, clock), recorder, clock=clock)
    await scheduler.start()
    try:
        clock.now += timedelta(minutes=2)
        scheduler.notify()
        yield scheduler, book, made.id
    finally:
        await scheduler.stop()


async def outcomes(db: Database) -> list[str | None]:
    rows = await db.fetchall("SELECT outcome FROM reminder_deliveries ORDER BY id")
    return [r["outcome"] for r in rows]


async def test_a_send_that_may_have_landed_is_not_sent_again(db: Database) -> None:
    """Telegram answered 502 (it may have delivered the message): the claim is closed as
    unknown and no retry is planned, however long the scheduler runs; the reminder is done."""
    clock = SettableClock(datetime(2026, 12, 1, 8, 0, tzinfo=UTC))
    recorder = Recorder(script=[Unknown("Bad Gateway")])
    async with fallen_due(db, clock, recorder, "take the pill") as (scheduler, book, _):
        await until(lambda: len(recorder.attempts) == 1 and scheduler.in_flight == 0)
        await until(lambda: not scheduler._retries)
        assert await outcomes(db) == ["unknown"]
        clock.now += timedelta(hours=1)  # past every back-off step
        scheduler.notify()
        assert await scheduler._sleep_for() > 0  # nothing due: it waits, it does not resend
    assert len(recorder.attempts) == 1
    # Nor is it sent after a restart: only a claim without any outcome is.
    assert await book.unfinished() == []


async def test_cancelling_a_one_off_whose_send_waits_for_its_retry_stops_the_retry(
    db: Database,
) -> None:
    """A one-off reminder's first send met flood control; while its retry waits the user
    cancels it. The cancel is accepted (the reminder was not delivered yet) and the retry sends
    nothing."""
    clock = SettableClock(datetime(2026, 12, 1, 8, 0, tzinfo=UTC))
    recorder = Recorder(script=[RetryLater(60.0)])
    async with fallen_due(db, clock, recorder, "call the plumber") as (scheduler, book, made):
        await until(lambda: len(recorder.attempts) == 1 and scheduler._retries)
        cancelled = await book.cancel(CHAT, made)
        assert cancelled is not None and cancelled.state == "cancelled"
        clock.now += timedelta(seconds=61)  # the retry falls due
        scheduler.notify()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while await outcomes(db) == [None]:
            assert loop.time() < deadline, "the retry never ran"
            await asyncio.sleep(0.01)
        await until(lambda: scheduler.in_flight == 0)
    assert len(recorder.attempts) == 1
    assert await outcomes(db) == ["stopped"]


async def test_a_one_off_already_delivered_cannot_be_cancelled(db: Database) -> None:
    clock = SettableClock(datetime(2026, 12, 1, 8, 0, tzinfo=UTC))
    recorder = Recorder()
    async with fallen_due(db, clock, recorder, "water the plants") as (scheduler, book, made):
        await until(lambda: len(recorder.attempts) == 1 and scheduler.in_flight == 0)
    assert await outcomes(db) == ["sent"]
    assert await book.cancel(CHAT, made) is None


def _caused_by(error: NetworkError, cause: BaseException) -> NetworkError:
    error.__cause__ = cause
    return error


@pytest.mark.parametrize(
    ("error", "never_sent"),
    [
        (_caused_by(NetworkError("httpx.ConnectError: refused"), httpx.ConnectError("x")), True),
        (_caused_by(TimedOut("connect"), httpx.ConnectTimeout("x")), True),
        (_caused_by(TimedOut("Pool timeout"), httpx.PoolTimeout("x")), True),
        (NetworkError("Bad Gateway"), False),  # an HTTP 502: Telegram may have delivered it
        (_caused_by(TimedOut("read"), httpx.ReadTimeout("x")), False),
        (_caused_by(NetworkError("cut"), httpx.RemoteProtocolError("x")), False),
    ],
)
def test_only_a_send_that_never_left_is_safe_to_repeat(
    error: NetworkError, never_sent: bool
) -> None:
    assert never_left(error) is never_sent
