"""A back-off schedule: how long to wait after the n-th failure in a row.

One indexing rule for every schedule (reminder sends, consolidation jobs, worker restarts, the
final message of a reply, provider retries, MCP server restarts): the first failure waits the
first delay, and past the end the last delay repeats. Counting failures from 1 everywhere is
what keeps the callers from drifting into `delays[n]` against `delays[n - 1]`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    delays: tuple[float, ...]

    def __init__(self, delays: Iterable[float]) -> None:
        values = tuple(float(delay) for delay in delays)
        if any(delay < 0 for delay in values):
            raise ValueError("back-off delays must not be negative")
        object.__setattr__(self, "delays", values)

    @classmethod
    def doubling(cls, first: float, cap: float) -> Backoff:
        """first, 2·first, 4·first … up to `cap`, which then repeats (restarts of a server)."""
        if first <= 0 or cap < first:
            raise ValueError("a doubling back-off needs 0 < first <= cap")
        delays = [first]
        while delays[-1] * 2 < cap:
            delays.append(delays[-1] * 2)
        return cls([*delays, cap] if delays[-1] < cap else delays)

    def after(self, failures: int) -> float:
        """Seconds to wait after `failures` failures in a row (1 or more)."""
        if failures < 1:
            raise ValueError("a back-off is asked after a failure: failures counts from 1")
        if not self.delays:
            raise ValueError("an empty back-off has no wait: its caller does not retry")
        return self.delays[min(failures, len(self.delays)) - 1]

    @property
    def first(self) -> float:
        """The wait after one failure (the floor under a wait a peer asks for)."""
        return self.after(1)

    def __len__(self) -> int:
        """How many steps: a caller that retries only so often (the provider transport, where
        an empty back-off means no retry) compares its count with this."""
        return len(self.delays)
