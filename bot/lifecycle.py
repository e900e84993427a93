"""Running the bot (polling or webhook, plus the health endpoint) and stopping it gracefully.

A stop (SIGTERM, SIGINT) goes in this order, and each step exists so that nothing is lost:

1. Stop taking work: /healthz answers 503, waiting split-message groups are released, chat
   turns that have not yet stored the user's message are held back (polling mode), and the
   consolidation worker launches no new job.
2. Stop fetching updates. PTB confirms fetched updates to Telegram on the next getUpdates; on a
   stop it confirms them all. We confirm only those below the first update still in progress,
   so an update that was fetched but not handled is delivered again after the restart.
   Updates above that point that were handled anyway are recorded (`handled_updates`) and
   skipped when they come again, so nothing is answered twice.
3. Replies being written get SHUTDOWN_GRACE_SECONDS to finish; running consolidations get the
   same grace at the same time. A reply still running then is ended with a note, and what was
   shown is stored; an unfinished consolidation stays queued and resumes on the next start.
4. Close the application and the services.

In webhook mode Telegram has already been told "200 OK" for every update it posted, so turns
are not held back: everything accepted is handled within the grace period, and the webhook
server stops first so Telegram keeps (and retries) anything newer.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import structlog
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
# Handled-update records older than this are useless: Telegram keeps updates for 24 hours.
_HANDLED_KEEP_DAYS = 2

App = Application[Any, Any, Any, Any, Any, Any]


class UpdateTracker(BaseUpdateProcessor):
    """PTB's concurrent update processing, remembering which updates are still in progress.

    `turn_pending` marks updates whose chat turn has not yet stored the user's message: if such
    an update is cut off by a stop, it was not handled, and Telegram must deliver it again.
    """

    def __init__(self, max_concurrent_updates: int = 1024) -> None:
        super().__init__(max_concurrent_updates)
        self._active: dict[asyncio.Task[Any], int] = {}
        self._turn_pending: set[int] = set()
        self._handled: set[int] = set()
        self._parts: dict[int, set[int]] = {}  # first part's update id -> later parts' ids
        self.skip: set[int] = set()

    async def initialize(self) -> None:
        return None

    async def shutdown(self) -> None:
        return None

    async def do_process_update(self, update: object, coroutine: Awaitable[Any]) -> None:
        update_id = getattr(update, "update_id", None)
        task = asyncio.current_task()
        if update_id is None or task is None:
            await coroutine
            return
        if update_id in self.skip:
            self.skip.discard(update_id)
            if isinstance(coroutine, Coroutine):
                coroutine.close()
            log.info("update_skipped_already_handled", update_id=update_id)
            return
        self._active[task] = update_id
        try:
            await coroutine
        finally:
            del self._active[task]
            parts = self._parts.pop(update_id, set())
            if update_id in self._turn_pending:
                self._turn_pending.discard(update_id)  # cut off before the message was stored
            else:
                self._handled.add(update_id)
                self._handled |= parts
            self._forget_below(self.first_in_progress())

    def _forget_below(self, first_open: int | None) -> None:
        """Only handled updates above the first one in progress can ever be redelivered."""
        if first_open is None:
            self._handled.clear()
        else:
            self._handled = {uid for uid in self._handled if uid > first_open}

    def _current(self) -> int | None:
        task = asyncio.current_task()
        return self._active.get(task) if task is not None else None

    def turn_started(self) -> None:
        update_id = self._current()
        if update_id is not None:
            self._turn_pending.add(update_id)

    def turn_committed(self) -> None:
        update_id = self._current()
        if update_id is not None:
            self._turn_pending.discard(update_id)
            self._handled |= self._parts.pop(update_id, set())

    def join_current_to(self, first_part: int) -> None:
        """The current update is a later part of `first_part`'s turn: it is handled when that
        turn is, and not before (a stop in between must redeliver every part)."""
        update_id = self._current()
        if update_id is None or first_part not in self._active.values():
            return
        self._turn_pending.add(update_id)
        self._parts.setdefault(first_part, set()).add(update_id)

    @property
    def in_progress(self) -> int:
        return len(self._active)

    def first_in_progress(self) -> int | None:
        return min(self._active.values(), default=None)

    def tasks(self) -> list[asyncio.Task[Any]]:
        return list(self._active)

    def pending_turn_tasks(self) -> list[asyncio.Task[Any]]:
        return [task for task, uid in self._active.items() if uid in self._turn_pending]

    def handled_from(self, first: int) -> list[int]:
        return sorted(uid for uid in self._handled if uid >= first)


class Lifecycle:
    """What handlers and the runner share about starting and stopping."""

    def __init__(self) -> None:
        self.tracker = UpdateTracker()
        self.closing = False
        self.hold_turns = True  # polling: held turns are delivered again; webhook: they run
        self.on_closing: list[Callable[[], None]] = []

    @asynccontextmanager
    async def admitted_turn(
        self, turns: ChatTurns, chat_id: int
    ) -> AsyncIterator[Callable[[], None]]:
        """The chat's turn lock, unless the bot is stopping; yields `committed`, to be called
        once the user's message is stored (from then on the update counts as handled)."""
        self.tracker.turn_started()
        async with turns.serialised(chat_id):
            if self.closing and self.hold_turns:
                # Never store or answer it now: the update stays unconfirmed and Telegram
                # delivers it again after the restart. The stop cancels this wait.
                log.info("turn_held_for_restart", chat_id=chat_id)
                await asyncio.Event().wait()
            yield self.tracker.turn_committed

    def begin_closing(self) -> None:
        if self.closing:
            return
        self.closing = True
        for callback in self.on_closing:
            try:
                callback()
            except Exception:
                log.exception("closing_callback_failed")


