"""Who may talk to the bot (whether a group message is meant for it: bot/incoming.py),
and the plain reply every handler uses. The guard that applies the allowlist to every update,
before any handler: bot/handlers/guard.py.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

import structlog
from telegram import Message, Update
from telegram.error import BadRequest, TelegramError

from bot.ui.flood import after_penalty
from bot.ui.i18n import t
from primitives.clock import Clock

if TYPE_CHECKING:
    from bot.config import Settings

log = structlog.get_logger("bot.access")

# Telegram's stand-ins for people who write on behalf of a chat: GroupAnonymousBot (anonymous
# group admins) and Channel_Bot (channels). Every anonymous admin of every group has the same
# id, so such an id must never be allowed, nor suggested to an owner.
ANONYMOUS_SENDER_IDS = frozenset({1087968824, 136817688})

REFUSAL_INTERVAL_S = 3600.0  # at most one refusal per stranger per hour
REFUSAL_MEMORY = 10_000  # strangers remembered at once (oldest forgotten first)


class RefusalThrottle:
    """At most one refusal per sender per `interval`, in bounded memory.

    A stranger who keeps writing would otherwise get a refusal for every message, each one a
    message of ours that shares Telegram's send limits with the real replies.
    """

    def __init__(
        self,
        interval: float = REFUSAL_INTERVAL_S,
        capacity: int = REFUSAL_MEMORY,
        clock: Clock[float] = time.monotonic,
    ) -> None:
        self.interval = interval
        self.capacity = capacity
        self._clock = clock
        self._last: OrderedDict[int, float] = OrderedDict()  # oldest refusal first

    def allow(self, sender_id: int) -> bool:
        """True (and remembered) if `sender_id` may be told again now."""
        now = self._clock()
        while self._last and now - next(iter(self._last.values())) >= self.interval:
            self._last.popitem(last=False)
        if sender_id in self._last:
            return False
        self._last[sender_id] = now
        if len(self._last) > self.capacity:
            self._last.popitem(last=False)
        return True

    def __len__(self) -> int:
        return len(self._last)


def is_anonymous(update: Update) -> bool:
    """Sent on behalf of a group or channel: no person we could check against the allowlist."""
    message = update.effective_message
    if message is not None and message.sender_chat is not None:
        return True
    user = update.effective_user
    return user is not None and user.id in ANONYMOUS_SENDER_IDS


def is_allowed(user_id: int | None, allowed: Collection[int], admins: Collection[int]) -> bool:
    """An empty allowlist means nobody: a fresh bot must not answer (and bill) the world."""
    return user_id is not None and (user_id in allowed or user_id in admins)


def user_allowed(settings: Settings, user_id: int | None) -> bool:
    return is_allowed(user_id, settings.ALLOWED_USER_IDS, settings.ADMIN_USER_IDS)


def user_language(update: Update) -> str | None:
    """The sender's Telegram language, which every reply is written in."""
    user = update.effective_user
    return user.language_code if user else None


async def say(message: Message, text: str, **kwargs: Any) -> bool:
    """A plain-text reply; True if Telegram took it. A flood penalty is waited out in this
    chat (bot/ui/flood.py). Never raised into PTB, never silent: a refused send is logged, and
    when Telegram refused the message itself (too long, bad text) rather than the connection,
    the user is told that a reply is missing."""
    try:
        await after_penalty(lambda: message.reply_text(text, do_quote=False, **kwargs))
        return True
    except TelegramError as exc:
        log.warning("reply_failed", chat_id=message.chat_id, error=str(exc),
                    units=len(text.encode("utf-16-le", "surrogatepass")) // 2)  # fmt: skip
        if not isinstance(exc, BadRequest):
            return False
    lang = message.from_user.language_code if message.from_user else None
    try:
        await message.reply_text(t("send_failed", lang), do_quote=False)
    except TelegramError as exc:
        log.warning("reply_failed_notice_failed", chat_id=message.chat_id, error=str(exc))
    return False
