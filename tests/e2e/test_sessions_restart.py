"""Sessions across restarts of the real bot process (`python -m bot`), against the fake Bot API
and the fake providers on 127.0.0.1; the database is inspected with plain sqlite3.

- An idle session is closed in the transaction that stores the next message: a kill -9 right
  after changes nothing, and its consolidation resumes and completes once on the next start.
- A turn held at a stop and sent again by Telegram (the last confirming getUpdates failed) is
  answered — and billed — once.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest

from memory.db import Database
from memory.store import Store
from tests.fakes.providers import Fault, Reply
from tests.support.consolidation_stack import GOOD_ARGS, KEYS, WIRE, good_call
from tests.support.e2e_bot import (
    FakeServers,
    confirmed,
    query,
    restartable_bot,
    showing,
    wait_until,
)
from tests.support.memory_sessions import SettableClock, oasst_multilingual, store_session
from tests.support.waits import within

pytestmark = pytest.mark.slow

TOKEN = "123456:SESSIONS-RESTART-TOKEN"
USER = 8118
HEAD = WIRE["llama-3.3-70b-versatile"]
IDLE_NOTE = "New session after a quiet spell; the previous one is being saved to memory."
SLOW_ANSWER = " ".join(f"word{i}" for i in range(400))  # streams for about 20 s


@pytest.fixture
async def fakes() -> AsyncIterator[FakeServers]:
    async with FakeServers(token=TOKEN, keys=KEYS) as servers:
        yield servers


def run_bot(
    fakes: FakeServers, db_path: Path, **values: str
) -> AbstractAsyncContextManager[asyncio.subprocess.Process]:
    return restartable_bot(fakes, db_path, user=USER, **values)


async def stop(proc: asyncio.subprocess.Process) -> None:
    proc.send_signal(signal.SIGTERM)
    assert await within(proc.wait(), 60) == 0


def events(db_path: Path) -> list[dict[str, Any]]:
    lines = db_path.with_suffix(".log").read_text("utf-8", errors="replace").splitlines()
    return [json.loads(line) for line in lines if line.startswith("{")]


async def test_an_idle_close_survives_a_kill_and_its_consolidation_completes_once(
    fakes: FakeServers, tmp_path: Path
) -> None:
    db_path = tmp_path / "bot.sqlite3"
    # A real multilingual session, stored with its own (years old) timestamps.
    db = await Database.open(db_path)
    try:
        clock = SettableClock()
        seeded = await store_session(Store(db, clock), clock, USER, oasst_multilingual(20))
    finally:
        await db.close()
    fakes.groq.set_default(HEAD, Fault("hang"))  # the consolidation stays in flight

    async with run_bot(fakes, db_path) as proc:
        fakes.tg.push(fakes.tg.make_text_update(USER, USER, "Good morning again"))
        await wait_until(
            lambda: (
                [m.text for m in fakes.tg.bot_messages(USER)]
                == [f"echo: Good morning again\n\n{IDLE_NOTE}"]
            ),
            "the answer, with the new-session line",
        )
        await wait_until(lambda: bool(fakes.groq.requests), "the consolidation request")
        os.kill(proc.pid, signal.SIGKILL)
        await proc.wait()

    # Close, open, enqueue and the message were one transaction: all of it is there.
    sessions = query(db_path, "SELECT id, closed_at FROM sessions ORDER BY id")
    assert [s["closed_at"] is not None for s in sessions] == [True, False]
    old, new = (s["id"] for s in sessions)
    [job] = query(db_path, "SELECT session_id, kind, state FROM consolidation_jobs")
    assert tuple(job) == (old, "session_closed", "running")
    kept = query(db_path, "SELECT content FROM messages WHERE session_id = ? ORDER BY id", (old,))
    assert [r["content"] for r in kept] == [m.content for m in seeded]
    current = query(
        db_path, "SELECT content FROM messages WHERE session_id = ? ORDER BY id", (new,)
    )
    assert [r["content"] for r in current] == ["Good morning again", "echo: Good morning again"]

    fakes.groq.set_default(HEAD, good_call())
    before = len(fakes.groq.requests)
    async with run_bot(fakes, db_path) as proc:
        await wait_until(
            lambda: query(db_path, "SELECT state FROM consolidation_jobs")[0]["state"] == "done",
            "the resumed consolidation",
        )
        await stop(proc)

    [entry] = query(db_path, "SELECT session_id, message_count FROM history_entries")
    assert tuple(entry) == (old, len(seeded))
    assert len(query(db_path, "SELECT * FROM consolidation_jobs")) == 1
    assert query(db_path, "SELECT * FROM messages WHERE session_id = ?", (old,)) == []
    current = query(
        db_path, "SELECT content FROM messages WHERE session_id = ? ORDER BY id", (new,)
    )
    assert [r["content"] for r in current] == ["Good morning again", "echo: Good morning again"]
    [memory] = query(db_path, "SELECT content FROM long_term_memory")
    assert memory["content"] == GOOD_ARGS["memory_update"]
    saved_from = fakes.groq.requests[before].body["messages"][-1]["content"]
    assert seeded[0].content[:40] in saved_from and "Good morning again" not in saved_from


async def test_a_held_update_sent_again_by_telegram_is_answered_once(
    fakes: FakeServers, tmp_path: Path
) -> None:
    db_path = tmp_path / "bot.sqlite3"
    tg = fakes.tg
    fakes.openai.set_default("*", Reply(SLOW_ANSWER, chunk_chars=4, chunk_delay=0.2))
    async with run_bot(fakes, db_path) as proc:
        first = tg.push(tg.make_text_update(USER, USER, "Tell me a long story"))
        await wait_until(
            lambda: any(text.startswith("word0") for text in showing(tg, USER)),
            "the reply to start streaming",
        )
        await wait_until(lambda: confirmed(tg, first), "the long poll after the first update")
        # From now on every getUpdates fails, the final confirming one at the stop included:
        # the second update is fetched by the poll already waiting, and never confirmed.
        tg.inject_error("getUpdates", count=1_000_000, status=502)
        pushed_at = time.monotonic()
        second = tg.push(tg.make_text_update(USER, USER, "And then what happened?"))
        await wait_until(
            lambda: any(
                c.method == "getUpdates" and not c.ok and c.at > pushed_at for c in tg.calls
            ),
            "the poll that fetched the second update to return",
        )
        await stop(proc)

    held = query(db_path, "SELECT update_id FROM held_updates")
    assert [r["update_id"] for r in held] == [second]
    assert not any(
        c.method == "getUpdates" and c.ok and int(c.params.get("offset") or 0) > second
        for c in tg.calls
    ), "Telegram still has the second update"

    tg.inject_error("getUpdates", count=0)
    fakes.openai.set_default("*", Reply("It ended well."))
    started = len(events(db_path))
    async with run_bot(fakes, db_path) as proc:
        # Both copies handled: the replayed one and the one Telegram sends again.
        await wait_until(
            lambda: (
                sum(
                    e.get("event") in ("turn_finished", "turn_duplicate_skipped")
                    for e in events(db_path)[started:]
                )
                >= 2
            ),
            "both deliveries of the second update to be handled",
        )
        await stop(proc)

    assert [m.text for m in tg.bot_messages(USER)].count("It ended well.") == 1
    assert len(fakes.openai.requests) == 2  # the first turn and the held one, once
    users = query(db_path, "SELECT content FROM messages WHERE role = 'user' ORDER BY id")
    assert [r["content"] for r in users] == ["Tell me a long story", "And then what happened?"]
    assert query(db_path, "SELECT * FROM held_updates") == []
