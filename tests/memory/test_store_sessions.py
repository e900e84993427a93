"""The store's session rules on a real SQLite file: which closed sessions still take a message,
what a repeated turn key does, and when a session counts as idle."""

from __future__ import annotations

from datetime import timedelta

import pytest

from memory.consolidation.jobs import JobQueue
from memory.db import Database
from memory.store import SessionClosedError, Store, to_iso
from tests.support.memory_sessions import SettableClock


async def test_a_closed_session_takes_its_answer_until_its_consolidation_is_claimed(
    db: Database,
) -> None:
    clock = SettableClock()
    store = Store(db, clock)
    question = await store.add_message(1, "user", "Which database do I use?")
    session = question.session_id
    await store.start_new_session(1)

    # Closed, job pending: the answer joins the session and will be consolidated with it.
    await store.add_message(1, "assistant", "PostgreSQL.", session_id=session)
    assert [m.content for m in await store.session_messages(session)] == [
        "Which database do I use?",
        "PostgreSQL.",
    ]

    [job] = await JobQueue(store).claim_due(to_iso(clock.now), 1)
    assert job.session_id == session
    with pytest.raises(SessionClosedError):
        await store.add_message(1, "assistant", "Late words.", session_id=session)
    assert len(await store.session_messages(session)) == 2


async def test_a_repeated_turn_key_stores_nothing_and_resumes_only_an_unanswered_question(
    db: Database,
) -> None:
    store = Store(db, SettableClock())
    first = await store.store_user_turn(1, "Hello?", user_id=1, key="tg:1:500")
    assert first is not None and not first.resumed

    again = await store.store_user_turn(1, "Hello?", user_id=1, key="tg:1:500")
    assert again is not None and again.resumed and again.message == first.message

    await store.add_message(1, "assistant", "Hi!", session_id=first.message.session_id)
    assert await store.store_user_turn(1, "Hello?", user_id=1, key="tg:1:500") is None
    rows = await db.fetchall("SELECT content FROM messages ORDER BY id")
    assert [r["content"] for r in rows] == ["Hello?", "Hi!"]


async def test_idle_is_measured_from_the_last_message_of_either_side(db: Database) -> None:
    clock = SettableClock()
    store = Store(db, clock)
    store.session_idle = timedelta(minutes=360)
    start = await store.store_user_turn(1, "Plan the trip", user_id=1)
    assert start is not None
    clock.advance(5 * 3600)
    await store.add_message(1, "assistant", "A long answer, five hours later")
    clock.advance(5 * 3600)  # ten hours after the question, five after the answer
    same = await store.store_user_turn(1, "Thanks", user_id=1)
    assert same is not None and same.idle_closed_session_id is None
    assert same.message.session_id == start.message.session_id

    clock.advance(6 * 3600)
    fresh = await store.store_user_turn(1, "Back again", user_id=1)
    assert fresh is not None and fresh.idle_closed_session_id == start.message.session_id
    assert fresh.job_id is not None and fresh.message.session_id != start.message.session_id
