"""SIGTERM to the real bot process (`python -m bot`) while it streams a reply and while it
consolidates: the reply ends with a note, nothing the user sent is lost or answered twice,
and consolidation finishes within the grace period or resumes on the next start.

The bot runs as a subprocess against the fake Bot API and the fake providers on 127.0.0.1 in
this test process; the database is inspected with plain sqlite3 between runs.
"""

from __future__ import annotations

import asyncio
import os
import signal
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import pytest

from memory.db import Database
from memory.store import Store
from tests.fakes.providers import Fault, Reply
from tests.support.consolidation_stack import KEYS, good_call
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

TOKEN = "123456:SHUTDOWN-TEST-TOKEN"
USER = 7007
INTERRUPTED = "(interrupted: the bot restarted; please ask again)"
# A reply that streams for about 20 s: a stop always catches it in the middle.
SLOW_ANSWER = " ".join(f"word{i}" for i in range(400))


def run_bot(
    fakes: FakeServers, db_path: Path, *, grace: float
) -> AbstractAsyncContextManager[asyncio.subprocess.Process]:
    return restartable_bot(fakes, db_path, user=USER, SHUTDOWN_GRACE_SECONDS=str(grace))


async def stop_with_sigterm(proc: asyncio.subprocess.Process, signum: int = signal.SIGTERM) -> int:
    proc.send_signal(signum)
    return await within(proc.wait(), timeout=60)


def log_events(db_path: Path) -> str:
    return db_path.with_suffix(".log").read_text(encoding="utf-8", errors="replace")


async def test_sigterm_mid_reply_ends_it_with_a_note_and_loses_no_message(tmp_path: Path) -> None:
    db_path = tmp_path / "bot.sqlite3"
    async with FakeServers(token=TOKEN, keys=KEYS) as fakes:
        tg = fakes.tg
        fakes.openai.set_default("*", Reply(SLOW_ANSWER, chunk_chars=4, chunk_delay=0.2))
        async with run_bot(fakes, db_path, grace=1) as proc:
            tg.push(tg.make_text_update(USER, USER, "Tell me a long story"))
            await wait_until(
                lambda: any(text.startswith("word0") for text in showing(tg, USER)),
                "the reply to start streaming",
            )
            # A second message queues behind the running reply; PTB fetches and confirms it.
            second = tg.push(tg.make_text_update(USER, USER, "And then what happened?"))
            await wait_until(lambda: confirmed(tg, second), "the second update to be confirmed")

            assert await stop_with_sigterm(proc) == 0

        # The half reply was ended with a note, and what was shown is stored.
        [reply] = tg.bot_messages(USER)
        assert reply.text.endswith(INTERRUPTED)
        shown = reply.text.removesuffix(INTERRUPTED).strip()
        assert shown and SLOW_ANSWER.startswith(shown)
        rows = query(db_path, "SELECT role, content FROM messages ORDER BY id")
        assert (rows[0]["role"], rows[0]["content"]) == ("user", "Tell me a long story")
        assert rows[1]["role"] == "assistant" and SLOW_ANSWER.startswith(rows[1]["content"])
        assert len(rows) == 2, "the second message was not answered during the stop"
        # Telegram has forgotten the second update; the bot kept it.
        held = query(db_path, "SELECT update_id FROM held_updates")
        assert [r["update_id"] for r in held] == [second]
        assert len(fakes.openai.requests) == 1

        # Next start: the held message is answered first, once; the first is not repeated.
        fakes.openai.set_default("*", Reply("It ended well."))
        async with run_bot(fakes, db_path, grace=1) as proc:
            await wait_until(
                lambda: any(m.text == "It ended well." for m in tg.bot_messages(USER)),
                "the held message to be answered after the restart",
            )
            await wait_until(
                lambda: not query(db_path, "SELECT 1 FROM held_updates"),
                "the held update to be deleted once handled",
            )
            assert await stop_with_sigterm(proc) == 0
        users = query(db_path, "SELECT content FROM messages WHERE role = 'user' ORDER BY id")
        assert [r["content"] for r in users] == ["Tell me a long story", "And then what happened?"]
        assert len(fakes.openai.requests) == 2
        assert fakes.openai.requests[1].body["messages"][-1]["content"] == (
            "And then what happened?"
        )
        assert [m.text for m in tg.bot_messages(USER)][-1] == "It ended well."


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("whole_group", [False, True], ids=["bot", "process-group"])
async def test_sigterm_with_enough_grace_lets_the_reply_finish(
    tmp_path: Path, signum: int, whole_group: bool
) -> None:
    """Also when the signal reaches the whole process group, as Ctrl-C in a terminal does: the
    bot and its provider workers (models/worker/pool.py) at once. The workers must outlive the
    signal and serve the reply through the grace period; they leave when the bot has gone."""
    db_path = tmp_path / "bot.sqlite3"
    answer = " ".join(f"piece{i}" for i in range(30))
    async with FakeServers(token=TOKEN, keys=KEYS) as fakes:
        tg = fakes.tg
        fakes.openai.set_default("*", Reply(answer, chunk_chars=6, chunk_delay=0.1))
        async with run_bot(fakes, db_path, grace=30) as proc:
            tg.push(tg.make_text_update(USER, USER, "Short story please"))
            await wait_until(
                lambda: any(m.text.startswith("piece0") for m in tg.bot_messages(USER)),
                "the reply to start streaming",
            )
            workers = _children(proc.pid)
            assert workers  # the provider workers, in the bot's process group
            if whole_group:
                os.killpg(proc.pid, signum)
                assert await within(proc.wait(), timeout=60) == 0
            else:
                assert await stop_with_sigterm(proc, signum) == 0
            await wait_until(
                lambda: not any(Path(f"/proc/{pid}").exists() for pid in workers),
                "the workers to go",
            )
        [reply] = tg.bot_messages(USER)
        assert reply.text == answer
        assistant = query(db_path, "SELECT content FROM messages WHERE role = 'assistant'")
        assert [r["content"] for r in assistant] == [answer]


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        found += [int(child) for child in children.read_text().split()]
    return found


