"""The reminder scheduler: sleeps until the next reminder falls due, then sends it.

No polling: it computes the next due time from the database (one indexed lookup) and waits
for that moment, or for `notify()` (a reminder made or cancelled, a send finished). While
10,000 reminders wait for next week it does nothing at all.

Each occurrence is claimed in a transaction before it is sent (`ReminderBook.claim_due`) and
marked with the message id after. A claim is sent again only when its last send is known not to
have landed (flood control, a refused connection): a send whose answer was lost after it may
have reached Telegram (a 502 or 504, a read timeout) is `Unknown`, recorded as such and never
sent again, because the Bot API has no idempotency key and no way to ask whether it landed, and
a retry then gives the chat the same reminder twice whenever the first did land (5 of 80 in a
held-out storm with one send in ten answered 502; 4 of 80 in benchmarks/reminders.py --storm).
What is left of "at least once" is the crash: a claim without an outcome at the next start is
sent again, so a reminder is not lost to a crash, at the price of a possible duplicate in that
window of one HTTP request.

How a message reaches the chat is the front end's business (`Deliver`); the scheduler only
knows outcomes: sent, the chat is gone (its reminders stop), retry later (nothing left), maybe
sent (unknown), or this one message can never be sent.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog

from memory.provenance import Provenance
from memory.store import Store, to_iso
from primitives.backoff import Backoff
from primitives.clock import Clock, utc_now
from primitives.tasks import stop_task, stop_tasks
from primitives.waits import wait_or_timeout
from reminders.book import REMINDER, Claim, ReminderBook

log = structlog.get_logger("reminders.scheduler")

# A send this much after its due time is marked late; so is one that fell due while the bot
# was not running.
LATE_AFTER = timedelta(seconds=60)
RETRY_DELAYS_S = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)
MAX_SLEEP_S = 300.0  # re-read the next due time at least this often (a changed system clock)
# The shortest wait when a look found something due but could start nothing (the book and the
# clock disagreeing, say): a pause, so that such a state costs a few looks a second instead of
# a loop that never yields.
IDLE_LOOK_S = 0.05


@dataclass(frozen=True)
class Delivered:
    message_id: int
    text: str  # what the chat now shows: stored in the session as the bot's message
    # Where it went when that is no longer the reminder's chat (the chat moved to a new id
    # on the way, memory/chat_move.py): the session message is stored there.
    chat_id: int | None = None
    # Stored with the session message: a task's answer says it is one, and, when words that
    # are not the user's reached its run, where from (held writes, the memory writer's stub).
    media: dict[str, object] | None = None
    provenance: Provenance | None = None
    # Written in the same transaction as the mark (a task run's final state).
    also: Callable[[sqlite3.Connection, str], None] | None = None


@dataclass(frozen=True)
class Stopped:
    reason: str  # e.g. "blocked", "chat_not_found", "not_allowed"


@dataclass(frozen=True)
class RetryLater:
    after_s: float | None = None  # None: the scheduler's own back-off


@dataclass(frozen=True)
class Failed:
    reason: str


@dataclass(frozen=True)
class Unknown:
    """The send may have reached the chat, its answer was lost (a 5xx, a read timeout)."""

    reason: str


@dataclass(frozen=True)
class Settled:
    """The occurrence is over and needs no message of the scheduler's (a task that had
    nothing to report, or was cancelled while it ran): its delivery row is closed as is."""

    outcome: str = "sent"  # the delivery row's outcome: 'sent' or 'stopped'


DeliveryOutcome = Delivered | Stopped | RetryLater | Failed | Unknown | Settled
Deliver = Callable[[Claim, bool], Awaitable[DeliveryOutcome]]
# How a pass waits: until the wake event is set or `timeout` seconds have passed. A parameter
# so that a test can see every wait the scheduler asks for and stand in for the time passing.
Wait = Callable[[asyncio.Event, float], Awaitable[None]]


async def wait_for_wake(wake: asyncio.Event, timeout: float) -> None:  # noqa: ASYNC109
    """The real wait: the wake event, or `timeout` seconds of the event loop's clock."""
    await wait_or_timeout(wake, timeout=timeout)


