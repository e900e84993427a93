"""The provider worker pool the tests share: one per event loop.

A pool starts a worker process whose litellm import costs seconds of CPU, so the tests of one
session (one loop: pyproject's asyncio loop scopes) share one instead of starting one each.
A test that grows, kills on purpose or reconfigures workers builds a pool of its own
(tests/models/test_worker.py), so the shared one stays as the defaults make it: one worker at most.
A bot built by `build_application` without `workers=` builds and stops its own, as the real
process does.
"""

from __future__ import annotations

import asyncio
import weakref

from models.worker.pool import WorkerPool

_POOLS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, WorkerPool] = (
    weakref.WeakKeyDictionary()
)


def shared_workers() -> WorkerPool:
    """The running loop's shared pool (built on first use)."""
    loop = asyncio.get_running_loop()
    pool = _POOLS.get(loop)
    if pool is None:
        pool = _POOLS[loop] = WorkerPool()
    return pool


async def close_shared_workers() -> None:
    """Stop the running loop's shared pool, if it was used (the session's end)."""
    pool = _POOLS.pop(asyncio.get_running_loop(), None)
    if pool is not None:
        await pool.aclose()
