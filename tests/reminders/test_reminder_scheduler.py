"""The scheduler against a real database, with an injected clock and a recording `Deliver`
(the Telegram side has its own end-to-end tests): claims, late marking, the crash between send
and mark (at least once), stopped chats, retries, and the wake-up on a new reminder."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from memory.db import Database
from memory.store import Store
from primitives.clock import utc_now
from primitives.tasks import stop_task
from reminders.book import Claim, ReminderBook, ScheduleRefusedError
from reminders.scheduler import (
    RETRY_DELAYS_S,
    Deliver,
    Delivered,
    DeliveryOutcome,
    ReminderScheduler,
    RetryLater,
    Stopped,
)
from tests.support.clocks import SettableClock
from tests.support.waits import within

CHAT = 7
OTHER = 8


@dataclass
class Recorder:
    """A Deliver that records each attempt and answers from a script (then Delivered)."""

    script: list[DeliveryOutcome | None] = field(default_factory=list)
    attempts: list[tuple[int, datetime, bool]] = field(default_factory=list)
    sent: asyncio.Event = field(default_factory=asyncio.Event)
    hang_after_send: bool = False

    async def __call__(self, claim: Claim, late: bool) -> DeliveryOutcome:
        self.attempts.append((claim.reminder.id, claim.due_at, late))
        self.sent.set()
        if self.hang_after_send:
            await asyncio.Event().wait()  # sent, and the process "dies" before the mark
        outcome = self.script.pop(0) if self.script else None
        return outcome or Delivered(1000 + len(self.attempts), f"⏰ {claim.reminder.text}")


async def until(predicate: object, timeout: float = 10.0) -> None:  # noqa: ASYNC109
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():  # type: ignore[operator]
        if loop.time() > deadline:
            raise AssertionError("condition not met")
        await asyncio.sleep(0.01)


async def run_once(
    db: Database, book: ReminderBook, clock: SettableClock[datetime], recorder: Recorder
) -> None:
    """Start a scheduler, wait until it made its first attempt and has nothing in flight."""
    scheduler = ReminderScheduler(book, Store(db, clock), recorder, clock=clock)
    await scheduler.start()
    try:
        await until(lambda: recorder.attempts)
        await until(lambda: scheduler.in_flight == 0)
    finally:
        await scheduler.stop()


async def test_a_missed_daily_reminder_is_sent_once_late_then_moves_to_its_next_time(
    db: Database,
) -> None:
    clock = SettableClock(datetime(2026, 12, 1, 8, 0, tzinfo=UTC))
    book = ReminderBook(db, clock)
    await book.set_chat_zone(CHAT, "Europe/Lisbon")
    made = await book.schedule(CHAT, when="2026-12-01T09:00", text="stretch", repeat="daily")
    # The bot is down for three days and a half: four occurrences pass.
    clock.now = datetime(2026, 12, 4, 20, 0, tzinfo=UTC)
    recorder = Recorder()
    scheduler = ReminderScheduler(book, Store(db, clock), recorder, clock=clock)
    await scheduler.start()
    try:
        await until(lambda: recorder.attempts)
        await until(lambda: scheduler.in_flight == 0)
        assert recorder.attempts == [(made.id, datetime(2026, 12, 1, 9, 0, tzinfo=UTC), True)]
        [after] = await book.pending(CHAT)
        assert after.next_at == datetime(2026, 12, 5, 9, 0, tzinfo=UTC)
        rows = await db.fetchall("SELECT outcome, late, message_id FROM reminder_deliveries")
        assert [tuple(r) for r in rows] == [("sent", 1, 1001)]
        # The message joined the chat's session as the bot's.
        [stored] = await db.fetchall(
            "SELECT role, content FROM messages WHERE chat_id = ?", (CHAT,)
        )
        assert tuple(stored) == ("assistant", "⏰ stretch")
    finally:
        await scheduler.stop()
    assert len(recorder.attempts) == 1


async def test_a_crash_between_send_and_mark_sends_again_after_restart(db: Database) -> None:
    """At least once: the claim without an outcome is sent again by the next run, and marked
    then; the reminder itself was moved on by the claim, so nothing else repeats."""
    clock = SettableClock(datetime(2026, 12, 1, 8, 0, tzinfo=UTC))
    book = ReminderBook(db, clock)
    made = await book.schedule(CHAT, when="2026-12-01T08:00:30", text="pills")
    first = Recorder(hang_after_send=True)
    scheduler = ReminderScheduler(book, Store(db, clock), first, clock=clock)
    await scheduler.start()
    clock.now += timedelta(seconds=31)
    scheduler.notify()
    await within(first.sent.wait(), 10)
    await scheduler.stop(grace=0.05)  # the "crash": the send happened, the mark did not
    [open_claim] = await db.fetchall("SELECT outcome FROM reminder_deliveries")
    assert open_claim["outcome"] is None
    assert await book.pending(CHAT) == []  # one-off: claimed, nothing left to schedule

    clock.now += timedelta(minutes=5)
    second = Recorder()
    await run_once(db, book, clock, second)
    due = datetime(2026, 12, 1, 8, 0, 30, tzinfo=UTC)
    assert first.attempts == [(made.id, due, False)]
    assert second.attempts == [(made.id, due, True)]
    rows = await db.fetchall("SELECT outcome, message_id FROM reminder_deliveries")
    assert [tuple(r) for r in rows] == [("sent", 1001)]


async def test_a_blocked_chat_stops_its_reminders_and_no_one_elses(db: Database) -> None:
    clock = SettableClock(datetime(2026, 12, 1, 8, 0, tzinfo=UTC))
    book = ReminderBook(db, clock)
    await book.schedule(CHAT, when="2026-12-01T08:01", text="first")
    await book.schedule(CHAT, when="2026-12-02T08:01", text="later", repeat="weekly")
    await book.schedule(OTHER, when="2026-12-03T08:01", text="not blocked")
    clock.now += timedelta(minutes=2)
    await run_once(db, book, clock, Recorder(script=[Stopped("blocked")]))
    assert await book.pending(CHAT) == []
    assert [r.text for r in await book.pending(OTHER)] == ["not blocked"]
    states = await db.fetchall(
        "SELECT text, state, stop_reason FROM reminders WHERE chat_id = ? ORDER BY id", (CHAT,)
    )
    assert [tuple(r) for r in states] == [("first", "stopped", "blocked"),
                                          ("later", "stopped", "blocked")]  # fmt: skip
    stats = await book.stats(clock())
    assert (stats.stopped_reminders, stats.stopped_chats, stats.pending) == (2, 1, 1)


async def test_flood_control_and_server_errors_are_retried_until_sent(db: Database) -> None:
    clock = SettableClock(utc_now())
    book = ReminderBook(db, clock)
    await book.schedule(CHAT, when=(clock.now + timedelta(minutes=1)).isoformat(), text="x")
    clock.now += timedelta(minutes=2)
    recorder = Recorder(script=[RetryLater(0.0), RetryLater(None)])
    scheduler = ReminderScheduler(
        book, Store(db, clock), recorder, clock=clock, retry_delays=(0.0,)
    )
    await scheduler.start()
    try:
        await until(lambda: len(recorder.attempts) == 3 and scheduler.in_flight == 0)
    finally:
        await scheduler.stop()
    rows = await db.fetchall("SELECT outcome, message_id FROM reminder_deliveries")
    assert [tuple(r) for r in rows] == [("sent", 1003)]


async def test_cancelled_reminders_never_fire_and_refusals_explain(db: Database) -> None:
    clock = SettableClock(datetime(2026, 12, 1, 8, 0, tzinfo=UTC))
    book = ReminderBook(db, clock)
    made = await book.schedule(CHAT, when="2026-12-01T08:01", text="gone")
    assert await book.cancel(OTHER, made.id) is None  # another chat cannot
    assert (await book.cancel(CHAT, made.id)) is not None
    for n in range(50):
        await book.schedule(CHAT, when=f"2026-12-02T08:{n:02d}", text=f"r{n}")
    with pytest.raises(ScheduleRefusedError, match="50 pending reminders"):
        await book.schedule(CHAT, when="2026-12-03T08:00", text="one too many")
    clock.now += timedelta(minutes=2)
    assert await book.claim_due(clock(), 10) == []


async def test_a_retry_is_dropped_when_the_reminder_was_cancelled_meanwhile(
    db: Database,
) -> None:
    """A send that met a 5xx waits for its retry; the user cancels the (daily) reminder in
    that wait. The retry finds the cancellation and sends nothing; the claim is closed."""
    clock = SettableClock(datetime(2026, 12, 1, 8, 0, tzinfo=UTC))
    book = ReminderBook(db, clock)
    made = await book.schedule(CHAT, when="2026-12-01T08:01", text="stretch", repeat="daily")
    recorder = Recorder(script=[RetryLater(60.0)])
    scheduler = ReminderScheduler(book, Store(db, clock), recorder, clock=clock)
    await scheduler.start()
    try:
        clock.now += timedelta(minutes=2)
        scheduler.notify()
        await until(lambda: len(recorder.attempts) == 1 and scheduler.in_flight == 0)
        assert await book.cancel(CHAT, made.id) is not None
        clock.now += timedelta(seconds=61)  # the retry falls due
        scheduler.notify()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while (await db.fetchall(
            "SELECT 1 FROM reminder_deliveries WHERE outcome IS NOT NULL"
        )) == [] and not scheduler.in_flight:  # fmt: skip
            assert loop.time() < deadline, "the retry never ran"
            await asyncio.sleep(0.01)
        await until(lambda: scheduler.in_flight == 0)
    finally:
        await scheduler.stop()
    assert len(recorder.attempts) == 1
    rows = await db.fetchall("SELECT outcome, message_id FROM reminder_deliveries")
    assert [tuple(r) for r in rows] == [("stopped", None)]


class WatchedClock(SettableClock[datetime]):
    """A clock that notices a loop that never yields. A ticker task calls `tick()` whenever it
    gets a turn; a thousand reads of the clock with no tick between them mean its reader came
    round a thousand times without giving any other task a turn. The read then raises, which
    the scheduler logs and answers with a 5 s pause, so a spinning loop ends and the test can
    report it instead of hanging with it."""

    def __init__(self, now: datetime) -> None:
        super().__init__(now)
        self.reads_since_tick = 0
        self.spun = False

    def tick(self) -> None:
        self.reads_since_tick = 0

    def __call__(self) -> datetime:
        self.reads_since_tick += 1
        if self.reads_since_tick > 1000:
            self.spun, self.reads_since_tick = True, 0
            raise RuntimeError("the clock's reader came round 1000 times without yielding")
        return self.now


async def test_with_every_slot_busy_and_a_retry_due_the_loop_still_yields(db: Database) -> None:
    """Every send slot busy and a retry already due: the scheduler can start nothing, so it
    must wait for a finished send. Looking again at once, forever, would freeze the whole bot
    (no replies, no /healthz) until a restart, and at every start after a crash that left more
    claims than slots."""
    clock = WatchedClock(datetime(2026, 12, 1, 8, 0, tzinfo=UTC))
    book = ReminderBook(db, clock)
    for text in ("retried", "held 1", "held 2"):
        await book.schedule(CHAT, when="2026-12-01T08:00:30", text=text)
    clock.now += timedelta(minutes=1)
    release = asyncio.Event()
    attempts: list[str] = []

    async def deliver(claim: Claim, late: bool) -> DeliveryOutcome:
        attempts.append(claim.reminder.text)
        if attempts == ["retried"]:
            return RetryLater(60.0)  # flood control: try again in a minute
        if claim.reminder.text != "retried":
            await release.wait()  # a send that takes its time: the slot stays busy
        return Delivered(2000 + len(attempts), claim.reminder.text)

    async def ticker() -> None:
        while True:
            await asyncio.sleep(0.005)
            clock.tick()

    ticking = asyncio.create_task(ticker())
    scheduler = ReminderScheduler(book, Store(db, clock), deliver, clock=clock, concurrency=2)
    await scheduler.start()
    try:
        await until(lambda: attempts == ["retried", "held 1", "held 2"])
        assert scheduler.in_flight == 2  # full
        clock.now += timedelta(seconds=61)  # the retry falls due while both slots are busy
        scheduler.notify()
        for _ in range(20):  # the ticker's turns: the scheduler's passes must let them come
            await asyncio.sleep(0.005)
        assert not clock.spun
        assert attempts == ["retried", "held 1", "held 2"]  # nothing could start
        release.set()  # the slots free up: the retry goes out then
        await until(lambda: len(attempts) == 4 and scheduler.in_flight == 0)
        assert attempts[3] == "retried"
    finally:
        await stop_task(ticking)
        await scheduler.stop()
    assert not clock.spun
    rows = await db.fetchall("SELECT outcome FROM reminder_deliveries ORDER BY id")
    assert [r["outcome"] for r in rows] == ["sent", "sent", "sent"]


@dataclass
class VirtualTime:
    """Stands in for the scheduler's wait (its `wait` parameter): records every wait the
    scheduler asks for and lets the time pass at once. A wait that a send in flight will end
    waits for that send; any other moves the clock forward by its timeout and returns, the way
    the real wait returns when its time is up. Once the next moment would pass `until`, the
    wait is for the wake event only (a `notify`, the stop) and `idle` is set: every pass the
    scheduler made up to then is in `waits`, and no real second went by."""

    clock: SettableClock[datetime]
    until: datetime
    waits: list[float] = field(default_factory=list)
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    scheduler: ReminderScheduler | None = None

    async def __call__(self, wake: asyncio.Event, timeout: float) -> None:  # noqa: ASYNC109
        assert self.scheduler is not None
        self.waits.append(timeout)
        if wake.is_set():
            return
        if self.scheduler.in_flight:
            await within(wake.wait(), 10)  # the send's end wakes it
            return
        if self.clock.now + timedelta(seconds=timeout) > self.until:
            self.idle.set()
            await wake.wait()
            self.idle.clear()
            return
        self.clock.now += timedelta(seconds=timeout)


def virtual_scheduler(
    db: Database,
    book: ReminderBook,
    clock: SettableClock[datetime],
    deliver: Deliver,
    *,
    until: datetime,
    concurrency: int = 64,
    retry_delays: tuple[float, ...] = RETRY_DELAYS_S,
) -> tuple[ReminderScheduler, VirtualTime]:
    """A scheduler whose waits pass in virtual time (see VirtualTime) up to `until`."""
    wait = VirtualTime(clock, until)
    scheduler = ReminderScheduler(
        book,
        Store(db, clock),
        deliver,
        clock=clock,
        concurrency=concurrency,
        retry_delays=retry_delays,
        wait=wait,
    )
    wait.scheduler = scheduler
    return scheduler, wait


async def test_it_wakes_only_for_a_due_time_or_a_notify(db: Database) -> None:
    """No polling: with one reminder 1,000 s ahead the scheduler's passes are its longest
    wait (300 s, a changed system clock is noticed) and then exactly the rest up to the due
    time; a new reminder wakes it through `notify`, and it then waits exactly until that one
    is due. Each is sent at its due time to the second, never early."""
    start = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
    clock = SettableClock(start)
    book = ReminderBook(db, clock)
    first = await book.schedule(CHAT, when="2026-12-01T08:16:40", text="first")
    recorder = Recorder()
    scheduler, time = virtual_scheduler(
        db, book, clock, recorder, until=start + timedelta(seconds=1500)
    )
    book.on_change = scheduler.notify
    await scheduler.start()
    try:
        await within(time.idle.wait(), 10)
        # 300 + 300 + 300 + 100 s: the due time. Then one wait the send's end cuts short,
        # and the longest waits up to the test's horizon (08:21:40, then 08:26:40 > 08:25).
        assert time.waits == [300.0, 300.0, 300.0, 100.0, 300.0, 300.0, 300.0]
        assert clock.now == datetime(2026, 12, 1, 8, 21, 40, tzinfo=UTC)
        assert recorder.attempts == [(first.id, datetime(2026, 12, 1, 8, 16, 40, tzinfo=UTC),
                                      False)]  # fmt: skip
        [sent] = await db.fetchall("SELECT finished_at FROM reminder_deliveries")
        assert sent["finished_at"] == "2026-12-01T08:16:40.000Z"  # at its due time

        time.until = start + timedelta(hours=1)
        waits_before = len(time.waits)
        second = await book.schedule(CHAT, when="2026-12-01T08:22:30", text="second")
        await until(lambda: len(recorder.attempts) == 2)
        await within(time.idle.wait(), 10)
        # The notify ended the idle wait; the next is exactly the 50 s to the new due time,
        # then the send's end and the longest waits up to 08:57:30 (+300 s > 09:00).
        assert time.waits[waits_before:] == [50.0] + [300.0] * 9
        assert clock.now == datetime(2026, 12, 1, 8, 57, 30, tzinfo=UTC)
        assert recorder.attempts[1] == (second.id, datetime(2026, 12, 1, 8, 22, 30, tzinfo=UTC),
                                        False)  # fmt: skip
    finally:
        await scheduler.stop()


@dataclass
class StampedScript:
    """A Deliver that answers from a script (then Delivered) and records the clock at each
    attempt."""

    clock: SettableClock[datetime]
    script: list[DeliveryOutcome]
    at: list[datetime] = field(default_factory=list)

    async def __call__(self, claim: Claim, late: bool) -> DeliveryOutcome:
        self.at.append(self.clock())
        if self.script:
            return self.script.pop(0)
        return Delivered(3000 + len(self.at), claim.reminder.text)


async def retried_at(db: Database, script: list[DeliveryOutcome]) -> list[float]:
    """Seconds after the due time of each attempt at one reminder, with back-off 1, 2, 5 s."""
    due = datetime(2026, 12, 1, 8, 0, 30, tzinfo=UTC)
    clock = SettableClock(due - timedelta(seconds=30))
    book = ReminderBook(db, clock)
    await book.schedule(CHAT, when="2026-12-01T08:00:30", text="stand up")
    deliver = StampedScript(clock, script)
    scheduler, time = virtual_scheduler(
        db, book, clock, deliver, until=due + timedelta(minutes=10), retry_delays=(1.0, 2.0, 5.0)
    )
    await scheduler.start()
    try:
        await within(time.idle.wait(), 10)
    finally:
        await scheduler.stop()
    [row] = await db.fetchall("SELECT outcome FROM reminder_deliveries")
    assert row["outcome"] == "sent"
    return [(at - due).total_seconds() for at in deliver.at]


async def test_the_back_off_grows_with_each_failed_attempt(db: Database) -> None:
    """A server error (no retry_after) three times: tried again 1, then 2, then 5 s later."""
    assert await retried_at(db, [RetryLater(None)] * 3) == [0.0, 1.0, 3.0, 8.0]


async def test_past_the_last_step_the_back_off_repeats_it(db: Database) -> None:
    """Five server errors with a 1, 2, 5 s back-off: the fourth and fifth wait 5 s again."""
    assert await retried_at(db, [RetryLater(None)] * 5) == [0.0, 1.0, 3.0, 8.0, 13.0, 18.0]


async def test_a_retry_after_from_flood_control_is_honoured(db: Database) -> None:
    """Flood control says 42 s: the next attempt is 42 s later, not the back-off's 1 s; the
    server error after it takes the back-off's second step (2 s)."""
    assert await retried_at(db, [RetryLater(42.0), RetryLater(None)]) == [0.0, 42.0, 44.0]


