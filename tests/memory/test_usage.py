"""Usage reports and budget caps over the real `usage` table (SQLite on disk, real migrations)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from memory.db import Database
from memory.store import Store
from memory.usage import Budgets, Cap, UsageLedger, day_start, month_start
from models.types import Usage
from tests.support.clocks import SettableClock

ANN, BOB = 1001, 1002
GROUP = -100500


async def test_period_starts_are_utc_day_and_month() -> None:
    moment = datetime(2026, 3, 31, 23, 30, tzinfo=UTC) + timedelta(hours=2)  # April 1st 01:30
    assert day_start(moment) == datetime(2026, 4, 1, tzinfo=UTC)
    assert month_start(moment) == datetime(2026, 4, 1, tzinfo=UTC)
    local = datetime(2026, 5, 1, 1, 0, tzinfo=UTC).astimezone(timezone(timedelta(hours=3)))
    assert month_start(local) == datetime(2026, 5, 1, tzinfo=UTC)


async def test_user_report_counts_consolidation_by_model_and_period(db: Database) -> None:
    clock = SettableClock(datetime(2026, 6, 3, 9, 0, tzinfo=UTC))
    store = Store(db, clock)
    # Last month: must appear nowhere.
    clock.now = datetime(2026, 5, 31, 23, 59, tzinfo=UTC)
    await store.record_usage(ANN, ANN, "gpt-5", "chat", Usage(1000, 100, 0.5))
    # Earlier this month.
    clock.now = datetime(2026, 6, 1, 8, 0, tzinfo=UTC)
    await store.record_usage(ANN, ANN, "gpt-5", "chat", Usage(200, 50, 0.02))
    await store.record_usage(
        ANN, ANN, "llama-3.3-70b-versatile", "consolidation", Usage(900, 300, 0.003)
    )
    # Today.
    clock.now = datetime(2026, 6, 3, 8, 0, tzinfo=UTC)
    await store.record_usage(ANN, ANN, "gpt-5", "chat", Usage(100, 10, 0.01))
    await store.record_usage(ANN, ANN, "gpt-5", "chat", Usage(110, 20, 0.011))
    await store.record_usage(ANN, ANN, "qwen3-32b", "consolidation", Usage(700, 200, 0.0004))
    # Someone else, today: not Ann's.
    await store.record_usage(BOB, BOB, "gpt-5", "chat", Usage(5000, 500, 1.0))
    clock.now = datetime(2026, 6, 3, 9, 0, tzinfo=UTC)

    report = await UsageLedger(db, clock).report(ANN)

    today = {(line.model_id, line.purpose): line for line in report.today.lines}
    assert set(today) == {("gpt-5", "chat"), ("qwen3-32b", "consolidation")}
    assert today["gpt-5", "chat"].calls == 2
    assert today["gpt-5", "chat"].prompt_tokens == 210
    assert today["gpt-5", "chat"].completion_tokens == 30
    assert today["qwen3-32b", "consolidation"].total_tokens == 900
    assert report.today.cost_usd == pytest.approx(0.0214)
    assert report.today.cost_for("consolidation") == pytest.approx(0.0004)

    month = {(line.model_id, line.purpose): line for line in report.month.lines}
    assert set(month) == {
        ("gpt-5", "chat"),
        ("qwen3-32b", "consolidation"),
        ("llama-3.3-70b-versatile", "consolidation"),
    }
    assert month["gpt-5", "chat"].calls == 3
    assert report.month.tokens_for("consolidation") == 900 + 1200
    assert report.month.cost_usd == pytest.approx(0.0444)
    # Most expensive line first.
    assert report.month.lines[0].model_id == "gpt-5"


async def test_bot_report_and_per_user_totals_cover_everyone(db: Database) -> None:
    clock = SettableClock(datetime(2026, 6, 3, 12, 0, tzinfo=UTC))
    store = Store(db, clock)
    await store.record_usage(ANN, ANN, "gpt-5", "chat", Usage(100, 10, 0.01))
    await store.record_usage(BOB, BOB, "gpt-5", "chat", Usage(300, 30, 0.03))
    await store.record_usage(GROUP, BOB, "claude-haiku-4-5", "consolidation", Usage(50, 5, 0.005))
    # A consolidation filed without an owner in Ann's private chat still counts as hers.
    await store.record_usage(ANN, None, "qwen3-32b", "consolidation", Usage(40, 4, 0.002))
    ledger = UsageLedger(db, clock)

    everything = await ledger.report(None)
    assert everything.today.calls == 4
    assert everything.today.cost_usd == pytest.approx(0.047)

    ann = await ledger.report(ANN)
    assert ann.today.cost_usd == pytest.approx(0.012)
    assert ann.today.cost_for("consolidation") == pytest.approx(0.002)

    totals = {row.user_id: row for row in await ledger.per_user()}
    assert set(totals) == {ANN, BOB}
    assert totals[BOB].month_cost_usd == pytest.approx(0.035)
    assert totals[BOB].month_consolidation_cost_usd == pytest.approx(0.005)
    assert totals[ANN].today_tokens == 110 + 44
    assert [row.user_id for row in await ledger.per_user()] == [BOB, ANN]


async def test_budget_caps_name_the_cap_reached(db: Database) -> None:
    clock = SettableClock(datetime(2026, 6, 3, 12, 0, tzinfo=UTC))
    store = Store(db, clock)
    ledger = UsageLedger(db, clock)
    assert await ledger.check_budget(ANN, Budgets()) is None

    await store.record_usage(ANN, ANN, "gpt-5", "chat", Usage(100, 10, 0.04))
    await store.record_usage(ANN, ANN, "qwen3-32b", "consolidation", Usage(100, 10, 0.01))

    # Spend of 0.05 today includes the consolidation work.
    hit = await ledger.check_budget(ANN, Budgets(user_daily_usd=0.05))
    assert hit is not None and hit.cap is Cap.USER_DAILY
    assert hit.spent_usd == pytest.approx(0.05)
    assert await ledger.check_budget(ANN, Budgets(user_daily_usd=0.06)) is None
    # Bob has spent nothing: Ann's cap is not his.
    assert await ledger.check_budget(BOB, Budgets(user_daily_usd=0.05)) is None
    # But the bot-wide cap covers everyone.
    hit = await ledger.check_budget(BOB, Budgets(bot_daily_usd=0.05))
    assert hit is not None and hit.cap is Cap.BOT_DAILY

    # A new day resets the daily caps but not the monthly one.
    clock.now = datetime(2026, 6, 4, 0, 0, 1, tzinfo=UTC)
    assert await ledger.check_budget(ANN, Budgets(user_daily_usd=0.05)) is None
    hit = await ledger.check_budget(ANN, Budgets(user_daily_usd=0.05, user_monthly_usd=0.05))
    assert hit is not None and hit.cap is Cap.USER_MONTHLY
    hit = await ledger.check_budget(BOB, Budgets(bot_monthly_usd=0.05))
    assert hit is not None and hit.cap is Cap.BOT_MONTHLY
    # A new month resets everything.
    clock.now = datetime(2026, 7, 1, 0, 0, tzinfo=UTC)
    assert await ledger.check_budget(ANN, Budgets(0.05, 0.05, 0.05, 0.05)) is None
