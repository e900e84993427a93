"""`TurnGuard`: what is checked before a chat turn may cost money — split parts joined, the
maximum input size, the per-user rate limit (bot/turns/rate_limit.py), the spending caps.

All of it protects the self-hoster's wallet and the bot's fairness between users; all of it is
checked before anything is stored or sent to a model, so a refused message costs nothing.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from bot.turns.joiner import MessageJoiner
from bot.turns.rate_limit import UserRateLimiter
from bot.ui.money import BUDGET_KEYS, money
from memory.usage import Budgets, UsageLedger
from primitives.clock import Clock


def input_too_long(text: str, max_chars: int) -> bool:
    """True if `text` exceeds `max_chars` characters (code points, as users count them)."""
    return len(text) > max_chars


@dataclass(frozen=True)
class Screened:
    """The verdict on an incoming text: run a turn with `text`, or not, and what to say.

    `text` None means no turn: the part joined another update's turn, or the message was
    refused. `reply_key`/`reply_values` is the refusal to send (None: stay silent).
    """

    text: str | None
    reply_key: str | None = None
    reply_values: dict[str, object] = field(default_factory=dict)
    parts: int = 1


class TurnGuard:
    """Everything checked before a chat turn may cost money, in the order that is fair:

    1. join split parts (so a long message counts once, and is measured whole),
    2. the input size limit,
    3. the per-user rate limit,
    4. the spending caps (a database read, so last).

    Admins are exempt from the per-user limits and caps, not from the bot-wide caps.
    """

    def __init__(
        self,
        *,
        ledger: UsageLedger,
        budgets: Budgets,
        per_minute: int,
        max_input_chars: int,
        split_window: float,
        admins: Collection[int] = (),
        clock: Clock[float] = time.monotonic,
        on_part_joined: Callable[[int], None] | None = None,
    ) -> None:
        self.ledger = ledger
        self.budgets = budgets
        self.max_input_chars = max_input_chars
        self.admins = frozenset(admins)
        self.rate = UserRateLimiter(per_minute, clock=clock)
        # The joiner stops a message at MAX_SPLIT_PARTS parts or past the input size limit.
        self.joiner: MessageJoiner[int] = MessageJoiner(
            split_window, max_chars=max_input_chars, clock=clock
        )
        # Told (part's update id is implicit in the caller) which update a part joined, so a
        # stop can treat the parts as handled only once the whole turn is.
        self.on_part_joined = on_part_joined

    async def screen(self, chat_id: int, user_id: int, text: str, update_id: int) -> Screened:
        """`update_id` identifies the part; the turn is known by its first part's id."""
        key = (chat_id, user_id)
        leader = self.joiner.leader_ref(key)
        turn = await self.joiner.submit(key, text, update_id)
        if turn is None:
            if leader is not None and self.on_part_joined is not None:
                self.on_part_joined(leader)
            return Screened(None)
        text = turn.text
        parts = len(turn.parts)
        if turn.overflowed or input_too_long(text, self.max_input_chars):
            return Screened(
                None,
                "input_too_long",
                {"length": len(text), "limit": self.max_input_chars},
                parts,
            )
        refused = await self.check_spend(user_id, parts)
        if refused is not None:
            return refused
        return Screened(text, parts=parts)

    async def check_spend(self, user_id: int, parts: int = 1) -> Screened | None:
        """The per-user rate limit, then the spending caps; a refusal, or None to go on.

        Media (voice notes, photos, documents) go through exactly these checks before any
        download or model call, so they count and are capped like text.
        """
        refused = self.check_rate(user_id, parts)
        if refused is not None:
            return refused
        return await self.check_budget(user_id, parts)

    def check_rate(self, user_id: int, parts: int = 1) -> Screened | None:
        """The per-user rate limit alone (admins exempt); a refusal, or None to go on. /recall
        asks it too: a search costs no model call, but each is a full-text query over the
        archive and an answer of up to several messages, and it shares the chat's budget of
        messages per minute, so switching to /recall gains no one more."""
        if user_id in self.admins:
            return None
        decision = self.rate.check(user_id)
        if decision.allowed:
            return None
        key = "rate_limited" if decision.notify else None
        return Screened(None, key, {"seconds": math.ceil(decision.retry_after_s)}, parts)

    async def check_budget(self, user_id: int, parts: int = 1) -> Screened | None:
        """The spending caps alone; a refusal, or None to go on. Asked again when the turn's
        chat is free (`run_chat_turn`): a message sent while the chat's previous answer still
        streamed passed the first check before that answer's cost was recorded."""
        budgets = self.budgets
        if user_id in self.admins:
            budgets = Budgets(
                bot_daily_usd=budgets.bot_daily_usd, bot_monthly_usd=budgets.bot_monthly_usd
            )
        hit = await self.ledger.check_budget(user_id, budgets)
        if hit is not None:
            return Screened(None, BUDGET_KEYS[hit.cap], {"limit": money(hit.limit_usd)}, parts)
        return None
