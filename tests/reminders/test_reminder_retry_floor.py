"""A flood-control answer that says "retry after 0 s" (a proxy, a local Bot API server) is not
taken at its word: the reminder waits at least the scheduler's first retry delay, so a chat
that always answers so is not sent the same reminder once per pass, forever."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from memory.db import Database
from memory.store import Store
from reminders.book import Claim, ReminderBook
from reminders.scheduler import Delivered, DeliveryOutcome, ReminderScheduler, RetryLater
from tests.support.clocks import SettableClock
from tests.support.waits import within

CHAT = 7


async def test_a_retry_after_of_zero_waits_the_first_retry_delay(db: Database) -> None:
    clock = SettableClock(datetime(2026, 12, 1, 8, 0, tzinfo=UTC))
    book = ReminderBook(db, clock)
    await book.schedule(CHAT, when="2026-12-01T08:00:30", text="water the plants")
    clock.now += timedelta(minutes=1)
    attempts: list[datetime] = []
    resent = asyncio.Event()

    async def deliver(claim: Claim, late: bool) -> DeliveryOutcome:
        attempts.append(clock.now)
        if len(attempts) == 1:
            return RetryLater(0.0)
        resent.set()
        return Delivered(900, claim.reminder.text)

    passes = 0
    looked = asyncio.Event()

    async def wait(wake: asyncio.Event, timeout: float) -> None:  # noqa: ASYNC109
        """Look again at once, as often as the scheduler likes: the clock alone decides what
        is due, so extra looks must not send anything early."""
        nonlocal passes
        passes += 1
        if passes >= 20:
            looked.set()
        await asyncio.sleep(0)

    scheduler = ReminderScheduler(
        book, Store(db, clock), deliver, clock=clock, retry_delays=(2.0, 5.0), wait=wait
    )
    await scheduler.start()
    try:
        await within(looked.wait(), 10)
        assert len(attempts) == 1  # twenty looks at the same moment: not resent
        clock.now += timedelta(seconds=2)
        await within(resent.wait(), 10)
    finally:
        await scheduler.stop()  # lets the send on its way record its outcome
    assert attempts[1] - attempts[0] == timedelta(seconds=2)
    rows = await db.fetchall("SELECT outcome, message_id FROM reminder_deliveries")
    assert [tuple(r) for r in rows] == [("sent", 900)]
