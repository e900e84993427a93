"""What the bot has spent, for whom, and whether a spending cap is reached.

Everything here reads the `usage` table, which holds one row per answered model call: chat turns
(purpose 'chat') and the background consolidation done for a chat (purpose 'consolidation',
attributed to the chat's owner). Counting the background work is the point: a self-hoster pays
for it too, and a report without it under-states the bill.

Periods are UTC calendar days and months, so "today" means the same thing on every server.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum

from memory.db import Database
from memory.store import Store, to_iso
from models.types import Spend, Usage
from primitives.clock import Clock, utc_now


def day_start(moment: datetime) -> datetime:
    """Midnight UTC of the day `moment` falls in."""
    moment = moment.astimezone(UTC)
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


def month_start(moment: datetime) -> datetime:
    """Midnight UTC of the first day of the month `moment` falls in."""
    return day_start(moment).replace(day=1)


@dataclass(frozen=True)
class UsageLine:
    """Spend of one model for one purpose within a period."""

    model_id: str
    purpose: str
    calls: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    estimated_calls: int = 0  # calls whose usage we counted ourselves (no provider figure)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class PeriodUsage:
    """All lines of one period (today or this month), most expensive first."""

    since: datetime
    lines: list[UsageLine] = field(default_factory=list)

    @property
    def calls(self) -> int:
        return sum(line.calls for line in self.lines)

    @property
    def prompt_tokens(self) -> int:
        return sum(line.prompt_tokens for line in self.lines)

    @property
    def completion_tokens(self) -> int:
        return sum(line.completion_tokens for line in self.lines)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def cost_usd(self) -> float:
        return sum(line.cost_usd for line in self.lines)

    def cost_for(self, purpose: str) -> float:
        return sum(line.cost_usd for line in self.lines if line.purpose == purpose)

    def tokens_for(self, purpose: str) -> int:
        return sum(line.total_tokens for line in self.lines if line.purpose == purpose)


@dataclass(frozen=True)
class UsageReport:
    """Today and this month for one user (`user_id`) or for the whole bot (`user_id` None)."""

    user_id: int | None
    today: PeriodUsage
    month: PeriodUsage


@dataclass(frozen=True)
class UserTotal:
    """One row of the admins' everyone-at-a-glance list."""

    user_id: int | None
    today_tokens: int
    today_cost_usd: float
    month_tokens: int
    month_cost_usd: float
    month_consolidation_cost_usd: float


class Cap(StrEnum):
    """Which spending cap was reached; the bot names it in its reply."""

    USER_DAILY = "user_daily"
    USER_MONTHLY = "user_monthly"
    BOT_DAILY = "bot_daily"
    BOT_MONTHLY = "bot_monthly"


@dataclass(frozen=True)
class Budgets:
    """Caps in USD; 0 means no cap. Mirrors the *_BUDGET_USD settings."""

    user_daily_usd: float = 0.0
    user_monthly_usd: float = 0.0
    bot_daily_usd: float = 0.0
    bot_monthly_usd: float = 0.0

    @property
    def any(self) -> bool:
        return any(
            cap > 0
            for cap in (
                self.user_daily_usd,
                self.user_monthly_usd,
                self.bot_daily_usd,
                self.bot_monthly_usd,
            )
        )


@dataclass(frozen=True)
class BudgetHit:
    """A cap that is reached: spent >= limit within the period starting at `period_start`."""

    cap: Cap
    limit_usd: float
    spent_usd: float
    period_start: datetime


# A user's rows: those carrying their id, plus rows with no user id in their private chat (whose
# chat id is their user id in Telegram), so background work filed without an owner still counts.
_USER_FILTER = "(user_id = ? OR (user_id IS NULL AND chat_id = ?))"


