"""The bot's side of the calls in flight on one provider worker: where a call's answer, its
wire fields and its streamed chunks go, and its send gate.

`CallsInFlight` is the bot's half of the protocol (models/worker/protocol.py) for calls: it
numbers them, reads the worker's answers to them and sends `Go` and `Cancel`. It knows nothing
of processes or sockets: models/worker/process.py hands it what a worker process sends, and
tests/fakes/workers.py what the worker's own code (models/worker/child.py) says on the same
loop, with no process at all.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import time
from collections.abc import Callable
from typing import Any

from models.worker.ipc import (
    CallNotEncodedError,
    ProviderCallError,
    WireFields,
    chunk_from,
    response_from,
)
from models.worker.protocol import (
    Cancel,
    Chunk,
    Done,
    End,
    Error,
    Gate,
    Go,
    Local,
    Message,
    Result,
    Stream,
)
from models.worker.wire import SendGate, WireRecord


class PendingCall:
    """One call in flight: where its wire fields go, its send gate, its first answer."""

    def __init__(
        self,
        record: WireRecord | None,
        gate: SendGate | None,
        first: asyncio.Future[Any],
        *,
        housekeeping: bool = False,
    ) -> None:
        self.housekeeping = housekeeping  # prepare, warm, close_pool: not a provider call
        self.record = record
        self.gate = gate
        self.paced_by = gate  # told when the request really left (`note`)
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
            self.gate_wait.cancel()  # its Go is moot for a failed call; nothing awaits it
        if self.stream is not None:
            self.stream.finish(error)
        elif not self.first.done():
            self.first.set_exception(error)


class RemoteStream:
    """A stream whose chunks the worker sends."""

    def __init__(self, calls: CallsInFlight, call_id: int, headers: dict[str, str]) -> None:
        self._calls = calls
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
            self._calls.cancel(self._call_id)


def settle(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


class CallsInFlight:
    """The calls in flight on one worker, by number, and the worker's answers to them.
    `send` takes a message to the worker (`Go`, `Cancel`)."""

    def __init__(self, send: Callable[[Message], None]) -> None:
        self._send = send
        self._ids = itertools.count(1)
        self._calls: dict[int, PendingCall] = {}

    def __len__(self) -> int:
        return len(self._calls)

    @property
    def provider_calls(self) -> int:
        """Provider calls in flight (housekeeping requests not counted)."""
        return sum(1 for call in self._calls.values() if not call.housekeeping)

    def next_id(self) -> int:
        return next(self._ids)

    def add(self, call_id: int, call: PendingCall) -> None:
        self._calls[call_id] = call

    def cancel(self, call_id: int) -> None:
        """Forget the call and tell the worker to stop it."""
        call = self._calls.pop(call_id, None)
        if call is not None:
            if call.gate_wait is not None:
                call.gate_wait.cancel()  # no Go for a call the worker is told to stop
            self._send(Cancel(call_id))

    def fail_all(self, error: BaseException | None) -> None:
        """The worker is gone: forget every call (each fails with `error`, if given)."""
        calls, self._calls = self._calls, {}
        if error is not None:
            for call in calls.values():
                call.fail(error)

    def answer(self, message: Message) -> None:
        """A message of the worker's about one call; a call cancelled meanwhile is ignored."""
        call_id: int = getattr(message, "call_id", 0)
        call = self._calls.get(call_id)
        if call is None:
            return  # cancelled by the bot meanwhile
        match message:
            case Chunk(_, data):
                if call.stream is not None:
                    call.stream.feed(chunk_from(data))
            case Gate():
                self._open_gate(call_id, call)
            case Stream(_, headers, wire):
                call.note(wire)
                call.stream = RemoteStream(self, call_id, headers)
                settle(call.first, call.stream)
            case End(_, failure, wire):
                del self._calls[call_id]
                call.note(wire)
                if call.stream is not None:
                    call.stream.finish(ProviderCallError(failure) if failure is not None else None)
            case Result(_, data, headers, wire):
                del self._calls[call_id]
                call.note(wire)
                settle(call.first, response_from(data, headers))
            case Error(_, failure, wire):
                del self._calls[call_id]
                call.note(wire)
                call.fail(ProviderCallError(failure))
            case Local(_, detail):  # the worker could not send the answer (not the provider's)
                del self._calls[call_id]
                call.fail(CallNotEncodedError(detail))
            case Done(_, result):
                del self._calls[call_id]
                settle(call.first, result)
            case _:
                raise ValueError(f"not a message for the bot: {message.kind!r}")

    def _open_gate(self, call_id: int, call: PendingCall) -> None:
        gate, call.gate = call.gate, None
        if gate is None or gate.send_now():
            self._send(Go(call_id))
            return

        async def wait_then_go() -> None:
            await gate.before_send()
            self._send(Go(call_id))

        call.gate_wait = asyncio.get_running_loop().create_task(wait_then_go())
