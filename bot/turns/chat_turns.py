"""Per-chat ordering and cancellation of chat turns.

Updates are processed concurrently across chats (PTB's concurrent updates), but a chat's own
turns run one at a time and in arrival order: a second message waits for the first reply to
finish, so the model always sees the conversation as the user wrote it. /cancel and /new do not
take the lock; they cancel the chat's running work directly: the reply, or before it the turn's
preparation (a voice note being transcribed, a photo downloaded, a document read), which is
registered the same way so that /cancel, /new and a graceful stop reach it too.

Telegram's Stop button on a streamed draft takes the same path as /cancel (`stop`), once the
reply that showed the draft says the press is its own; while the reply's tools run, it waits
for the running call to end instead (`StopSwitch`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from primitives.tasks import stop_tasks

T = TypeVar("T")

# The cancellation message of /forget's stop (`cancel(reason=...)`): the work it stops keeps
# nothing for later, since the forgetting deletes it.
FORGETTING = "forgetting"
# The cancellation message of a Stop press on a draft (`stop`).
STOPPED = "stopped"


@dataclass
class StopSwitch:
    """How a Stop press reaches a running reply.

    `owns(thread_id, draft_id)` says whether the pressed draft is the reply's (and the reply
    still streaming). While `tools_running`, a press only sets `requested`, which the agent
    loop reads between tool calls: a call that has started is never cut midway by a Stop, and
    none after it runs. Otherwise the press cancels the reply as /cancel does."""

    owns: Callable[[int | None, int], bool]
    requested: asyncio.Event = field(default_factory=asyncio.Event)
    tools_running: bool = False


class ChatTurns:
    """Per-chat locks (created lazily, dropped when idle) and the chat's running reply task."""

    def __init__(self) -> None:
        self._locks: dict[int, asyncio.Lock] = {}
        self._users: dict[int, int] = {}
        self._gates: dict[int, asyncio.Lock] = {}
        self._gate_users: dict[int, int] = {}
        self._running: dict[int, asyncio.Task[Any]] = {}
        self._switches: dict[int, StopSwitch] = {}
        # Work a turn started for after itself (a chat's move), referenced until done, so
        # none is collected half-way.
        self._after: set[asyncio.Task[Any]] = set()

    @asynccontextmanager
    async def serialised(self, chat_id: int) -> AsyncIterator[None]:
        """Hold the chat's lock. Waiters are served first come, first served.

        The bookkeeping before the first await keeps arrival order: PTB starts update tasks in
        order, and asyncio.Lock wakes waiters in the order they queued.
        """
        lock = self._locks.setdefault(chat_id, asyncio.Lock())
        self._users[chat_id] = self._users.get(chat_id, 0) + 1
        try:
            async with lock:
                yield
        finally:
            self._users[chat_id] -= 1
            if self._users[chat_id] == 0:
                del self._users[chat_id]
                del self._locks[chat_id]

    @asynccontextmanager
    async def session_gate(self, chat_id: int) -> AsyncIterator[None]:
        """Held by a turn while it stores its question and registers its reply, and by /new
        and /forget while they cancel that reply and change the session.

        So a question is stored either before /new — and its reply is registered by then, so
        /new cancels it, and what it showed lands in the old session before that closes — or
        after /new, in the new session. Without it, a turn that stored its question just after
        /new looked for a reply to cancel wrote its answer into the closed session. A turn
        holds the gate for one database write; /new for the cancel and its transaction.
        """
        lock = self._gates.setdefault(chat_id, asyncio.Lock())
        self._gate_users[chat_id] = self._gate_users.get(chat_id, 0) + 1
        try:
            async with lock:
                yield
        finally:
            self._gate_users[chat_id] -= 1
            if self._gate_users[chat_id] == 0:
                del self._gate_users[chat_id]
                del self._gates[chat_id]

    def waiting(self, chat_id: int) -> int:
        """Turns holding or queued for the chat's lock (for tests and /stats)."""
        return self._users.get(chat_id, 0)

    def begin(self, chat_id: int, work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Register `work` as the chat's running reply or preparation (cancellable from now on)."""
        task = asyncio.create_task(work)
        self._running[chat_id] = task
        return task

    async def join(self, chat_id: int, task: asyncio.Task[Any]) -> None:
        """Wait for a reply started with `begin`; its cancellation ends it quietly."""
        try:
            await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # we were cancelled ourselves (a stop), not just the reply
            # Only the reply was cancelled (/cancel, /new, /forget), possibly before it began:
            # the turn is over, not an error.
        finally:
            if self._running.get(chat_id) is task:
                del self._running[chat_id]

    def running_count(self) -> int:
        """Replies being written now (for /stats, /healthz and the graceful stop)."""
        return sum(1 for task in self._running.values() if not task.done())

    def running_tasks(self) -> list[asyncio.Task[Any]]:
        return [task for task in self._running.values() if not task.done()]

    async def cancel_all(self, *, wait: float = 10.0) -> int:
        """Cancel every running reply (graceful stop after the grace period); each ends with
        its note and stores what it showed."""
        tasks = self.running_tasks()
        await stop_tasks(tasks, patience=wait)
        return len(tasks)

    @contextmanager
    def stoppable(self, chat_id: int, switch: StopSwitch) -> Iterator[None]:
        """While inside, a Stop press in this chat is offered to `switch` (by the running reply,
        from its own task)."""
        self._switches[chat_id] = switch
        try:
            yield
        finally:
            if self._switches.get(chat_id) is switch:
                del self._switches[chat_id]

    def stop(self, chat_id: int, thread_id: int | None, draft_id: int) -> bool:
        """A Stop press on draft `draft_id`: stop the chat's running reply if the draft is its
        own. Returns whether it was; a press on a finished reply, another chat's or another
        reply's draft changes nothing. A second press of the same stop does nothing more (a
        second cancel would cut the stopped reply's own last message)."""
        switch = self._switches.get(chat_id)
        task = self._running.get(chat_id)
        if switch is None or task is None or task.done() or not switch.owns(thread_id, draft_id):
            return False
        if switch.requested.is_set():
            return True
        switch.requested.set()
        if not switch.tools_running:
            task.cancel(STOPPED)
        return True

    def stopping(self, chat_id: int) -> bool:
        """Whether the chat's running reply took a Stop and is winding down (tests, logs)."""
        switch = self._switches.get(chat_id)
        return switch is not None and switch.requested.is_set()

    def is_running(self, chat_id: int) -> bool:
        task = self._running.get(chat_id)
        return task is not None and not task.done()

    async def cancel(self, chat_id: int, *, wait: float = 10.0, reason: str | None = None) -> bool:
        """Cancel the chat's running reply and wait (bounded) until it has wound down.

        Waiting matters for /new: the cancelled reply stores what it showed, and that must
        land in the old session, before the new one opens. `reason` is the cancellation's
        message (`FORGETTING`), which the cancelled work reads from its CancelledError.
        """
        task = self._running.get(chat_id)
        if task is None or task.done():
            return False
        await stop_tasks([task], patience=wait, reason=reason)
        return True

    def after_turn(self, work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Start `work` now, for a turn that cannot wait for it: work that needs the chat
        (`serialised`) runs once that turn lets go."""
        task = asyncio.create_task(work)
        self._after.add(task)
        task.add_done_callback(self._after.discard)
        return task