class UsageLedger:
    """Read-only reports over the `usage` table. Writes go through `Store.record_usage`."""

    def __init__(self, db: Database, clock: Clock[datetime] = utc_now) -> None:
        self.db = db
        self.clock = clock

    async def _lines(self, since: datetime, user_id: int | None) -> list[UsageLine]:
        sql = (
            "SELECT model_id, purpose, COUNT(*) AS calls, "
            "SUM(prompt_tokens) AS prompt_tokens, SUM(completion_tokens) AS completion_tokens, "
            "SUM(cost_usd) AS cost_usd, SUM(estimated) AS estimated "
            "FROM usage WHERE created_at >= ?"
        )
        params: list[object] = [to_iso(since)]
        if user_id is not None:
            sql += f" AND {_USER_FILTER}"
            params += [user_id, user_id]
        sql += " GROUP BY model_id, purpose ORDER BY SUM(cost_usd) DESC, model_id, purpose"
        rows = await self.db.fetchall(sql, params)
        return [
            UsageLine(
                model_id=row["model_id"],
                purpose=row["purpose"],
                calls=int(row["calls"]),
                prompt_tokens=int(row["prompt_tokens"] or 0),
                completion_tokens=int(row["completion_tokens"] or 0),
                cost_usd=float(row["cost_usd"] or 0.0),
                estimated_calls=int(row["estimated"] or 0),
            )
            for row in rows
        ]

    async def report(self, user_id: int | None = None) -> UsageReport:
        """Today and this month, by model and purpose; `user_id=None` is the whole bot."""
        now = self.clock()
        today, month = day_start(now), month_start(now)
        return UsageReport(
            user_id=user_id,
            today=PeriodUsage(today, await self._lines(today, user_id)),
            month=PeriodUsage(month, await self._lines(month, user_id)),
        )

    async def per_user(self) -> list[UserTotal]:
        """Every user with spend this month, biggest spender first (for admins)."""
        now = self.clock()
        today, month = to_iso(day_start(now)), to_iso(month_start(now))
        rows = await self.db.fetchall(
            "SELECT COALESCE(user_id, chat_id) AS who, "
            "SUM(CASE WHEN created_at >= ? THEN prompt_tokens + completion_tokens ELSE 0 END)"
            " AS today_tokens, "
            "SUM(CASE WHEN created_at >= ? THEN cost_usd ELSE 0 END) AS today_cost, "
            "SUM(prompt_tokens + completion_tokens) AS month_tokens, "
            "SUM(cost_usd) AS month_cost, "
            "SUM(CASE WHEN purpose = 'consolidation' THEN cost_usd ELSE 0 END) AS month_consol "
            "FROM usage WHERE created_at >= ? GROUP BY who ORDER BY month_cost DESC, who",
            (today, today, month),
        )
        return [
            UserTotal(
                user_id=row["who"],
                today_tokens=int(row["today_tokens"] or 0),
                today_cost_usd=float(row["today_cost"] or 0.0),
                month_tokens=int(row["month_tokens"] or 0),
                month_cost_usd=float(row["month_cost"] or 0.0),
                month_consolidation_cost_usd=float(row["month_consol"] or 0.0),
            )
            for row in rows
        ]

    async def check_budget(self, user_id: int, budgets: Budgets) -> BudgetHit | None:
        """The first cap `user_id` has reached (user caps before bot caps), or None.

        Spend includes consolidation: it is real money spent for this user. The check gates new
        chat calls only; consolidation of messages already sent is never refused. Every sum a
        check needs is read in one round trip: it is asked twice on a turn's way to the model
        (bot/turns/limits.py), and each trip waits behind every other chat's reads.
        """
        if not budgets.any:
            return None
        now = self.clock()
        today, month = day_start(now), month_start(now)
        scopes = (
            (
                user_id,
                (Cap.USER_DAILY, budgets.user_daily_usd),
                (Cap.USER_MONTHLY, budgets.user_monthly_usd),
            ),
            (
                None,
                (Cap.BOT_DAILY, budgets.bot_daily_usd),
                (Cap.BOT_MONTHLY, budgets.bot_monthly_usd),
            ),
        )
        capped = [(who, day, mon) for who, day, mon in scopes if day[1] > 0 or mon[1] > 0]
        sums = await self.db.read(
            lambda conn: [_spent(conn, today, month, who) for who, _, _ in capped]
        )
        for (_, (day_cap, day_limit), (month_cap, month_limit)), (spent_day, spent_month) in zip(
            capped, sums, strict=True
        ):
            if day_limit > 0 and spent_day >= day_limit:
                return BudgetHit(day_cap, day_limit, spent_day, today)
            if month_limit > 0 and spent_month >= month_limit:
                return BudgetHit(month_cap, month_limit, spent_month, month)
        return None


def _spent(
    conn: sqlite3.Connection, day: datetime, month: datetime, user_id: int | None
) -> tuple[float, float]:
    """(spent since `day`, spent since `month`) in one pass over the month's rows, on a
    database thread (`Database.read`); `user_id` None is the whole bot.

    A user's two kinds of rows are summed by separate queries so each uses its index
    (usage_by_user, usage_by_chat); an OR across them would scan the whole month.
    """
    sums = (
        "SELECT COALESCE(SUM(CASE WHEN created_at >= ? THEN cost_usd END), 0) AS day, "
        "COALESCE(SUM(cost_usd), 0) AS month FROM usage WHERE created_at >= ?"
    )
    params: list[object] = [to_iso(day), to_iso(month)]
    if user_id is None:
        parts = [(sums, params)]
    else:
        parts = [
            (sums + " AND user_id = ?", [*params, user_id]),
            (sums + " AND user_id IS NULL AND chat_id = ?", [*params, user_id]),
        ]
    total_day = total_month = 0.0
    for sql, values in parts:
        row = conn.execute(sql, values).fetchone()
        if row is not None:
            total_day += float(row["day"])
            total_month += float(row["month"])
    return total_day, total_month


class SpendRecorder:
    """Collects what each model call of one turn cost and writes it to the `usage` table.

    Hand `recorder.add` to `Transport.stream`/`complete` as `on_spend` (it is synchronous, so
    it works inside a cancellation), and `await recorder.flush()` at every exit of the turn:
    after the answer, after a failure, after a /cancel or a stop. Each spend is written once,
    so flushing twice is harmless; a budget check then sees every attempt that cost money.
    """

    def __init__(self, store: Store, chat_id: int, user_id: int | None, purpose: str) -> None:
        self.store = store
        self.chat_id = chat_id
        self.user_id = user_id
        self.purpose = purpose
        self.spends: list[Spend] = []
        self._written = 0

    def add(self, spend: Spend) -> None:
        self.spends.append(spend)

    @property
    def total(self) -> Usage:
        total = Usage()
        for spend in self.spends:
            total = total + spend.usage
        return total

    def pending(self) -> list[Spend]:
        """Spends not written yet, for a caller that writes them inside its own transaction
        (then `written(len(...))`), e.g. together with the answer they paid for."""
        return self.spends[self._written :]

    def written(self, count: int) -> None:
        self._written += count

    async def flush(self) -> None:
        while self._written < len(self.spends):
            spend = self.spends[self._written]
            self._written += 1
            await self.store.record_usage(
                self.chat_id, self.user_id, spend.model_id, self.purpose, spend.usage
            )
