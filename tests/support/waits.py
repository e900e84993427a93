"""A test's own bound on something that must happen: a hang fails the test here, at once and
with its own line, instead of at the run's timeout (pytest-timeout) or never."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def within(awaitable: Awaitable[T], timeout: float) -> T:  # noqa: ASYNC109
    """`awaitable`'s result; TimeoutError (the test fails) past `timeout` seconds."""
    return await asyncio.wait_for(awaitable, timeout)  # the one test bound: raises on a hang
