"""Per-user message rate limit: at most so many accepted messages per sliding minute.

It protects the bot's fairness between users and the self-hoster's wallet; `TurnGuard`
(bot/turns/limits.py) asks it before anything is stored or sent to a model.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

from primitives.clock import Clock

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

    def __init__(self, per_minute: int, *, clock: Clock[float] = time.monotonic) -> None:
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
