"""The composition root: settings → catalog → gateways, then every long-lived object, built
once, complete, in one place, and the PTB Application that serves them.

`prepare()` does every check that can fail on bad configuration *before* anything connects, so
`python -m bot` either refuses with one line or starts. `build_application()` returns a PTB
Application whose handlers read `context.bot_data.services` (typed: bot/services.py). Its
post_init opens the database and builds `Services` (`open_services`); its post_shutdown
closes them. No other module builds or rewires a long-lived object: a feature that needs one
gets a constructor argument here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

import httpx
import structlog
from telegram import Bot
from telegram.ext import AIORateLimiter, ApplicationBuilder, CallbackQueryHandler, ContextTypes
from telegram.request import HTTPXRequest

from agent.loop import AgentLoop
from agent.task_run import TaskRunner
from agent.tools.mcp import McpTools
from agent.tools.memory import ChatTools
from agent.tools.web import WebSettings, WebTools
from bot.config import (
    SETTING_NAMES,
    ConfigError,
    Settings,
    gateway_keys,
    mcp_environ,
    mcp_variables,
    provider_workers,
)
from bot.handlers.access import RefusalThrottle
from bot.handlers.chat import register_handlers, stray_callback
from bot.handlers.guard import register_access_guard
from bot.handlers.mcp import register_mcp_handlers
from bot.handlers.memory import register_memory_handlers
from bot.handlers.migration import register_migration_handlers
from bot.handlers.ops import register_operations_handlers, set_admin_commands
from bot.handlers.pending import register_pending_handlers
from bot.handlers.reminders import TelegramDelivery, register_reminder_handlers
from bot.handlers.stop import register_stop_handler
from bot.handlers.tasks import TaskDelivery, register_task_handlers
from bot.lifecycle import Lifecycle, UpdateTracker
from bot.runner import ALLOWED_UPDATES, run_bot, started
from bot.services import (
    App,
    BotData,
    MemoryFeature,
    Prepared,
    ProviderWarmUp,
    ReminderFeature,
    Services,
    TaskFeature,
    available_models,
)
from bot.turns.chat_turns import ChatTurns
from bot.turns.limits import TurnGuard
from bot.turns.migrate import migrate_chat
from bot.ui.commands import register_commands
from mcp_client.config import McpConfig, McpConfigError, load_config
from mcp_client.hub import McpHub
from media.document_reader import ReaderSlots
from media.inbox import MediaInbox
from memory.consolidation.consolidation import Consolidator
from memory.consolidation.worker import ConsolidationWorker
from memory.db import Database
from memory.longterm import MemoryRepository
from memory.mcp_calls import McpCalls
from memory.recall.archive import ArchivePurger
from memory.store import Store
from memory.usage import Budgets, UsageLedger
from memory.web_calls import WebCalls
from models.catalog import Catalog, CatalogError, declared_gateways, load_catalog
from models.gateways import Gateway
from models.logging_setup import redactor
from models.worker.sockets import transport
from primitives.clock import Clock, utc_now
from reminders.book import TASK, ReminderBook
from reminders.scheduler import ReminderScheduler
from reminders.task_runs import TaskRuns
from web.addresses import parse_allowance

if TYPE_CHECKING:
    from telegram.ext import Updater

    from models.worker.interface import ProviderWorkers

log = structlog.get_logger("bot.app")


def build_gateways(settings: Settings, catalog: Catalog | None = None) -> dict[str, Gateway]:
    """The three built-in gateways from the *_API_BASE / *_API_KEY settings, and those the
    catalog file declares, each with the keys its `api_key_env` variable holds."""

    def keys(secrets: list[Any]) -> tuple[str, ...]:
        return tuple(k.get_secret_value() for k in secrets)

    declared = {
        spec.name: Gateway(
            spec.name,
            spec.protocol,
            spec.base_url,
            tuple(gateway_keys(settings, spec.key_env)),
            spec.rps,
        )
        for spec in (catalog.gateways if catalog is not None else ())
    }
    return declared | {
        "openai": Gateway(
            "openai",
            "openai",
            settings.OPENAI_API_BASE,
            keys(settings.OPENAI_API_KEY),
            settings.OPENAI_RPS,
        ),
        "anthropic": Gateway(
            "anthropic",
            "anthropic",
            settings.ANTHROPIC_API_BASE,
            keys(settings.ANTHROPIC_API_KEY),
            settings.ANTHROPIC_RPS,
        ),
        "groq": Gateway(
            "groq",
            "groq",
            settings.GROQ_API_BASE,
            keys(settings.GROQ_API_KEY),
            settings.GROQ_RPS,
        ),
    }


def file_base_url(base_url: str) -> str:
    """Where the Bot API serves downloads: `<base>/file/bot<token>/<file_path>`, with `<base>`
    TELEGRAM_BASE_URL without its `/bot` suffix (a local Bot API server serves files too)."""
    base = base_url.rstrip("/").removesuffix("/bot")
    return f"{base}/file/bot"


def resolve_default_model(
    settings: Settings, catalog: Catalog, gateways: dict[str, Gateway]
) -> str:
    """DEFAULT_MODEL if it is usable, else the first available model; ConfigError otherwise."""
    available = available_models(catalog, gateways)
    if settings.DEFAULT_MODEL is not None:
        wanted = settings.DEFAULT_MODEL
        if wanted not in catalog:
            raise ConfigError(f"DEFAULT_MODEL: unknown model {wanted!r} (see /model or README)")
        if not catalog.is_visible(wanted):
            raise ConfigError(f"DEFAULT_MODEL: {wanted!r} is a hidden model; pick a visible one")
        if wanted not in {e.id for e in available}:
            gateway = catalog.get(wanted).gateway
            key_env = next(
                (g.key_env for g in catalog.gateways if g.name == gateway),
                f"{gateway.upper()}_API_KEY",
            )
            raise ConfigError(
                f"DEFAULT_MODEL: {wanted!r} needs the {gateway} gateway; set {key_env}"
            )
        return wanted
    if not available:
        raise ConfigError(
            "OPENAI_API_KEY: no provider key set; set OPENAI_API_KEY, ANTHROPIC_API_KEY or "
            "GROQ_API_KEY (or a gateway's key variable from MODEL_CATALOG_FILE)"
        )
    return available[0].id


def prepare(settings: Settings) -> Prepared:
    """Load the catalog and check the model settings. Raises ConfigError or CatalogError."""
    try:
        catalog = load_catalog(settings.MODEL_CATALOG_FILE, reserved=SETTING_NAMES)
    except CatalogError as exc:
        source = "MODEL_CATALOG_FILE" if settings.MODEL_CATALOG_FILE else "built-in catalog"
        raise CatalogError(f"{source}: {exc}") from None
    gateways = build_gateways(settings, catalog)
    if settings.CONSOLIDATION_MODEL not in catalog:
        raise ConfigError(f"CONSOLIDATION_MODEL: unknown model {settings.CONSOLIDATION_MODEL!r}")
    if settings.TRANSCRIPTION_MODEL not in catalog:
        raise ConfigError(f"TRANSCRIPTION_MODEL: unknown model {settings.TRANSCRIPTION_MODEL!r}")
    if catalog.get(settings.TRANSCRIPTION_MODEL).kind != "transcription":
        raise ConfigError(
            f"TRANSCRIPTION_MODEL: {settings.TRANSCRIPTION_MODEL!r} is not a transcription model"
        )
    default_model = resolve_default_model(settings, catalog, gateways)
    return Prepared(settings, catalog, gateways, default_model, mcp=mcp_config(settings))


def mcp_config(settings: Settings) -> McpConfig | None:
    """MCP_CONFIG read and checked before anything starts: a bad file stops start-up with one
    line naming the server and the field. Unset, or MCP_USER_DAILY_CALLS 0: no MCP."""
    if settings.MCP_CONFIG is None or settings.MCP_USER_DAILY_CALLS == 0:
        return None
    try:
        return load_config(settings.MCP_CONFIG, mcp_environ(settings))
    except McpConfigError as exc:
        raise ConfigError(str(exc)) from None


def secrets_of(settings: Settings) -> list[str]:
    """Every secret the logs must never show, the keys of declared gateways included."""
    values = [settings.TELEGRAM_BOT_TOKEN.get_secret_value()]
    for keys in (settings.OPENAI_API_KEY, settings.ANTHROPIC_API_KEY, settings.GROQ_API_KEY):
        values.extend(k.get_secret_value() for k in keys)
    try:  # the keys of gateways declared in the catalog file, from .env or the environment
        declared = declared_gateways(settings.MODEL_CATALOG_FILE)
    except CatalogError:
        declared = []  # start-up refuses the file anyway; its .env lines are still secrets
    names = (
        {g.key_env for g in declared}
        | set(settings.model_extra or {})
        | mcp_variables(settings.MCP_CONFIG)  # the tokens MCP servers' headers and env name
    )
    for name in sorted(names):
        values.extend(gateway_keys(settings, name))
    if settings.WEBHOOK_SECRET is not None:
        values.append(settings.WEBHOOK_SECRET.get_secret_value())
    return [v for v in values if v]


# PTB's own pool size for the Bot API; more idle connections kept than httpx's 20, so a burst of
# replies does not close and reopen (TLS handshake included) all but 20 after every wave.
# Task runs under way at once, bot-wide: each is a model turn (seconds to minutes), and the
# rest wait their turn in the book, claimed as runs finish.
TASK_RUNS_AT_ONCE = 8
TELEGRAM_LIMITS = httpx.Limits(
    max_connections=256, max_keepalive_connections=64, keepalive_expiry=30.0
)


def telegram_request() -> HTTPXRequest:
    """The Bot API client for everything but getUpdates: PTB's, over the socket-keeping
    connection pool (models/worker/sockets.py): its pool scan on every request was ~12 % of the
    event loop's busy time while a hundred replies streamed (py-spy,
    benchmarks/turn_overhead.py)."""
    return HTTPXRequest(
        httpx_kwargs={"transport": transport(TELEGRAM_LIMITS, httpx.create_ssl_context())}
    )


async def open_services(
    prepared: Prepared,
    bot: Bot,
    tracker: UpdateTracker,
    *,
    transport_options: dict[str, Any] | None = None,
    edit_interval: float = 1.0,
    clock: Clock[datetime] | None = None,
    workers: ProviderWorkers | None = None,
) -> Services:
    """Open the database and build every long-lived object, each once and complete: what one
    needs of another is a constructor argument, so nothing is rewired after it is built.

    The provider worker pool is built here from the settings and stopped with the services,
    unless the caller brings `workers` (tests share one pool across bots) and stops them.

    Two pairs name each other: the store wakes the consolidation worker when it queues a job
    (and the worker reads the store), the reminder book wakes the scheduler when a reminder is
    made or cancelled (and the scheduler reads the book). The first of each pair is built
    with a callback that calls the second by name; both exist before any turn runs."""
    # Imported here: a configuration error is reported before the transport's imports.
    from models.transport import Transport
    from models.worker.pool import WorkerPool, WorkerSettings

    settings = prepared.settings
    own_workers = None
    if workers is None:
        workers = own_workers = WorkerPool(
            WorkerSettings(
                max_workers=provider_workers(settings),
                at_rest=settings.PROVIDER_WORKERS_AT_REST,
            )
        )
    transport = Transport(
        prepared.catalog, prepared.gateways, workers=workers, **(transport_options or {})
    )
    db = await Database.open(settings.DATABASE_PATH)
    idle = settings.SESSION_IDLE_MINUTES

    def job_enqueued() -> None:
        worker.notify()

    def reminders_changed() -> None:
        scheduler.notify()
        task_scheduler.notify()

    store = Store(
        db,
        clock or utc_now,
        memory_window=settings.MEMORY_WINDOW,
        keep_recent=settings.MEMORY_KEEP_RECENT,
        session_idle=timedelta(minutes=idle) if idle > 0 else None,
        on_job_enqueued=job_enqueued,
    )
    consolidator = Consolidator(
        transport,
        prepared.catalog,
        head_model=settings.CONSOLIDATION_MODEL,
        timeout=settings.CONSOLIDATION_TIMEOUT,
        memory_max_chars=settings.MEMORY_MAX_CHARS,
    )
    worker = ConsolidationWorker(
        store,
        consolidator,
        retry_delays=settings.CONSOLIDATION_RETRY_DELAYS,
        memory_max_chars=settings.MEMORY_MAX_CHARS,
        clock=store.clock,
    )
    memory = MemoryFeature(
        MemoryRepository(db), worker, ArchivePurger(db, settings.ARCHIVE_DAYS, store.clock)
    )
    book = ReminderBook(
        db, store.clock, on_change=reminders_changed, tasks_per_chat=settings.TASKS_PER_CHAT
    )
    # The operator's MCP servers: started in post_init, stopped with the services.
    mcp = (
        McpHub(
            prepared.mcp,
            McpCalls(db, store.clock),
            daily_calls=settings.MCP_USER_DAILY_CALLS,
            max_result_chars=settings.MCP_MAX_RESULT_CHARS,
            environ=mcp_environ(settings),
        )
        if prepared.mcp is not None
        else None
    )
    # One set of reader slots for the whole bot: documents, photos and web pages.
    readers = ReaderSlots()
    agent = AgentLoop(
        store=store,
        transport=transport,
        catalog=prepared.catalog,
        tools=ChatTools(
            db, memory_max_chars=settings.MEMORY_MAX_CHARS, clock=store.clock, reminders=book
        ),
        web=WebTools(web_settings(settings), WebCalls(db, store.clock), readers),
        mcp=McpTools(mcp, settings.ADMIN_USER_IDS) if mcp is not None else None,
        max_steps=settings.AGENT_MAX_STEPS,
        timeout=settings.CHAT_TIMEOUT,
        max_answer_tokens=settings.MAX_ANSWER_TOKENS,
        answer_seconds=settings.MAX_ANSWER_SECONDS,
        max_answer_chars=settings.MAX_ANSWER_CHARS,
    )
    turns = ChatTurns()
    delivery = TelegramDelivery(
        bot,
        settings,
        store,
        book.clock,
        # A send found the group became a supergroup: the chat's data follows it.
        on_migrated=partial(migrate_chat, turns, store, via="reminder"),
    )
    scheduler = ReminderScheduler(book, store, delivery, clock=book.clock)
    ledger = UsageLedger(db)
    guard = TurnGuard(
        ledger=ledger,
        budgets=Budgets(
            user_daily_usd=settings.USER_DAILY_BUDGET_USD,
            user_monthly_usd=settings.USER_MONTHLY_BUDGET_USD,
            bot_daily_usd=settings.BOT_DAILY_BUDGET_USD,
            bot_monthly_usd=settings.BOT_MONTHLY_BUDGET_USD,
        ),
        per_minute=settings.USER_MESSAGES_PER_MINUTE,
        max_input_chars=settings.MAX_INPUT_CHARS,
        split_window=settings.SPLIT_MESSAGE_WINDOW,
        admins=settings.ADMIN_USER_IDS,
        # A later part of a split message is kept with its first part if a stop holds it.
        on_part_joined=tracker.join_current_to,
    )
    runs = TaskRuns(book)
    task_delivery = TaskDelivery(
        bot=bot,
        settings=settings,
        store=store,
        book=book,
        runs=runs,
        # A run is offered the operator's MCP tools that run without a tap (read-only, or
        # listed in autoApprove), never one with effects.
        runner=TaskRunner(
            agent,
            seconds=settings.TASK_MAX_SECONDS,
            extra_tools=agent.mcp.at_once_names if agent.mcp is not None else None,
        ),
        guard=guard,
        pending=agent.pending_writes,
        chat_model=lambda chat_id: services.chat_model(chat_id),
        pace=delivery._pace,
        clock=book.clock,
    )
    # A cancelled task's run under way stops at once (no answer; its spend is recorded).
    book.on_cancel.append(task_delivery.stop)
    # Task runs are model turns: a few at a time, behind every chat turn in the gateways'
    # queues (background priority), on a scheduler of their own so no ⏰ waits for them.
    task_scheduler = ReminderScheduler(
        book, store, task_delivery, clock=book.clock, concurrency=TASK_RUNS_AT_ONCE, kind=TASK
    )
    # A graceful stop releases the waiting split-message groups, and the schedulers claim
    # nothing new while replies finish (a claim cut off by the stop is sent after the next
    # start).
    lifecycle = Lifecycle(
        tracker, db, on_closing=(guard.joiner.flush, scheduler.pause, task_scheduler.pause)
    )
    services = Services(
        settings=settings,
        catalog=prepared.catalog,
        gateways=prepared.gateways,
        default_model=prepared.default_model,
        db=db,
        store=store,
        transport=transport,
        agent=agent,
        memory=memory,
        reminders=ReminderFeature(book, scheduler),
        tasks=TaskFeature(runs, task_scheduler),
        mcp=mcp,
        inbox=MediaInbox(db),
        ledger=ledger,
        guard=guard,
        lifecycle=lifecycle,
        turns=turns,
        refusals=RefusalThrottle(),
        languages={},
        warm_up=ProviderWarmUp(transport),
        readers=readers,
        edit_interval=edit_interval,
        own_workers=own_workers,
    )
    return services


def build_application(
    prepared: Prepared,
    *,
    transport_options: dict[str, Any] | None = None,
    edit_interval: float = 1.0,
    clock: Clock[datetime] | None = None,
    workers: ProviderWorkers | None = None,
) -> App:
    """The PTB Application, handlers registered; services open in post_init.

    `clock` is the time the store (message stamps, idle sessions) and the consolidation
    worker go by; tests move it forward instead of waiting hours. `workers`: see
    `open_services`."""
    settings = prepared.settings
    redactor().add(secrets_of(settings))
    # PTB's update processor, built with the application: it knows which update each handler
    # task works on, which a graceful stop needs to hold unanswered turns (bot/lifecycle.py).
    tracker = UpdateTracker()

    async def post_init(application: App) -> None:
        services = await open_services(
            prepared,
            application.bot,
            tracker,
            transport_options=transport_options,
            edit_interval=edit_interval,
            clock=clock,
            workers=workers,
        )
        # Held from here on, so that post_shutdown closes what a failed start opened.
        application.bot_data.open(services)
        # The consolidation worker first resumes jobs a crash interrupted; the scheduler
        # first resends what a crash left unconfirmed.
        await services.memory.worker.start()
        await services.memory.purger.start()
        if services.mcp is not None:
            # Each server's first start, a few seconds at most: a server still starting (or
            # failing) goes on in the background and never holds the bot up.
            await services.mcp.start()
        await set_admin_commands(application, settings.ADMIN_USER_IDS)
        await services.reminders.scheduler.start()
        await services.tasks.scheduler.start()
        await register_commands(application)
        log.info(
            "bot_started",
            bot_username=application.bot.username,
            default_model=prepared.default_model,
            models=[e.id for e in services.available_models()],
            database=str(settings.DATABASE_PATH),
        )

    async def post_shutdown(application: App) -> None:
        services = application.bot_data.close()
        if services is not None:
            await services.close()
        log.info("bot_stopped")

    application: App = (
        ApplicationBuilder()
        .token(settings.TELEGRAM_BOT_TOKEN.get_secret_value())
        .base_url(settings.TELEGRAM_BASE_URL)
        .base_file_url(file_base_url(settings.TELEGRAM_BASE_URL))
        .context_types(ContextTypes(bot_data=BotData))
        .concurrent_updates(tracker)
        .rate_limiter(AIORateLimiter(max_retries=0))
        .request(telegram_request())
        .post_init(post_init)
        .post_shutdown(post_shutdown)
        .build()
    )
    # First of all: a stranger's update goes no further (bot/handlers/guard.py).
    register_access_guard(application, settings)
    register_handlers(application)
    register_memory_handlers(application)
    register_operations_handlers(application)
    register_reminder_handlers(application)
    register_task_handlers(application)
    register_migration_handlers(application)
    register_pending_handlers(application)
    register_mcp_handlers(application)
    register_stop_handler(application)
    # Last of all: a press no handler above took is answered quietly.
    application.add_handler(CallbackQueryHandler(stray_callback))
    return application


@asynccontextmanager
async def running(
    application: App,
    *,
    poll_interval: float = 0.0,
    poll_timeout: int = 10,
) -> AsyncIterator[App]:
    """The application polling inside the current event loop (tests, benchmarks), started and
    stopped as `python -m bot` does it (bot/runner.py `started`)."""

    async def poll(updater: Updater) -> None:
        await updater.start_polling(
            poll_interval=poll_interval,
            timeout=poll_timeout,
            drop_pending_updates=False,
            allowed_updates=ALLOWED_UPDATES,
        )

    async with started(application, poll) as app:
        yield app


def run_polling(prepared: Prepared) -> None:
    """The main job: poll Telegram (or serve the webhook) until SIGINT/SIGTERM, then stop
    gracefully (bot/runner.py)."""
    run_bot(build_application(prepared), prepared.settings)


def web_settings(settings: Settings) -> WebSettings:
    """The WEB_* settings as the web tools take them."""
    return WebSettings(
        search_url=settings.WEB_SEARCH_URL,
        allowance=parse_allowance(settings.WEB_ALLOW_PRIVATE),
        read_max_chars=settings.WEB_READ_MAX_CHARS,
        daily_calls=settings.WEB_DAILY_CALLS,
    )
