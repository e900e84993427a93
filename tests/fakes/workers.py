"""The provider workers (models/worker/interface.py) with no process, for the transport's unit
tests: swapped in as httpx's transports are swapped in tests (`Transport(workers=...)`).

The worker's own code (models/worker/child.py) runs on the test's loop, and the bot's side of
the calls (models/worker/remote.py `CallsInFlight`) reads what it says. Real litellm makes real
HTTP requests to the fake providers, and every message still goes through the protocol's
framing (models/worker/protocol.py), so what could not cross fails as it would. Only the
process and its socket are gone: no start-up, nothing to supervise, no litellm import in a
child per test run. What the process adds (a worker that dies, freezes, garbles, forks) is
tested against the real pool: tests/models/test_worker.py, tests/models/test_worker_supervision.py.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import pickle
from collections.abc import Sequence
from typing import Any

from models.worker.child import _Worker
from models.worker.ipc import ClientSpec
from models.worker.protocol import Call, ClosePool, Message, Prepare, Warm, decode, encode
from models.worker.remote import CallsInFlight, PendingCall
from models.worker.wire import SendGate, WireRecord


def _crossed(message: Message) -> Message:
    """`message` as the other side reads it: framed, pickled and read back."""
    return decode(pickle.loads(encode(message)[4:]))


class _SameLoopWorker(_Worker):
    """The worker's message handling, its answers handed to `deliver` instead of a socket."""

    def __init__(self, deliver: Any) -> None:
        super().__init__(writer=None)  # type: ignore[arg-type]  # nothing is written
        self._deliver = deliver

    def send(self, message: Message) -> None:
        self._deliver(message)

    async def drained(self) -> None:
        return None  # no socket to fill


class InProcessWorkers:
    """`ProviderWorkers` running the worker's code on the running loop (see the module)."""

    def __init__(self) -> None:
        self._calls = CallsInFlight(self._to_worker)
        self._worker = _SameLoopWorker(self._to_bot)
        self._pool_ids = itertools.count(1)

    def _to_worker(self, message: Message) -> None:
        asyncio.get_running_loop().call_soon(self._worker.handle, _crossed(message))

    def _to_bot(self, message: Message) -> None:
        asyncio.get_running_loop().call_soon(self._calls.answer, _crossed(message))

    async def call(
        self, name: str, kwargs: dict[str, Any], wire: WireRecord, gate: SendGate | None
    ) -> Any:
        call_id = self._calls.next_id()
        first = asyncio.get_running_loop().create_future()
        pending = PendingCall(wire, gate, first)
        client = kwargs.pop("client")
        message = _crossed(Call(call_id, name, kwargs, client, pending.gate is not None))
        self._calls.add(call_id, pending)
        asyncio.get_running_loop().call_soon(self._worker.handle, message)
        try:
            return await first
        except asyncio.CancelledError:
            self._calls.cancel(call_id)
            raise

    async def _request(self, kind: type[Prepare | Warm | ClosePool], arg: Any) -> Any:
        call_id = self._calls.next_id()
        first = asyncio.get_running_loop().create_future()
        self._calls.add(call_id, PendingCall(None, None, first, housekeeping=True))
        self._to_worker(kind(call_id, arg))
        return await first

    async def wait_ready(self) -> None:
        return None  # always ready: nothing to start

    async def warm_up(self, specs: Sequence[ClientSpec], model_names: Sequence[str]) -> None:
        await self._request(Prepare, list(specs))
        await self._request(Warm, list(model_names))

    def new_pool(self) -> int:
        return next(self._pool_ids)

    async def close_pool(self, pool: int) -> None:
        await self._request(ClosePool, pool)

    def status(self) -> list[dict[str, Any]]:
        return [
            {
                "number": 1,
                "pid": os.getpid(),
                "state": "ready",
                "rss_mib": None,
                "in_flight": self._calls.provider_calls,
                "restarts": 0,
                "cpu": 0.0,
            }
        ]

    async def aclose(self) -> None:
        """Stop what is running in it and close its HTTP clients."""
        await self._worker.aclose()
