"""The turn's start reads what the turn needs besides the message: the chat's model, its time
zone (for the system prompt of every round) and the memory change no reply has announced yet,
in the one transaction that stores the user's message. The notice leaves the database only
once a reply has shown it, so a turn that fails first loses nothing; and a turn makes no other
round trip to the database for any of them."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bot.ui.i18n import t
from memory.db import Database
from memory.longterm import MemoryNotice, add_unreported, memory_notice_shown, write_memory
from memory.store import Store, to_iso
from memory.timezones import ChatZone
from reminders.book import ReminderBook
from tests.fakes.providers import Fault, Reply
from tests.support.e2e_bot import OWNER, bot_under_test
from tests.support.memory_sessions import SettableClock


async def consolidation_changed(db: Database, chat_id: int, change: MemoryNotice) -> None:
    """What a consolidation's commit does to the counts (memory/consolidation/jobs.py calls
    add_unreported)."""

    def write(conn: sqlite3.Connection) -> None:
        add_unreported(conn, chat_id, change)

    await db.run_in_transaction(write)


async def test_the_turn_start_returns_the_chats_time_zone_and_the_unannounced_change(
    db: Database,
) -> None:
    clock = SettableClock()
    store = Store(db, clock)
    assert await ReminderBook(db, clock).set_chat_zone(1, "america/new_york") == (
        "America/New_York"
    )

    def write(conn: sqlite3.Connection) -> None:
        write_memory(conn, 1, "- Name: Rina", over_budget=False, now=to_iso(clock.now))

    await db.run_in_transaction(write)
    await consolidation_changed(db, 1, MemoryNotice(added=2, removed=1))

    await store.set_chat_model(1, "claude-sonnet-4-5")

    start = await store.store_user_turn(1, "What time is it?", user_id=1, key="tg:1:7")
    assert start is not None and start.message.content == "What time is it?"
    assert start.chat_model == "claude-sonnet-4-5"
    assert start.chat_zone == ChatZone("America/New_York", known=True)
    assert start.memory_notice == MemoryNotice(added=2, removed=1)

    # A crash before the answer, and a /model meanwhile: the replayed update resumes the turn,
    # with what the chat has now.
    await store.set_chat_model(1, "gpt-4.1")
    again = await store.store_user_turn(1, "What time is it?", user_id=1, key="tg:1:7")
    assert again is not None and again.resumed and again.message == start.message
    assert again.chat_model == "gpt-4.1"
    assert again.chat_zone == ChatZone("America/New_York", known=True)
    assert again.memory_notice == MemoryNotice(added=2, removed=1)

    # Another chat: no model chosen, no zone set, nothing to announce.
    other = await store.store_user_turn(2, "Hello", user_id=2)
    assert other is not None
    assert (other.chat_model, other.chat_zone, other.memory_notice) == (
        None,
        ChatZone("UTC", known=False),
        None,
    )


async def test_the_notice_stays_until_a_reply_showed_it_and_then_only_what_it_showed(
    db: Database,
) -> None:
    store = Store(db, SettableClock())

    def write(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO chats(chat_id, created_at, updated_at) VALUES (1, 'x', 'x')")
        write_memory(conn, 1, "- Name: Rina", over_budget=False, now="x")

    await db.run_in_transaction(write)
    await consolidation_changed(db, 1, MemoryNotice(added=2, removed=1))

    # A turn that failed before its reply showed the notice: the next turn gets it.
    failed = await store.store_user_turn(1, "First", user_id=1)
    assert failed is not None and failed.memory_notice == MemoryNotice(2, 1)
    shown = await store.store_user_turn(1, "Second", user_id=1)
    assert shown is not None and shown.memory_notice == MemoryNotice(2, 1)

    # A consolidation commits while that turn streams; its reply shows what the start read.
    await consolidation_changed(db, 1, MemoryNotice(added=1, removed=0))
    await memory_notice_shown(db, 1, MemoryNotice(2, 1))
    later = await store.store_user_turn(1, "Third", user_id=1)
    assert later is not None and later.memory_notice == MemoryNotice(1, 0)

    await memory_notice_shown(db, 1, MemoryNotice(1, 0))
    last = await store.store_user_turn(1, "Fourth", user_id=1)
    assert last is not None and last.memory_notice is None


def _caller() -> str:
    """The function of ours that asked the database for a round trip (the first frame outside
    memory/db.py: fetchone and fetchall go through read)."""
    frame = sys._getframe(2)
    while frame.f_code.co_filename.endswith("memory/db.py"):
        assert frame.f_back is not None
        frame = frame.f_back
    return frame.f_code.co_qualname


def count_round_trips(db: Database) -> Counter[str]:
    """Count every round trip to the database's threads by the function that asked for it. The
    real methods run; each call is only counted on its way through."""
    trips: Counter[str] = Counter()

    def counted(method: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            trips[_caller()] += 1
            return method(*args)

        return call

    db.read = counted(db.read)  # type: ignore[method-assign]
    db.run_in_transaction = counted(db.run_in_transaction)  # type: ignore[method-assign]
    return trips


async def test_a_turn_reads_what_it_needs_in_its_start_and_one_read_a_round(
    tmp_path: Path,
) -> None:
    """Up to the provider request a turn waits for the database twice: its start (which also
    brings the chat's zone, model and memory notice) and its round's one read (session and
    memory together). A round trip added to every turn's path must be added here on purpose."""
    async with bot_under_test(tmp_path) as bot:
        bot.openai.set_default("*", Reply("Hi Rina."))
        await bot.ask(OWNER, "/timezone Europe/Lisbon")
        await bot.ask(OWNER, "/model gpt-4.1")
        await bot.set_memory(OWNER, "- Name: Rina")
        await consolidation_changed(bot.services.db, OWNER, MemoryNotice(added=1, removed=0))
        trips = count_round_trips(bot.services.db)

        [shown] = await bot.ask(OWNER, "Hello")

        assert shown.text == "Hi Rina.\n\n" + t("memory_updated", added=1, removed=0)
        gateway, request = bot.chat_requests()[-1]
        assert (gateway, request.model) == ("openai", "gpt-4.1")  # the chat's choice
        system = request.system_text()
        assert "(Europe/Lisbon); reminder times are local to this zone" in system
        assert "- Name: Rina" in system
        assert [m["content"] for m in request.body["messages"][1:]] == ["Hello"]
        assert trips == Counter(
            {
                # The message; the chat's model, time zone and unannounced memory change.
                "Store.store_user_turn": 1,
                "Store.round_context": 1,  # the session's messages and the memory
                "Store.add_answer": 1,
                "memory_notice_shown": 1,  # only when a notice was shown
            }
        )
        trips.clear()
        [plain] = await bot.ask(OWNER, "And now?")
        assert plain.text == "Hi Rina."
        assert trips == Counter(
            {
                "Store.store_user_turn": 1,
                "Store.round_context": 1,
                "Store.add_answer": 1,
            }
        )


async def test_a_turn_that_fails_leaves_the_notice_to_the_next_reply(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        await bot.set_memory(OWNER, "- Name: Rina\n- Lives in Porto")
        await consolidation_changed(bot.services.db, OWNER, MemoryNotice(added=2, removed=0))
        bot.openai.set_default("*", Fault("server_500"))  # every model of the chain fails
        [failed] = await bot.ask(OWNER, "are you down?")
        assert failed.text.startswith("Sorry, no model could answer right now")
        assert "🧠" not in failed.text

        bot.openai.set_default("*", Reply("Back."))
        [answer] = await bot.ask(OWNER, "hello?")
        assert answer.text == "Back.\n\n" + t("memory_updated", added=2, removed=0)
        [again] = await bot.ask(OWNER, "and now?")
        assert again.text == "Back."  # shown once


async def test_each_spending_cap_check_is_one_round_trip(tmp_path: Path) -> None:
    """The caps are checked twice on a turn's way to the model (when the message comes, and
    again once the chat's previous turn is over). Before, each check read each sum alone: with
    a user cap and a bot cap, three reads one after the other, six a turn."""
    async with bot_under_test(
        tmp_path, USER_DAILY_BUDGET_USD=1.0, BOT_MONTHLY_BUDGET_USD=5.0
    ) as bot:
        bot.openai.set_default("*", Reply("Hi."))
        await bot.ask(OWNER, "Hello")  # something spent: the sums have rows to add up
        trips = count_round_trips(bot.services.db)

        [plain] = await bot.ask(OWNER, "And now?")

        assert plain.text == "Hi."
        assert trips == Counter(
            {
                "UsageLedger.check_budget": 2,  # both caps' sums in each
                "Store.store_user_turn": 1,
                "Store.round_context": 1,
                "Store.add_answer": 1,
            }
        )


async def test_a_cancel_before_the_model_is_asked_still_tells_the_user(tmp_path: Path) -> None:
    """The turn's first wait after its start is the round's read (the chat model comes with
    the start); a /cancel that lands there ends the turn as one that landed in the model read
    did: the question kept, no model asked, the user told."""
    async with bot_under_test(tmp_path) as bot:
        bot.openai.set_default("*", Reply("Hi."))
        db = bot.services.db
        released = threading.Event()

        def hold(conn: object) -> None:
            released.wait(timeout=30)

        # Both read connections busy: the turn's first read waits, and /cancel lands there.
        holders = [asyncio.create_task(db.read(hold)) for _ in range(2)]
        try:
            bot.say(OWNER, "Are you there?")
            await bot.wait(lambda: bot.services.turns.is_running(OWNER))
            bot.say(OWNER, "/cancel")
            await bot.wait(lambda: t("cancelled") in bot.texts(OWNER))
            await bot.wait_idle(OWNER)
        finally:
            released.set()
            await asyncio.gather(*holders)

        assert bot.texts(OWNER) == [t("reply_cancelled"), t("cancelled")]
        assert bot.model_requests() == []
        rows = await bot.rows("SELECT role, content FROM messages ORDER BY id")
        assert rows == [{"role": "user", "content": "Are you there?"}]
        [next_answer] = await bot.ask(OWNER, "And now?")
        assert next_answer.text == "Hi."
