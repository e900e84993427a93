"""litellm in a process of its own, so its CPU does not share the bot's GIL.

Measured with benchmarks/turn_overhead.py at 100 concurrent chats: litellm costs about 8 ms of
CPU to set up and finish each request and 0.2–0.35 ms per streamed chunk (SSE decoding, the
OpenAI SDK's pydantic objects, litellm's chunk wrapper and its success logging). On a thread of
the bot's own process (models/offloop.py alone) that CPU took the GIL from the chat loop: with
100 first messages in one second the bot needed more than one CPU-second per second in one
interpreter, and updates waited for it (intake p99 0.3–0.9 s, loop stalls 110–220 ms).

Here the worker (models/worker_child.py) makes the calls; the bot sends each call's arguments
and gets back plain data: the HTTP status, headers and error body, the classified failure, and
every streamed chunk as a small tuple. Keys, pacing, breakers, retries and fallbacks stay in the
bot (models/transport.py); the worker has no state worth keeping. If it dies, the calls in
flight fail as `unavailable` (the transport falls back or retries as for any provider failure,
and bills what streamed) and the next call starts a new one.

`ProviderWorker` lives on the provider loop (models/offloop.py): one reader task dispatches the
worker's messages, and streams are handed to the caller's loop the way offloop already does.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import itertools
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import structlog

from models.errors import Classified
from models.ipc import (
    ClientSpec,
    ProviderFailure,
    WireFields,
    chunk_from,
    encode,
    read_message,
    response_from,
)
from models.offloop import on_loop
from models.types import Outcome
from models.wire import WireRecord, current_record

log = structlog.get_logger(__name__)

_ROOT = str(Path(__file__).resolve().parents[1])
_BOOT = "import sys; sys.path.insert(0, sys.argv[1]); from models.worker_child import main; main()"

WORKER_GONE = Classified(Outcome.UNAVAILABLE, "provider worker stopped")


class _Call:
    """One call in flight: where its wire fields go, its send gate, its first answer."""

    def __init__(self, record: WireRecord | None, first: asyncio.Future[Any]) -> None:
        self.record = record
        self.gate = record.gate if record is not None else None
        if record is not None:
            record.gate = None
        if self.gate is not None and self.gate.send_now():
            # The pace lets it leave now: it goes without a round trip at its send time (set-up
            # in the worker takes a millisecond or two, far below any pace's spacing).
            self.gate = None
        self.first = first
        self.stream: RemoteStream | None = None
        self.gate_wait: asyncio.Task[None] | None = None

    def note(self, wire: WireFields) -> None:
        if self.record is not None:
            self.record.status, self.record.headers, self.record.error_body = wire


class RemoteStream:
    """A stream whose chunks the worker sends; iterated on the provider loop."""

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


class ProviderWorker:
    """The bot's side of the worker process. Every method runs on the provider loop."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._calls: dict[int, _Call] = {}
        self._process: asyncio.subprocess.Process | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._start: asyncio.Lock | None = None
        self._reader: asyncio.Task[None] | None = None
        self.started = 0  # worker processes started (a restart after a crash counts)

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def in_flight(self) -> int:
        return len(self._calls)

    async def call(self, name: str, kwargs: dict[str, Any]) -> Any:
        """litellm's `acompletion` ("completion") or `atranscription` ("transcription") in the
        worker. The caller's wire record (models/wire.py) gets the HTTP fields; a failure is
        raised as ProviderFailure, classified; a stream comes back as a RemoteStream."""
        await self._ensure_started()
        call_id = next(self._ids)
        first = asyncio.get_running_loop().create_future()
        call = _Call(current_record(), first)
        self._calls[call_id] = call
        self._send(("call", call_id, name, kwargs, kwargs.pop("client"), call.gate is not None))
        try:
            return await first
        except asyncio.CancelledError:
            self.cancel(call_id)
            raise

    async def request(self, kind: str, *args: Any) -> None:
        """A housekeeping request (prepare clients, warm up, close a pool), answered "done"."""
        await self._ensure_started()
        call_id = next(self._ids)
        first = asyncio.get_running_loop().create_future()
        self._calls[call_id] = _Call(None, first)
        self._send((kind, call_id, *args))
        await first

    async def prepare(self, specs: Sequence[ClientSpec]) -> None:
        await self.request("prepare", list(specs))

    async def warm(self, model_names: Sequence[str]) -> None:
        await self.request("warm", list(model_names))

    async def close_pool(self, pool: int) -> None:
        if self._writer is not None and not self._writer.is_closing():
            await self.request("close_pool", pool)

    def cancel(self, call_id: int) -> None:
        call = self._calls.pop(call_id, None)
        if call is not None:
            if call.gate_wait is not None:
                call.gate_wait.cancel()
            self._send(("cancel", call_id))

    async def stop(self) -> None:
        """Close the socket (the worker exits on it) and wait for the process."""
        writer, self._writer = self._writer, None
        process, self._process = self._process, None
        reader, self._reader = self._reader, None
        if writer is not None:
            writer.close()
        if reader is not None:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
        if process is not None:
            await _reap(process)

    # ---- internals ---------------------------------------------------------------------------

    def _send(self, message: tuple[Any, ...]) -> None:
        if self._writer is not None and not self._writer.is_closing():
            self._writer.write(encode(message))

    async def _ensure_started(self) -> None:
        if self._writer is not None and not self._writer.is_closing():
            return
        if self._start is None:
            self._start = asyncio.Lock()
        async with self._start:
            if self._writer is not None and not self._writer.is_closing():
                return
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                self._process = await asyncio.create_subprocess_exec(
                    *(sys.executable, "-c", _BOOT, _ROOT, str(theirs.fileno())),
                    pass_fds=(theirs.fileno(),),
                    stdin=asyncio.subprocess.DEVNULL,
                    env=os.environ.copy(),
                )
            finally:
                theirs.close()
            reader, self._writer = await asyncio.open_unix_connection(sock=ours)
            if not self.started:
                atexit.register(_stop_at_exit, self, asyncio.get_running_loop())
            self.started += 1
            log.info("provider_worker_started", pid=self._process.pid)
            self._reader = asyncio.create_task(self._read(reader, self._writer, self._process))

    async def _read(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        process: asyncio.subprocess.Process,
    ) -> None:
        while True:
            try:
                message = await read_message(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            try:
                self._dispatch(message)
            except Exception:  # a bad message must not stop every call's reader
                log.exception("provider_worker_message_failed", kind=str(message[0]))
        writer.close()
        if self._writer is writer:  # gone on its own (not stopped): calls in flight fail
            self._writer = None
            log.warning("provider_worker_stopped", pid=process.pid, calls=len(self._calls))
            calls, self._calls = self._calls, {}
            for call in calls.values():
                _fail(call, ProviderFailure(WORKER_GONE))
            await _reap(process)

    def _dispatch(self, message: tuple[Any, ...]) -> None:
        kind, call_id = message[0], message[1]
        call = self._calls.get(call_id)
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
            del self._calls[call_id]
            call.note(message[3])
            failure = message[2]
            if call.stream is not None:
                call.stream.finish(ProviderFailure(failure) if failure is not None else None)
        elif kind == "result":
            del self._calls[call_id]
            call.note(message[3])
            _settle(call.first, response_from(*message[2]))
        elif kind == "error":
            del self._calls[call_id]
            call.note(message[3])
            _fail(call, ProviderFailure(message[2]))
        elif kind == "done":
            del self._calls[call_id]
            _settle(call.first, None)

    def _open_gate(self, call_id: int, call: _Call) -> None:
        gate, call.gate = call.gate, None
        if gate is None or gate.send_now():
            self._send(("go", call_id))
            return
        record = call.record

        async def wait_then_go() -> None:
            await on_loop(record.loop if record is not None else None, gate.before_send)
            self._send(("go", call_id))

        call.gate_wait = asyncio.create_task(wait_then_go())


def _settle(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


def _fail(call: _Call, error: BaseException) -> None:
    if call.stream is not None:
        call.stream.finish(error)
    elif not call.first.done():
        call.first.set_exception(error)


def _stop_at_exit(worker: ProviderWorker, loop: asyncio.AbstractEventLoop) -> None:
    """At interpreter exit: let the worker go and reap it, rather than leave the provider loop's
    reader to be destroyed pending (a warning on every exit)."""
    if loop.is_closed() or not loop.is_running():
        return
    try:
        asyncio.run_coroutine_threadsafe(worker.stop(), loop).result(timeout=10)
    except Exception:  # exiting anyway
        pass


async def _reap(process: asyncio.subprocess.Process) -> None:
    try:
        await asyncio.wait_for(process.wait(), 5)
    except TimeoutError:
        process.kill()
        await process.wait()


class WorkerPool:
    """The worker processes (PROVIDER_WORKERS, default 1): a call goes to the one with the
    fewest calls in flight. One worker runs litellm on one core; past about 100 streams at once
    its CPU is the limit, and a machine with cores to spare can take more workers (each about
    300 MB of memory)."""

    def __init__(self, count: int = 1) -> None:
        self.workers = [ProviderWorker() for _ in range(count)]

    def resize(self, count: int) -> None:
        """Set the number of workers (at start-up, before any call)."""
        if count < 1:
            raise ValueError("at least one provider worker")
        while len(self.workers) < count:
            self.workers.append(ProviderWorker())
        del self.workers[count:]

    @property
    def pid(self) -> int | None:
        """The first worker's process id (None before it started)."""
        return self.workers[0].pid

    @property
    def pids(self) -> list[int]:
        return [w.pid for w in self.workers if w.pid is not None]

    async def call(self, name: str, kwargs: dict[str, Any]) -> Any:
        worker = min(self.workers, key=lambda w: w.in_flight)
        return await worker.call(name, kwargs)

    async def prepare(self, specs: Sequence[ClientSpec]) -> None:
        for worker in self.workers:
            await worker.prepare(specs)

    async def warm(self, model_names: Sequence[str]) -> None:
        await asyncio.gather(*(worker.warm(model_names) for worker in self.workers))

    async def close_pool(self, pool: int) -> None:
        for worker in self.workers:
            await worker.close_pool(pool)


WORKER = WorkerPool()


async def acompletion(**kwargs: Any) -> Any:
    """`litellm.acompletion(**kwargs)` in a worker (`client` is a ClientSpec)."""
    return await WORKER.call("completion", kwargs)


async def atranscription(**kwargs: Any) -> Any:
    """`litellm.atranscription(**kwargs)` in a worker (`client` is a ClientSpec)."""
    return await WORKER.call("transcription", kwargs)
