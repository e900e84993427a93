"""Wiring: settings → catalog → gateways → transport, database, and the PTB Application.

`prepare()` does every check that can fail on bad configuration *before* anything connects, so
`python -m bot` either refuses with one line or starts. `build_application()` returns a PTB
Application whose `post_init` opens the services and whose `post_shutdown` closes them; other
parts (memory worker, webhook, health) hook into the same lifecycle through `Services`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog
from telegram import BotCommand
from telegram.ext import AIORateLimiter, Application, ApplicationBuilder

from bot.chat_turns import ChatTurns
from bot.config import ConfigError, Settings
from bot.i18n import MESSAGES, SUPPORTED_LANGUAGES, t
from bot.lifecycle import LIFECYCLE_KEY, Lifecycle
from bot.logging_setup import redactor
from memory.db import Database
from memory.store import Store
from models.catalog import Catalog, CatalogError, ModelEntry, load_catalog
from models.gateways import Gateway

if TYPE_CHECKING:
    from bot.limits import TurnGuard
    from models.transport import Transport

log = structlog.get_logger("bot.app")

SERVICES_KEY = "services"

# (command, i18n key of its description), in the order Telegram shows them. Other features
# append their commands here before the application starts.
BOT_COMMANDS: list[tuple[str, str]] = [
    ("start", "cmd_start"),
    ("help", "cmd_help"),
    ("model", "cmd_model"),
    ("new", "cmd_new"),
    ("cancel", "cmd_cancel"),
]


def build_gateways(settings: Settings) -> dict[str, Gateway]:
    """The three gateways the catalog may name, from the *_API_BASE / *_API_KEY settings."""

    def keys(secrets: list[Any]) -> tuple[str, ...]:
        return tuple(k.get_secret_value() for k in secrets)

    return {
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


def available_models(catalog: Catalog, gateways: dict[str, Gateway]) -> list[ModelEntry]:
    """Visible models whose gateway has a key: what /model offers and accepts."""
    return [
        e for e in catalog.visible() if e.gateway in gateways and gateways[e.gateway].configured
    ]


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
            raise ConfigError(
                f"DEFAULT_MODEL: {wanted!r} needs the {gateway} gateway; "
                f"set {gateway.upper()}_API_KEY"
            )
        return wanted
    if not available:
        raise ConfigError(
            "OPENAI_API_KEY: no provider key set; set OPENAI_API_KEY or ANTHROPIC_API_KEY "
            "(or add visible models for GROQ_API_KEY in MODEL_CATALOG_FILE)"
        )
    return available[0].id


@dataclass(frozen=True)
class Prepared:
    """Everything start-up derives from settings without touching the network or disk."""

    settings: Settings
    catalog: Catalog
    gateways: dict[str, Gateway]
    default_model: str


def prepare(settings: Settings) -> Prepared:
    """Load the catalog and check the model settings. Raises ConfigError or CatalogError."""
    try:
        catalog = load_catalog(settings.MODEL_CATALOG_FILE)
    except CatalogError as exc:
        source = "MODEL_CATALOG_FILE" if settings.MODEL_CATALOG_FILE else "built-in catalog"
        raise CatalogError(f"{source}: {exc}") from None
    gateways = build_gateways(settings)
    if settings.CONSOLIDATION_MODEL not in catalog:
        raise ConfigError(f"CONSOLIDATION_MODEL: unknown model {settings.CONSOLIDATION_MODEL!r}")
    default_model = resolve_default_model(settings, catalog, gateways)
    return Prepared(settings, catalog, gateways, default_model)


def secrets_of(settings: Settings) -> list[str]:
    """Every secret the logs must never show."""
    values = [settings.TELEGRAM_BOT_TOKEN.get_secret_value()]
    for keys in (settings.OPENAI_API_KEY, settings.ANTHROPIC_API_KEY, settings.GROQ_API_KEY):
        values.extend(k.get_secret_value() for k in keys)
    if settings.WEBHOOK_SECRET is not None:
        values.append(settings.WEBHOOK_SECRET.get_secret_value())
    return [v for v in values if v]


async def _no_long_term_memory(chat_id: int) -> str:
    return ""


@dataclass
class Services:
    """The long-lived objects handlers use. Opened in post_init, closed in post_shutdown.

    Features add fields here (e.g. a consolidation worker) and replace `memory_text`.
    """

    settings: Settings
    catalog: Catalog
    gateways: dict[str, Gateway]
    default_model: str
    db: Database
    store: Store
    transport: Transport
    turns: ChatTurns = field(default_factory=ChatTurns)
    memory_text: Callable[[int], Awaitable[str]] = _no_long_term_memory
    edit_interval: float = 1.0
    on_close: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    # Operations (bot/ops_handlers.attach_operations): graceful stop, limits and budgets.
    lifecycle: Lifecycle = field(default_factory=lambda: Lifecycle())
    guard: TurnGuard | None = None

    @classmethod
    async def open(
        cls, prepared: Prepared, *, transport_options: dict[str, Any] | None = None
    ) -> Services:
        # Imported here: litellm takes seconds to import, and a configuration error should
        # be reported before that.
        from models.transport import Transport

        transport = Transport(prepared.catalog, prepared.gateways, **(transport_options or {}))
        # litellm's first-request loading runs in a thread meanwhile, not in the first turns.
        db, _ = await asyncio.gather(
            Database.open(prepared.settings.DATABASE_PATH), transport.warm_up()
        )
        return cls(
            settings=prepared.settings,
            catalog=prepared.catalog,
            gateways=prepared.gateways,
            default_model=prepared.default_model,
            db=db,
            store=Store(db),
            transport=transport,
        )

    def available_models(self) -> list[ModelEntry]:
        return available_models(self.catalog, self.gateways)

    def is_available(self, model_id: str) -> bool:
        return any(e.id == model_id for e in self.available_models())

    def label(self, model_id: str) -> str:
        entry = self.catalog.entries.get(model_id)
        return entry.label if entry else model_id

    async def chat_model(self, chat_id: int) -> ModelEntry:
        """The chat's chosen model, or the default if none was chosen or it is gone now."""
        chosen = await self.store.get_chat_model(chat_id)
        if chosen is not None and self.is_available(chosen):
            return self.catalog.get(chosen)
        return self.catalog.get(self.default_model)

    async def close(self) -> None:
        for closer in reversed(self.on_close):
            try:
                await closer()
            except Exception:
                log.exception("service_close_failed")
        await self.transport.aclose()
        await self.db.close()


