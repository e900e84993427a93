"""Stopping background tasks of our own: give them a grace period to end by themselves, then
cancel what is left and wait until it has really ended.

Waiting matters: a task only cancelled may still be running its `finally` when the caller closes
what the task uses (the database, a socket). The grace matters for work worth finishing (a send
on its way, a consolidation): it ends well instead of being cut. A bound on the wait after the
cancel (`patience`) is for tasks that may hold on to a cancellation (a reply storing what it
showed): the caller goes on after it, the task ends when it ends.

The caller's own cancellation is never swallowed here: only the stopped tasks' is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any


async def stop_tasks(
    tasks: Iterable[asyncio.Future[Any]],
    *,
    grace: float = 0.0,
    patience: float | None = None,
    reason: str | None = None,
) -> set[asyncio.Future[Any]]:
    """Wait up to `grace` seconds for `tasks` to end, cancel those still running (`reason`: the
    message their CancelledError carries), and wait for them to end (at most `patience`
    seconds, None: as long as it takes). Returns the tasks that had to be cancelled. The tasks'
    own outcomes are left to whoever handles them."""
    running = {task for task in tasks if not task.done()}
    if running and grace > 0:
        _, running = await asyncio.wait(running, timeout=grace)
    for task in running:
        task.cancel(reason)
    if running:
        await asyncio.wait(running, timeout=patience)
    return running


async def stop_task(
    task: asyncio.Future[Any] | None,
    *,
    grace: float = 0.0,
    patience: float | None = None,
    reason: str | None = None,
) -> None:
    """`stop_tasks` for one task (None: nothing to stop). Once it has ended, an exception it
    ended with (other than its cancellation) is raised here, so a background loop that broke
    does not go unnoticed at its stop."""
    if task is None:
        return
    await stop_tasks([task], grace=grace, patience=patience, reason=reason)
    error = task.exception() if task.done() and not task.cancelled() else None
    if error is not None:
        raise error
