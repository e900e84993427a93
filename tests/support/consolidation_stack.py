"""The real consolidation stack over HTTP: fake providers on 127.0.0.1, real litellm transport,
real SQLite store, queue and worker. Shared by the consolidation tests and the benchmark."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from memory.consolidation.consolidation import Consolidator
from memory.consolidation.jobs import JobQueue
from memory.consolidation.worker import ConsolidationWorker
from memory.db import Database
from memory.longterm import MemoryRepository
from memory.store import Store
from models.catalog import Catalog, load_catalog
from models.gateways import Gateway
from models.transport import Transport
from models.worker.interface import ProviderWorkers
from tests.fakes.providers import FakeProvider, ToolCallReply
from tests.support.shared_workers import shared_workers

CHAIN = [
    "llama-3.3-70b-versatile",
    "qwen3-32b",
    "llama-4-scout-17b-16e-instruct",
    "gpt-4.1-mini",
    "claude-haiku-4-5",
]
WIRE = {
    "llama-3.3-70b-versatile": "llama-3.3-70b-versatile",
    "qwen3-32b": "qwen/qwen3-32b",
    "llama-4-scout-17b-16e-instruct": "meta-llama/llama-4-scout-17b-16e-instruct",
    "gpt-4.1-mini": "gpt-4.1-mini",
    "claude-haiku-4-5": "claude-haiku-4-5",
}
KEYS = {
    "groq": "gsk_test_groq_key_0001",
    "openai": "sk-test-openai-0001",
    "anthropic": "sk-ant-test",
}

GOOD_ARGS = {
    "history_entry": "[2026-03-01 09:00] Rina said she moves the billing service to PostgreSQL.",
    "memory_update": "- Name: Rina\n- Works on the billing service (moving it to PostgreSQL)",
}


def good_call(**overrides: Any) -> ToolCallReply:
    return ToolCallReply(arguments={**GOOD_ARGS, **overrides}, prompt_tokens=900)


def anthropic_first_catalog() -> Catalog:
    """The default chain re-ordered so Claude Haiku is tried first (to fault Anthropic)."""
    entries = {e.id: e for e in load_catalog().entries.values()}
    entries["gpt-4.1-mini"] = replace(entries["gpt-4.1-mini"], fallback=None)
    entries["claude-haiku-4-5"] = replace(
        entries["claude-haiku-4-5"], fallback="llama-3.3-70b-versatile"
    )
    return Catalog.build(entries.values())


class StepClock:
    """Wall time for the worker that tests can move forward past retry delays. Not a
    SettableClock (tests/support/clocks.py): it keeps running with real time, as the rest of the
    stack's clocks do, and only the offset is the test's."""

    def __init__(self) -> None:
        self.offset = timedelta(0)

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += timedelta(seconds=seconds)


@dataclass
class Stack:
    groq: FakeProvider
    openai: FakeProvider
    anthropic: FakeProvider
    db: Database
    store: Store
    repo: MemoryRepository
    queue: JobQueue
    transport: Transport
    consolidator: Consolidator
    worker: ConsolidationWorker
    clock: StepClock

    @property
    def providers(self) -> list[FakeProvider]:
        return [self.groq, self.openai, self.anthropic]

    def requests_for(self, model_id: str) -> list[Any]:
        provider = {"groq": self.groq, "openai": self.openai, "anthropic": self.anthropic}[
            self.consolidator.catalog.get(model_id).gateway
        ]
        return [r for r in provider.requests if r.model == WIRE[model_id]]

    async def close(self) -> None:
        await self.worker.stop(grace=1)
        await self.transport.aclose()
        await self.db.close()
        for provider in self.providers:
            await provider.stop()


async def open_stack(
    db_path: Path,
    *,
    catalog: Catalog | None = None,
    head: str = CHAIN[0],
    attempt_timeout: float = 5.0,
    retry_delays: Sequence[float] = (60, 300),
    concurrency: int = 2,
    latency: float = 0.0,
    transport_options: dict[str, Any] | None = None,
    gateway_keys: dict[str, str] | None = None,
    workers: ProviderWorkers | None = None,
) -> Stack:
    """Fakes, transport, store and consolidation worker, on `workers` (by default the running
    loop's shared pool: tests/support/shared_workers.py)."""
    groq = FakeProvider("groq", latency=latency)
    openai = FakeProvider("openai", latency=latency)
    anthropic = FakeProvider("anthropic", latency=latency)
    for provider in (groq, openai, anthropic):
        await provider.start()
        provider.set_default("*", good_call())
    keys = {**KEYS, **(gateway_keys or {})}
    gateways = {
        name: Gateway(name, name, provider.base_url, (keys[name],), requests_per_second=1000)
        for name, provider in (("groq", groq), ("openai", openai), ("anthropic", anthropic))
    }
    catalog = catalog or load_catalog()
    options: dict[str, Any] = {
        "backoff": (0.01, 0.02, 0.04),
        "retry_after_cap": 0.2,
        "timeout_grace": 0.5,
        "breaker_threshold": 10_000,
        "gateway_breaker_threshold": 10_000,
        "rate_limit_cooldown": 0.0,
        "retry_budget_initial": 1e9,
        "retry_budget_cap": 1e9,
    }
    options |= transport_options or {}
    transport = Transport(catalog, gateways, workers=workers or shared_workers(), **options)
    db = await Database.open(db_path)
    clock = StepClock()
    store = Store(db, clock)
    consolidator = Consolidator(
        transport, catalog, head_model=head, timeout=attempt_timeout, memory_max_chars=6000
    )
    worker = ConsolidationWorker(
        store,
        consolidator,
        retry_delays=retry_delays,
        concurrency=concurrency,
        clock=clock,
    )
    store.on_job_enqueued = worker.notify
    return Stack(
        groq,
        openai,
        anthropic,
        db,
        store,
        MemoryRepository(db),
        JobQueue(store),
        transport,
        consolidator,
        worker,
        clock,
    )


async def closed_session(stack: Stack, chat_id: int, turns: int = 4) -> tuple[list[int], int]:
    """A short session, then /new: returns the stored message ids and the job id."""
    ids = []
    for i in range(turns):
        role = "user" if i % 2 == 0 else "assistant"
        text = f"turn {i}: I am Rina and I move billing to PostgreSQL" if i == 0 else f"turn {i}"
        ids.append((await stack.store.add_message(chat_id, role, text, user_id=chat_id)).id)
    result = await stack.store.start_new_session(chat_id)
    assert result.job_id is not None
    return ids, result.job_id
