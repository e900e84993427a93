"""Running the bot (polling or webhook, plus the health endpoint) and stopping it gracefully.

A stop (SIGTERM, SIGINT) goes in this order, and each step exists so that nothing is lost:

1. Stop taking work: /healthz answers 503, waiting split-message groups are released, and the
   consolidation worker launches no new job (running ones get the grace period).
2. Stop fetching updates (polling) or stop the webhook server (Telegram keeps and retries what
   it could not post).
3. Replies being written get SHUTDOWN_GRACE_SECONDS to finish. A reply still running then is
   ended with a note, and what was shown is stored.
4. Chat turns that had not started are *held*: their update (with any split-message parts) is
   written to `held_updates` instead of being answered. Telegram has already forgotten them —
   PTB confirms fetched updates on its next getUpdates, a webhook post was answered 200 — so
   only our copy can save them. On the next start they are handled first, then deleted.
5. Close the application and the services; an unfinished consolidation stays queued.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import structlog
from telegram import Update
from telegram.ext import Application, BaseUpdateProcessor

from bot.health import HealthServer
from memory.store import from_iso, to_iso, utc_now

if TYPE_CHECKING:
    from bot.app import Services
    from bot.chat_turns import ChatTurns
    from bot.config import Settings
    from memory.db import Database

log = structlog.get_logger("bot.lifecycle")

LIFECYCLE_KEY = "lifecycle"
ALLOWED_UPDATES = ["message", "callback_query"]

App = Application[Any, Any, Any, Any, Any, Any]


class UpdateTracker(BaseUpdateProcessor):
    """PTB's concurrent update processing, knowing which update each handler task works on.

    That is what lets a held turn save its own update, and the parts that joined it.
    """

    def __init__(self, max_concurrent_updates: int = 1024) -> None:
        super().__init__(max_concurrent_updates)
        self._active: dict[asyncio.Task[Any], Update] = {}
        self._parts: dict[int, list[Update]] = {}  # first part's update id -> later parts
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
        try:
            await coroutine
        finally:
            del self._active[task]
            self._parts.pop(update.update_id, None)
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

    def parts_of(self, update_id: int) -> list[Update]:
        return list(self._parts.get(update_id, []))

    @property
    def in_progress(self) -> int:
        return len(self._active)


class Lifecycle:
    """What handlers and the runner share about starting and stopping."""

    def __init__(self) -> None:
        self.tracker = UpdateTracker()
        self.tracker.on_done = self._forget_held
        self.closing = False
        self.db: Database | None = None
        self.on_closing: list[Callable[[], None]] = []
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
        if update is None or self.db is None:
            log.warning("turn_dropped_on_stop", reason="no update or database")
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
        if self.db is None:
            return 0
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
        if update_id not in self._replayed or self.db is None:
            return
        self._replayed.discard(update_id)
        if self.closing:
            return  # it may just have been held again: keep the row
        async with self.db.transaction() as conn:
            await conn.execute("DELETE FROM held_updates WHERE update_id = ?", (update_id,))


def lifecycle_of(application: App) -> Lifecycle:
    return application.bot_data[LIFECYCLE_KEY]


async def save_held_updates(db: Database, updates: list[Update]) -> None:
    now = to_iso(utc_now())
    async with db.transaction() as conn:
        await conn.executemany(
            "INSERT OR REPLACE INTO held_updates(update_id, payload, held_at) VALUES (?, ?, ?)",
            [(u.update_id, json.dumps(u.to_dict(), ensure_ascii=False), now) for u in updates],
        )


# --- health figures ------------------------------------------------------------------------------


def health_figures(application: App, mode: str) -> Callable[[], Awaitable[dict[str, Any]]]:
    """Liveness plus the figures a monitor wants: consolidation backlog and work in flight."""

    async def figures() -> dict[str, Any]:
        from bot.app import SERVICES_KEY

        services: Services | None = application.bot_data.get(SERVICES_KEY)
        lifecycle = lifecycle_of(application)
        body: dict[str, Any] = {"mode": mode, "updates_in_progress": lifecycle.tracker.in_progress}
        if services is None:
            body["status"] = "starting"
            return body
        row = await services.db.fetchone(
            "SELECT COUNT(*) AS depth, MIN(created_at) AS oldest FROM consolidation_jobs "
            "WHERE state != 'done'"
        )
        depth = int(row["depth"]) if row else 0
        body["queue_depth"] = depth
        body["oldest_pending_s"] = (
            round((utc_now() - from_iso(row["oldest"])).total_seconds())
            if row and row["oldest"]
            else None
        )
        body["turns_in_flight"] = services.turns.running_count()
        return body

    return figures


# --- running -------------------------------------------------------------------------------------


def webhook_path(url: str) -> str:
    """The local path PTB serves: the path of the public WEBHOOK_URL, without slashes."""
    return urlsplit(url).path.strip("/")


async def serve(
    application: App,
    settings: Settings,
    *,
    stop: asyncio.Event | None = None,
    freeze_heap: bool = False,
) -> None:
    """Run until `stop` is set (or SIGTERM/SIGINT when `stop` is None), then stop gracefully.

    `freeze_heap` (the real process, not tests sharing one interpreter): see `freeze_start_up_heap`.
    """
    loop = asyncio.get_running_loop()
    stop = stop or asyncio.Event()
    force = asyncio.Event()
    installed: list[int] = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, _on_signal, stop, force, signum)
            installed.append(signum)
    mode = settings.TELEGRAM_MODE
    health: HealthServer | None = None
    updater = application.updater
    assert updater is not None
    try:
        await application.initialize()
        if application.post_init:
            await application.post_init(application)
        if freeze_heap:
            freeze_start_up_heap()
        # Held at the last stop: queued before anything new is fetched.
        await lifecycle_of(application).replay_held(application)
        if settings.HEALTH_PORT:
            health = HealthServer(
                health_figures(application, mode), host="127.0.0.1", port=settings.HEALTH_PORT
            )
            await health.start()
        if mode == "webhook":
            assert settings.WEBHOOK_URL and settings.WEBHOOK_SECRET
            await updater.start_webhook(
                listen=settings.WEBHOOK_LISTEN,
                port=settings.WEBHOOK_PORT,
                url_path=webhook_path(settings.WEBHOOK_URL),
                webhook_url=settings.WEBHOOK_URL,
                secret_token=settings.WEBHOOK_SECRET.get_secret_value(),
                allowed_updates=ALLOWED_UPDATES,
                drop_pending_updates=False,
            )
        else:
            await updater.start_polling(
                allowed_updates=ALLOWED_UPDATES, drop_pending_updates=False, timeout=30
            )
        await application.start()
        log.info("bot_running", mode=mode, health_port=health.port if health else None)
        await stop.wait()
        log.info("bot_stopping", grace_s=settings.SHUTDOWN_GRACE_SECONDS)
        if health is not None:
            health.mark_stopping()
        await stop_gracefully(application, settings.SHUTDOWN_GRACE_SECONDS, force=force)
    finally:
        with contextlib.suppress(RuntimeError):
            if updater.running:
                await updater.stop()
        with contextlib.suppress(RuntimeError):
            if application.running:
                await application.stop()
        await application.shutdown()
        if application.post_shutdown:
            await application.post_shutdown(application)
        if health is not None:
            await health.stop()
        for signum in installed:
            loop.remove_signal_handler(signum)


def _on_signal(stop: asyncio.Event, force: asyncio.Event, signum: int) -> None:
    if stop.is_set():
        log.warning("second_stop_signal_no_more_grace", signal=signal.Signals(signum).name)
        force.set()
        return
    log.info("stop_signal", signal=signal.Signals(signum).name)
    stop.set()


async def stop_gracefully(application: App, grace: float, *, force: asyncio.Event) -> None:
    """Steps 1–4 of the module docstring; the caller closes the application afterwards."""
    from bot.app import SERVICES_KEY

    lifecycle = lifecycle_of(application)
    services: Services | None = application.bot_data.get(SERVICES_KEY)
    lifecycle.begin_closing()

    # 1. The worker launches no new job; running ones get the grace period.
    worker_stop: asyncio.Task[None] | None = None
    worker = _worker_of(application)
    if worker is not None:
        worker_stop = asyncio.create_task(worker.stop(grace), name="worker-stop")

    # 2. No new updates.
    updater = application.updater
    if updater is not None and updater.running:
        await updater.stop()
    log.info("updates_stopped", in_progress=lifecycle.tracker.in_progress)

    # 3. Replies in flight share the grace period with the consolidations.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    turns = services.turns if services is not None else None
    while turns is not None and turns.running_count() and not force.is_set():
        remaining = deadline - loop.time()
        if remaining <= 0:
            break
        await _wait_any(turns.running_tasks(), force, seconds=min(remaining, 0.5))
    if turns is not None and turns.running_count():
        log.info("replies_interrupted", count=turns.running_count())
        await turns.cancel_all(wait=5.0)

    # 4. Queued updates are handled now: commands answer, turns are held for the next start.
    if application.running:
        await application.stop()
    if worker_stop is not None:
        if force.is_set():
            worker_stop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await worker_stop
    log.info("bot_stopped_gracefully", held_updates=lifecycle.held)


async def _wait_any(tasks: list[asyncio.Task[Any]], force: asyncio.Event, seconds: float) -> None:
    waiter = asyncio.create_task(force.wait())
    try:
        await asyncio.wait([*tasks, waiter], timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()


def _worker_of(application: App) -> Any:
    from bot.memory_handlers import MEMORY_KEY

    feature = application.bot_data.get(MEMORY_KEY)
    return getattr(feature, "worker", None)


def run_bot(application: App, settings: Settings) -> None:
    """The main job (`python -m bot`): serve until SIGTERM/SIGINT, then stop gracefully."""
    asyncio.run(serve(application, settings, freeze_heap=True))


def freeze_start_up_heap() -> None:
    """Exclude everything alive after start-up from later garbage collections.

    litellm and its dependencies leave a few hundred thousand long-lived objects, and every full
    collection walked all of them while every thread of the process stood still: 0.3–0.6 s
    each, measured under load by benchmarks/turn_overhead.py. They live as long as the process,
    so they are collected once here, then frozen; later collections see only what turns create.
    """
    gc.collect()
    gc.freeze()
