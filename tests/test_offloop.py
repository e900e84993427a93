"""models/offloop.py: litellm's calls and streams on a loop of their own, read from ours.

The transport tests (tests/test_transport.py, test_gateway_*.py) run every provider request
through it against the fake providers; these check the hand-over itself: order, errors in
place, closing, cancellation and context variables, with plain async generators.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from models.offloop import OffLoopStream, ProviderLoop

marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="unset")


@pytest.fixture
def providers() -> Iterator[ProviderLoop]:
    loop = ProviderLoop(name="test-providers")
    yield loop
    loop.close()


async def test_stream_items_cross_in_order_then_the_error_in_its_place(
    providers: ProviderLoop,
) -> None:
    seen_on: list[str] = []

    async def stream() -> AsyncIterator[int]:
        seen_on.append(threading.current_thread().name)
        for item in range(50):
            yield item
            if item % 7 == 0:
                await asyncio.sleep(0)  # let the consumer catch up now and then
        raise ValueError("provider went away")

    async def start() -> AsyncIterator[int]:
        return stream()

    response = await providers.acompletion(start)
    assert isinstance(response, OffLoopStream)
    received: list[int] = []
    with pytest.raises(ValueError, match="provider went away"):
        async for item in response:
            received.append(item)
    assert received == list(range(50))
    assert seen_on == ["test-providers"]  # produced on the provider thread, not ours
    await response.aclose()


async def test_a_plain_result_comes_back_as_is_and_context_travels(
    providers: ProviderLoop,
) -> None:
    marker.set("from the caller")

    async def call(**kwargs: Any) -> dict[str, Any]:
        return {"thread": threading.current_thread().name, "marker": marker.get(), **kwargs}

    result = await providers.acompletion(call, model="m")
    assert result == {"thread": "test-providers", "marker": "from the caller", "model": "m"}


async def test_aclose_stops_an_endless_stream_on_its_own_loop(providers: ProviderLoop) -> None:
    closed = threading.Event()

    async def endless() -> AsyncIterator[int]:
        try:
            n = 0
            while True:
                n += 1
                yield n
                await asyncio.sleep(0.001)
        finally:
            closed.set()

    async def start() -> AsyncIterator[int]:
        return endless()

    response = await providers.acompletion(start)
    first = await anext(response)
    assert first == 1
    await response.aclose()
    assert closed.is_set()
    await response.aclose()  # twice is harmless


async def test_a_consumer_that_gives_up_waiting_can_still_close(providers: ProviderLoop) -> None:
    """The transport's silence guard cancels the wait for the next chunk; the stream must then
    close cleanly (the provider side is cancelled there, not left running)."""
    released = threading.Event()

    async def silent() -> AsyncIterator[int]:
        try:
            yield 1
            await asyncio.sleep(3600)
            yield 2
        finally:
            released.set()

    async def start() -> AsyncIterator[int]:
        return silent()

    response = await providers.acompletion(start)
    assert await anext(response) == 1
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.2):
            await anext(response)
    await response.aclose()
    assert released.is_set()


async def test_cancelling_the_caller_cancels_the_call_there(providers: ProviderLoop) -> None:
    started = threading.Event()
    cancelled = threading.Event()

    async def hangs(**_: Any) -> None:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    task = asyncio.create_task(providers.acompletion(hangs))
    await asyncio.to_thread(started.wait, 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(cancelled.wait, 30)
