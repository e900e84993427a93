"""Key rotation per gateway with per-key cool-downs.

Keys are known to the rest of the system only by their position (0, 1, ...): positions are what
logs, attempts and /stats show, so a key value never leaves this module and the HTTP call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

Clock = Callable[[], float]


@dataclass
class KeyState:
    index: int
    cool_until: float = 0.0
    reason: str = ""  # why it is cooling: "rate_limit", "quota", "auth"
    failures: int = 0
    uses: int = 0


class KeyRing:
    """Round-robin over a gateway's keys, skipping those cooling down."""

    def __init__(self, gateway: str, keys: Sequence[str], clock: Clock) -> None:
        self.gateway = gateway
        self._keys = tuple(keys)
        self._clock = clock
        self.states = [KeyState(i) for i in range(len(self._keys))]
        self._next = 0

    def __len__(self) -> int:
        return len(self._keys)

    def pick(self, exclude: set[int] | frozenset[int] = frozenset()) -> tuple[int, str] | None:
        """The next usable key as (position, value), or None when all are cooling down."""
        now = self._clock()
        for offset in range(len(self._keys)):
            index = (self._next + offset) % len(self._keys)
            state = self.states[index]
            if index in exclude or state.cool_until > now:
                continue
            self._next = (index + 1) % len(self._keys)
            state.uses += 1
            return index, self._keys[index]
        return None

    def cool(self, index: int, seconds: float, reason: str) -> bool:
        """Rest a key; True when it was usable before (so the caller logs the change once)."""
        state = self.states[index]
        now = self._clock()
        was_usable = state.cool_until <= now
        state.cool_until = max(state.cool_until, now + max(0.0, seconds))
        state.reason = reason
        state.failures += 1
        return was_usable

    def rest_until(self, index: int, moment: float) -> None:
        """Set when a cooling key is usable again (shortening or lengthening its rest)."""
        self.states[index].cool_until = moment

    def record_success(self, index: int) -> None:
        self.states[index].failures = 0

    def soonest_available_s(self) -> float:
        """Seconds until some key is usable again (0 when one is usable now)."""
        if not self._keys:
            return float("inf")
        now = self._clock()
        return max(0.0, min(s.cool_until for s in self.states) - now)

    def status(self) -> list[dict[str, object]]:
        now = self._clock()
        return [
            {
                "position": s.index,
                "available": s.cool_until <= now,
                "cooling_s": round(max(0.0, s.cool_until - now), 1),
                "reason": s.reason if s.cool_until > now else "",
                "uses": s.uses,
            }
            for s in self.states
        ]
