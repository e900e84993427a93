"""A spy that counts how often a module's function is called, the real function still answering.

For tests that bound work rather than time (how many boundary checks a split may make): a count
is the same on every machine, where a duration is not.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


def count_calls(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> Callable[[], int]:
    """Replace `owner.name` (for the test's length) by a wrapper that counts its calls and
    passes each to the real one; returns a function that tells the count so far."""
    real = getattr(owner, name)
    calls = 0

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return lambda: calls