def services_of(application: Application[Any, Any, Any, Any, Any, Any]) -> Services:
    return application.bot_data[SERVICES_KEY]


def bot_commands(lang: str | None) -> list[BotCommand]:
    return [BotCommand(name, t(key, lang)) for name, key in BOT_COMMANDS]


async def register_commands(application: Application[Any, Any, Any, Any, Any, Any]) -> None:
    """English as the default list, plus each language that has its own descriptions."""
    await application.bot.set_my_commands(bot_commands("en"))
    for lang in SUPPORTED_LANGUAGES:
        translated = MESSAGES.get(lang, {})
        if lang != "en" and all(key in translated for _, key in BOT_COMMANDS):
            await application.bot.set_my_commands(bot_commands(lang), language_code=lang)


def build_application(
    prepared: Prepared,
    *,
    transport_options: dict[str, Any] | None = None,
    edit_interval: float = 1.0,
) -> Application[Any, Any, Any, Any, Any, Any]:
    """The PTB Application, handlers registered; services open in post_init."""
    from bot.handlers import register_handlers  # handlers import this module's Services

    settings = prepared.settings
    redactor().add(secrets_of(settings))

    async def post_init(application: Application[Any, Any, Any, Any, Any, Any]) -> None:
        services = await Services.open(prepared, transport_options=transport_options)
        services.edit_interval = edit_interval
        application.bot_data[SERVICES_KEY] = services
        from bot.memory_handlers import attach_memory

        await attach_memory(application, services)
        from bot.ops_handlers import attach_operations

        await attach_operations(application, services)
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
        .concurrent_updates(lifecycle.tracker)
        .rate_limiter(AIORateLimiter(max_retries=0))
        .post_init(post_init)
        .post_shutdown(post_shutdown)
        .build()
    )
    application.bot_data[LIFECYCLE_KEY] = lifecycle
    register_handlers(application)
    from bot.memory_handlers import register_memory_handlers
    from bot.ops_handlers import register_operations_handlers

    register_memory_handlers(application)
    register_operations_handlers(application)
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
    gracefully (bot/lifecycle.py)."""
    from bot.lifecycle import run_bot

    run_bot(build_application(prepared), prepared.settings)
