"""What handlers and the runner share about starting and stopping: which update each handler
task works on, the closing flag, and the updates held for the next start.

The order of a graceful stop, and why each step exists, is in bot/runner.py. This module is
the part handlers touch (a turn that has not started while the bot stops is *held*: its update,
with any split-message parts, is written to `held_updates` and replayed first on the next
start), so it knows nothing of `Services` or of the runner.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import structlog
from telegram import Update
from telegram.ext import Application, BaseUpdateProcessor

from memory.store import to_iso
from primitives.clock import utc_now

if TYPE_CHECKING:
    from bot.turns.chat_turns import ChatTurns
    from memory.db import Database

log = structlog.get_logger("bot.lifecycle")

App = Application[Any, Any, Any, Any, Any, Any]


class UpdateTracker(BaseUpdateProcessor):
    """PTB's concurrent update processing, knowing which update each handler task works on.

    That is what lets a held turn save its own update, and the parts that joined it.
    """

    def __init__(self, max_concurrent_updates: int = 1024) -> None:
        super().__init__(max_concurrent_updates)
        self._active: dict[asyncio.Task[Any], Update] = {}
        self._parts: dict[int, list[Update]] = {}  # first part's update id -> later parts
        # Updates whose user message a chat turn stored: an error later in the same update
        # (another handler's) may tell the user the message is saved.
        self._stored: set[int] = set()
        self.on_done: Callable[[int], Awaitable[None]] | None = None

    async def initialize(self) -> None:
        return None

    async def shutdown(self) -> None:
        return None

    async def do_process_update(self, update: object, coroutine: Awaitable[Any]) -> None:
        task = asyncio.current_task()
        if not isinstance(update, Update) or task is None:
            await coroutine
            return
        self._active[task] = update
        chat = update.effective_chat
        # Every log line of this update's handlers, and of the tasks they start (a chat turn,
        # its streamed reply), carries the update and its chat: each update runs in a task of
        # its own, whose context these are bound in.
        bound = {"update_id": update.update_id, **({"chat_id": chat.id} if chat else {})}
        try:
            with structlog.contextvars.bound_contextvars(**bound):
                await coroutine
        finally:
            del self._active[task]
            self._parts.pop(update.update_id, None)
            self._stored.discard(update.update_id)
            if self.on_done is not None:
                await self.on_done(update.update_id)

    def current(self) -> Update | None:
        task = asyncio.current_task()
        return self._active.get(task) if task is not None else None

    def join_current_to(self, first_part: int) -> None:
        """The current update is a later part of `first_part`'s turn (kept with it if held)."""
        update = self.current()
        if update is not None and any(u.update_id == first_part for u in self._active.values()):
            self._parts.setdefault(first_part, []).append(update)

    def mark_stored(self, update_id: int) -> None:
        """The handler's turn stored this update's message (until the update is done)."""
        self._stored.add(update_id)

    def stored(self, update_id: int) -> bool:
        return update_id in self._stored

    def parts_of(self, update_id: int) -> list[Update]:
        return list(self._parts.get(update_id, []))

    @property
    def in_progress(self) -> int:
        return len(self._active)


def tracker_of(application: App) -> UpdateTracker:
    """The application's update processor: the `UpdateTracker` bot/app.py gave PTB."""
    processor = application.update_processor
    assert isinstance(processor, UpdateTracker), "bot/app.py builds PTB with an UpdateTracker"
    return processor


class Lifecycle:
    """What handlers and the runner share about starting and stopping.

    Built once the database is open, on the tracker PTB was built with (which exists before
    any database does): the lifecycle is what the tracker tells when an update is done.
    `on_closing` is called, in order, as a graceful stop begins."""

    def __init__(
        self, tracker: UpdateTracker, db: Database, on_closing: Sequence[Callable[[], None]] = ()
    ) -> None:
        self.tracker = tracker
        tracker.on_done = self._forget_held
        self.db = db
        self.on_closing = tuple(on_closing)
        self.closing = False
        self._replayed: set[int] = set()
        self.held = 0

    @asynccontextmanager
    async def admitted_turn(self, turns: ChatTurns, chat_id: int) -> AsyncIterator[bool]:
        """The chat's turn lock; yields False if the bot is stopping, in which case the turn's
        update has been held for the next start and the caller must not answer it."""
        async with turns.serialised(chat_id):
            if self.closing:
                await self.hold_current()
                yield False
            else:
                # A replayed turn leaves the held list as it starts: if a stop cuts its reply
                # short, it must not be replayed (and answered) a second time.
                update = self.tracker.current()
                if update is not None:
                    await self._forget_held(update.update_id)
                yield True

    async def hold_current(self) -> None:
        """Keep the current update (and its split-message parts) for the next start."""
        update = self.tracker.current()
        if update is None:
            log.warning("turn_dropped_on_stop", reason="no update")
            return
        updates = [update, *self.tracker.parts_of(update.update_id)]
        await save_held_updates(self.db, updates)
        self.held += len(updates)
        chat = update.effective_chat
        log.info(
            "turn_held_for_restart",
            chat_id=chat.id if chat else None,
            updates=[u.update_id for u in updates],
        )

    def begin_closing(self) -> None:
        if self.closing:
            return
        self.closing = True
        for callback in self.on_closing:
            try:
                callback()
            except Exception:
                log.exception("closing_callback_failed")

    async def replay_held(self, application: App) -> int:
        """Queue the updates held at the last stop, oldest first, ahead of anything new."""
        rows = await self.db.fetchall(
            "SELECT update_id, payload FROM held_updates ORDER BY update_id"
        )
        for row in rows:
            update = Update.de_json(json.loads(row["payload"]), application.bot)
            self._replayed.add(update.update_id)
            await application.update_queue.put(update)
        if rows:
            log.info("held_updates_replayed", count=len(rows))
        return len(rows)

    async def _forget_held(self, update_id: int) -> None:
        """A replayed update was handled (or held again, which rewrote its row first)."""
        if update_id not in self._replayed:
            return
        self._replayed.discard(update_id)
        if self.closing:
            return  # it may just have been held again: keep the row
        await self.db.run_in_transaction(
            lambda conn: conn.execute("DELETE FROM held_updates WHERE update_id = ?", (update_id,))
        )


async def save_held_updates(db: Database, updates: list[Update]) -> None:
    now = to_iso(utc_now())
    rows = [(u.update_id, json.dumps(u.to_dict(), ensure_ascii=False), now) for u in updates]
    await db.run_in_transaction(
        lambda conn: conn.executemany(
            "INSERT OR REPLACE INTO held_updates(update_id, payload, held_at) VALUES (?, ?, ?)",
            rows,
        )
    )
