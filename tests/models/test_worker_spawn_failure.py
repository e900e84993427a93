"""A provider worker that cannot even be spawned (out of file descriptors, EMFILE; out of
memory) is lost like one that died at once: its slot is reused and the next start waits the
restart back-off. Marked lost by itself, it would never be replaced: every call would append
one more dead worker and try another spawn, without bound, for as long as the fault lasted.

The operating system is the only stand-in: `Popen` raises the error the kernel gives."""

from __future__ import annotations

import errno
import time
from typing import Any

import pytest

from models.worker import process
from models.worker.ipc import WorkerLostError
from models.worker.pool import WorkerPool
from models.worker.settings import WorkerSettings


@pytest.mark.parametrize("max_workers", [1, 2])  # 2: spare sockets are made as well
async def test_a_worker_that_cannot_spawn_is_replaced_in_its_slot_with_back_off(
    monkeypatch: pytest.MonkeyPatch, max_workers: int
) -> None:
    spawns = 0

    def out_of_descriptors(*args: Any, **kwargs: Any) -> Any:
        nonlocal spawns
        spawns += 1
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(process.subprocess, "Popen", out_of_descriptors)
    pool = WorkerPool(WorkerSettings(max_workers=max_workers))
    try:
        for _ in range(3):
            with pytest.raises((WorkerLostError, OSError)):
                await pool.wait_ready()  # what a call does first: pick (start) a worker
        # One slot, re-used: not one more dead worker per call.
        assert [(w["number"], w["restarts"]) for w in pool.status()] == [(1, 3)]
        assert spawns == 3
        assert pool.restarts == 3
        # Three deaths in a row at start: the next start waits its back-off.
        assert pool._next_start > time.monotonic()
    finally:
        await pool.aclose()