async def test_a_reminder_that_fell_due_seconds_before_the_start_is_sent_once_late(
    db: Database,
) -> None:
    """Due 10 s before the bot started: within the 60 s of "on time", but it fell due while
    the bot was down, so it is marked late (the user must know it is not fresh) — and sent
    once, also after an hour of the scheduler running."""
    clock = SettableClock(datetime(2026, 12, 1, 8, 0, tzinfo=UTC))
    book = ReminderBook(db, clock)
    made = await book.schedule(CHAT, when="2026-12-01T08:01:00", text="pills")
    clock.now = datetime(2026, 12, 1, 8, 1, 10, tzinfo=UTC)  # the start, 10 s after
    recorder = Recorder()
    scheduler, time = virtual_scheduler(
        db, book, clock, recorder, until=clock.now + timedelta(hours=1)
    )
    await scheduler.start()
    try:
        await within(time.idle.wait(), 10)
    finally:
        await scheduler.stop()
    assert recorder.attempts == [(made.id, datetime(2026, 12, 1, 8, 1, tzinfo=UTC), True)]
    rows = await db.fetchall("SELECT outcome, late FROM reminder_deliveries")
    assert [tuple(r) for r in rows] == [("sent", 1)]


async def test_no_more_sends_at_once_than_the_concurrency(db: Database) -> None:
    """Five reminders due at once and two send slots: two go out, and each finished send lets
    the next one start, never a third beside them; meanwhile the scheduler just waits."""
    clock = SettableClock(datetime(2026, 12, 1, 8, 0, tzinfo=UTC))
    book = ReminderBook(db, clock)
    for n in range(5):
        await book.schedule(CHAT + n, when="2026-12-01T08:00:30", text=f"r{n}")
    clock.now += timedelta(minutes=1)
    gate = asyncio.Semaphore(0)
    attempts: list[str] = []
    active = most = 0

    async def deliver(claim: Claim, late: bool) -> DeliveryOutcome:
        nonlocal active, most
        attempts.append(claim.reminder.text)
        active += 1
        most = max(most, active)
        try:
            await gate.acquire()  # the send takes its time: its slot stays busy
        finally:
            active -= 1
        return Delivered(4000 + len(attempts), claim.reminder.text)

    scheduler, time = virtual_scheduler(
        db, book, clock, deliver, until=clock.now + timedelta(hours=1), concurrency=2
    )
    await scheduler.start()
    try:
        for n in range(5):
            await until(lambda n=n: len(attempts) > n)  # the n-th send is on its way
            gate.release()
        await until(lambda: len(attempts) == 5 and scheduler.in_flight == 0)
    finally:
        await scheduler.stop()
    assert most == 2
    assert sorted(attempts) == ["r0", "r1", "r2", "r3", "r4"]
    # With both slots busy and more due, every wait was for a finished send (the longest
    # wait, which the send's end cuts short), never a look again soon: that spun the loop.
    assert time.waits and set(time.waits) == {300.0}
