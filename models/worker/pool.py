"""litellm in processes of their own, so its CPU does not share the bot's GIL, supervised.

Measured with benchmarks/turn_overhead.py at 100 concurrent chats: litellm costs about 8 ms of
CPU to set up and finish each request and 0.2–0.35 ms per streamed chunk. In the bot's own
process that CPU took the GIL from the chat loop (intake p99 0.3–0.9 s, loop stalls 110–220 ms);
in a worker process the bot only reads small tuples off a socket.

A worker (models/worker/child.py) makes the calls; the bot sends each call's arguments (with
only the key in use) and gets back plain data: the HTTP status, headers and error body, the
classified failure, every streamed chunk as a small tuple. Keys, pacing, breakers, retries and
fallbacks stay in the bot (models/transport.py, models/policy/attempt_policy.py).

The bot depends on a worker for every answer, so the pool supervises them:
- a worker that stops answering (no message for `heartbeat_s`, pings every quarter of it), dies,
  or sends a frame that cannot be read is killed and its calls fail with `WorkerLostError`,
  which the transport retries on another worker and never blames on a provider;
- a replacement starts after a backoff that grows while workers keep dying young, and is warmed
  up (clients built, litellm's first-request loading done) before it takes calls;
- a worker over `max_rss_mb` takes no new calls, and stops once its calls are done;
- `at_rest` workers (one by default) run at rest; another (up to `max_workers`) starts while
  every worker has `scale_calls` calls in flight or uses `scale_cpu` of a core, and stops after
  `idle_s` without calls. One that starts under load is a copy of a ready worker (`fork`, on
  a spare socket of those each spawned worker gets): a spawned one would spend seconds of CPU
  importing litellm inside the rush that asked for it. On 2 cores, 100 conversations starting
  within a second: intake p99 36–296 ms (median 128, 12 runs) with a copy that makes the
  warm-up's first calls on its own loop before it serves, 204–320 ms with one that did not,
  253–549 ms spawning (benchmarks/turn_overhead.py);
- start-up (`start_timeout_s`) and stop (`STOP_GRACE_S`) are bounded.

A pool belongs to one event loop: its workers' sockets are read there and its supervision
runs there, so a call from another loop is refused. There is no pool per process: the
composition root (bot/app.py `open_services`) builds the bot's and hands it to the transport,
and a benchmark or a test that runs its own loop builds its own. Where the work lives:
models/worker/process.py (one worker process from spawn to end), models/worker/remote.py (the
calls in flight on a worker), models/worker/protocol.py (every message), models/worker/proc.py
(processes by pid). What the transport asks of the pool is models/worker/interface.py
`ProviderWorkers`.
"""

from __future__ import annotations

import asyncio
import atexit
import contextvars
import itertools
import socket
import time
from collections.abc import Sequence
from typing import Any

import structlog

from models.worker.ipc import ClientSpec, WorkerLostError
from models.worker.process import STOP_GRACE_S, ProviderWorker
from models.worker.protocol import ClosePool, Prepare, Warm
from models.worker.settings import WorkerSettings
from models.worker.wire import SendGate, WireRecord
from primitives.backoff import Backoff
from primitives.tasks import stop_task

log = structlog.get_logger(__name__)

RESTART_BACKOFF = Backoff((0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0))
YOUNG_S = 30.0  # a worker lost sooner than this after its start counts towards the backoff


