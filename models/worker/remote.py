"""The bot's side of the calls in flight on one provider worker: where a call's answer, its
wire fields and its streamed chunks go, and its send gate (models/worker/process.py reads the
worker's messages and hands them here)."""

from __future__ import annotations

import asyncio
import collections
import time
from typing import TYPE_CHECKING, Any

from models.worker.ipc import WireFields
from models.worker.wire import WireRecord

if TYPE_CHECKING:
    from models.worker.process import ProviderWorker


class PendingCall:
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


def settle(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)
