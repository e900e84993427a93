"""The token bucket `GatewayPacer` (models/policy/pacing.py) paces a gateway with: requests per
second with a small burst.

A plain synchronous state machine driven by an injected clock, so tests can step time instead of
sleeping. It takes no lock of its own: whoever shares one between threads guards it.
"""

from __future__ import annotations

from primitives.clock import Clock


class TokenBucket:
    """Requests per second with a small burst: the gateway ceiling (`*_RPS`) and the pace
    learned from a provider's per-minute limits. Plain state: `GatewayPacer` decides who may
    take a token, so a crowd of waiters costs one timer, not one wake-up each per token.
    """

    def __init__(self, rate: float, burst: float, clock: Clock[float]) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be positive and burst at least 1")
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._tokens = burst
        self._updated = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._updated) * self.rate)
        self._updated = now

    @property
    def tokens(self) -> float:
        self._refill()
        return self._tokens

    def available_in(self) -> float:
        """Seconds until a token is there (0.0: now), without taking it."""
        self._refill()
        if self._tokens >= 1 - 1e-9:  # float slack: a wait of 1e-16 s would never end
            return 0.0
        return (1 - self._tokens) / self.rate

    def try_take(self) -> float:
        """0.0 when a token was taken; otherwise seconds until one will be there."""
        wait = self.available_in()
        if wait == 0.0:
            self._tokens -= 1
        return wait

    def retune(self, rate: float, burst: float) -> None:
        """New rate and burst (a provider told us its limit); tokens already saved stay."""
        self._refill()
        self.rate = rate
        self.burst = burst
        self._tokens = min(self._tokens, burst)
