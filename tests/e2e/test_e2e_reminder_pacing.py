"""Reminders due together in one chat leave one per second, even when a failed send comes back
as a retry among them: Telegram allows about one message per second per chat and answers more
with a 429 flood penalty (the fake Bot API enforces it).

The whole bot runs in this process against the fakes (tests/support/e2e_bot.py); the reminders are
written into its database as if set over the past weeks, then the scheduler is told.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

from tests.support.e2e_bot import OWNER, bot_under_test
from tests.support.reminder_rows import add_pending

CHAT = OWNER  # a private chat: chat id = user id
TEXTS = [f"pace{n} drink water" for n in range(5)]


async def test_a_retry_among_queued_reminders_of_one_chat_earns_no_flood_penalty(
    tmp_path: Path,
) -> None:
    """The first send meets a 429 (retry after 2) and comes back two seconds later, while the
    other four wait for their turns: it must take a turn of its own, not one already promised
    (the pacer once measured from the last send that left, and gave the retry the third one's
    turn: two sends at once, and Telegram's 429 for one of them)."""
    async with bot_under_test(tmp_path) as bot:
        tg = bot.tg
        tg.enforce_flood_limits = True
        tg.inject_error("sendMessage", count=1, retry_after=2)
        due = datetime.now(UTC)

        def write(conn: sqlite3.Connection) -> None:
            add_pending(conn, [(CHAT, text, due) for text in TEXTS])

        sends_before = len(tg.calls_of("sendMessage"))
        await bot.services.db.run_in_transaction(write)
        assert bot.services.agent is not None
        book = bot.services.agent.tools.reminders
        assert book.on_change is not None
        book.on_change()  # what the book tells the scheduler after a reminder was made

        def sent() -> list[str]:
            calls = tg.calls_of("sendMessage")[sends_before:]
            return [str(c.params["text"]) for c in calls if c.ok]

        await bot.wait(lambda: len(sent()) >= len(TEXTS), timeout=30)
        refused = [c.error for c in tg.calls_of("sendMessage")[sends_before:] if not c.ok]

    assert refused == ["Too Many Requests: retry after 2"]
    assert tg.flood_violations == []
    assert sorted(text.removeprefix("⏰ ") for text in sent()) == sorted(TEXTS)