class WorkerPool:
    """The worker processes: `settings.at_rest` at rest, up to `settings.max_workers` under
    load. A call goes to the ready worker with the fewest calls in flight; before any is ready
    it waits for one."""

    def __init__(self, settings: WorkerSettings | None = None) -> None:
        self.settings = settings or WorkerSettings()
        self.workers: list[ProviderWorker] = []
        self.stderr: Any = None  # where the workers' stderr goes (None: the bot's)
        self.started = 0  # worker processes started (a restart counts)
        self.restarts = 0  # workers replaced after they were lost or over memory
        self._young_deaths = 0
        self._next_start = 0.0
        self._recipes: dict[int, list[ClientSpec]] = {}
        self._pool_ids = itertools.count(1)
        self._warm_names: list[str] = []
        self.recipe_version = 0
        self._supervisor: asyncio.Task[None] | None = None
        self._exit_hook = False
        self._loop: asyncio.AbstractEventLoop | None = None  # the one the workers are read on

    def configure(self, settings: WorkerSettings) -> None:
        """Set how the workers run (at start-up, before any call)."""
        if settings.max_workers < 1:
            raise ValueError("at least one provider worker")
        self.settings = settings

    @property
    def pid(self) -> int | None:
        """The first live worker's process id (None before one started)."""
        pids = self.pids
        return pids[0] if pids else None

    @property
    def pids(self) -> list[int]:
        return [w.pid for w in self.workers if w.pid is not None and w.state != "lost"]

    def status(self) -> list[dict[str, Any]]:
        """Each worker for /stats and /healthz."""
        return [w.status() for w in self.workers]

    async def call(
        self, name: str, kwargs: dict[str, Any], wire: WireRecord, gate: SendGate | None
    ) -> Any:
        """See `ProviderWorkers.call` (models/worker/interface.py)."""
        worker = await self._pick()
        return await worker.call(name, kwargs, wire, gate)

    async def wait_ready(self) -> None:
        """Until a worker takes calls (bounded by the start timeout)."""
        await self._pick()

    async def warm_up(self, specs: Sequence[ClientSpec], model_names: Sequence[str]) -> None:
        """Remember what every worker builds and loads before it takes calls; start one."""
        if specs:
            self._recipes[specs[0].pool] = list(specs)
        self._warm_names = sorted(set(self._warm_names) | set(model_names))
        self.recipe_version += 1
        worker = await self._pick()
        if worker.recipe_version < self.recipe_version:  # ready before the recipe was known
            worker.recipe_version = self.recipe_version
            async with asyncio.timeout(self.settings.start_timeout_s):
                await worker.request(Prepare, list(specs))
                await worker.request(Warm, list(model_names))
                worker.warmed = list(model_names)
        while len(self.workers) < min(self.settings.at_rest, self.settings.max_workers):
            self._spawn_extra()  # the others kept at rest start in the background

    def recipe(self) -> tuple[list[ClientSpec], list[str]]:
        specs = [spec for specs in self._recipes.values() for spec in specs]
        return specs, list(self._warm_names)

    def new_pool(self) -> int:
        return next(self._pool_ids)

    async def close_pool(self, pool: int) -> None:
        self._recipes.pop(pool, None)
        for worker in list(self.workers):
            if worker.usable:
                try:
                    async with asyncio.timeout(STOP_GRACE_S):
                        await worker.request(ClosePool, pool)
                except (TimeoutError, WorkerLostError):
                    pass

    async def aclose(self) -> None:
        """Stop every worker (bounded: STOP_GRACE_S each, at once). The pool may start again
        afterwards, on another loop too."""
        workers, self.workers = self.workers, []
        supervisor, self._supervisor = self._supervisor, None
        await stop_task(supervisor)
        await asyncio.gather(*(w.stop() for w in workers), return_exceptions=True)
        self._loop = None

    # ---- used by the workers -----------------------------------------------------------------

    async def restart_delay(self) -> None:
        delay = self._next_start - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)

    def lost(self, worker: ProviderWorker) -> None:
        """Replace `worker` (its number, one more restart); a young death delays the next."""
        if time.monotonic() - worker.started_at < YOUNG_S:
            self._young_deaths += 1
            delay = RESTART_BACKOFF.after(self._young_deaths)
        else:
            self._young_deaths, delay = 0, 0.0
        self._next_start = time.monotonic() + delay
        self._replace(worker)

    def _replace(self, worker: ProviderWorker) -> None:
        if worker in self.workers:
            index = self.workers.index(worker)
            self.workers[index] = ProviderWorker(self, worker.number, worker.restarts + 1)
            self.restarts += 1

    def watch(self) -> None:
        """Run the supervision (once)."""
        if self._supervisor is None:
            # The pool serves every caller: its tasks carry none of their log context.
            self._supervisor = asyncio.get_running_loop().create_task(
                self._supervise(), context=contextvars.Context()
            )
        if not self._exit_hook:
            self._exit_hook = True
            atexit.register(self._kill_at_exit)

    # ---- internals ---------------------------------------------------------------------------

    async def _pick(self) -> ProviderWorker:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif self._loop is not loop:
            raise RuntimeError(
                "a provider worker pool runs on one event loop; this call came from another"
                " (build one pool per loop)"
            )
        if not self.workers:
            self.workers.append(ProviderWorker(self, 1))
        ready = [w for w in self.workers if w.usable]
        if not ready:
            waiting = next((w for w in self.workers if w.state in ("new", "starting")), None)
            if waiting is None:
                number = len(self.workers) + 1
                waiting = ProviderWorker(self, number)
                self.workers.append(waiting)
            await waiting.ready()
            return waiting
        chosen = min(ready, key=lambda w: w.in_flight)
        self._maybe_grow()
        return chosen

    async def fork_a_ready_worker(self) -> tuple[int, socket.socket] | None:
        """A copy of a ready worker that still has a spare socket (see `ProviderWorker.fork`),
        or None: the new worker is spawned."""
        for worker in list(self.workers):
            if worker.usable and worker.can_fork:
                return await worker.fork()
        return None

    def _maybe_grow(self) -> None:
        """Start another worker when every serving one is busy (and the cap allows), or when
        every one is draining (over memory)."""
        settings = self.settings
        serving = [w for w in self.workers if w.state in ("new", "starting", "ready")]
        if any(w.state in ("new", "starting") for w in serving):
            return
        if not serving and any(w.state == "draining" for w in self.workers):
            self._spawn_extra()
        elif 0 < len(serving) < settings.max_workers and all(
            w.in_flight >= settings.scale_calls or w.cpu >= settings.scale_cpu for w in serving
        ):
            self._spawn_extra()

    def _spawn_extra(self) -> None:
        numbers = {w.number for w in self.workers}
        number = next(n for n in itertools.count(1) if n not in numbers)
        worker = ProviderWorker(self, number)
        self.workers.append(worker)
        task = asyncio.get_running_loop().create_task(worker.ready(), context=contextvars.Context())
        task.add_done_callback(_quiet)

    async def _supervise(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            interval = max(0.05, self.settings.heartbeat_s / 4)
            before = loop.time()
            await asyncio.sleep(interval)
            now = loop.time()
            late = now - before - interval > self.settings.heartbeat_s / 2
            for worker in list(self.workers):
                if late:
                    worker.heard_now()  # our loop stalled, not the worker
                else:
                    worker.tick(now, interval)
            self._tidy()

    def _tidy(self) -> None:
        """Grow for load or memory; stop drained workers and extra ones left idle."""
        self._maybe_grow()
        for worker in list(self.workers):
            if worker.state == "draining" and not worker.calls:
                self.restarts += 1  # replaced (for memory) by the one `_maybe_grow` started
                self._retire(worker)
        serving = [w for w in self.workers if w.state == "ready"]
        for worker in serving[self.settings.at_rest :]:
            if not worker.calls and time.monotonic() - worker.last_busy > self.settings.idle_s:
                self._retire(worker)

    def _retire(self, worker: ProviderWorker) -> None:
        log.info("provider_worker_retired", number=worker.number, pid=worker.pid)
        self.workers.remove(worker)
        stopping = asyncio.get_running_loop().create_task(
            worker.stop(), context=contextvars.Context()
        )
        stopping.add_done_callback(_quiet)

    def _kill_at_exit(self) -> None:
        for worker in self.workers:
            worker.kill_now()


def _quiet(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.info("provider_worker_start_failed", error=str(task.exception()))
