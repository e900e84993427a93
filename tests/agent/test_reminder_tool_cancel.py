"""The model's `cancel_reminder` for the member asking: it cancels their own reminders, not
another member's (the ❌ button lets an admin do that), and an id no row can have is an error
the model can act on, not an OverflowError from SQLite."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agent.tools.reminders import run_reminder_tool
from memory.db import Database
from reminders.book import ReminderBook

GROUP = -100555
ANN, BEN = 100, 101


@pytest.fixture
def book(db: Database) -> ReminderBook:
    return ReminderBook(db, lambda: datetime(2026, 12, 1, 8, 0, tzinfo=UTC))


async def test_a_member_cannot_cancel_another_members_reminder(book: ReminderBook) -> None:
    made = await book.schedule(GROUP, when="2026-12-02T09:00", text="water the plants",
                               user_id=ANN, user_name="Ann")  # fmt: skip
    refused = await run_reminder_tool(
        book, GROUP, "cancel_reminder", {"id": made.id}, user_id=BEN, user_name="Ben"
    )
    assert not refused.ok and "set by Ann" in refused.content
    assert "nothing was cancelled" in refused.content
    assert [r.id for r in await book.pending(GROUP)] == [made.id]

    done = await run_reminder_tool(book, GROUP, "cancel_reminder", {"id": made.id}, user_id=ANN)
    assert done.ok and done.kind == "reminder_cancelled"
    assert await book.pending(GROUP) == []


@pytest.mark.parametrize("raw", ["9" * 25, 2**63, -1, "٣"])
async def test_an_id_no_reminder_can_have_is_an_error_not_a_crash(
    book: ReminderBook, raw: object
) -> None:
    result = await run_reminder_tool(book, GROUP, "cancel_reminder", {"id": raw}, user_id=ANN)
    assert not result.ok and "integer 'id'" in result.content