async def _seed_session(db_path: Path, count: int) -> list[str]:
    """A real multilingual session stored before the bot starts."""
    db = await Database.open(db_path)
    try:
        clock = SettableClock()
        stored = await store_session(Store(db, clock), clock, USER, oasst_multilingual(count))
    finally:
        await db.close()
    return [m.content for m in stored]


async def test_sigterm_during_consolidation_leaves_the_job_queued_to_resume(
    tmp_path: Path,
) -> None:
    db_path = tmp_path / "bot.sqlite3"
    seeded = await _seed_session(db_path, 30)
    async with FakeServers(token=TOKEN, keys=KEYS) as fakes:
        tg = fakes.tg
        fakes.groq.set_default("*", Fault("hang"))  # the consolidation model never answers
        async with run_bot(fakes, db_path, grace=1) as proc:
            tg.push(tg.make_text_update(USER, USER, "/new"))
            await wait_until(lambda: bool(fakes.groq.requests), "consolidation to start")
            assert await stop_with_sigterm(proc) == 0
        assert "New session started." in [m.text for m in tg.bot_messages(USER)]
        [job] = query(db_path, "SELECT state FROM consolidation_jobs")
        assert job["state"] != "done"
        kept = query(db_path, "SELECT content FROM messages ORDER BY id")
        assert [r["content"] for r in kept] == seeded, "every message is still there"
        assert not query(db_path, "SELECT 1 FROM history_entries")

        # Next start: the job resumes and completes, once.
        fakes.groq.reset()
        fakes.groq.set_default("*", good_call())
        async with run_bot(fakes, db_path, grace=1) as proc:
            await wait_until(
                lambda: (
                    query(db_path, "SELECT state FROM consolidation_jobs")[0]["state"] == "done"
                ),
                "the job to resume and finish",
            )
            assert await stop_with_sigterm(proc) == 0
        assert len(query(db_path, "SELECT 1 FROM history_entries")) >= 1
        [memory] = query(db_path, "SELECT content FROM long_term_memory")
        assert "Rina" in memory["content"]
        assert "consolidation_jobs_resumed" in log_events(db_path)


async def test_sigterm_lets_a_running_consolidation_finish_within_the_grace(
    tmp_path: Path,
) -> None:
    db_path = tmp_path / "bot.sqlite3"
    seeded = await _seed_session(db_path, 20)
    async with FakeServers(token=TOKEN, keys=KEYS) as fakes:
        tg = fakes.tg
        fakes.groq.set_default("*", good_call())
        fakes.groq.latency = 2.0  # slow but within the grace period
        async with run_bot(fakes, db_path, grace=30) as proc:
            tg.push(tg.make_text_update(USER, USER, "/new"))
            await wait_until(lambda: bool(fakes.groq.requests), "consolidation to start")
            assert await stop_with_sigterm(proc) == 0
        [job] = query(db_path, "SELECT state FROM consolidation_jobs")
        assert job["state"] == "done", "the running consolidation finished before the exit"
        history = query(db_path, "SELECT message_count FROM history_entries")
        assert sum(r["message_count"] for r in history) == len(seeded)
        assert not query(db_path, "SELECT 1 FROM messages")
