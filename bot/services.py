"""The long-lived objects every handler uses (`Services`), and `BotData`, through which a
handler reaches them with types: `context.bot_data.services`.

Nothing here builds anything: bot/app.py is the one place that does (the composition root).
A module of its own so that handlers, turns and the runner can import these types, while
bot/app.py — which imports all of them to build the application — is pointed at by nothing
but the entry point.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog
from telegram.ext import Application, CallbackContext, ExtBot

from agent.loop import AgentLoop
from bot.config import Settings
from bot.handlers.access import RefusalThrottle
from bot.handlers.chat_admins import ChatAdmins
from bot.lifecycle import Lifecycle
from bot.turns.chat_turns import ChatTurns
from bot.turns.limits import TurnGuard
from mcp_client.config import McpConfig
from mcp_client.hub import McpHub
from media.document_reader import ReaderSlots
from media.inbox import MediaInbox
from memory.consolidation.worker import ConsolidationWorker
from memory.db import Database
from memory.longterm import MemoryRepository
from memory.recall.archive import ArchivePurger
from memory.store import Store
from memory.usage import UsageLedger
from models.catalog import Catalog, ModelEntry
from models.gateways import Gateway
from primitives.tasks import stop_task
from reminders.book import ReminderBook
from reminders.scheduler import ReminderScheduler
from reminders.task_runs import TaskRuns

if TYPE_CHECKING:
    from models.transport import Transport
    from models.worker.pool import WorkerPool

log = structlog.get_logger("bot.services")


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
    # MCP_CONFIG read and checked (mcp_client/config.py); None when it is unset.
    mcp: McpConfig | None = None


@dataclass(frozen=True)
class MemoryFeature:
    """The long-term memory (/memory, /forget) and the background work that keeps it."""

    repo: MemoryRepository
    worker: ConsolidationWorker
    # ARCHIVE_DAYS: archived words older than that go at start-up, then once a day.
    purger: ArchivePurger


@dataclass(frozen=True)
class ReminderFeature:
    """The reminders of every chat, and the scheduler that sends them when due."""

    book: ReminderBook
    scheduler: ReminderScheduler


@dataclass(frozen=True)
class TaskFeature:
    """Scheduled tasks: their runs' records, and the scheduler that claims them when due (in
    the book of reminders, with a scheduler of their own, whose delivery runs and sends them:
    bot/handlers/tasks.py)."""

    runs: TaskRuns
    scheduler: ReminderScheduler


class ProviderWarmUp:
    """The provider worker's warm-up, started once polling runs, so start-up does not wait for
    litellm's import (a message that comes first waits for the worker)."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._transport.warm_up())

    async def stop(self) -> None:
        await stop_task(self._task)  # warm_up logs its own failures and never raises


@dataclass(frozen=True, eq=False)
class Services:
    """The long-lived objects handlers use, each built once and complete by bot/app.py (in
    post_init, once the database is open) and closed in post_shutdown. Frozen: nothing swaps
    a part after the start; a new feature is a new field, filled by the root."""

    settings: Settings
    catalog: Catalog
    gateways: dict[str, Gateway]
    default_model: str
    db: Database
    store: Store
    transport: Transport
    agent: AgentLoop
    memory: MemoryFeature
    reminders: ReminderFeature
    tasks: TaskFeature
    # Voice notes, audio and video notes between their arrival and their transcript.
    inbox: MediaInbox
    # Read-only spend reports: /usage and the guard's spending caps.
    ledger: UsageLedger
    # Split parts, input size, rate limit and spending caps (bot/turns/limits.py).
    guard: TurnGuard
    # Graceful stop: which update each handler works on, the closing flag, held updates.
    lifecycle: Lifecycle
    # One turn at a time per chat; /cancel, /new and /forget stop the running one.
    turns: ChatTurns
    # Strangers are told no at most once an hour each (bot/handlers/access.py).
    refusals: RefusalThrottle
    # The chat's language as last written to the database (bot/handlers/ops.py).
    languages: dict[int, str]
    warm_up: ProviderWarmUp
    # The reader children's slots (documents and photos here, pages in the web tools).
    readers: ReaderSlots
    # Seconds between edits of a streamed reply.
    edit_interval: float = 1.0
    # Group admins as Telegram reports them, kept a minute (bot/handlers/chat_admins.py).
    chat_admins: ChatAdmins = field(default_factory=ChatAdmins)
    # The operator's MCP servers (mcp_client/hub.py); None without MCP_CONFIG.
    mcp: McpHub | None = None
    # The provider worker pool the root built for this bot, stopped with it; None when the
    # caller brought the transport's workers (tests sharing one pool) and stops them itself.
    own_workers: WorkerPool | None = None

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
        """Start a provider worker and warm it up, in the background (`ProviderWarmUp`)."""
        self.warm_up.start()

    async def close(self) -> None:
        """Stop the background work (the scheduler, the archive purge, the consolidation
        worker: each gets its grace), then the transport and the database."""
        await self.warm_up.stop()
        grace = self.settings.SHUTDOWN_GRACE_SECONDS
        closers = (
            lambda: self.reminders.scheduler.stop(min(5.0, grace)),
            lambda: self.tasks.scheduler.stop(min(5.0, grace)),
            self.memory.purger.stop,
            lambda: self.memory.worker.stop(grace),
            # Every MCP server's process ends with the bot (after the turns that used them).
            self.mcp.stop if self.mcp is not None else _nothing,
        )
        for closer in closers:
            try:
                await closer()
            except Exception:
                log.exception("service_close_failed")
        await self.transport.aclose()
        if self.own_workers is not None:
            await self.own_workers.aclose()
        await self.db.close()


async def _nothing() -> None:
    return None


class BotData:
    """`context.bot_data` of every handler (PTB's `ContextTypes(bot_data=BotData)`): the
    services, typed, instead of a dict with string keys.

    PTB builds this with no arguments when the Application is built, before any event loop
    runs; the services need the database, which opens in post_init. So this one holder is
    filled once, by the root (bot/app.py), and emptied at post_shutdown.
    """

    def __init__(self) -> None:
        self._services: Services | None = None

    @property
    def services(self) -> Services:
        if self._services is None:
            raise RuntimeError("the services are not open (before post_init or after shutdown)")
        return self._services

    @property
    def opened(self) -> Services | None:
        """The services, or None before post_init and after post_shutdown."""
        return self._services

    def open(self, services: Services) -> None:
        if self._services is not None:
            raise RuntimeError("the services are open already")
        self._services = services

    def close(self) -> Services | None:
        """Empty the holder; the services it held (to be closed), if any."""
        services, self._services = self._services, None
        return services


# The `context` every handler gets, and the application it belongs to.
Context = CallbackContext[ExtBot[None], dict[Any, Any], dict[Any, Any], BotData]
App = Application[Any, Any, Any, Any, BotData, Any]
