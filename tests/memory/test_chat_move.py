"""Moving a chat to a new id (memory/chat_move.py): every table keyed by chat_id follows, in one
transaction, and a second move changes nothing. Real SQLite, the real store and reminder book.

The end-to-end side (Telegram's service messages and ChatMigrated) is in
tests/e2e/test_e2e_chat_migration.py."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import timedelta

from memory.chat_move import MERGED_COUNTS, MOVED_TABLES, move_chat
from memory.chats import CHAT_SETTINGS
from memory.db import Database
from memory.longterm import write_memory
from memory.store import Store, to_iso
from models.calls import CallOptions
from models.types import ChatResult, Message
from primitives.clock import utc_now
from reminders.book import ReminderBook
from tests.memory.test_jobs import Responder, ScriptedTransport, make_worker, save_call
from tests.support.memory_sessions import SettableClock

OLD = -216055857  # the ids of ../shared/testdata/tg-updates/telegram-rs_update_assets
NEW = -1001113717682


async def chat_id_columns(db: Database) -> list[str]:
    """Every table of the schema with a chat_id column (FTS shadow tables have none)."""
    tables = await db.fetchall("SELECT name FROM sqlite_master WHERE type = 'table'")
    found = []
    for table in tables:
        columns = await db.fetchall(f"PRAGMA table_info({table['name']})")
        if any(c["name"] == "chat_id" for c in columns):
            found.append(table["name"])
    return sorted(found)


async def rows_of(db: Database, chat_id: int) -> dict[str, int]:
    counts = {}
    for table in await chat_id_columns(db):
        row = await db.fetchone(f"SELECT COUNT(*) AS n FROM {table} WHERE chat_id = ?", (chat_id,))
        assert row is not None
        counts[table] = int(row["n"])
    return counts


async def test_the_move_covers_every_table_keyed_by_chat_id(db: Database) -> None:
    """A table added by a later migration with a chat_id column must be added to the move."""
    expected = ["chats", "long_term_memory", *MOVED_TABLES, *MERGED_COUNTS]
    assert sorted(expected) == await chat_id_columns(db)


async def test_every_column_of_a_chat_and_of_its_memory_is_carried(db: Database) -> None:
    """The chats row and the memory are merged column by column: a column added later (a new
    chat setting) must be added to the merge, or a merged chat would lose it."""
    chats = {c["name"] for c in await db.fetchall("PRAGMA table_info(chats)")}
    assert chats == {"chat_id", "created_at", "updated_at", *CHAT_SETTINGS}
    memory = {c["name"] for c in await db.fetchall("PRAGMA table_info(long_term_memory)")}
    assert memory == {"chat_id", "content", "version", "over_budget", "updated_at",
                      "unreported_added", "unreported_removed"}  # fmt: skip


async def test_a_second_move_changes_nothing_and_returns_nothing(db: Database) -> None:
    store = Store(db)
    await store.add_message(OLD, "user", "we meet on Fridays", user_id=7)
    first = await move_chat(db, OLD, NEW, to_iso(utc_now()))
    assert first.anything and not first.merged
    assert first.moved["messages"] == 1 and first.moved["sessions"] == 1
    after_first = await rows_of(db, NEW)
    again = await move_chat(db, OLD, NEW, to_iso(utc_now()))
    assert not again.anything and again.moved == {}
    assert await rows_of(db, NEW) == after_first
    assert set((await rows_of(db, OLD)).values()) == {0}


async def test_when_the_new_id_was_used_first_both_are_kept_and_its_own_settings_win(
    db: Database,
) -> None:
    store = Store(db)
    book = ReminderBook(db)
    now = to_iso(utc_now())
    # The old group: a model, a time zone, a memory, an open session, a reminder.
    await store.set_chat_model(OLD, "gpt-5")
    assert await book.set_chat_zone(OLD, "Europe/Lisbon") == "Europe/Lisbon"
    await store.add_message(OLD, "user", "the old group's words", user_id=7)
    old_session = await store.active_session(OLD)
    in_a_month = (utc_now() + timedelta(days=30)).strftime("%Y-%m-%dT09:00")
    reminder = await book.schedule(OLD, when=in_a_month, text="book the room")
    # The supergroup, used before the move was heard of: its own zone and memory, a session.
    assert await book.set_chat_zone(NEW, "Asia/Tokyo") == "Asia/Tokyo"
    await store.add_message(NEW, "user", "the supergroup's first words", user_id=7)
    new_session = await store.active_session(NEW)

    def write(conn: sqlite3.Connection) -> None:
        write_memory(conn, OLD, "- meets on Fridays\n- likes tea", over_budget=False,
                           now=now)  # fmt: skip
        write_memory(conn, NEW, "- likes tea\n- room 4B", over_budget=False, now=now)

    await db.run_in_transaction(write)

    moved = await move_chat(db, OLD, NEW, now)

    assert moved.merged and moved.closed_session_id == old_session
    assert set((await rows_of(db, OLD)).values()) == {0}
    [chat] = await db.fetchall("SELECT model_id, time_zone FROM chats WHERE chat_id = ?", (NEW,))
    assert (chat["model_id"], chat["time_zone"]) == ("gpt-5", "Asia/Tokyo")
    [memory] = await db.fetchall(
        "SELECT content, version FROM long_term_memory WHERE chat_id = ?", (NEW,)
    )
    assert memory["content"] == "- meets on Fridays\n- likes tea\n- room 4B"
    assert memory["version"] == 2  # past both (1 and 1): a job that read either runs again
    # One open session, the supergroup's; the old one closed and queued for consolidation.
    sessions = await db.fetchall(
        "SELECT id, closed_at FROM sessions WHERE chat_id = ? ORDER BY id", (NEW,)
    )
    assert [(s["id"], s["closed_at"] is None) for s in sessions] == [
        (old_session, False),
        (new_session, True),
    ]
    assert await store.active_session(NEW) == new_session
    [job] = await db.fetchall("SELECT chat_id, session_id, state FROM consolidation_jobs")
    assert dict(job) == {"chat_id": NEW, "session_id": old_session, "state": "pending"}
    contents = await db.fetchall(
        "SELECT content FROM messages WHERE chat_id = ? ORDER BY id", (NEW,)
    )
    assert [m["content"] for m in contents] == [
        "the old group's words",
        "the supergroup's first words",
    ]
    assert [r.text for r in await book.pending(NEW)] == ["book the room"]
    assert (await book.get(NEW, reminder.id)) is not None


async def test_a_merge_drops_the_old_chats_pending_memory_edits_and_keeps_the_new_ones(
    db: Database,
) -> None:
    """Both chats have tool edits kept for a consolidation's replay (remember / forget while
    one ran). The merged memory's version moves past both, so a consolidation of either runs
    again from it: the old chat's edits would only replay its facts a second time into the
    joined memory (and hold words a user may have asked to forget). They go; the new chat's
    stay, under its own versions."""
    now = to_iso(utc_now())
    edits = [
        (OLD, 2, "remember", "meets on Fridays", '["- meets on Fridays"]', now),
        (OLD, 3, "remember", "parks in B2", '["- parks in B2"]', now),
        (NEW, 1, "remember", "room 4B", '["- room 4B"]', now),
    ]

    def write(conn: sqlite3.Connection) -> tuple[int, int]:
        conn.executemany(
            "INSERT INTO chats(chat_id, created_at, updated_at) VALUES (?, ?, ?)",
            [(OLD, now, now), (NEW, now, now)],
        )
        for content in ("- likes tea", "- likes tea\n- meets on Fridays",
                        "- likes tea\n- meets on Fridays\n- parks in B2"):  # fmt: skip
            old_version = write_memory(conn, OLD, content, over_budget=False, now=now)
        new_version = write_memory(conn, NEW, "- room 4B", over_budget=False, now=now)
        conn.executemany(
            "INSERT INTO memory_edits(chat_id, version, kind, fact, lines, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            edits,
        )
        return old_version, new_version

    assert await db.run_in_transaction(write) == (3, 1)

    moved = await move_chat(db, OLD, NEW, now)

    assert moved.merged
    [memory] = await db.fetchall("SELECT content, version FROM long_term_memory")
    assert dict(memory) == {
        "content": "- likes tea\n- meets on Fridays\n- parks in B2\n- room 4B",
        "version": 4,  # past both (3 and 1)
    }
    kept = await db.fetchall("SELECT chat_id, version, fact FROM memory_edits ORDER BY id")
    assert [tuple(e) for e in kept] == [(NEW, 1, "room 4B")]


class AskedTransport(ScriptedTransport):
    """Says when the first model was asked (and then waits for the gate)."""

    def __init__(self, responder: Responder) -> None:
        super().__init__(responder)
        self.asked = asyncio.Event()

    async def complete(
        self, model_id: str, messages: list[Message], options: CallOptions
    ) -> ChatResult:
        self.asked.set()
        return await super().complete(model_id, messages, options)


async def test_a_consolidation_running_while_the_chat_moves_commits_under_the_new_id(
    db: Database,
) -> None:
    """The job read the memory and the messages under the old id; its commit (memory, history
    entry, archive, attempts, spend) lands under the new one, not behind."""
    clock = SettableClock()
    transport = AskedTransport(
        lambda m, msgs: save_call("[2026-03-01 09:00] planned the offsite", "- offsite in May")
    )
    transport.gate = asyncio.Event()
    store, worker = make_worker(db, clock, transport)
    await store.add_message(OLD, "user", "the offsite is in May", user_id=7)
    await store.start_new_session(OLD)
    running = asyncio.create_task(worker.run_due())
    await transport.asked.wait()  # the models are running: memory and messages were read
    assert (await move_chat(db, OLD, NEW, to_iso(clock()))).anything
    transport.gate.set()
    await running

    assert set((await rows_of(db, OLD)).values()) == {0}
    [memory] = await db.fetchall("SELECT chat_id, content FROM long_term_memory")
    assert dict(memory) == {"chat_id": NEW, "content": "- offsite in May"}
    [entry] = await db.fetchall("SELECT chat_id, entry FROM history_entries")
    assert dict(entry) == {"chat_id": NEW, "entry": "[2026-03-01 09:00] planned the offsite"}
    [job] = await db.fetchall("SELECT chat_id, state FROM consolidation_jobs")
    assert dict(job) == {"chat_id": NEW, "state": "done"}
    archived = await db.fetchall("SELECT chat_id, content FROM archived_messages")
    assert [dict(a) for a in archived] == [{"chat_id": NEW, "content": "the offsite is in May"}]
    spent = await db.fetchall("SELECT DISTINCT chat_id FROM usage")
    assert [s["chat_id"] for s in spent] == [NEW]
