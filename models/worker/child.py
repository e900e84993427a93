"""The provider worker process: litellm's calls, the HTTP clients and the wire record live here.

Started by models/worker/pool.py with one end of a socket pair. It serves calls until that socket
closes (the bot stopped, or was killed: the worker never outlives it). Each call runs as its
own task; what the bot must decide from (the HTTP status, headers and error body, the classified
failure) is sent back with the call's result, so nothing of litellm's crosses but plain data.

Every message either way is one of models/worker/protocol.py. The one thing asked of the bot
during a call is the send gate: right before the request leaves, the request hook
(models/worker/wire.py) sends `Gate` and waits for `Go`, so the gateway's pacing in the bot
spaces the requests as they really leave, after litellm's set-up here.

The bot supervises us: `Ready` once litellm is imported, `Pong` to each `Ping`. Our logs go
through the same scrubbing JSON pipeline as the bot's (models/logging_setup.py), with every key
a call brings registered before the call runs; what litellm or Python print to stdout/stderr goes
through it too, line by line.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import io
import logging
import os
import signal
import socket
import sys
import threading
import warnings
from collections.abc import Coroutine, Sequence
from typing import Any, NoReturn

import litellm
import structlog

from models.errors import classify_exception
from models.logging_setup import configure_logging, install_exception_hooks, redactor
from models.worker.clients import ClientPool
from models.worker.ipc import ClientSpec, WireFields, chunk_data, hidden_headers, response_data
from models.worker.protocol import (
    Call,
    Cancel,
    Chunk,
    ClosePool,
    Done,
    End,
    Error,
    Fork,
    Gate,
    Go,
    Local,
    Message,
    Ping,
    Pong,
    Prepare,
    Ready,
    Result,
    Stream,
    Warm,
    encode,
    read_message,
)
from models.worker.wire import WireRecord, start_record

log = structlog.get_logger(__name__)

litellm.suppress_debug_info = True
litellm.disable_hf_tokenizer_download = True
# litellm counts every request's prompt with tiktoken, to price it (`response_cost`, which we
# never read) and to make up usage a provider did not report (the bot estimates that itself and
# flags it: `estimate_usage` in models/billing.py). Its two encodings cost this process 115 MiB
# and every request a tokenizer pass over its whole prompt. With the counter off, a usage nobody
# reported arrives as zeros, which models/worker/ipc.py reads as none.
litellm.disable_token_counter = True
# litellm.acompletion builds the request's coroutine in a thread (`run_in_executor`) and awaits
# it when the thread returns; a call cancelled meanwhile (a timeout, a /cancel) drops it unrun,
# so no request left, and Python warns on stderr. Seen in benchmarks/consolidation.py.
warnings.filterwarnings(
    "ignore",
    message=r"coroutine '(OpenAIChatCompletion|BaseLLMHTTPHandler|AnthropicChatCompletion)\.",
    category=RuntimeWarning,
)

# Past this many bytes waiting to go to the bot, a stream stops reading its provider until the
# bot has read them (the socket's own backpressure reaches the provider's TCP window).
_WRITE_HIGH_WATER = 1024 * 1024

# litellm's handlers for these take `encoding=` (its cl100k tokenizer) on every call.
_TOKENIZER_PROTOCOLS = frozenset({"anthropic", "groq"})

_CALLS = {"completion": litellm.acompletion, "transcription": litellm.atranscription}


class _RemoteGate:
    """The send gate of one call (models/wire.SendGate), asked of the bot, which keeps the
    gateway's pace."""

    def __init__(self, worker: _Worker, call_id: int) -> None:
        self._worker = worker
        self._call_id = call_id

    def send_now(self) -> bool:
        return False  # only the bot knows the pace

    async def before_send(self) -> None:
        go = asyncio.get_running_loop().create_future()
        self._worker.gates[self._call_id] = go
        self._worker.send(Gate(self._call_id))
        try:
            await go
        finally:
            self._worker.gates.pop(self._call_id, None)

    def left(self, seconds_ago: float) -> None:
        """Nothing to tell here: the bot's pacer hears when the request left from the call's
        reported `left_at` (models/worker/remote.py `PendingCall.note`)."""


