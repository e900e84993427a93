"""Per-user message rate limit and maximum input size.

Both protect the self-hoster's wallet and the bot's fairness between users; both are checked
before anything is stored or sent to a model, so a refused message costs nothing.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from bot.turns.joiner import MessageJoiner
from memory.usage import Budgets, Cap, UsageLedger

WINDOW_SECONDS = 60.0


@dataclass(frozen=True)
class RateDecision:
    """Whether a message may go on; if not, when the next one may, and whether to say so.

    `notify` is true only for the first refusal of a burst: answering every refused message
    would itself flood the chat (Telegram allows about one message per second per chat).
    """

    allowed: bool
    retry_after_s: float = 0.0
    notify: bool = False


class UserRateLimiter:
    """At most `per_minute` accepted messages per user in any sliding 60-second window.

    Refused messages do not count against the user, so waiting always works. `per_minute=0`
    switches the limit off.
    """

    def __init__(self, per_minute: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute = per_minute
        self._clock = clock
        self._accepted: dict[int, deque[float]] = {}
        self._notified_until: dict[int, float] = {}

    def check(self, user_id: int) -> RateDecision:
        """Record the message if it is allowed; otherwise say how long to wait."""
        if self.per_minute <= 0:
            return RateDecision(allowed=True)
        now = self._clock()
        if len(self._accepted) > 1024:  # bounded memory over months of uptime
            self.forget_idle()
        stamps = self._accepted.setdefault(user_id, deque())
        while stamps and now - stamps[0] >= WINDOW_SECONDS:
            stamps.popleft()
        if len(stamps) < self.per_minute:
            stamps.append(now)
            self._notified_until.pop(user_id, None)
            return RateDecision(allowed=True)
        retry_after = WINDOW_SECONDS - (now - stamps[0])
        notify = now >= self._notified_until.get(user_id, float("-inf"))
        if notify:
            self._notified_until[user_id] = now + retry_after
        return RateDecision(allowed=False, retry_after_s=retry_after, notify=notify)

    def forget_idle(self) -> None:
        """Drop users with no message in the window, so memory stays bounded over months."""
        now = self._clock()
        idle = [u for u, s in self._accepted.items() if not s or now - s[-1] >= WINDOW_SECONDS]
        for user_id in idle:
            del self._accepted[user_id]
            self._notified_until.pop(user_id, None)


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
        clock: Callable[[], float] = time.monotonic,
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
        self.on_part_joined: Callable[[int], None] | None = None

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
        admin = user_id in self.admins
        if not admin:
            decision = self.rate.check(user_id)
            if not decision.allowed:
                key = "rate_limited" if decision.notify else None
                return Screened(None, key, {"seconds": math.ceil(decision.retry_after_s)}, parts)
        return await self.check_budget(user_id, parts)

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
