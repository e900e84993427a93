"""The long-lived objects every handler uses (`Services`), and what start-up prepared for them.

A module of its own so that handlers, turns and the runner can import `Services` from here,
while `bot/wiring.py` — which imports all of them to wire the application — stays the one module
that points at everything and is pointed at by nothing but the entry point.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog
from telegram.ext import Application

from agent.loop import AgentLoop
from agent.tools.memory import ChatTools
from bot.config import Settings, provider_workers
from bot.handlers.access import RefusalThrottle
from bot.lifecycle import Lifecycle
from bot.turns.chat_turns import ChatTurns
from memory.db import Database
from memory.store import Clock, Store, utc_now
from models.catalog import Catalog, ModelEntry
from models.gateways import Gateway

if TYPE_CHECKING:
    from bot.turns.limits import TurnGuard
    from models.transport import Transport

log = structlog.get_logger("bot.services")

SERVICES_KEY = "services"


def available_models(catalog: Catalog, gateways: dict[str, Gateway]) -> list[ModelEntry]:
    """Visible models whose gateway has a key: what /model offers and accepts."""
    return [
        e for e in catalog.visible() if e.gateway in gateways and gateways[e.gateway].configured
    ]


@dataclass(frozen=True)
class Prepared:
    """Everything start-up derives from settings without touching the network or disk."""

    settings: Settings
    catalog: Catalog
    gateways: dict[str, Gateway]
    default_model: str


@dataclass
class Services:
    """The long-lived objects handlers use. Opened in post_init, closed in post_shutdown.

    Features add fields here (e.g. a consolidation worker).
    """

    settings: Settings
    catalog: Catalog
    gateways: dict[str, Gateway]
    default_model: str
    db: Database
    store: Store
    transport: Transport
    turns: ChatTurns = field(default_factory=ChatTurns)
    edit_interval: float = 1.0
    on_close: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    # Operations (bot/turn_guard.attach_turn_guard): graceful stop, limits and budgets.
    lifecycle: Lifecycle = field(default_factory=lambda: Lifecycle())
    guard: TurnGuard | None = None
    # Strangers are told no at most once an hour each (bot/handlers/access.py).
    refusals: RefusalThrottle = field(default_factory=RefusalThrottle)
    # The chat turn's agent loop (agent/), built in `open`.
    agent: AgentLoop | None = None
    # The provider worker's warm-up, started once polling runs (`warm_up_providers`).
    warming: asyncio.Task[None] | None = None

    @classmethod
    async def open(
        cls,
        prepared: Prepared,
        *,
        transport_options: dict[str, Any] | None = None,
        clock: Clock | None = None,
    ) -> Services:
        # Imported here: a configuration error is reported before the transport's imports.
        from models.transport import Transport
        from models.worker.pool import WORKER, WorkerSettings

        settings = prepared.settings
        WORKER.configure(
            WorkerSettings(
                max_workers=provider_workers(settings),
                at_rest=settings.PROVIDER_WORKERS_AT_REST,
                heartbeat_s=settings.PROVIDER_WORKER_HEARTBEAT_S,
                max_rss_mb=settings.PROVIDER_WORKER_MAX_RSS_MB,
            )
        )
        transport = Transport(prepared.catalog, prepared.gateways, **(transport_options or {}))
        db = await Database.open(settings.DATABASE_PATH)
        store = Store(db, clock or utc_now)
        services = cls(
            settings=settings,
            catalog=prepared.catalog,
            gateways=prepared.gateways,
            default_model=prepared.default_model,
            db=db,
            store=store,
            transport=transport,
        )
        services.agent = AgentLoop(
            store=store,
            transport=transport,
            catalog=prepared.catalog,
            tools=ChatTools(db, memory_max_chars=settings.MEMORY_MAX_CHARS, clock=store.clock),
            max_steps=settings.AGENT_MAX_STEPS,
            timeout=settings.CHAT_TIMEOUT,
            max_answer_tokens=settings.MAX_ANSWER_TOKENS,
            answer_seconds=settings.MAX_ANSWER_SECONDS,
            max_answer_chars=settings.MAX_ANSWER_CHARS,
        )
        return services

    def available_models(self) -> list[ModelEntry]:
        return available_models(self.catalog, self.gateways)

    def is_available(self, model_id: str) -> bool:
        return any(e.id == model_id for e in self.available_models())

    def label(self, model_id: str) -> str:
        entry = self.catalog.entries.get(model_id)
        return entry.label if entry else model_id

    async def chat_model(self, chat_id: int) -> ModelEntry:
        """The chat's chosen model, or the default if none was chosen or it is gone now."""
        return self.model_or_default(await self.store.get_chat_model(chat_id))

    def model_or_default(self, chosen: str | None) -> ModelEntry:
        """The model a chat chose (`chosen`, as stored), or the default if it chose none or
        the chosen one is not offered any more. A turn has `chosen` from its start
        (memory.store.TurnStart.chat_model); other callers use `chat_model`."""
        if chosen is not None and self.is_available(chosen):
            return self.catalog.get(chosen)
        return self.catalog.get(self.default_model)

    def warm_up_providers(self) -> None:
        """Start a provider worker and warm it up, in the background: called once polling
        runs, so start-up does not wait for litellm's import (a message that comes first waits
        for the worker)."""
        if self.warming is None:
            self.warming = asyncio.create_task(self.transport.warm_up())

    async def close(self) -> None:
        if self.warming is not None and not self.warming.done():
            self.warming.cancel()
            await asyncio.gather(self.warming, return_exceptions=True)
        for closer in reversed(self.on_close):
            try:
                await closer()
            except Exception:
                log.exception("service_close_failed")
        await self.transport.aclose()
        await self.db.close()


def services_of(application: Application[Any, Any, Any, Any, Any, Any]) -> Services:
    return application.bot_data[SERVICES_KEY]


def warm_up_providers(application: Application[Any, Any, Any, Any, Any, Any]) -> None:
    """Once polling runs: start the provider worker's warm-up (see Services.warm_up_providers)."""
    services: Services | None = application.bot_data.get(SERVICES_KEY)
    if services is not None:
        services.warm_up_providers()
