"""kill -9 of the real bot process (`python -m bot`) while consolidation is in flight, and right
after a commit: no message is lost and no consolidation is applied twice.

The bot runs as a subprocess against the fake Telegram Bot API and the fake providers, all on
127.0.0.1 in this test process. The database is inspected with plain sqlite3 between runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest

from memory.db import Database
from memory.store import Store
from tests.fakes.providers import Fault
from tests.support.consolidation_stack import GOOD_ARGS, KEYS, WIRE, good_call
from tests.support.e2e_bot import FakeServers, bot_process, query, subprocess_env, wait_until
from tests.support.memory_sessions import SettableClock, oasst_multilingual, store_session
from tests.support.waits import within

pytestmark = pytest.mark.slow

TOKEN = "123456:TEST-TOKEN"
USER = 4242
HEAD = "llama-3.3-70b-versatile"


def head_requests(fakes: FakeServers) -> list[Any]:
    return [r for r in fakes.groq.requests if r.model == WIRE[HEAD]]


@pytest.fixture
async def fakes() -> AsyncIterator[FakeServers]:
    async with FakeServers(token=TOKEN, keys=KEYS) as servers:
        for provider in servers.providers.values():
            provider.set_default("*", good_call())
        yield servers


def run_bot(
    fakes: FakeServers, db_path: Path, log_path: Path
) -> AbstractAsyncContextManager[asyncio.subprocess.Process]:
    env = subprocess_env(
        fakes,
        db_path,
        user=USER,
        CONSOLIDATION_TIMEOUT="60",
        CONSOLIDATION_RETRY_DELAYS="1",
        SHUTDOWN_GRACE_SECONDS="1",
        LOG_LEVEL="INFO",
    )
    return bot_process(env, cwd=db_path.parent, log_path=log_path)


def job_state(db_path: Path) -> str | None:
    rows = query(db_path, "SELECT state FROM consolidation_jobs ORDER BY id")
    return rows[-1]["state"] if rows else None


async def seed_session(db_path: Path) -> list[str]:
    """A real multilingual 60-message session, stored before the bot starts."""
    db = await Database.open(db_path)
    try:
        clock = SettableClock()
        stored = await store_session(Store(db, clock), clock, USER, oasst_multilingual(60))
    finally:
        await db.close()
    return [m.content for m in stored]


async def send_new(fakes: FakeServers) -> None:
    fakes.tg.push(fakes.tg.make_text_update(USER, USER, "/new"))
    await fakes.tg.wait_for(
        lambda: any(m.text == "New session started." for m in fakes.tg.bot_messages(USER)),
        timeout=30,
    )


def transcript_of(request: Any) -> str:
    return request.body["messages"][-1]["content"]


async def test_kill_during_consolidation_then_restart_completes_once(
    fakes: FakeServers, tmp_path: Path
) -> None:
    db_path = tmp_path / "bot.sqlite3"
    log_path = tmp_path / "bot.log"
    contents = await seed_session(db_path)
    fakes.groq.set_default(WIRE[HEAD], Fault("hang"))  # consolidation stays in flight

    async with run_bot(fakes, db_path, log_path) as proc:
        await send_new(fakes)
        await wait_until(lambda: len(head_requests(fakes)) >= 1, "the consolidation request")
        os.kill(proc.pid, signal.SIGKILL)
        await proc.wait()
    assert proc.returncode == -signal.SIGKILL

    # Killed mid-flight: the job is still marked running, every message is still there.
    assert job_state(db_path) == "running"
    assert [r["content"] for r in query(db_path, "SELECT content FROM messages ORDER BY id")] == (
        contents
    )
    assert query(db_path, "SELECT * FROM history_entries") == []

    fakes.groq.set_default(WIRE[HEAD], good_call())
    before = len(head_requests(fakes))
    async with run_bot(fakes, db_path, log_path) as proc:
        await wait_until(lambda: job_state(db_path) == "done", "the resumed job", 60)
        proc.send_signal(signal.SIGTERM)
        await within(proc.wait(), 30)

    history = query(db_path, "SELECT entry, model_id, message_count FROM history_entries")
    assert [(h["entry"], h["model_id"], h["message_count"]) for h in history] == [
        (GOOD_ARGS["history_entry"], HEAD, 60)
    ]
    memory = query(db_path, "SELECT content, version FROM long_term_memory")
    assert [(m["content"], m["version"]) for m in memory] == [(GOOD_ARGS["memory_update"], 1)]
    assert query(db_path, "SELECT * FROM messages") == []
    # What was deleted had been sent to the model that saved it: all 60, in order.
    saved_from = transcript_of(head_requests(fakes)[before])
    position = 0
    for content in contents:
        first_line = content.splitlines()[0][:30]  # further lines are indented
        found = saved_from.find(first_line, position)
        assert found >= 0, first_line
        position = found
    log_text = log_path.read_text("utf-8")
    resumed = [json.loads(line) for line in log_text.splitlines() if "jobs_resumed" in line]
    assert resumed and resumed[0]["count"] == 1
    assert KEYS["groq"] not in log_text and TOKEN not in log_text


async def test_kill_right_after_the_commit_applies_nothing_twice(
    fakes: FakeServers, tmp_path: Path
) -> None:
    db_path = tmp_path / "bot.sqlite3"
    log_path = tmp_path / "bot.log"
    await seed_session(db_path)

    async with run_bot(fakes, db_path, log_path) as proc:
        await send_new(fakes)
        await wait_until(lambda: job_state(db_path) == "done", "the commit")
        os.kill(proc.pid, signal.SIGKILL)
        await proc.wait()

    requests_before = len(head_requests(fakes))
    snapshot = [
        query(db_path, "SELECT entry FROM history_entries"),
        query(db_path, "SELECT content, version FROM long_term_memory"),
    ]

    def worker_looks() -> list[dict[str, Any]]:
        lines = log_path.read_text("utf-8").splitlines()
        return [json.loads(line) for line in lines if "consolidation_worker_ready" in line]

    looked_before = len(worker_looks())
    async with run_bot(fakes, db_path, log_path) as proc:
        # The restarted worker has looked at the queue once (a second run would start there).
        await wait_until(lambda: len(worker_looks()) > looked_before, "the worker's first look")
        assert worker_looks()[-1]["launched"] == 0
        proc.send_signal(signal.SIGTERM)
        await within(proc.wait(), 30)

    assert len(head_requests(fakes)) == requests_before  # no second consolidation
    history = query(db_path, "SELECT entry FROM history_entries")
    memory = query(db_path, "SELECT content, version FROM long_term_memory")
    assert [tuple(r) for r in history] == [tuple(r) for r in snapshot[0]]
    assert len(history) == 1
    assert [tuple(r) for r in memory] == [(GOOD_ARGS["memory_update"], 1)]
    assert query(db_path, "SELECT state FROM consolidation_jobs")[0]["state"] == "done"
    # Killed right after the commit, maybe before the archive's index transactions: after
    # the restart every archived turn is indexed, and counted once.
    assert query(db_path, "SELECT id FROM archived_messages WHERE indexed = 0") == []
    searched = query(db_path, "SELECT COUNT(*) AS n FROM archived_messages WHERE terms != ''")
    counted = query(
        db_path, "SELECT docs FROM archive_terms WHERE chat_id = ? AND term = ''", (USER,)
    )
    assert searched[0]["n"] > 0 and [r["docs"] for r in counted] == [searched[0]["n"]]
