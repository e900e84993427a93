"""/stats and /usage texts from real tables, the real Transport's status and real translations."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta

from bot.ui.stats import build_stats_text, everyone_text, money, usage_text
from memory.db import Database
from memory.store import Store, to_iso
from memory.usage import UsageLedger
from models.calls import CallOptions
from models.types import Usage
from tests.fakes.providers import Reply
from tests.support.archive_rows import closed_session
from tests.support.shared_workers import shared_workers

NOW = datetime(2026, 6, 3, 12, 0, tzinfo=UTC)
ANN, BOB = 1001, 1002


async def _job(db: Database, chat_id: int, state: str, *, attempts: int, created: datetime) -> int:
    stamp = to_iso(created)

    def write(conn: sqlite3.Connection) -> int:
        session_id = closed_session(conn, chat_id, stamp)
        cursor = conn.execute(
            "INSERT INTO consolidation_jobs(chat_id, session_id, kind, state, attempts, "
            "next_attempt_at, created_at, updated_at) "
            "VALUES (?, ?, 'session_closed', ?, ?, ?, ?, ?)",
            (chat_id, session_id, state, attempts, stamp, stamp, stamp),
        )
        assert cursor.lastrowid is not None
        return cursor.lastrowid

    return await db.run_in_transaction(write)


async def _attempt(db: Database, job_id: int, chat_id: int, model: str, outcome: str) -> None:
    def write(conn: sqlite3.Connection) -> None:
        conn.execute(
            "INSERT INTO consolidation_attempts(job_id, chat_id, model_id, outcome, created_at) "
            "VALUES (?, ?, ?, ?, ?)",
            (job_id, chat_id, model, outcome, to_iso(NOW - timedelta(hours=1))),
        )

    await db.run_in_transaction(write)


async def test_stats_text_shows_queue_outcomes_breakers_workers_and_spend(
    db: Database, transport, fake_openai
) -> None:
    done1 = await _job(db, ANN, "done", attempts=0, created=NOW - timedelta(hours=5))
    await _attempt(db, done1, ANN, "llama-3.3-70b-versatile", "rate_limit")
    await _attempt(db, done1, ANN, "qwen3-32b", "saved")
    done2 = await _job(db, BOB, "done", attempts=0, created=NOW - timedelta(hours=4))
    await _attempt(db, done2, BOB, "llama-3.3-70b-versatile", "saved")
    failing = await _job(db, ANN, "pending", attempts=2, created=NOW - timedelta(minutes=95))
    for model in ("llama-3.3-70b-versatile", "qwen3-32b"):
        await _attempt(db, failing, ANN, model, "timeout")
    await _job(db, BOB, "pending", attempts=0, created=NOW - timedelta(minutes=3))
    store = Store(db, lambda: NOW - timedelta(minutes=10))
    await store.record_usage(ANN, ANN, "gpt-5", "chat", Usage(1000, 200, 0.5))
    await store.record_usage(ANN, ANN, "qwen3-32b", "consolidation", Usage(3000, 300, 0.25))
    # The real transport: trip the Groq gateway breaker the way failures do.
    groq = transport.policy.gateway_state("groq")
    while groq.breaker.state.value == "closed":
        groq.breaker.record_failure()

    fake_openai.script("gpt-5", Reply("hello"))
    await transport.complete("gpt-5", [{"role": "user", "content": "hi"}], CallOptions(timeout=10))
    [worker] = transport.workers.workers

    text = await build_stats_text(db, transport.status(), "en", clock=lambda: NOW)

    assert f"• worker 1: pid {worker.pid}, ready, " in text
    assert ", calls in flight 0, restarts " in text
    assert "Memory queue: 2 pending, 0 running, 2 done" in text
    assert "Oldest waiting job: since 2026-06-03 10:25 UTC (95 min ago)" in text
    assert "Failed jobs waiting for a retry: 1" in text
    assert "Models tried per saved job: 1.50 on average, at most 2" in text
    assert "• llama-3.3-70b-versatile: saved 1, rate_limit 1, timeout 1" in text
    assert "• qwen3-32b: saved 1, timeout 1" in text
    assert "groq: breaker OPEN" in text
    assert "openai: breaker closed" in text and "keys available 1/1" in text
    assert "Spend today (UTC): 4,500 tokens, $0.7500 (chat $0.5000, memory $0.2500)" in text
    assert "sk-" not in text and "gsk_" not in text


async def test_stats_text_is_translated(db: Database, transport) -> None:
    text = await build_stats_text(db, transport.status(), "ja", clock=lambda: NOW)
    assert "記憶" in text
    assert "Memory queue" not in text


async def test_usage_texts_include_memory_work_and_everyone_for_admins(db: Database) -> None:
    store = Store(db, lambda: NOW)
    await store.record_usage(ANN, ANN, "gpt-5", "chat", Usage(1200, 300, 0.0123))
    await store.record_usage(ANN, ANN, "qwen3-32b", "consolidation", Usage(4000, 500, 0.0021))
    await store.record_usage(BOB, BOB, "claude-haiku-4-5", "chat", Usage(100, 50, 1.5))
    ledger = UsageLedger(db, lambda: NOW)

    own = usage_text(await ledger.report(ANN), "en")
    assert own.splitlines()[0] == "Your usage (days and months in UTC):"
    assert "Today: 6,000 tokens, $0.0144" in own
    assert "gpt-5 (chat): 1,500 tokens, $0.0123, requests: 1" in own
    assert "qwen3-32b (memory): 4,500 tokens, $0.0021" in own
    assert "4,500 tokens, $0.0021 of background memory work" in own
    assert "claude" not in own  # Bob's spend is not Ann's business

    admin = everyone_text(await ledger.per_user(), await ledger.report(None), "en")
    assert f"{BOB}: today $1.50, month $1.50 (150 tokens, memory $0)" in admin
    assert f"{ANN}: today $0.0144" in admin and "memory $0.0021" in admin
    assert "Whole bot: today 6,150 tokens, $1.51" in admin

    assert usage_text(await ledger.report(4242), "pt").endswith("Nenhum uso ainda.")


def test_money_keeps_small_amounts_readable() -> None:
    assert money(0) == "$0"
    assert money(0.00042) == "$0.0004"
    assert money(12.345) == "$12.35"
    assert money(1234.5) == "$1,234.50"


async def test_stats_show_who_waits_for_a_turn_and_the_longest_wait(
    db: Database, fake_openai, fake_groq, fake_anthropic
) -> None:
    """Requests waiting in a gateway's queue, chat and memory apart, and the longest wait."""
    import asyncio

    from models.catalog import load_catalog
    from models.policy.pacing import Priority
    from models.transport import Transport
    from tests.support.e2e_bot import wait_until
    from tests.support.transport import make_gateways

    gateways = make_gateways(fake_openai, fake_groq, fake_anthropic, {"openai": 2.0})
    transport = Transport(load_catalog(), gateways, bucket_burst=1.0, workers=shared_workers())
    hi = [{"role": "user", "content": "hi"}]
    asks = [
        asyncio.create_task(transport.complete("gpt-4.1", hi, CallOptions(timeout=30, user_key=n)))
        for n in range(3)
    ]
    asks.append(
        asyncio.create_task(
            transport.complete("gpt-4.1", hi, CallOptions(timeout=30, priority=Priority.BACKGROUND))
        )
    )

    def waiting() -> int:
        return transport.status()["gateways"]["openai"]["queue"]["waiting"]

    await wait_until(lambda: waiting() == 3, "three requests queued behind the first")
    text = await build_stats_text(db, transport.status(), "en", clock=lambda: NOW)
    assert "waiting for a turn: 3 (chat 2, memory 1)" in text
    await asyncio.gather(*asks)
    text = await build_stats_text(db, transport.status(), "en", clock=lambda: NOW)
    longest = transport.status()["gateways"]["openai"]["queue"]["longest_wait_s"]
    assert longest > 0 and f"longest wait {longest:.1f} s" in text
    await transport.aclose()
