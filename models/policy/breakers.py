"""What keeps one provider's trouble from becoming everyone's: circuit breakers per model and
per gateway stop sending to what keeps failing, and one global retry budget bounds the extra
load our retries add to a provider that struggles.

Both are plain synchronous state machines driven by an injected clock, so tests can step time
instead of sleeping; the transport uses them from its one event loop, so they need no locks.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from primitives.clock import Clock


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

    def __init__(self, name: str, threshold: int, cooldown: float, clock: Clock[float]) -> None:
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
        self, *, initial: float, cap: float, ratio: float, per_second: float, clock: Clock[float]
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
