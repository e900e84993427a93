"""Wiring: settings → catalog → gateways → transport, database, and the PTB Application.

`prepare()` does every check that can fail on bad configuration *before* anything connects, so
`python -m bot` either refuses with one line or starts. `build_application()` returns a PTB
Application whose `post_init` opens the services and whose `post_shutdown` closes them; other
parts (memory worker, webhook, health) hook into the same lifecycle through `Services`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import structlog
from telegram.ext import AIORateLimiter, Application, ApplicationBuilder
from telegram.request import HTTPXRequest

from bot.config import SETTING_NAMES, ConfigError, Settings, gateway_keys
from bot.handlers.chat import register_handlers
from bot.handlers.memory import attach_memory, register_memory_handlers
from bot.handlers.migration import register_migration_handlers
from bot.handlers.ops import attach_operations, register_operations_handlers
from bot.handlers.reminders import attach_reminders, register_reminder_handlers
from bot.lifecycle import LIFECYCLE_KEY, Lifecycle
from bot.runner import run_bot
from bot.services import SERVICES_KEY, Prepared, Services, available_models, warm_up_providers
from bot.turn_guard import attach_turn_guard
from bot.ui.commands import register_commands
from memory.store import Clock
from models.catalog import Catalog, CatalogError, declared_gateways, load_catalog
from models.gateways import Gateway
from models.logging_setup import redactor
from models.worker.sockets import transport

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
    return Prepared(settings, catalog, gateways, default_model)


def secrets_of(settings: Settings) -> list[str]:
    """Every secret the logs must never show, the keys of declared gateways included."""
    values = [settings.TELEGRAM_BOT_TOKEN.get_secret_value()]
    for keys in (settings.OPENAI_API_KEY, settings.ANTHROPIC_API_KEY, settings.GROQ_API_KEY):
        values.extend(k.get_secret_value() for k in keys)
    try:  # the keys of gateways declared in the catalog file, from .env or the environment
        declared = declared_gateways(settings.MODEL_CATALOG_FILE)
    except CatalogError:
        declared = []  # start-up refuses the file anyway; its .env lines are still secrets
    names = {g.key_env for g in declared} | set(settings.model_extra or {})
    for name in sorted(names):
        values.extend(gateway_keys(settings, name))
    if settings.WEBHOOK_SECRET is not None:
        values.append(settings.WEBHOOK_SECRET.get_secret_value())
    return [v for v in values if v]


# PTB's own pool size for the Bot API; more idle connections kept than httpx's 20, so a burst of
# replies does not close and reopen (TLS handshake included) all but 20 after every wave.
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


def build_application(
    prepared: Prepared,
    *,
    transport_options: dict[str, Any] | None = None,
    edit_interval: float = 1.0,
    clock: Clock | None = None,
) -> Application[Any, Any, Any, Any, Any, Any]:
    """The PTB Application, handlers registered; services open in post_init.

    `clock` is the time the store (message stamps, idle sessions) and the consolidation
    worker go by; tests move it forward instead of waiting hours."""
    settings = prepared.settings
    redactor().add(secrets_of(settings))

    async def post_init(application: Application[Any, Any, Any, Any, Any, Any]) -> None:
        services = await Services.open(prepared, transport_options=transport_options, clock=clock)
        services.edit_interval = edit_interval
        application.bot_data[SERVICES_KEY] = services
        await attach_memory(application, services)
        attach_turn_guard(application, services)
        await attach_operations(application, services)
        await attach_reminders(application, services)
        await register_commands(application)
        log.info(
            "bot_started",
            bot_username=application.bot.username,
            default_model=prepared.default_model,
            models=[e.id for e in services.available_models()],
            database=str(settings.DATABASE_PATH),
        )

    async def post_shutdown(application: Application[Any, Any, Any, Any, Any, Any]) -> None:
        services = application.bot_data.pop(SERVICES_KEY, None)
        if services is not None:
            await services.close()
        log.info("bot_stopped")

    lifecycle = Lifecycle()
    application = (
        ApplicationBuilder()
        .token(settings.TELEGRAM_BOT_TOKEN.get_secret_value())
        .base_url(settings.TELEGRAM_BASE_URL)
        .base_file_url(file_base_url(settings.TELEGRAM_BASE_URL))
        .concurrent_updates(lifecycle.tracker)
        .rate_limiter(AIORateLimiter(max_retries=0))
        .request(telegram_request())
        .post_init(post_init)
        .post_shutdown(post_shutdown)
        .build()
    )
    application.bot_data[LIFECYCLE_KEY] = lifecycle
    register_handlers(application)
    register_memory_handlers(application)
    register_operations_handlers(application)
    register_reminder_handlers(application)
    register_migration_handlers(application)
    return application


@asynccontextmanager
async def running(
    application: Application[Any, Any, Any, Any, Any, Any],
    *,
    poll_interval: float = 0.0,
    poll_timeout: int = 10,
) -> AsyncIterator[Application[Any, Any, Any, Any, Any, Any]]:
    """Run the application polling inside the current event loop (tests, benchmarks).

    Mirrors `run_polling`'s order: initialize, post_init, polling, start; then the reverse.
    """
    await application.initialize()
    try:
        if application.post_init:
            await application.post_init(application)
        assert application.updater is not None
        await application.updater.start_polling(
            poll_interval=poll_interval, timeout=poll_timeout, drop_pending_updates=False
        )
        await application.start()
        warm_up_providers(application)
        try:
            yield application
        finally:
            if application.updater.running:
                await application.updater.stop()
            if application.running:
                await application.stop()
    finally:
        await application.shutdown()
        if application.post_shutdown:
            await application.post_shutdown(application)


def run_polling(prepared: Prepared) -> None:
    """The main job: poll Telegram (or serve the webhook) until SIGINT/SIGTERM, then stop
    gracefully (bot/runner.py)."""
    run_bot(build_application(prepared), prepared.settings)
