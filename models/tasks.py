"""Stopping a background task of our own: cancel it and wait until it has really ended.

Lives in the lowest layer because every layer has such tasks (the loop watch in bot/, the
benchmarks' loop-lag watcher, the reminder scheduler) and each stopped them with the same lines.
Waiting matters: a task only cancelled may still be running its `finally` when the caller closes
what the task uses (the database, a socket).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel `task` (None: nothing to stop) and wait for it to end, its CancelledError
    swallowed; any other exception it ends with is raised here."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