class ReminderScheduler:
    """One per bot process. `start()` resumes what a previous run left unfinished."""

    def __init__(
        self,
        book: ReminderBook,
        store: Store,
        deliver: Deliver,
        *,
        clock: Clock[datetime] = utc_now,
        concurrency: int = 64,
        late_after: timedelta = LATE_AFTER,
        retry_delays: tuple[float, ...] = RETRY_DELAYS_S,
        wait: Wait = wait_for_wake,
        kind: str = REMINDER,
    ) -> None:
        self.book = book
        # Which of the book's kinds this scheduler claims: reminders and tasks have one each,
        # so a task's model turn never holds a slot a ⏰ message is waiting for.
        self.kind = kind
        self.store = store
        self.deliver = deliver
        self.clock = clock
        self.concurrency = concurrency
        self.late_after = late_after
        self.backoff = Backoff(retry_delays)
        self.wait = wait
        self.started_at: datetime | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._sending: set[asyncio.Task[None]] = set()
        self._retries: list[tuple[datetime, int, Claim]] = []  # (when, attempts so far, claim)

    def notify(self) -> None:
        """Look again now: a reminder was made or cancelled."""
        self._wake.set()

    @property
    def in_flight(self) -> int:
        return len(self._sending)

    async def start(self) -> None:
        self.started_at = self.clock()
        book = self.book
        unfinished = await book.unfinished(self.kind)
        if unfinished:
            log.warning("reminders_resent_after_crash", count=len(unfinished))
        self._retries.extend((self.started_at, 0, claim) for claim in unfinished)
        self._task = asyncio.create_task(self._run(), name=f"{self.kind}-scheduler")

    def pause(self) -> None:
        """Claim nothing more (the bot is stopping); sends on their way go on. `stop` ends it."""
        if self._task is not None:
            self._task.cancel()  # pause is synchronous: `stop` waits for the loop to end

    async def stop(self, grace: float = 5.0) -> None:
        """Stop claiming; sends already on their way get `grace` seconds. One cut off keeps
        its claim without outcome and is sent after the next start."""
        await stop_task(self._task)
        self._task = None
        await stop_tasks(self._sending, grace=grace)

    async def _run(self) -> None:
        """Every pass ends in a wait that can block: for the wake event (a finished send, a
        `notify`) or for the next due moment. The bot has one event loop; a pass that could
        come round without blocking would freeze every chat, /healthz and the watchdog pings."""
        while True:
            self._wake.clear()
            try:
                started = await self._dispatch()
                timeout = await self._sleep_for()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("reminder_scheduler_error")
                started, timeout = 0, 5.0
            if timeout <= 0 and not started:
                timeout = IDLE_LOOK_S  # something is due, yet nothing could start: pause
            if timeout > 0:
                await self.wait(self._wake, timeout)

    async def _dispatch(self) -> int:
        """Start sends while there is room: retries that are due, then new claims. Returns how
        many started."""
        now = self.clock()
        free = self.concurrency - len(self._sending)
        ready = [r for r in self._retries if r[0] <= now][: max(free, 0)]
        for retry in ready:
            self._retries.remove(retry)
            self._send(retry[2], retry[1])
        free -= len(ready)
        started = len(ready)
        if free > 0:
            for claim in await self.book.claim_due(now, free, self.kind):
                self._send(claim, 0)
                started += 1
        return started

    async def _sleep_for(self) -> float:
        """Seconds to wait for a wake-up before looking again; 0 to look again at once.

        With every slot busy nothing can start, however much is due (a retry, a claim left by
        a crash), so the wait is for the wake-up a finished send gives, not for a due time:
        a due time already past would make the wait 0 and the loop would spin."""
        if len(self._sending) >= self.concurrency:
            return MAX_SLEEP_S
        now = self.clock()
        moments = [when for when, _, _ in self._retries]
        next_due = await self.book.next_due(self.kind)
        if next_due is not None:
            moments.append(next_due)
        if not moments:
            return MAX_SLEEP_S
        seconds = (min(moments) - now).total_seconds()
        return min(max(seconds, 0.0), MAX_SLEEP_S)

    def _send(self, claim: Claim, attempts: int) -> None:
        task = asyncio.create_task(self._deliver(claim, attempts))
        self._sending.add(task)
        task.add_done_callback(self._sent)

    def _sent(self, task: asyncio.Task[None]) -> None:
        self._sending.discard(task)
        self._wake.set()

    def is_late(self, claim: Claim, now: datetime) -> bool:
        fell_due_while_down = self.started_at is not None and claim.due_at < self.started_at
        return fell_due_while_down or now - claim.due_at > self.late_after

    async def _record_sent(self, claim: Claim, sent: Delivered, late: bool) -> None:
        """The mark and the message in the chat's session (so the model knows what it
        reminded), in ONE transaction: never one without the other."""
        store, now = self.store, to_iso(self.clock())

        def write(conn: sqlite3.Connection) -> int | None:
            self.book.mark_sent(conn, claim, sent.message_id, late=late, now=now)
            if sent.also is not None:
                sent.also(conn, now)
            chat_id = sent.chat_id if sent.chat_id is not None else claim.reminder.chat_id
            _, window_job = store._insert_message(
                conn, now, chat_id, "assistant", sent.text,
                None, None, None, None, None, None, sent.media, None, sent.provenance,
            )  # fmt: skip
            return window_job

        if await self.book.db.run_in_transaction(write) is not None:
            store._job_enqueued()  # the session outgrew the memory window

    async def _deliver(self, claim: Claim, attempts: int) -> None:
        """One attempt at one claim, in a task of its own: every log line of it (the send, a
        task's model turn and the tasks that starts) carries the chat and the reminder's or
        task's id from the context bound here, and a delivery that finds the chat moved
        rebinds `chat_id` for the rest of it."""
        ids = {"chat_id": claim.reminder.chat_id, f"{self.kind}_id": claim.reminder.id}
        with structlog.contextvars.bound_contextvars(**ids):
            await self._attempt(claim, attempts)

    async def _attempt(self, claim: Claim, attempts: int) -> None:
        if attempts and await self.book.drop_if_withdrawn(claim):
            log.info("reminder_retry_dropped", attempt=attempts + 1)
            return
        late = self.is_late(claim, self.clock())
        try:
            outcome = await self.deliver(claim, late)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("reminder_delivery_error")
            outcome = RetryLater()
        if isinstance(outcome, Delivered):
            await self._record_sent(claim, outcome, late)
            lateness_ms = round((self.clock() - claim.due_at).total_seconds() * 1000)
            log.info("reminder_sent", late=late, lateness_ms=lateness_ms)
        elif isinstance(outcome, Stopped):
            others = await self.book.stop_chat(claim, outcome.reason)
            log.warning("reminders_stopped", reason=outcome.reason, other_reminders=others)
        elif isinstance(outcome, Failed):
            await self.book.mark_failed(claim)
            log.error("reminder_not_sent", reason=outcome.reason)
        elif isinstance(outcome, Unknown):
            await self.book.mark_unknown(claim)
            log.warning("reminder_outcome_unknown", attempt=attempts + 1, reason=outcome.reason)
        elif isinstance(outcome, Settled):
            await self.book.settle(claim, outcome.outcome)
        else:
            delay = self.backoff.after(attempts + 1)
            if outcome.after_s is not None:
                # Telegram's own wait, but never below our first delay: a retry_after of 0 (a
                # proxy, a local Bot API server) would make the retry due at once, and a send
                # answered so every time would be resent in a loop, one request per pass.
                delay = max(outcome.after_s, self.backoff.first)
            log.warning("reminder_retry", attempt=attempts + 1, after_s=delay)
            self._retries.append((self.clock() + timedelta(seconds=delay), attempts + 1, claim))
