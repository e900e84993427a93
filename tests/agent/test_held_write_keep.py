"""A held write's ✅ carries out exactly what its question showed, in the one transaction that
finds it still pending: a ✅ racing /forget never writes into the forgotten memory, and a
`forget_fact` whose lines changed since the question removes nothing (agent/tools/held.py,
memory/pending_writes.py; a real database, the races ordered by the writer's queue, no sleeps).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

from agent.tools.held import HeldCalls, HeldRun, write_family
from agent.tools.memory import ChatTools, ToolOutcome
from memory.db import Database
from memory.forget import forget_chat
from memory.longterm import memory_of, write_memory
from memory.pending_writes import Kept, PendingWrite, PendingWrites, TapFound
from memory.store import Store, to_iso
from models.types import ToolCall
from primitives.clock import utc_now

CHAT, ASKER = 42, 4200
T = TypeVar("T")
BANK_LINES = [
    "- Banks with Nordbank",
    "- Bank card PIN is written in the blue notebook",
    "- Opened a savings account at the bank in March",
]
MEMORY = "\n".join(["- Likes sourdough bread", *BANK_LINES])


async def set_memory(db: Database, content: str) -> None:
    """The chat's memory as a consolidation would write it (a new version)."""
    now = to_iso(utc_now())

    def write(conn: sqlite3.Connection) -> None:
        conn.execute(
            "INSERT INTO chats(chat_id, created_at, updated_at) VALUES (?, ?, ?) "
            "ON CONFLICT(chat_id) DO NOTHING",
            (CHAT, now, now),
        )
        write_memory(conn, CHAT, content, over_budget=False, now=now)

    await db.run_in_transaction(write)


async def memory(db: Database) -> str:
    return (await db.read(lambda conn: memory_of(conn, CHAT))).content


def calls(db: Database) -> tuple[ChatTools, HeldCalls]:
    """The chat tools and the held calls with their write family, as the agent loop has them."""
    tools = ChatTools(db, memory_max_chars=6000)
    held_calls = HeldCalls(PendingWrites(db), Store(db))
    held_calls.register(write_family(tools))
    return tools, held_calls


async def hold(held_calls: HeldCalls, name: str, **args: object) -> ToolOutcome:
    call = ToolCall(f"call_{name}", name, json.dumps(args))
    return await held_calls.hold(call, chat_id=CHAT, user_id=ASKER, user_name=None, topic_id=None)


async def held(held_calls: HeldCalls, name: str, **args: object) -> PendingWrite:
    outcome = await hold(held_calls, name, **args)
    assert outcome.pending is not None, outcome.content
    return outcome.pending


def keep(
    held_calls: HeldCalls, write: PendingWrite, user_id: int = ASKER
) -> Awaitable[Kept[HeldRun]]:
    return held_calls.keep(write.id, CHAT, user_id)


def outcome_of(kept: Kept[HeldRun]) -> ToolOutcome:
    assert kept.result is not None
    return kept.result.outcome


async def test_the_question_of_a_forget_holds_the_lines_and_the_version_it_read(
    db: Database,
) -> None:
    await set_memory(db, MEMORY)
    _, held_calls = calls(db)
    write = await held(held_calls, "forget_fact", fact="bank")
    assert write.preview is not None and json.loads(write.preview) == {"lines": BANK_LINES}
    assert write.memory_version == (await db.read(lambda c: memory_of(c, CHAT))).version


async def test_a_forget_no_line_states_is_refused_at_once_not_shown(db: Database) -> None:
    await set_memory(db, MEMORY)
    _, held_calls = calls(db)
    outcome = await hold(held_calls, "forget_fact", fact="the user's cat")
    assert not outcome.ok and outcome.pending is None
    assert "no memory line states this" in outcome.content
    assert await db.fetchall("SELECT id FROM pending_writes") == []


