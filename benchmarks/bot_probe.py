"""Run `python -m bot` with two probes a benchmark reads back: event-loop lag and database waits.

    python -m benchmarks.bot_probe OUT_FILE [bot arguments...]

- Event-loop lag: a task on the bot's own loop sleeps 10 ms over and over and records by how
  much each wake-up came late. Anything that holds the loop (CPU work in a callback, a blocking
  call) shows up here as lag, whatever caused it. For wake-ups later than 50 ms it also records
  how much CPU the loop's thread used meanwhile: the rest of such a stall the thread was not
  running (another thread held the GIL, or the machine's cores were busy elsewhere).
- Garbage collections: how long each took, per generation.
- Database waits: the time from asking `Database` for a write transaction until it is open
  (waiting for the writer, then BEGIN IMMEDIATE), how long it is then held, and the time a
  read takes from call to rows, queueing included: every round trip to a reader, `read(fn)`,
  through which `fetchone` and `fetchall` go too (each counted once).

Samples are appended to OUT_FILE as `kind monotonic_s value_ms` lines (the monotonic clock is
the same for every process on the machine, so the benchmark can match them to its phases).
Measurement only: nothing here runs in production.
"""

from __future__ import annotations

import asyncio
import gc
import runpy
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from primitives.litellm_env import keep_litellm_offline

LAG_PERIOD_S = 0.010
FLUSH_EVERY_S = 0.5
SLOW_S = 0.050  # lag worth explaining

REPO = Path(__file__).resolve().parents[1]


class _Recorder:
    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._lines: list[str] = []
        self._lock = threading.Lock()  # the provider loop's monitor writes from its thread

    def add(self, kind: str, at: float, value_s: float) -> None:
        with self._lock:
            self._lines.append(f"{kind} {at:.6f} {value_s * 1000:.3f}\n")

    def flush(self) -> None:
        with self._lock:
            lines, self._lines = self._lines, []
        if lines:
            self._out.write("".join(lines))
            self._out.flush()


async def _monitor_lag(recorder: _Recorder, kind: str = "lag") -> None:
    loop = asyncio.get_running_loop()
    flushed = loop.time()
    while True:
        before, cpu_before = loop.time(), time.thread_time()
        await asyncio.sleep(LAG_PERIOD_S)
        now = loop.time()
        lag = max(0.0, now - before - LAG_PERIOD_S)
        recorder.add(kind, now, lag)
        if kind == "lag" and lag >= SLOW_S:
            # How much of a late wake-up the loop spent computing (the rest it was not
            # running at all: another thread held the GIL, or the machine was busy).
            recorder.add("lag_busy", now, min(lag, time.thread_time() - cpu_before))
        if kind == "lag" and now - flushed >= FLUSH_EVERY_S:
            recorder.flush()
            flushed = now


def _install_lag_monitor(recorder: _Recorder) -> None:
    """Start the monitor on every loop the bot creates (`asyncio.run` asks the policy)."""
    tasks: set[asyncio.Task[None]] = set()

    class Policy(asyncio.DefaultEventLoopPolicy):
        def new_event_loop(self) -> asyncio.AbstractEventLoop:
            loop = super().new_event_loop()
            if threading.current_thread() is not threading.main_thread():
                return loop  # e.g. the provider loop: monitored on its own

            def start() -> None:
                task = loop.create_task(_monitor_lag(recorder))
                tasks.add(task)

            loop.call_soon(start)
            return loop

    asyncio.set_event_loop_policy(Policy())


def _install_db_probe(recorder: _Recorder) -> None:
    from memory.db import Database

    original_read = Database.read
    original_run_in_transaction = Database.run_in_transaction

    async def run_in_transaction(self: Database, fn: Any, *, background: bool = False) -> Any:
        # The body runs on the writer's thread: its start and end are taken there, so "wait"
        # is the lock plus the hop to the thread and BEGIN.
        asked = time.monotonic()
        moments: list[float] = []

        def timed(conn: Any) -> Any:
            moments.append(time.monotonic())
            try:
                return fn(conn)
            finally:
                moments.append(time.monotonic())

        try:
            return await original_run_in_transaction(self, timed, background=background)
        finally:
            if len(moments) == 2:
                opened, closed = moments
                recorder.add("db_write_wait", opened, opened - asked)
                recorder.add("db_write_hold", closed, closed - opened)

    async def read(self: Database, *args: Any, **kwargs: Any) -> Any:
        asked = time.monotonic()
        try:
            return await original_read(self, *args, **kwargs)
        finally:
            recorder.add("db_read", time.monotonic(), time.monotonic() - asked)

    Database.read = read  # type: ignore[method-assign]
    Database.run_in_transaction = run_in_transaction  # type: ignore[method-assign]


def _install_gc_probe(recorder: _Recorder) -> None:
    """Time every garbage collection: a full one stops every thread of the process."""
    started: list[float] = []

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started.append(time.monotonic())
        elif started:
            now = time.monotonic()
            recorder.add(f"gc{info['generation']}", now, now - started.pop())

    gc.callbacks.append(callback)


def main() -> None:
    out_path, bot_args = sys.argv[1], sys.argv[2:]
    keep_litellm_offline()
    out = open(out_path, "a", encoding="ascii")  # open for the process's life
    recorder = _Recorder(out)
    _install_lag_monitor(recorder)
    _install_db_probe(recorder)
    _install_gc_probe(recorder)
    sys.argv = ["python -m bot", *bot_args]
    try:
        runpy.run_module("bot", run_name="__main__", alter_sys=True)
    finally:
        recorder.flush()
        out.close()


if __name__ == "__main__":
    main()
