"""How money and the spending caps are written for users: `money()` and the text key of each
cap's refusal, shared by the turn guard's refusals and the /usage and /stats texts.
"""

from __future__ import annotations

from memory.usage import Cap

BUDGET_KEYS = {
    Cap.USER_DAILY: "budget_user_daily",
    Cap.USER_MONTHLY: "budget_user_monthly",
    Cap.BOT_DAILY: "budget_bot_daily",
    Cap.BOT_MONTHLY: "budget_bot_monthly",
}


def money(usd: float) -> str:
    """Cents matter on small bills and fractions of a cent on cheap models."""
    if usd == 0:
        return "$0"
    if usd < 1:
        return f"${usd:.4f}"
    return f"${usd:,.2f}"
