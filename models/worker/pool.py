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
  or sends a frame that cannot be read is killed and its calls fail with `WorkerLost`, which the
  transport retries on another worker and never blames on a provider;
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

Everything runs on the caller's loop. The processes outlive a loop (tests run one loop per
test): a call from another loop attaches to the worker's socket again.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import contextlib
import itertools
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from models.worker.ipc import (
    CallNotEncoded,
    ClientSpec,
    ProviderFailure,
    WireFields,
    WorkerLost,
    chunk_from,
    encode,
    read_message,
    response_from,
)
from models.worker.wire import WireRecord, current_record

log = structlog.get_logger(__name__)

_ROOT = str(Path(__file__).resolve().parents[2])
_BOOT = "import sys; sys.path.insert(0, sys.argv[1]); from models.worker.child import main; main()"
STOP_GRACE_S = 5.0  # a stopped worker's time to leave before it is killed
RESTART_BACKOFF_S = (0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
YOUNG_S = 30.0  # a worker lost sooner than this after its start counts towards the backoff
EXTRA_WORKER_NICE = 10  # an extra worker's nice steps below the bot's (see `_start`)
# Copies one spawned worker can make (`fork`): an extra worker retires after a quiet spell, and
# each later rush that needs one forks again. Past these, an extra one is spawned.
SPARE_SOCKETS = 8

# What the worker's environment keeps of ours: what Python, litellm, TLS, proxies and our logging
# read. Never the bot token or provider keys (a call carries the one key it is sent with).
_ENV_NAMES = frozenset(
    {
        "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "VIRTUAL_ENV",
        "PYTHONPATH", "PYTHONHASHSEED", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED",
        "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
        "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY",
        "http_proxy", "https_proxy", "no_proxy", "all_proxy",
        "XDG_CACHE_HOME", "HF_HOME", "TIKTOKEN_CACHE_DIR", "LOG_LEVEL", "LOG_FORMAT",
    }
)  # fmt: skip
_ENV_PREFIXES = ("LITELLM_", "LC_")


def worker_environment(environ: dict[str, str] | os._Environ[str]) -> dict[str, str]:
    """The worker's environment: only the names it needs (see `_ENV_NAMES`)."""
    return {
        name: value
        for name, value in environ.items()
        if name in _ENV_NAMES or name.startswith(_ENV_PREFIXES)
    }


@dataclass(frozen=True)
class WorkerSettings:
    """How the pool runs its workers (bot/config.py fills it from the settings)."""

    max_workers: int = 1  # PROVIDER_WORKERS
    at_rest: int = 1  # PROVIDER_WORKERS_AT_REST: started at warm-up, never retired for idling
    # Constants, not settings: they guard our own child process, whose needs no operator
    # knows better. 5 s of silence (pinged four times as often) is far past any GC pause or
    # busy loop of a healthy worker; 1024 MB is about five times what a worker holds (about
    # 200 MB, README), so only a leak reaches it.
    heartbeat_s: float = 5.0  # silence that makes a worker lost
    max_rss_mb: float = 1024.0  # above it a worker takes no new calls and is replaced
    start_timeout_s: float = 60.0  # spawn → ready (litellm's import) and warmed up
    scale_calls: int = 16  # calls in flight on every worker before another one starts
    scale_cpu: float = 0.7  # or this share of a core used by every worker
    idle_s: float = 120.0  # an extra worker without calls this long stops


class _Call:
    """One call in flight: where its wire fields go, its send gate, its first answer."""

    def __init__(
        self, record: WireRecord | None, first: asyncio.Future[Any], *, housekeeping: bool = False
    ) -> None:
        self.housekeeping = housekeeping  # prepare, warm, close_pool: not a provider call
        self.record = record
        self.gate = record.gate if record is not None else None
        self.paced_by = self.gate  # told when the request really left (`note`)
        if record is not None:
            record.gate = None
        if self.gate is not None and self.gate.send_now():
            # The pace lets it leave now: it goes without a round trip at its send time. Its
            # set-up in the worker can still take a while (a busy worker, a first request's
            # imports): the worker says when it left, and the pacer reckons from then.
            self.gate = None
        self.first = first
        self.stream: RemoteStream | None = None
        self.gate_wait: asyncio.Task[None] | None = None

    def note(self, wire: WireFields) -> None:
        status, headers, error_body, left_at = wire
        if self.record is not None:
            self.record.status, self.record.headers, self.record.error_body = (
                status,
                headers,
                error_body,
            )
        if left_at is not None and self.paced_by is not None:
            # One monotonic clock for every process of the machine: the age is exact here,
            # where an age taken in the worker would also count the report's way to us.
            self.paced_by.left(max(0.0, time.monotonic() - left_at))
            self.paced_by = None

    def fail(self, error: BaseException) -> None:
        if self.gate_wait is not None:
            self.gate_wait.cancel()
        if self.stream is not None:
            self.stream.finish(error)
        elif not self.first.done():
            self.first.set_exception(error)


class RemoteStream:
    """A stream whose chunks the worker sends."""

    def __init__(self, worker: ProviderWorker, call_id: int, headers: dict[str, str]) -> None:
        self._worker = worker
        self._call_id = call_id
        self._hidden_params = {"additional_headers": headers}
        self._chunks: collections.deque[Any] = collections.deque()
        self._finished = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None

    def feed(self, chunk: Any) -> None:
        self._chunks.append(chunk)
        self._wake()

    def finish(self, error: BaseException | None) -> None:
        if self._finished:
            return
        self._finished = True
        self._error = error
        self._wake()

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def __aiter__(self) -> RemoteStream:
        return self

    async def __anext__(self) -> Any:
        while True:
            if self._chunks:
                return self._chunks.popleft()
            if self._finished:
                if self._error is not None:
                    raise self._error
                raise StopAsyncIteration
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter

    async def aclose(self) -> None:
        if not self._finished:
            self._finished = True
            self._worker.cancel(self._call_id)


class _Link:
    """The worker's socket as seen from one event loop."""

    def __init__(
        self, sock: socket.socket, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.sock = sock
        self.reader = reader
        self.writer = writer
        self.task: asyncio.Task[None] | None = None

    def close(self) -> None:
        try:
            self.writer.close()
        except RuntimeError:  # its loop has closed: the transport is gone with it
            pass
        self.sock.close()


class ProviderWorker:
    """One worker process, from spawn to its end. A replacement is a new ProviderWorker with
    the same `number` and one more `restarts`."""

    def __init__(self, pool: WorkerPool, number: int, restarts: int = 0) -> None:
        self.pool = pool
        self.number = number
        self.restarts = restarts
        self.state = "new"  # new → starting → ready → (draining →) stopped | lost
        self.process: subprocess.Popen[bytes] | ForkedProcess | None = None
        self._sock: socket.socket | None = None
        self._spares: dict[int, socket.socket] = {}  # our ends of the sockets copies serve on
        self._link: _Link | None = None
        self._ids = itertools.count(1)
        self.calls: dict[int, _Call] = {}
        self._ready: asyncio.Future[None] | None = None
        self._starting: asyncio.Task[None] | None = None
        self._attaching: asyncio.Task[None] | None = None
        self.started_at = 0.0
        self.last_heard = 0.0
        self.last_busy = time.monotonic()
        self._cpu_sample: tuple[float, float] | None = None
        self.cpu = 0.0  # share of a core over the last supervision tick
        self.recipe_version = 0  # the pool's warm-up recipe this worker has done
        self.warmed: list[str] = []  # the models whose first call it has made (mocked)

    # ---- what the pool and the transport use --------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def can_fork(self) -> bool:
        return bool(self._spares)

    @property
    def in_flight(self) -> int:
        """Provider calls in flight (housekeeping requests not counted)."""
        return sum(1 for call in self.calls.values() if not call.housekeeping)

    @property
    def usable(self) -> bool:
        """Ready for calls on the running loop."""
        return (
            self.state == "ready"
            and self._link is not None
            and self._link.loop is asyncio.get_running_loop()
        )

    def rss_mib(self) -> float | None:
        return _rss_mib(self.pid)

    def status(self) -> dict[str, Any]:
        rss = self.rss_mib()
        return {
            "number": self.number,
            "pid": self.pid,
            "state": self.state,
            "rss_mib": round(rss, 1) if rss is not None else None,
            "in_flight": self.in_flight,
            "restarts": self.restarts,
            "cpu": round(self.cpu, 2),
        }

    async def ready(self) -> None:
        """Start the process if needed and wait until it is ready on the running loop."""
        if self.usable:
            return
        loop = asyncio.get_running_loop()
        if self.state in ("ready", "draining") and self._link is not None:
            # Alive, but attached to another (finished) loop. Calls that arrive together attach
            # once: two attaches at once would each replace the other's link.
            attaching = self._attaching
            if attaching is None or attaching.get_loop() is not loop or attaching.done():
                attaching = self._attaching = loop.create_task(self._attach())
            await asyncio.shield(attaching)
            return
        if self.state in ("stopped", "lost"):
            raise WorkerLost(f"provider worker {self.number} {self.state}")
        if self._starting is None or self._starting.get_loop() is not loop:
            self._starting = loop.create_task(self._start())
        await asyncio.shield(self._starting)

    async def call(self, name: str, kwargs: dict[str, Any]) -> Any:
        """litellm's `acompletion` ("completion") or `atranscription` ("transcription") here.
        The caller's wire record (models/worker/wire.py) gets the HTTP fields; a provider's failure
        is raised as ProviderFailure, classified; ours as WorkerLost or CallNotEncoded; a stream
        comes back as a RemoteStream."""
        call_id = next(self._ids)
        record = current_record()
        first = asyncio.get_running_loop().create_future()
        call = _Call(record, first)
        client = kwargs.pop("client")
        frame = encode(("call", call_id, name, kwargs, client, call.gate is not None))
        link = self._link
        if not self.usable or link is None:
            raise WorkerLost(f"provider worker {self.number} {self.state}")
        self.calls[call_id] = call
        self.last_busy = time.monotonic()
        try:
            link.writer.write(frame)
            await link.writer.drain()  # a worker that stopped reading holds us here, not memory
            return await first
        except asyncio.CancelledError:
            self.cancel(call_id)
            raise
        except (ConnectionError, RuntimeError) as exc:
            self._lose(link, f"write failed: {type(exc).__name__}")
            if first.done() and first.exception() is not None:
                raise first.exception() from None  # type: ignore[misc]
            raise WorkerLost(f"provider worker {self.number} lost") from exc

    async def request(self, kind: str, *args: Any) -> Any:
        """A housekeeping request (prepare clients, warm up, close a pool, fork), answered
        "done" (with what it made, if anything)."""
        link = self._link
        if link is None or link.loop is not asyncio.get_running_loop():
            return None
        call_id = next(self._ids)
        first = asyncio.get_running_loop().create_future()
        frame = encode((kind, call_id, *args))
        self.calls[call_id] = _Call(None, first, housekeeping=True)
        link.writer.write(frame)
        return await first

    async def fork(self) -> tuple[int, socket.socket] | None:
        """A copy of this worker, serving on a spare socket it was started with: its pid and
        our end of that socket; None when it has no spare left or cannot (the caller spawns)."""
        if not self._spares:
            return None
        index = min(self._spares)
        spare = self._spares.pop(index)
        if not self.usable:
            spare.close()
            return None
        try:
            async with asyncio.timeout(self.pool.settings.start_timeout_s):
                pid = await self.request("fork", index)
        except (TimeoutError, WorkerLost):
            pid = None
        if not isinstance(pid, int):
            spare.close()
            return None
        return pid, spare

    def cancel(self, call_id: int) -> None:
        call = self.calls.pop(call_id, None)
        if call is not None:
            if call.gate_wait is not None:
                call.gate_wait.cancel()
            self._send(("cancel", call_id))

    async def stop(self) -> None:
        """Close the socket (the worker exits on it), wait up to STOP_GRACE_S, then kill."""
        if self.state in ("stopped", "lost"):
            return
        self.state = "stopped"
        if self._starting is not None and not self._starting.done():
            self._starting.cancel()
        self._detach(WorkerLost(f"provider worker {self.number} stopped"))
        self._close_sockets()
        if self.process is not None:
            await _reap(self.process, STOP_GRACE_S)
            log.info("provider_worker_stopped", number=self.number, pid=self.process.pid)

    def kill_now(self) -> None:
        """At interpreter exit: no loop to wait on."""
        if self._link is not None:
            self._link.sock.close()
        if self._sock is not None:
            self._sock.close()
        if self.process is not None and self.process.poll() is None:
            try:
                self.process.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def tick(self, now: float, interval: float) -> None:
        """One supervision round: liveness, a ping, CPU and memory."""
        link = self._link
        if self.state not in ("ready", "draining") or link is None:
            return
        if link.loop is not asyncio.get_running_loop():
            return
        if now - self.last_heard > self.pool.settings.heartbeat_s:
            self._lose(link, f"no answer for {self.pool.settings.heartbeat_s:g} s")
            return
        self._send(("ping", 0))
        if self.calls:
            self.last_busy = time.monotonic()
        cpu = _cpu_seconds(self.pid)
        if cpu is not None:
            if self._cpu_sample is not None and now > self._cpu_sample[0]:
                self.cpu = (cpu - self._cpu_sample[1]) / (now - self._cpu_sample[0])
            self._cpu_sample = (now, cpu)
        rss = self.rss_mib()
        if self.state == "ready" and rss is not None and rss > self.pool.settings.max_rss_mb:
            log.warning(
                "provider_worker_over_memory",
                number=self.number,
                pid=self.pid,
                rss_mib=round(rss),
                cap_mib=self.pool.settings.max_rss_mb,
            )
            self.state = "draining"

    def heard_now(self) -> None:
        """Our own loop was late (not the worker): judge silence from now on."""
        self.last_heard = asyncio.get_running_loop().time()

    # ---- internals ---------------------------------------------------------------------------

    def _send(self, message: tuple[Any, ...]) -> None:
        link = self._link
        if link is not None and link.loop is asyncio.get_running_loop():
            if not link.writer.is_closing():
                link.writer.write(encode(message))

    async def _start(self) -> None:
        self.state = "starting"
        await self.pool.restart_delay()
        forked = await self.pool.fork_a_ready_worker()
        if forked is not None:
            pid, ours = forked
            self.process = ForkedProcess(pid)
        else:
            ours = self._spawn()
            if self.number > self.pool.settings.at_rest:
                # An extra worker spawned under load: its import and warm-up (seconds of CPU)
                # yield the cores to the bot and the busy worker (its own calls too, later: it
                # is there for what the first cannot take).
                # Relative to the bot's own: a bot already running under `nice` would
                # otherwise give the extra worker a HIGHER priority than itself.
                niced = min(os.getpriority(os.PRIO_PROCESS, 0) + EXTRA_WORKER_NICE, 19)
                with contextlib.suppress(OSError):
                    os.setpriority(os.PRIO_PROCESS, self.process.pid, niced)
        self._sock = ours
        self.started_at = time.monotonic()
        self.pool.started += 1
        log.info("provider_worker_started", number=self.number, pid=self.process.pid)
        try:
            async with asyncio.timeout(self.pool.settings.start_timeout_s):
                await self._attach(starting=True)
                self.recipe_version = self.pool.recipe_version
                specs, names = self.pool.recipe()
                if specs:
                    await self.request("prepare", specs)  # its own clients, a copy's too
                if names:
                    # A copy too: it has the modules, but runs a loop of its own, and what
                    # litellm's first calls build on a loop was paid by the rush's first
                    # requests (benchmarks/turn_overhead.py, 100 conversations on 2 cores:
                    # intake p99 204–320 ms unwarmed, 36–136 ms warmed, 3 runs each).
                    await self.request("warm", names)
                    self.warmed = list(names)
        except (TimeoutError, WorkerLost, ConnectionError) as exc:
            if self.state == "starting":
                self._lose(self._link, f"start failed: {type(exc).__name__}")
            raise WorkerLost(f"provider worker {self.number} did not start") from exc
        if self.state == "starting":
            self.state = "ready"
            self.last_heard = asyncio.get_running_loop().time()
            log.info("provider_worker_ready", number=self.number, pid=self.process.pid)
        elif self.state in ("stopped", "lost"):
            raise WorkerLost(f"provider worker {self.number} {self.state}")

    def _spawn(self) -> socket.socket:
        """A new process (it imports litellm: seconds of CPU); our end of its socket. When the
        pool may run more than one worker it also gets `SPARE_SOCKETS` spare sockets, to serve
        copies of itself on (`fork`): one per rush that needs an extra worker, since an extra
        one retires after a quiet spell and the next rush asks again."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        count = SPARE_SOCKETS if self.pool.settings.max_workers > 1 else 0
        spares = [socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(count)]
        fds = [theirs.fileno()] + [spare[1].fileno() for spare in spares]
        try:
            # Not asyncio's subprocess: its child watcher ties the process to one loop, and a
            # worker outlives loops (see the module docstring). Spawning does not block long.
            self.process = subprocess.Popen(
                (sys.executable, "-c", _BOOT, _ROOT, *map(str, fds)),
                pass_fds=fds,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=self.pool.stderr,
                env=worker_environment(os.environ),
            )
        except BaseException:
            ours.close()
            for spare in spares:
                spare[0].close()
            self.state = "lost"
            raise
        finally:
            theirs.close()
            for spare in spares:
                spare[1].close()
        self._spares = {index: spare[0] for index, spare in enumerate(spares)}
        return ours

    async def _attach(self, *, starting: bool = False) -> None:
        """Connect the running loop to the worker's socket (a duplicate of it, so the loop
        that goes away closes only its own). `starting`: wait for the worker's one "ready"
        message, which a worker sends once, when litellm is imported (only `_start` may wait
        for it: a later attach waiting for it would wait for ever)."""
        assert self._sock is not None
        if self._link is not None:
            for call_id in list(self.calls):
                self._send(("cancel", call_id))  # their loop has finished
            self._detach(None)
        sock = self._sock.dup()
        reader, writer = await asyncio.open_unix_connection(sock=sock)
        link = _Link(sock, reader, writer)
        self._link = link
        self._ready = link.loop.create_future()
        link.task = link.loop.create_task(self._read(link))
        self.last_heard = link.loop.time()
        if starting:
            await self._ready  # the worker says "ready" once litellm is imported
        self.pool.watch()

    def _close_sockets(self) -> None:
        for sock in (self._sock, *self._spares.values()):
            if sock is not None:
                sock.close()
        self._spares = {}

    def _detach(self, error: BaseException | None) -> None:
        link, self._link = self._link, None
        calls, self.calls = self.calls, {}
        if error is not None:
            for call in calls.values():
                call.fail(error)
        if self._ready is not None and not self._ready.done() and error is not None:
            self._ready.set_exception(error)
            self._ready.exception()  # retrieved: nobody may be waiting
        if link is not None:
            if link.task is not None and link.task is not asyncio.current_task():
                try:
                    link.task.cancel()
                except RuntimeError:  # its loop has closed: the task went with it
                    pass
            link.close()

    def _lose(self, link: _Link | None, reason: str) -> None:
        """The worker is gone or cannot be trusted: kill it, fail its calls (the transport
        retries them elsewhere)."""
        if link is not None and link is not self._link:
            return
        if self.state in ("stopped", "lost"):
            return
        self.state = "lost"
        log.warning(
            "provider_worker_lost",
            number=self.number,
            pid=self.pid,
            reason=reason,
            calls=len(self.calls),
        )
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
        self._detach(WorkerLost(f"provider worker lost ({reason})"))
        self._close_sockets()
        self.pool.lost(self)
        if self.process is not None:
            asyncio.get_running_loop().create_task(_reap(self.process, 0.0))

    async def _read(self, link: _Link) -> None:
        loop = link.loop
        try:
            while True:
                message = await read_message(link.reader)
                self.last_heard = loop.time()
                self._dispatch(message)
        except asyncio.CancelledError:
            raise
        except (asyncio.IncompleteReadError, ConnectionError):
            reason = "exited" if self.process is not None and self.process.poll() else "closed"
        except Exception as exc:  # an unreadable frame (a RecursionError too), or a bad message
            reason = f"unreadable frame: {type(exc).__name__}"
        self._lose(link, reason)

    def _dispatch(self, message: tuple[Any, ...]) -> None:
        kind, call_id = message[0], message[1]
        if kind == "pong":
            return
        if kind == "ready":
            if self._ready is not None and not self._ready.done():
                self._ready.set_result(None)
            return
        call = self.calls.get(call_id)
        if call is None:
            return  # cancelled by the bot meanwhile
        if kind == "chunk":
            if call.stream is not None:
                call.stream.feed(chunk_from(message[2]))
        elif kind == "gate":
            self._open_gate(call_id, call)
        elif kind == "stream":
            call.note(message[3])
            call.stream = RemoteStream(self, call_id, message[2])
            _settle(call.first, call.stream)
        elif kind == "end":
            del self.calls[call_id]
            call.note(message[3])
            failure = message[2]
            if call.stream is not None:
                call.stream.finish(ProviderFailure(failure) if failure is not None else None)
        elif kind == "result":
            del self.calls[call_id]
            call.note(message[3])
            _settle(call.first, response_from(*message[2]))
        elif kind == "error":
            del self.calls[call_id]
            call.note(message[3])
            call.fail(ProviderFailure(message[2]))
        elif kind == "local":  # the worker could not send the answer (not the provider's doing)
            del self.calls[call_id]
            call.fail(CallNotEncoded(message[2]))
        elif kind == "done":
            del self.calls[call_id]
            _settle(call.first, message[2] if len(message) > 2 else None)
        else:
            raise ValueError(f"unknown message {kind!r}")

    def _open_gate(self, call_id: int, call: _Call) -> None:
        gate, call.gate = call.gate, None
        if gate is None or gate.send_now():
            self._send(("go", call_id))
            return

        async def wait_then_go() -> None:
            await gate.before_send()
            self._send(("go", call_id))

        call.gate_wait = asyncio.get_running_loop().create_task(wait_then_go())


def _settle(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


class ForkedProcess:
    """A worker forked from another (`ProviderWorker.fork`): not our child (its parent's kernel
    reaps it), so what the pool needs of a process is done by pid."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            text = _proc_read(self.pid, "stat")
            if text is None or text.rsplit(")", 1)[-1].split()[0] in ("Z", "X"):
                self.returncode = 0
        return self.returncode

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        deadline = time.monotonic() + (timeout if timeout is not None else float("inf"))
        while (code := self.poll()) is None:
            if time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
            time.sleep(0.02)
        return code


async def _reap(process: subprocess.Popen[bytes] | ForkedProcess, grace: float) -> None:
    """Wait for `process` to exit (polling: no child watcher ties it to a loop); kill it after
    `grace` seconds."""
    deadline = time.monotonic() + grace
    while process.poll() is None:
        if time.monotonic() >= deadline:
            process.kill()
            deadline = float("inf")
        await asyncio.sleep(0.02)


def _proc_read(pid: int | None, name: str) -> str | None:
    if pid is None:
        return None
    try:
        return Path(f"/proc/{pid}/{name}").read_text()
    except OSError:
        return None


def _rss_mib(pid: int | None) -> float | None:
    text = _proc_read(pid, "status")
    for line in (text or "").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return None


def _cpu_seconds(pid: int | None) -> float | None:
    text = _proc_read(pid, "stat")
    if not text:
        return None
    fields = text.rsplit(")", 1)[-1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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
        self._warm_names: list[str] = []
        self.recipe_version = 0
        self._supervisor: asyncio.Task[None] | None = None
        self._exit_hook = False

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

    async def call(self, name: str, kwargs: dict[str, Any]) -> Any:
        worker = await self._pick()
        return await worker.call(name, kwargs)

    async def wait_ready(self) -> None:
        """Until a worker takes calls on this loop (bounded by the start timeout)."""
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
                await worker.request("prepare", list(specs))
                await worker.request("warm", list(model_names))
                worker.warmed = list(model_names)
        while len(self.workers) < min(self.settings.at_rest, self.settings.max_workers):
            self._spawn_extra()  # the others kept at rest start in the background

    def recipe(self) -> tuple[list[ClientSpec], list[str]]:
        specs = [spec for specs in self._recipes.values() for spec in specs]
        return specs, list(self._warm_names)

    async def close_pool(self, pool: int) -> None:
        self._recipes.pop(pool, None)
        for worker in list(self.workers):
            if worker.usable:
                try:
                    async with asyncio.timeout(STOP_GRACE_S):
                        await worker.request("close_pool", pool)
                except (TimeoutError, WorkerLost):
                    pass

    async def aclose(self) -> None:
        """Stop every worker (bounded: STOP_GRACE_S each, at once)."""
        workers, self.workers = self.workers, []
        if self._supervisor is not None:
            self._supervisor.cancel()
            self._supervisor = None
        await asyncio.gather(*(w.stop() for w in workers), return_exceptions=True)

    # ---- used by the workers -----------------------------------------------------------------

    async def restart_delay(self) -> None:
        delay = self._next_start - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)

    def lost(self, worker: ProviderWorker) -> None:
        """Replace `worker` (its number, one more restart); a young death delays the next."""
        if time.monotonic() - worker.started_at < YOUNG_S:
            self._young_deaths += 1
            delay = RESTART_BACKOFF_S[min(self._young_deaths, len(RESTART_BACKOFF_S)) - 1]
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
        """Run the supervision on the running loop (once per loop)."""
        loop = asyncio.get_running_loop()
        if self._supervisor is None or self._supervisor.get_loop() is not loop:
            self._supervisor = loop.create_task(self._supervise())
        if not self._exit_hook:
            self._exit_hook = True
            atexit.register(self._kill_at_exit)

    # ---- internals ---------------------------------------------------------------------------

    async def _pick(self) -> ProviderWorker:
        if not self.workers:
            self.workers.append(ProviderWorker(self, 1))
        ready = [w for w in self.workers if w.state == "ready"]
        for worker in ready:
            if not worker.usable:
                await worker.ready()  # attach it to this loop
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
        task = asyncio.get_running_loop().create_task(worker.ready())
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
        asyncio.get_running_loop().create_task(worker.stop()).add_done_callback(_quiet)

    def _kill_at_exit(self) -> None:
        for worker in self.workers:
            worker.kill_now()


def _quiet(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.info("provider_worker_start_failed", error=str(task.exception()))


WORKER = WorkerPool()


async def acompletion(**kwargs: Any) -> Any:
    """`litellm.acompletion(**kwargs)` in a worker (`client` is a ClientSpec)."""
    return await WORKER.call("completion", kwargs)


async def atranscription(**kwargs: Any) -> Any:
    """`litellm.atranscription(**kwargs)` in a worker (`client` is a ClientSpec)."""
    return await WORKER.call("transcription", kwargs)
