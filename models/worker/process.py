"""One provider worker process, from spawn (or fork) to its end, as the bot sees it: its start
and warm-up, its socket, the messages it sends (models/worker/protocol.py) and its supervision
tick. models/worker/pool.py decides how many run and which one takes a call.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import socket
import subprocess
import time
from typing import Any, Protocol

import structlog

from models.worker.ipc import ClientSpec, WorkerLostError
from models.worker.proc import ForkedProcess, cpu_seconds, reap, rss_mib
from models.worker.protocol import (
    Call,
    ClosePool,
    Fork,
    Message,
    Ping,
    Pong,
    Prepare,
    Ready,
    Warm,
    encode,
    read_message,
)
from models.worker.remote import CallsInFlight, PendingCall
from models.worker.settings import WorkerSettings
from models.worker.wire import SendGate, WireRecord
from primitives.interpreter import child_env, python_command

log = structlog.get_logger(__name__)

_BOOT = "from models.worker.child import main; main()"
STOP_GRACE_S = 5.0  # a stopped worker's time to leave before it is killed
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


class OwningPool(Protocol):
    """What a worker asks of the pool it belongs to (models/worker/pool.py `WorkerPool`)."""

    settings: WorkerSettings
    stderr: Any  # where the workers' stderr goes (None: the bot's)
    started: int  # worker processes started
    recipe_version: int  # bumped when what a worker builds and loads before calls changes

    async def restart_delay(self) -> None: ...

    async def fork_a_ready_worker(self) -> tuple[int, socket.socket] | None: ...

    def recipe(self) -> tuple[list[ClientSpec], list[str]]: ...

    def lost(self, worker: ProviderWorker) -> None: ...

    def watch(self) -> None: ...


class _Link:
    """The worker's socket, read and written on the pool's loop."""

    def __init__(
        self, sock: socket.socket, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.sock = sock
        self.reader = reader
        self.writer = writer
        self.task: asyncio.Task[None] | None = None

    def close(self) -> None:
        self.writer.close()
        self.sock.close()


class ProviderWorker:
    """One worker process, from spawn to its end. A replacement is a new ProviderWorker with
    the same `number` and one more `restarts`."""

    def __init__(self, pool: OwningPool, number: int, restarts: int = 0) -> None:
        self.pool = pool
        self.number = number
        self.restarts = restarts
        self.state = "new"  # new → starting → ready → (draining →) stopped | lost
        self.process: subprocess.Popen[bytes] | ForkedProcess | None = None
        self._sock: socket.socket | None = None
        self._spares: dict[int, socket.socket] = {}  # our ends of the sockets copies serve on
        self._link: _Link | None = None
        self.calls = CallsInFlight(self._send)
        self._ready: asyncio.Future[None] | None = None
        self._starting: asyncio.Task[None] | None = None
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
        return self.calls.provider_calls

    @property
    def usable(self) -> bool:
        """Ready for calls."""
        return self.state == "ready" and self._link is not None

    def rss_mib(self) -> float | None:
        return rss_mib(self.pid)

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
        """Start the process if needed and wait until it is ready."""
        if self.usable:
            return
        if self.state in ("stopped", "lost"):
            raise WorkerLostError(f"provider worker {self.number} {self.state}")
        if self._starting is None:
            # The worker serves every caller: its tasks carry none of their log context.
            self._starting = asyncio.get_running_loop().create_task(
                self._start(), context=contextvars.Context()
            )
        await asyncio.shield(self._starting)

    async def call(
        self, name: str, kwargs: dict[str, Any], wire: WireRecord, gate: SendGate | None
    ) -> Any:
        """litellm's `acompletion` ("completion") or `atranscription` ("transcription") here.
        `wire` gets the HTTP fields; `gate` (the slot) is passed right before the request
        leaves and told when it left. A provider's failure is raised as ProviderCallError,
        classified; ours as WorkerLostError or CallNotEncodedError; a stream comes back as a
        RemoteStream."""
        call_id = self.calls.next_id()
        first = asyncio.get_running_loop().create_future()
        call = PendingCall(wire, gate, first)
        client = kwargs.pop("client")
        frame = encode(Call(call_id, name, kwargs, client, call.gate is not None))
        link = self._link
        if not self.usable or link is None:
            raise WorkerLostError(f"provider worker {self.number} {self.state}")
        self.calls.add(call_id, call)
        self.last_busy = time.monotonic()
        try:
            link.writer.write(frame)
            await link.writer.drain()  # a worker that stopped reading holds us here, not memory
            return await first
        except asyncio.CancelledError:
            self.calls.cancel(call_id)
            raise
        except (ConnectionError, RuntimeError) as exc:
            self._lose(link, f"write failed: {type(exc).__name__}")
            answered = first.exception() if first.done() else None
            if answered is not None:
                raise answered from None
            raise WorkerLostError(f"provider worker {self.number} lost") from exc

    async def request(self, kind: type[Housekeeping], arg: Any) -> Any:
        """A housekeeping request (prepare clients, warm up, close a pool, fork), answered
        `Done` (with what it made, if anything)."""
        link = self._link
        if link is None:
            return None
        call_id = self.calls.next_id()
        first = asyncio.get_running_loop().create_future()
        frame = encode(kind(call_id, arg))
        self.calls.add(call_id, PendingCall(None, None, first, housekeeping=True))
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
                pid = await self.request(Fork, index)
        except (TimeoutError, WorkerLostError):
            pid = None
        if not isinstance(pid, int):
            spare.close()
            return None
        return pid, spare

    async def stop(self) -> None:
        """Close the socket (the worker exits on it), wait up to STOP_GRACE_S, then kill."""
        if self.state in ("stopped", "lost"):
            return
        self.state = "stopped"
        if self._starting is not None and not self._starting.done():
            self._starting.cancel()  # not awaited: what the start spawned is reaped just below
        self._detach(WorkerLostError(f"provider worker {self.number} stopped"))
        self._close_sockets()
        if self.process is not None:
            await reap(self.process, STOP_GRACE_S)
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
        if now - self.last_heard > self.pool.settings.heartbeat_s:
            self._lose(link, f"no answer for {self.pool.settings.heartbeat_s:g} s")
            return
        self._send(Ping())
        if self.calls:
            self.last_busy = time.monotonic()
        cpu = cpu_seconds(self.pid)
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

    def _send(self, message: Message) -> None:
        link = self._link
        if link is not None and not link.writer.is_closing():
            link.writer.write(encode(message))

    async def _start(self) -> None:
        self.state = "starting"
        await self.pool.restart_delay()
        forked = await self.pool.fork_a_ready_worker()
        if forked is not None:
            pid, ours = forked
            self.process = ForkedProcess(pid)
        else:
            self.started_at = time.monotonic()  # a failed spawn is a young death
            try:
                self.process, ours = self._spawn()
            except OSError as error:
                # EMFILE, ENOMEM, EAGAIN: lost like a worker that died at once, so the pool
                # backs off (RESTART_BACKOFF) and reuses the slot. Left "lost" by itself it
                # would never be replaced, and every call would append a worker and spawn again.
                self._lose(None, f"spawn failed: {error.strerror or type(error).__name__}")
                raise WorkerLostError(f"provider worker {self.number} did not start") from error
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
                await self._connect()
                self.recipe_version = self.pool.recipe_version
                specs, names = self.pool.recipe()
                if specs:
                    await self.request(Prepare, specs)  # its own clients, a copy's too
                if names:
                    # A copy too: it has the modules, but runs a loop of its own, and what
                    # litellm's first calls build on a loop was paid by the rush's first
                    # requests (benchmarks/turn_overhead.py, 100 conversations on 2 cores:
                    # intake p99 204–320 ms unwarmed, 36–136 ms warmed, 3 runs each).
                    await self.request(Warm, names)
                    self.warmed = list(names)
        except (TimeoutError, WorkerLostError, ConnectionError) as exc:
            if self.state == "starting":
                self._lose(self._link, f"start failed: {type(exc).__name__}")
            raise WorkerLostError(f"provider worker {self.number} did not start") from exc
        if self.state == "starting":
            self.state = "ready"
            self.last_heard = asyncio.get_running_loop().time()
            log.info("provider_worker_ready", number=self.number, pid=self.process.pid)
        elif self.state in ("stopped", "lost"):
            raise WorkerLostError(f"provider worker {self.number} {self.state}")

    def _spawn(self) -> tuple[subprocess.Popen[bytes], socket.socket]:
        """A new process (it imports litellm: seconds of CPU) and our end of its socket. When the
        pool may run more than one worker it also gets `SPARE_SOCKETS` spare sockets, to serve
        copies of itself on (`fork`): one per rush that needs an extra worker, since an extra
        one retires after a quiet spell and the next rush asks again."""
        count = SPARE_SOCKETS if self.pool.settings.max_workers > 1 else 0
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        spares: list[tuple[socket.socket, socket.socket]] = []
        try:
            for _ in range(count):  # out of descriptors (EMFILE) may strike here too
                spares.append(socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM))
            fds = [theirs.fileno()] + [spare[1].fileno() for spare in spares]
            # Not asyncio's subprocess: `reap` polls, so no child watcher is involved (a copy
            # made by `fork` is not our child either). Spawning does not block long.
            process = subprocess.Popen(
                [*python_command(_BOOT), *map(str, fds)],
                pass_fds=fds,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=self.pool.stderr,
                env=child_env(worker_environment(os.environ)),
            )
        except BaseException:
            ours.close()
            for spare in spares:
                spare[0].close()
            raise
        finally:
            theirs.close()
            for spare in spares:
                spare[1].close()
        self._spares = {index: spare[0] for index, spare in enumerate(spares)}
        return process, ours

    async def _connect(self) -> None:
        """Read the worker's socket on the pool's loop, and wait for its one `Ready`, sent
        when litellm is imported."""
        assert self._sock is not None
        reader, writer = await asyncio.open_unix_connection(sock=self._sock)
        link = _Link(self._sock, reader, writer)
        loop = asyncio.get_running_loop()
        self._link = link
        self._ready = loop.create_future()
        link.task = loop.create_task(self._read(link), context=contextvars.Context())
        self.last_heard = loop.time()
        await self._ready
        self.pool.watch()

    def _close_sockets(self) -> None:
        for sock in (self._sock, *self._spares.values()):
            if sock is not None:
                sock.close()
        self._spares = {}

    def _detach(self, error: BaseException | None) -> None:
        link, self._link = self._link, None
        self.calls.fail_all(error)
        if self._ready is not None and not self._ready.done() and error is not None:
            self._ready.set_exception(error)
            self._ready.exception()  # retrieved: nobody may be waiting
        if link is not None:
            if link.task is not None and link.task is not asyncio.current_task():
                link.task.cancel()  # synchronous here: the reader's own end closes nothing more
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
        self._detach(WorkerLostError(f"provider worker lost ({reason})"))
        self._close_sockets()
        self.pool.lost(self)
        if self.process is not None:
            asyncio.get_running_loop().create_task(
                reap(self.process, 0.0), context=contextvars.Context()
            )

    async def _read(self, link: _Link) -> None:
        loop = asyncio.get_running_loop()
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

    def _dispatch(self, message: Message) -> None:
        match message:
            case Pong():
                return
            case Ready():
                if self._ready is not None and not self._ready.done():
                    self._ready.set_result(None)
                return
        self.calls.answer(message)


Housekeeping = Prepare | Warm | ClosePool | Fork  # requests answered by `Done`
