"""Load limits that keep one provider's trouble from becoming everyone's: token buckets per
gateway, circuit breakers per model and per gateway, and one global retry budget.

All three are plain synchronous state machines driven by an injected clock, so tests can step
time instead of sleeping, and the transport (single event loop) needs no locks.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum

Clock = Callable[[], float]


class TokenBucket:
    """Requests per second with a small burst, handed out first come, first served.

    `acquire(max_wait)` decides at once: if the caller's turn would come later than
    `max_wait`, it is refused and falls back to another model instead of queueing without
    bound behind a slow provider. Admitted callers wait in a FIFO queue served by a single
    dispatcher, so a crowd of waiters costs one timer, not one wake-up each per token. Tokens
    are taken right before sending: after an event-loop stall at most `burst` leave together.
    """

    def __init__(
        self,
        rate: float,
        burst: float,
        clock: Clock,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be positive and burst at least 1")
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._tokens = burst
        self._updated = clock()
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._dispatcher: asyncio.Task[None] | None = None

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._updated) * self.rate)
        self._updated = now

    @property
    def tokens(self) -> float:
        self._refill()
        return self._tokens

    @property
    def waiting(self) -> int:
        return sum(1 for w in self._waiters if not w.done())

    def try_take(self) -> float:
        """0.0 when a token was taken; otherwise seconds until one will be there."""
        self._refill()
        if self._tokens >= 1:
            self._tokens -= 1
            return 0.0
        return (1 - self._tokens) / self.rate

    async def acquire(self, max_wait: float) -> bool:
        """Take a token, waiting in line at most about `max_wait`; False means go elsewhere."""
        if not self.waiting and self.try_take() == 0.0:
            return True
        self._refill()
        eta = (self.waiting + 1 - self._tokens) / self.rate
        if eta > max_wait:
            return False
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        if self._dispatcher is None or self._dispatcher.done():
            self._dispatcher = asyncio.get_running_loop().create_task(self._dispatch())
        await waiter  # cancellation leaves a done future the dispatcher skips
        return True

    async def _dispatch(self) -> None:
        while self._waiters:
            waiter = self._waiters[0]
            if waiter.done():
                self._waiters.popleft()
                continue
            wait = self.try_take()
            if wait == 0.0:
                self._waiters.popleft()
                waiter.set_result(None)
                continue
            await self._sleep(wait)


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass
class BreakerChange:
    """Returned when a breaker changes state, so the caller can log it once."""

    name: str
    old: BreakerState
    new: BreakerState
    failures: int


class CircuitBreaker:
    """Open after `threshold` consecutive failures; one probe after `cooldown` seconds.

    While a probe is in flight everyone else is still refused; a probe that never reports
    (its caller was cancelled) is forgotten after another cool-down so the breaker cannot wedge.
    """

    def __init__(self, name: str, threshold: int, cooldown: float, clock: Clock) -> None:
        self.name = name
        self.threshold = threshold
        self.cooldown = cooldown
        self._clock = clock
        self.state = BreakerState.CLOSED
        self.failures = 0
        self._opened_at = 0.0
        self._probe_started: float | None = None

    def allow(self) -> tuple[bool, BreakerChange | None]:
        """May a request go now? Taking the half-open probe slot counts as a yes."""
        if self.state is BreakerState.CLOSED:
            return True, None
        now = self._clock()
        if self.state is BreakerState.OPEN:
            if now - self._opened_at < self.cooldown:
                return False, None
            change = self._move(BreakerState.HALF_OPEN)
            self._probe_started = now
            return True, change
        # HALF_OPEN: one probe at a time
        if self._probe_started is not None and now - self._probe_started < self.cooldown:
            return False, None
        self._probe_started = now
        return True, None

    def record_success(self) -> BreakerChange | None:
        self.failures = 0
        self._probe_started = None
        if self.state is not BreakerState.CLOSED:
            return self._move(BreakerState.CLOSED)
        return None

    def record_failure(self) -> BreakerChange | None:
        self.failures += 1
        if self.state is BreakerState.HALF_OPEN or (
            self.state is BreakerState.CLOSED and self.failures >= self.threshold
        ):
            self._opened_at = self._clock()
            self._probe_started = None
            return self._move(BreakerState.OPEN)
        return None

    def release_probe(self) -> None:
        """The probe ended without a verdict on the provider (e.g. a bad request)."""
        self._probe_started = None

    def remaining_open_s(self) -> float:
        if self.state is not BreakerState.OPEN:
            return 0.0
        return max(0.0, self.cooldown - (self._clock() - self._opened_at))

    def _move(self, new: BreakerState) -> BreakerChange:
        change = BreakerChange(self.name, self.state, new, self.failures)
        self.state = new
        return change


class RetryBudget:
    """A shared allowance of extra requests, refilled by successful traffic.

    Each success deposits `ratio` (0.2 = one retry per five successes), plus a slow trickle of
    `per_second` so a quiet bot recovers; each retry withdraws one. Under an outage the balance
    runs dry and requests get their first attempt and chain walk only, which bounds the load
    we add to a struggling provider to a fixed multiple of the load we were given.
    """

    def __init__(
        self, *, initial: float, cap: float, ratio: float, per_second: float, clock: Clock
    ) -> None:
        self.cap = cap
        self.ratio = ratio
        self.per_second = per_second
        self._clock = clock
        self._balance = min(initial, cap)
        self._updated = clock()
        self.denied = 0
        self.spent = 0

    def _trickle(self) -> None:
        now = self._clock()
        self._balance = min(self.cap, self._balance + (now - self._updated) * self.per_second)
        self._updated = now

    @property
    def balance(self) -> float:
        self._trickle()
        return self._balance

    def record_success(self) -> None:
        self._trickle()
        self._balance = min(self.cap, self._balance + self.ratio)

    def try_spend(self) -> bool:
        self._trickle()
        if self._balance >= 1:
            self._balance -= 1
            self.spent += 1
            return True
        self.denied += 1
        return False
