"""A second event loop, on its own thread, for the provider calls, so chats do not wait behind them.

litellm itself runs in the provider worker process (models/worker.py): its CPU per request and
per streamed chunk (set-up, SSE decoding, pydantic objects, litellm's chunk wrapper) would take
the GIL from the loop that serves Telegram and the database. What stays in the bot is reading
the worker's socket and relaying each call's messages; that runs here (`ProviderLoop`), and the
caller's loop only takes what is ready. Streamed chunks cross to the caller's loop in batches:
the provider side appends to a buffer and wakes the consumer only when it is waiting, so all
chunks that arrived since the consumer last looked cost it one wake-up, and each chunk a deque
pop.

Context variables travel with each call (asyncio copies the caller's context into the task it
starts on the other loop), so the attempt's wire record (models/wire.py) reaches the code that
fills it in from the worker's answers.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class ProviderLoop:
    """A daemon thread running an asyncio loop, started on first use, shared by the process."""

    def __init__(self, name: str = "providers") -> None:
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._start_lock = threading.Lock()

    def loop(self) -> asyncio.AbstractEventLoop:
        with self._start_lock:
            if self._loop is None or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def serve() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                # A daemon: the process exits without stopping it (nothing of ours is pending
                # there by then; the transport closed its clients on this loop).
                threading.Thread(target=serve, name=self._name, daemon=True).start()
                ready.wait()
                self._loop = loop
            return self._loop

    def close(self) -> None:
        """Stop the loop and its thread (tests; the process's own loop lives as long as it)."""
        with self._start_lock:
            loop, self._loop = self._loop, None
        if loop is not None and not loop.is_closed():
            done = threading.Event()
            loop.call_soon_threadsafe(lambda: (loop.stop(), done.set()))
            done.wait()

    async def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run `coroutine` on the provider loop; cancelling the caller cancels it there."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop())
        return await asyncio.wrap_future(future)

    async def acompletion(self, call: Callable[..., Awaitable[Any]], **kwargs: Any) -> Any:
        """`await call(**kwargs)` (litellm.acompletion, atranscription) on the provider loop.
        A stream comes back wrapped, to be iterated from the caller's loop."""
        result = await self.run(_call(call, kwargs))
        if hasattr(result, "__aiter__"):
            return OffLoopStream(result, self, asyncio.get_running_loop())
        return result


async def _call(call: Callable[..., Awaitable[Any]], kwargs: dict[str, Any]) -> Any:
    return await call(**kwargs)


async def on_loop(
    loop: asyncio.AbstractEventLoop | None, function: Callable[[], Awaitable[T]]
) -> T:
    """`await function()` on `loop` (the caller's: where the state it touches lives), from
    whichever loop we are on. The pacer's send gate is awaited this way by the HTTP request
    hook, which runs on the provider loop. Cancelling the waiter cancels it there."""
    if loop is None or loop is asyncio.get_running_loop():
        return await function()

    async def call() -> T:
        return await function()

    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(call(), loop))


class OffLoopStream:
    """Iterate, from the consumer's loop, an async stream that lives on the provider loop.

    A pump task on the provider loop reads the stream into a buffer; `__anext__` takes from the
    buffer and waits (one future, set from the other thread) only when it is empty. Errors are
    raised to the consumer in their place, after the chunks that came before them. Attributes
    not defined here (litellm's `_hidden_params`, ...) are the stream's own.
    """

    def __init__(
        self, stream: Any, provider: ProviderLoop, consumer: asyncio.AbstractEventLoop
    ) -> None:
        self._stream = stream
        self._provider = provider
        self._consumer = consumer
        self._lock = threading.Lock()
        self._buffer: collections.deque[Any] = collections.deque()
        self._finished = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._pump_task: asyncio.Task[None] | None = None
        self._closed = False
        self._pump = asyncio.run_coroutine_threadsafe(self._pump_chunks(), provider.loop())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def __aiter__(self) -> OffLoopStream:
        return self

    async def __anext__(self) -> Any:
        while True:
            with self._lock:
                if self._buffer:
                    return self._buffer.popleft()
                if self._finished:
                    if self._error is not None:
                        raise self._error
                    raise StopAsyncIteration
                waiter = self._consumer.create_future()
                self._waiter = waiter
            try:
                await waiter
            finally:
                with self._lock:
                    if self._waiter is waiter:
                        self._waiter = None

    async def aclose(self) -> None:
        """Stop reading and close the stream on the provider loop; waits until it is closed
        (even if the caller is cancelled meanwhile: a half-closed stream would leak)."""
        if self._closed:
            return
        self._closed = True
        await asyncio.shield(self._provider.run(self._shutdown()))

    # ---- provider side ----------------------------------------------------------------------

    async def _pump_chunks(self) -> None:
        self._pump_task = asyncio.current_task()
        error: BaseException | None = None
        try:
            async for chunk in self._stream:
                with self._lock:
                    self._buffer.append(chunk)
                    waiter, self._waiter = self._waiter, None
                if waiter is not None:
                    self._consumer.call_soon_threadsafe(_wake, waiter)
        except asyncio.CancelledError:
            error = asyncio.CancelledError()
        except BaseException as exc:  # handed to the consumer, who classifies it
            error = exc
        finally:
            with self._lock:
                self._finished = True
                self._error = error
                waiter, self._waiter = self._waiter, None
            if waiter is not None:
                self._consumer.call_soon_threadsafe(_wake, waiter)

    async def _shutdown(self) -> None:
        task = self._pump_task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task})
        elif task is None:
            self._pump.cancel()
        close = getattr(self._stream, "aclose", None)
        if close is not None:
            try:
                await close()
            except Exception:  # closing a broken stream may fail again; nothing to do
                pass


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


PROVIDERS = ProviderLoop()
