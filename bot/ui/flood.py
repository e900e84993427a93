"""Telegram's flood control (a 429 with `retry_after`): one rule for every send of ours.

PTB's AIORateLimiter paces our requests (about 30 a second bot-wide, 20 a minute per group)
but is built with `max_retries=0`, so it never retries a refused request itself: its retry
waits out the penalty holding back every request of the bot, in every chat, and then sends
the very request again. Measured with benchmarks/telegram_429.py: while one chat's reply sat
out a 2 s penalty, another chat's /help waited 2.1 s for its answer with PTB's retry, 0.01 s
without. A penalty is Telegram's word about one chat, so it is waited out there alone, and
never retried into (a request during a penalty extends it):

- a one-off reply (`after_penalty`) waits the penalty out and is sent once more;
- a streamed reply (bot/ui/streaming.py) skips its intermediate updates until the penalty
  ends and then sends its final text once;
- a reminder (bot/handlers/reminders.py) goes back to the scheduler, which paces every chat
  itself and tries it again after the penalty.
"""

from __future__ import annotations

import asyncio
import datetime as dtm
from collections.abc import Awaitable, Callable
from typing import TypeVar

import structlog
from telegram.error import RetryAfter

log = structlog.get_logger("bot.flood")

T = TypeVar("T")

# Penalties waited out for one reply before it is given up (and the refusal logged).
MAX_PENALTY_WAITS = 5


def penalty_seconds(error: RetryAfter) -> float:
    """How long Telegram asked us to wait (PTB gives seconds or a timedelta)."""
    value: int | float | dtm.timedelta = error.retry_after
    if isinstance(value, dtm.timedelta):
        return value.total_seconds()
    return float(value)


async def after_penalty(send: Callable[[], Awaitable[T]], *, waits: int = MAX_PENALTY_WAITS) -> T:
    """`send()`, and once more after each penalty Telegram answers with, `waits` at most;
    the last RetryAfter is raised."""
    for attempt in range(waits + 1):
        try:
            return await send()
        except RetryAfter as error:
            if attempt == waits:
                raise
            seconds = penalty_seconds(error)
            log.warning("telegram_flood_control", retry_after_s=seconds, attempt=attempt + 1)
            await asyncio.sleep(seconds)
    raise AssertionError("unreachable")  # the loop returns or raises
