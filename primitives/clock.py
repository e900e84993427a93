"""The clock, as a parameter: what a part of the bot reads the time from.

A `Clock[float]` is monotonic seconds (pacing, breakers, cool-downs: only differences count);
a `Clock[datetime]` is aware UTC wall time (what is stored, due times, days and months). Both
are plain callables, so a test passes a settable one and no test waits for real time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TypeVar

T = TypeVar("T")
Clock = Callable[[], T]

monotonic: Clock[float] = time.monotonic


def utc_now() -> datetime:
    """Aware UTC now: the default wall clock."""
    return datetime.now(UTC)