def lifecycle_of(application: App) -> Lifecycle:
    return application.bot_data[LIFECYCLE_KEY]


# --- handled updates -----------------------------------------------------------------------------


async def load_handled_updates(db: Database) -> set[int]:
    """Updates handled above the confirmed offset at the last clean stop (skip them once)."""
    cutoff = to_iso(utc_now() - timedelta(days=_HANDLED_KEEP_DAYS))
    async with db.transaction() as conn:
        await conn.execute("DELETE FROM handled_updates WHERE handled_at < ?", (cutoff,))
    rows = await db.fetchall("SELECT update_id FROM handled_updates")
    return {int(row["update_id"]) for row in rows}


async def save_handled_updates(db: Database, update_ids: list[int]) -> None:
    if not update_ids:
        return
    now = to_iso(utc_now())
    async with db.transaction() as conn:
        await conn.executemany(
            "INSERT OR REPLACE INTO handled_updates(update_id, handled_at) VALUES (?, ?)",
            [(uid, now) for uid in update_ids],
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


async def serve(application: App, settings: Settings, *, stop: asyncio.Event | None = None) -> None:
    """Run until `stop` is set (or SIGTERM/SIGINT when `stop` is None), then stop gracefully."""
    loop = asyncio.get_running_loop()
    stop = stop or asyncio.Event()
    force = asyncio.Event()
    installed: list[int] = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, _on_signal, stop, force, signum)
            installed.append(signum)
    mode = settings.TELEGRAM_MODE
    lifecycle = lifecycle_of(application)
    lifecycle.hold_turns = mode == "polling"
    health: HealthServer | None = None
    updater = application.updater
    assert updater is not None
    try:
        await application.initialize()
        if application.post_init:
            await application.post_init(application)
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
    """Steps 1–3 of the module docstring; the caller closes the application afterwards."""
    from bot.app import SERVICES_KEY

    lifecycle = lifecycle_of(application)
    services: Services | None = application.bot_data.get(SERVICES_KEY)
    tracker = lifecycle.tracker
    lifecycle.begin_closing()

    # Stop the worker from launching jobs now; running ones get the grace period.
    worker_stop: asyncio.Task[None] | None = None
    worker = _worker_of(application)
    if worker is not None:
        worker_stop = asyncio.create_task(worker.stop(grace), name="worker-stop")

    # 2. Stop fetching; confirm only what lies below the first update in progress.
    await asyncio.sleep(0)  # let updates already queued reach the tracker
    updater = application.updater
    first_open = tracker.first_in_progress()
    if updater is not None and updater.running:
        if first_open is not None and lifecycle.hold_turns:
            _confirm_only_below(updater, first_open)
        await updater.stop()
    log.info("updates_stopped", first_unconfirmed=first_open, in_progress=tracker.in_progress)

    # 3. Replies and consolidations share the grace period.
    deadline = asyncio.get_running_loop().time() + grace
    turns = services.turns if services is not None else None
    while turns is not None and turns.running_count() and not force.is_set():
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            break
        await _wait_any(turns.running_tasks(), force, seconds=min(remaining, 0.5))
    lifecycle.hold_turns = True  # the grace is over: turns still waiting do not start now
    if turns is not None and turns.running_count():
        log.info("replies_interrupted", count=turns.running_count())
        await turns.cancel_all(wait=5.0)
    held = tracker.pending_turn_tasks()
    for task in held:
        task.cancel()
    if held:
        await asyncio.wait(held, timeout=5.0)
        log.info("turns_left_for_redelivery", count=len(held))
    if worker_stop is not None:
        if force.is_set():
            worker_stop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await worker_stop

    # Everything else in progress (commands) finishes in application.stop(); record handled
    # updates above the confirmed offset so the redelivery skips them.
    if application.running:
        await application.stop()
    if services is not None and first_open is not None and lifecycle.hold_turns:
        handled = tracker.handled_from(first_open)
        await save_handled_updates(services.db, handled)
        log.info("handled_updates_recorded", count=len(handled))


def _confirm_only_below(updater: Any, first_open: int) -> None:
    """PTB keeps the next offset to confirm in `_last_update_id` and sends it in its final
    getUpdates on stop; lower it so updates still in progress stay with Telegram. Updater.stop
    marks the updater stopped before it can yield, so no later batch overwrites this."""
    current = getattr(updater, "_last_update_id", None)
    if isinstance(current, int) and first_open < current:
        updater._last_update_id = first_open


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
    asyncio.run(serve(application, settings))
