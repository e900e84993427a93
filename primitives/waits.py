"""Waiting for something to happen, or for a timeout: whichever comes first.

`asyncio.wait_for(event.wait(), t)` raises on the timeout and, given several things to wait
for, needs a task per event and their cancellation afterwards; every loop that sleeps until
woken wrote those lines again. Here they are once: a timeout is an answer (False), not an
error, and the waiters made for events are always cleaned up.
"""

from __future__ import annotations

import asyncio
from typing import Any

Waitable = asyncio.Event | asyncio.Future[Any]


def _ready(what: Waitable) -> bool:
    return what.is_set() if isinstance(what, asyncio.Event) else what.done()


async def wait_or_timeout(*waits: Waitable, timeout: float | None) -> bool:  # noqa: ASYNC109
    """True as soon as one of `waits` (events set, futures or tasks done) is ready; False when
    `timeout` seconds (None: no limit) pass first. The futures given are only watched, never
    cancelled; the caller's cancellation propagates."""
    if any(_ready(what) for what in waits):
        return True
    if timeout is not None and timeout <= 0:
        return False
    own = [asyncio.ensure_future(w.wait()) for w in waits if isinstance(w, asyncio.Event)]
    watched = [w for w in waits if not isinstance(w, asyncio.Event)]
    try:
        done, _ = await asyncio.wait(
            [*own, *watched], timeout=timeout, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        for waiter in own:
            waiter.cancel()  # our own event waiters: nothing else awaits them
    return bool(done)
