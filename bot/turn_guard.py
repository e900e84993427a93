"""The turn guard and the graceful-stop lifecycle, put into `Services` once they open.

`attach_turn_guard` runs in post_init after the services open: the guard (split parts, input
size, rate limit, spending caps: bot/turns/limits.py) and the lifecycle (bot/lifecycle.py,
the order of a stop in bot/runner.py) are wired to each other and to the services here.
"""

from __future__ import annotations

from typing import Any

from telegram.ext import Application

from bot.lifecycle import lifecycle_of
from bot.services import Services
from bot.turns.limits import TurnGuard
from memory.usage import Budgets, UsageLedger

App = Application[Any, Any, Any, Any, Any, Any]


def attach_turn_guard(application: App, services: Services) -> None:
    """Wire the guard and the lifecycle into the services."""
    settings = services.settings
    lifecycle = lifecycle_of(application)
    services.lifecycle = lifecycle
    services.guard = TurnGuard(
        ledger=UsageLedger(services.db),
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
    )
    lifecycle.db = services.db
    lifecycle.on_closing.append(services.guard.joiner.flush)
    services.guard.on_part_joined = lifecycle.tracker.join_current_to