class _Worker:
    def __init__(self, writer: asyncio.StreamWriter, spares: dict[int, int] | None = None) -> None:
        self._writer = writer
        self._spares = spares or {}  # the sockets workers forked from us serve on (`_fork`)
        self._pools: dict[int, ClientPool] = {}
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self.gates: dict[int, asyncio.Future[None]] = {}
        self._outbox: list[bytes] = []

    def send(self, message: Message) -> None:
        """Queue `message`; what one turn of the loop queued leaves in one write (a system call
        per streamed chunk was 5 % of the worker's loop with 100 streams)."""
        if not self._outbox:
            asyncio.get_running_loop().call_soon(self._flush)
        self._outbox.append(encode(message))

    def _flush(self) -> None:
        outbox, self._outbox = self._outbox, []
        if not self._writer.is_closing():
            self._writer.write(b"".join(outbox))

    async def drained(self) -> None:
        """Wait while the bot is behind reading what we sent."""
        self._flush()
        if self._writer.transport.get_write_buffer_size() > _WRITE_HIGH_WATER:
            await self._writer.drain()

    def handle(self, message: Message) -> None:
        match message:
            case Ping():
                self.send(Pong())
            case Call(call_id, name, kwargs, spec, gated):
                redactor().add([spec.key])
                self._start(call_id, self._call(call_id, name, kwargs, spec, gated))
            case Go(call_id):
                go = self.gates.get(call_id)
                if go is not None and not go.done():
                    go.set_result(None)
            case Cancel(call_id):
                task = self._tasks.get(call_id)
                if task is not None:
                    task.cancel()  # the bot stopped the call: the call reports its own End
            case Fork(call_id, index):
                self._track(call_id, self._fork(index))
            case Prepare(call_id, specs):
                self._track(call_id, self._prepare(specs))
            case Warm(call_id, names):
                self._track(call_id, _warm_litellm(names))
            case ClosePool(call_id, pool):
                self._track(call_id, self._close_pool(pool))

    def _track(self, call_id: int, work: Any) -> None:
        async def run() -> None:
            result = None
            try:
                result = await work
            finally:
                self.send(Done(call_id, result))

        self._start(call_id, run())

    def _start(self, call_id: int, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` as call `call_id`'s task, known (to `Cancel` and the exit) until it ends."""

        def forget(_task: asyncio.Task[None]) -> None:
            self._tasks.pop(call_id, None)

        task = asyncio.create_task(work)
        self._tasks[call_id] = task
        task.add_done_callback(forget)

    async def _fork(self, index: int) -> int | None:
        """Start another worker as a copy of this one: it imports nothing, where a new process
        spends seconds of CPU importing litellm, in the middle of the rush that asked for it.
        The copy serves on the spare socket `index` of those the bot gave us at our start; its
        pid, or None without that spare."""
        spare = self._spares.pop(index, None)
        if spare is None:
            return None
        forked: concurrent.futures.Future[int] = concurrent.futures.Future()

        def fork_here() -> None:
            # In a thread of its own: the child keeps only the thread that forked, so it holds
            # none of our loop's callbacks, and starts a loop of its own.
            try:
                pid = os.fork()
            except BaseException as exc:
                forked.set_exception(exc)
                return
            if pid == 0:
                _serve_forked(spare)
            forked.set_result(pid)

        threading.Thread(target=fork_here, name="provider-worker-fork", daemon=True).start()
        try:
            pid = await asyncio.wrap_future(forked)
        finally:
            os.close(spare)
        log.info("provider_worker_forked", pid=pid)
        return pid

    def _client(self, spec: ClientSpec) -> Any:
        redactor().add([spec.key])
        pool = self._pools.setdefault(spec.pool, ClientPool())
        if spec.sdk:
            return pool.sdk_client_for(spec.gateway, spec.key_index, spec.key)
        return pool.client_for(spec.gateway, spec.key_index, spec.key)

    async def _prepare(self, specs: Sequence[ClientSpec]) -> None:
        def build() -> None:
            for spec in specs:
                self._pools.setdefault(spec.pool, ClientPool()).prepare(
                    spec.gateway, spec.key_index, spec.key
                )

        build()

    async def _close_pool(self, pool: int) -> None:
        clients = self._pools.pop(pool, None)
        if clients is not None:
            await clients.aclose()

    async def _call(
        self, call_id: int, name: str, kwargs: dict[str, Any], spec: ClientSpec, gated: bool
    ) -> None:
        try:
            await self._run_call(call_id, name, kwargs, spec, gated)
        except Exception as exc:  # ours, around litellm's answer (one we could not pickle, ...)
            log.exception("provider_worker_call_failed")
            self.send(Local(call_id, f"provider worker: {type(exc).__name__}"))

    async def _run_call(
        self, call_id: int, name: str, kwargs: dict[str, Any], spec: ClientSpec, gated: bool
    ) -> None:
        record = start_record()
        if gated:
            record.gate = _RemoteGate(self, call_id)
        kwargs["client"] = self._client(spec)
        try:
            response = await _CALLS[name](**kwargs)
        except asyncio.CancelledError:
            return  # the bot gave up on it and forgot it
        except Exception as exc:
            refused = classify_exception(exc, record.status, record.headers, record.error_body)
            log.debug("provider_call_failed", outcome=refused.outcome.value, error=str(exc))
            self.send(Error(call_id, refused, _wire(record)))
            return
        if not hasattr(response, "__aiter__"):
            self.send(Result(call_id, *response_data(response), _wire(record)))
            return
        self.send(Stream(call_id, hidden_headers(response), _wire(record)))
        failure = None
        try:
            async for chunk in response:
                self.send(Chunk(call_id, chunk_data(chunk)))
                if len(self._outbox) > 64:
                    await self.drained()
        except asyncio.CancelledError:
            return  # closed by the bot (cancelled, timed out, or it stopped reading)
        except Exception as exc:
            failure = classify_exception(exc, record.status, record.headers, record.error_body)
        finally:
            close = getattr(response, "aclose", None)
            if close is not None:
                try:
                    await close()
                except Exception:  # closing a broken stream may fail again; nothing to do
                    pass
        self.send(End(call_id, failure, _wire(record)))

    async def aclose(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()  # the worker is exiting: each call's finally closes its response
        for pool in list(self._pools):
            await self._close_pool(pool)


def _wire(record: WireRecord) -> WireFields:
    return record.status, record.headers, record.error_body, record.left_at


async def _warm_litellm(model_names: Sequence[str]) -> None:
    """Load now what litellm would load during a model's first real call: through a mocked
    call per model (no request leaves), the code of its stream and pricing (~110 ms of CPU);
    and for the protocols whose handlers litellm hands a tokenizer on every call (Anthropic's
    and Groq's, even with the counter off), that tokenizer (cl100k, ~200 ms and 33 MiB). An
    OpenAI-only bot never loads it."""
    if any(name.split("/", 1)[0] in _TOKENIZER_PROTOCOLS for name in model_names):
        await asyncio.to_thread(getattr, litellm, "encoding")
    for name in model_names:
        try:
            stream = await litellm.acompletion(
                model=name,
                messages=[{"role": "user", "content": "warm up"}],
                mock_response="ok",
                stream=True,
                stream_options={"include_usage": True},
            )
            async for _ in stream:
                pass
        except Exception:  # only an optimisation
            continue


async def serve(sock: socket.socket, spares: dict[int, int] | None = None) -> None:
    reader, writer = await asyncio.open_unix_connection(sock=sock)
    worker = _Worker(writer, spares)
    asyncio.get_running_loop().set_exception_handler(_loop_errors)
    worker.send(Ready(os.getpid()))
    try:
        while True:
            try:
                message = await read_message(reader)
            except Exception:  # the bot has gone, or what came is not a message: we end
                return
            worker.handle(message)
    finally:
        await worker.aclose()
        writer.close()


class _LoggedOutput(io.TextIOBase):
    """sys.stdout/sys.stderr: each line becomes a log event, scrubbed like every other."""

    def __init__(self, name: str) -> None:
        self._logger = logging.getLogger(f"provider_worker.{name}")
        self._pending = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        lines = (self._pending + text).split("\n")
        self._pending = lines.pop()
        for line in lines:
            if line.strip():
                self._logger.warning(line)
        return len(text)

    def flush(self) -> None:
        if self._pending.strip():
            self._logger.warning(self._pending)
        self._pending = ""


def _log_through_the_scrubber() -> None:
    fmt = os.environ.get("LOG_FORMAT") or "json"
    configure_logging(
        level=os.environ.get("LOG_LEVEL") or "INFO",
        fmt="console" if fmt == "console" else "json",
        stream=sys.__stderr__,
    )
    install_exception_hooks()
    logging.captureWarnings(True)
    for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):
        # litellm gives its loggers a handler of their own on the raw stderr (LITELLM_LOG):
        # theirs go through ours instead.
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
        logger.propagate = True
    sys.stdout = _LoggedOutput("stdout")
    sys.stderr = _LoggedOutput("stderr")


def _serve_forked(fd: int) -> NoReturn:
    """The copy `_fork` made: close every descriptor the original held but our socket (its bot
    link, its provider connections, its loop's), then serve on a loop of our own. The
    original's objects stay in memory, unreferenced by anything that runs."""
    try:
        for name in os.listdir("/proc/self/fd"):
            number = int(name)
            if number > 2 and number != fd:
                with contextlib.suppress(OSError):
                    os.close(number)
        asyncio.run(serve(socket.socket(fileno=fd)))
    except BaseException:
        log.exception("provider_worker_fork_failed")
    finally:
        os._exit(0)


def main() -> None:
    """`python -c ... main()` with the socket's descriptor (and, when the bot may ask for
    copies of us, the spare sockets') as the last arguments."""
    sock = socket.socket(fileno=int(sys.argv[1]))
    spares = dict(enumerate(int(fd) for fd in sys.argv[2:]))
    _log_through_the_scrubber()
    # Ctrl-C in a terminal (and a stop sent to the whole group) reaches us with the bot: the bot
    # stops gracefully and still needs us for the replies it lets finish. We leave when it has
    # gone and our socket closes.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the copies we fork are reaped by the kernel
    # Everything imported so far lives as long as the process: keep it out of collections.
    gc.collect()
    gc.freeze()
    asyncio.run(serve(sock, spares))


def _loop_errors(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    log.error("event_loop_exception", detail=str(context.get("message", "")),
              exc_info=context.get("exception"))  # fmt: skip
