"""Who may change what a group shares: its admins, asked of Telegram (getChatMember).

In a group, a reminder is cancelled only by the member who set it or by an admin, and the
group's time zone (every member's reminder times) is changed only by an admin. Each answer is
kept ADMIN_CACHE_S seconds: a list of ❌ presses costs one getChatMember, and a member made or
unmade admin counts within a minute. A failed look-up counts as "not an admin": refusing a
cancel is undone by asking again, a wrong cancel is not.
"""

from __future__ import annotations

import time
from typing import Any

import structlog
from telegram import Chat, ChatMember
from telegram.error import TelegramError

from primitives.clock import Clock

log = structlog.get_logger("bot.chat_admins")

ADMIN_CACHE_S = 60.0
ADMIN_CACHE_ENTRIES = 4096
ADMIN_STATUSES = (ChatMember.OWNER, ChatMember.ADMINISTRATOR)


def is_group(chat: Chat | None) -> bool:
    return chat is not None and chat.type in (Chat.GROUP, Chat.SUPERGROUP)


class ChatAdmins:
    """getChatMember answers for (chat, user), kept for a minute, in bounded memory."""

    def __init__(self, clock: Clock[float] = time.monotonic) -> None:
        self._clock = clock
        self._known: dict[tuple[int, int], tuple[bool, float]] = {}

    async def is_admin(self, bot: Any, chat_id: int, user_id: int) -> bool:
        now = self._clock()
        known = self._known.get((chat_id, user_id))
        if known is not None and known[1] > now:
            return known[0]
        try:
            member = await bot.get_chat_member(chat_id, user_id)
        except TelegramError as exc:
            log.warning("chat_member_unknown", error=str(exc))
            return False  # not kept: the next press asks again
        admin = member.status in ADMIN_STATUSES
        if len(self._known) >= ADMIN_CACHE_ENTRIES:
            self._known = {k: v for k, v in self._known.items() if v[1] > now}
            if len(self._known) >= ADMIN_CACHE_ENTRIES:
                self._known.clear()
        self._known[(chat_id, user_id)] = (admin, now + ADMIN_CACHE_S)
        return admin