class CutIn(Database):
    """A database on which a /forget can be made to cut in right after the next transaction
    commits: the moment a ✅ checked in one transaction and carried out in a second left open."""

    after_next_commit: Callable[[], Awaitable[object]] | None = None

    async def run_in_transaction(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        result = await super().run_in_transaction(fn)
        step, self.after_next_commit = self.after_next_commit, None
        if step is not None:
            await step()
        return result


@pytest.mark.parametrize("tool", ["remember", "forget_fact"])
async def test_a_keep_racing_forget_never_writes_into_the_forgotten_memory(
    tmp_path: Path, tool: str
) -> None:
    """/forget commits right after the ✅'s first transaction: whatever the ✅ wrote, /forget
    removes. (A ✅ checked in one transaction and carried out in a second let /forget in
    between, and the write landed in the memory just forgotten.)"""
    db = await CutIn.open(tmp_path / "db.sqlite3")
    try:
        await set_memory(db, MEMORY)
        _, held_calls = calls(db)
        args = {"fact": "The user's bank PIN is 4321"} if tool == "remember" else {"fact": "bank"}
        write = await held(held_calls, tool, **args)
        db.after_next_commit = lambda: forget_chat(db, CHAT, to_iso(utc_now()))
        kept = await keep(held_calls, write)
        assert db.after_next_commit is None  # /forget did cut in
        assert kept.found is TapFound.CLAIMED
        assert await memory(db) == ""
        assert await db.fetchall("SELECT id FROM pending_writes") == []
    finally:
        await db.close()


async def test_a_keep_after_forget_finds_nothing_and_writes_nothing(db: Database) -> None:
    await set_memory(db, MEMORY)
    _, held_calls = calls(db)
    write = await held(held_calls, "remember", fact="The user's bank PIN is 4321")
    _, kept = await asyncio.gather(
        forget_chat(db, CHAT, to_iso(utc_now())),
        keep(held_calls, write),
    )
    assert kept.found is TapFound.MISSING and kept.result is None
    assert await memory(db) == ""


async def test_a_forget_whose_lines_changed_since_the_question_removes_nothing(
    db: Database,
) -> None:
    """A consolidation rewrote the memory after the question: "bank" now matches other lines
    than the three the user saw, so the ✅ removes none of them and says why."""
    await set_memory(db, MEMORY)
    _, held_calls = calls(db)
    write = await held(held_calls, "forget_fact", fact="bank")
    rewritten = "- Likes sourdough bread\n- Banks with Nordbank and keeps the PIN at home"
    await set_memory(db, rewritten)
    kept = await keep(held_calls, write)
    assert not outcome_of(kept).ok
    assert "memory changed" in outcome_of(kept).content
    assert await memory(db) == rewritten
    [row] = await db.fetchall("SELECT state FROM pending_writes")
    assert row["state"] == "failed"


async def test_a_forget_whose_lines_are_unchanged_removes_exactly_them(db: Database) -> None:
    """Another line was added since the question (a new version), the lines shown are still
    the ones that would go: the ✅ removes exactly those."""
    await set_memory(db, MEMORY)
    _, held_calls = calls(db)
    write = await held(held_calls, "forget_fact", fact="bank")
    await set_memory(db, MEMORY + "\n- Lives in Porto")
    kept = await keep(held_calls, write)
    assert outcome_of(kept).receipt is not None
    assert await memory(db) == "- Likes sourdough bread\n- Lives in Porto"


async def test_only_the_asker_keeps_and_a_second_keep_finds_it_settled(db: Database) -> None:
    _, held_calls = calls(db)
    write = await held(held_calls, "remember", fact="Prefers tea")
    other = await keep(held_calls, write, ASKER + 1)
    assert other.found is TapFound.NOT_ASKER and await memory(db) == ""
    first, second = await asyncio.gather(
        keep(held_calls, write),
        keep(held_calls, write),
    )
    assert sorted([first.found, second.found]) == [TapFound.CLAIMED, TapFound.SETTLED]
    assert await memory(db) == "- Prefers tea"


async def test_a_cancel_shows_the_reminder_and_a_wrong_id_is_refused_at_once(
    db: Database,
) -> None:
    tools, held_calls = calls(db)
    await tools.reminders.set_chat_zone(CHAT, "Asia/Tokyo")
    made = await tools.reminders.schedule(
        CHAT, when="2027-01-05T07:15", text="take out the bins", repeat="weekly", user_id=ASKER
    )
    write = await held(held_calls, "cancel_reminder", id=made.id)
    assert write.preview is not None
    assert json.loads(write.preview) == {
        "local": "2027-01-05T07:15:00",
        "time_zone": "Asia/Tokyo",
        "repeat": "weekly",
        "text": "take out the bins",
    }
    refused = await hold(held_calls, "cancel_reminder", id=made.id + 1)
    assert not refused.ok and "no pending reminder" in refused.content
    kept = await keep(held_calls, write)
    assert outcome_of(kept).receipt is not None
    assert (await tools.reminders.get(CHAT, made.id)).state == "cancelled"  # type: ignore[union-attr]
