"""Running the bot (polling or webhook, plus the health endpoint) and stopping it gracefully.

A stop (SIGTERM, SIGINT) goes in this order, and each step exists so that nothing is lost:

1. Stop taking work: /healthz answers 503, waiting split-message groups are released, and the
   consolidation worker launches no new job (running ones get the grace period).
2. Stop fetching updates (polling) or stop the webhook server (Telegram keeps and retries what
   it could not post).
3. Replies being written, and turns still preparing (a voice note being transcribed, a photo
   or document being fetched and read), get SHUTDOWN_GRACE_SECONDS to finish. A reply still
   running then is ended with a note, and what was shown is stored; a preparation still running
   is cancelled (an attempt in flight is billed) and its update held as in step 4, so
   `application.stop()` below never waits for a transcription chain.
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
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import structlog

from bot.health import HealthServer
from bot.lifecycle import tracker_of
from bot.loop_watch import LoopWatch, SystemdNotifier
from bot.services import App
from memory.store import from_iso
from primitives.clock import utc_now
from primitives.tasks import stop_task
from primitives.waits import wait_or_timeout

if TYPE_CHECKING:
    from telegram.ext import Updater

    from bot.config import Settings

log = structlog.get_logger("bot.runner")

# Asked for explicitly, for polling and for setWebhook: Telegram sends only these. A Stop press
# on a draft (bot/handlers/stop.py) is not among PTB 22.8's Update.ALL_TYPES.
ALLOWED_UPDATES = ["message", "callback_query", "stopped_message_generation"]


# --- health figures ------------------------------------------------------------------------------


def health_figures(application: App, mode: str) -> Callable[[], Awaitable[dict[str, Any]]]:
    """Liveness plus the figures a monitor wants: consolidation backlog and work in flight."""

    tracker = tracker_of(application)

    async def figures() -> dict[str, Any]:
        services = application.bot_data.opened
        body: dict[str, Any] = {"mode": mode, "updates_in_progress": tracker.in_progress}
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
        body["provider_workers"] = services.transport.status()["workers"]
        return body

    return figures


# --- running -------------------------------------------------------------------------------------


def webhook_path(url: str) -> str:
    """The local path PTB serves: the path of the public WEBHOOK_URL, without slashes."""
    return urlsplit(url).path.strip("/")


@asynccontextmanager
async def started(
    application: App,
    start_updates: Callable[[Updater], Awaitable[object]],
    *,
    before_updates: Callable[[], Awaitable[None]] | None = None,
) -> AsyncIterator[App]:
    """The PTB Application running inside the current event loop, for polling and for the
    webhook alike (`start_updates` starts one of them), in `run_polling`'s order: initialize,
    post_init, `before_updates`, updates, start; on the way out whatever still runs is
    stopped, then shutdown and post_shutdown, also when the start failed halfway."""
    updater = application.updater
    assert updater is not None
    await application.initialize()
    try:
        if application.post_init:
            await application.post_init(application)
        if before_updates is not None:
            await before_updates()
        await start_updates(updater)
        await application.start()
        application.bot_data.services.warm_up_providers()
        yield application
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


async def serve(
    application: App,
    settings: Settings,
    *,
    stop: asyncio.Event | None = None,
    freeze_heap: bool = False,
) -> None:
    """Run until `stop` is set (or SIGTERM/SIGINT when `stop` is None), then stop gracefully.

    `freeze_heap` (the real process, not tests sharing one interpreter): see `_freeze_heap`."""
    loop = asyncio.get_running_loop()
    stop = stop or asyncio.Event()
    force = asyncio.Event()
    installed: list[signal.Signals] = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, _on_signal, stop, force, signum)
            installed.append(signum)
    mode = settings.TELEGRAM_MODE
    health: HealthServer | None = None
    notifier = SystemdNotifier()
    # Started first, so that a start-up frozen in post_init already misses its watchdog pings.
    loop_watch = LoopWatch(notifier)
    loop_watch.start()

    async def before_updates() -> None:
        nonlocal health
        if freeze_heap:
            _freeze_heap()
        # Held at the last stop: queued before anything new is fetched.
        await application.bot_data.services.lifecycle.replay_held(application)
        if settings.HEALTH_PORT:
            health = HealthServer(
                health_figures(application, mode),
                host="127.0.0.1",
                port=settings.HEALTH_PORT,
                loop_watch=loop_watch,
            )
            await health.start()

    async def start_updates(updater: Updater) -> None:
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

    try:
        async with started(application, start_updates, before_updates=before_updates):
            notifier.ready()
            log.info("bot_running", mode=mode, health_port=health.port if health else None)
            await stop.wait()
            notifier.stopping()
            log.info("bot_stopping", grace_s=settings.SHUTDOWN_GRACE_SECONDS)
            if health is not None:
                health.mark_stopping()
            await stop_gracefully(application, settings.SHUTDOWN_GRACE_SECONDS, force=force)
    finally:
        if health is not None:
            await health.stop()
        await loop_watch.stop()
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
    services = application.bot_data.services
    lifecycle = services.lifecycle
    lifecycle.begin_closing()

    # 1. The worker launches no new job; running ones get the grace period.
    worker_stop = asyncio.create_task(services.memory.worker.stop(grace), name="worker-stop")

    # 2. No new updates.
    updater = application.updater
    if updater is not None and updater.running:
        await updater.stop()
    log.info("updates_stopped", in_progress=lifecycle.tracker.in_progress)

    # 3. Replies in flight share the grace period with the consolidations.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    turns = services.turns
    while turns.running_count() and not force.is_set():
        remaining = deadline - loop.time()
        if remaining <= 0:
            break
        await wait_or_timeout(*turns.running_tasks(), force, timeout=min(remaining, 0.5))
    if turns.running_count():
        log.info("replies_interrupted", count=turns.running_count())
        await turns.cancel_all(wait=5.0)

    # 4. Queued updates are handled now: commands answer, turns are held for the next start.
    if application.running:
        await application.stop()
    if force.is_set():
        await stop_task(worker_stop)  # a second signal: the consolidations are cut now
    else:
        await worker_stop
    log.info("bot_stopped_gracefully", held_updates=lifecycle.held)


def run_bot(application: App, settings: Settings) -> None:
    """The main job (`python -m bot`): serve until SIGTERM/SIGINT, then stop gracefully."""
    from models.logging_setup import loop_exception_handler

    async def main() -> None:
        # Exceptions the loop only reports go through the same scrubbing as every log line.
        asyncio.get_running_loop().set_exception_handler(loop_exception_handler)
        await serve(application, settings, freeze_heap=True)

    asyncio.run(main())


def _freeze_heap() -> None:
    """Keep what start-up leaves (modules' code and data, ~90k objects, alive as long as the
    process) out of every later full collection: walking it took 53-86 ms with every thread
    stopped, the longest stall of the event loop at 100 conversations (loop lag max 58-79 ms;
    benchmarks/turn_overhead.py). Collections then walk only what turns create."""
    gc.collect()
    gc.freeze()
