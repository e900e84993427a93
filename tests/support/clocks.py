"""The one clock tests set by hand: monotonic seconds (a float) or aware UTC wall time,
whatever the code under test reads (primitives/clock.py `Clock[float]` or `Clock[datetime]`),
so no test waits for real time to pass."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar

T = TypeVar("T", float, datetime)

WALL_START = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


class SettableClock(Generic[T]):
    """Reads `now`; a test sets it, or moves it on with `advance(seconds)`."""

    def __init__(self, now: Any = WALL_START) -> None:
        self.now: T = now

    def __call__(self) -> T:
        return self.now

    def advance(self, seconds: float) -> None:
        if isinstance(self.now, datetime):
            self.now = self.now + timedelta(seconds=seconds)
        else:
            self.now = self.now + seconds
