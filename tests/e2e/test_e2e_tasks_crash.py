"""kill -9 of the real bot process (`python -m bot`) in the middle of a scheduled task's run:
between its claim and its message, and between its message and the mark. Each time the chat
gets the answer once, after the restart. The bot runs against the fake Bot API and the fake
providers in this test process; the database is read with plain sqlite3 between runs."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from tests.e2e.test_e2e_reminders import WrittenWhen, texts_of
from tests.fakes.providers import Reply, ToolCallReply
from tests.support.e2e_bot import FakeServers, query, restartable_bot, wait_until

pytestmark = pytest.mark.slow

USER = 4243
TOKYO = ZoneInfo("Asia/Tokyo")
TASK = "the weather in Tokyo today"
ANSWER = "Sunny in Tokyo, 24 degrees."


def answers(fakes: FakeServers) -> list[str]:
    return [text for text in texts_of(fakes, USER) if text.startswith(f"🗓 {TASK}")]


def run_requests(fakes: FakeServers) -> int:
    return sum(
        1
        for r in fakes.openai.requests
        if any(
            str(m.get("content", "")).startswith("[Scheduled task.")
            for m in r.body.get("messages", [])
        )
    )


def delivery(db_path: Path) -> list[tuple[str | None, str | None]]:
    rows = query(
        db_path,
        "SELECT d.outcome, t.state FROM reminder_deliveries d "
        "LEFT JOIN task_runs t ON t.delivery_id = d.id ORDER BY d.id",
    )
    return [(r["outcome"], r["state"]) for r in rows]


async def set_task(fakes: FakeServers, run: Reply | None = None) -> None:
    """The task, due 10 s after the model wrote its time: the turn's second round, the receipt
    and what the test does after it come first, even on a loaded machine. `run`, when given,
    is scripted now as the answer to the task's run, so it cannot come too late."""
    fakes.tg.push(fakes.tg.make_text_update(USER, USER, "/timezone Asia/Tokyo"))
    await wait_until(
        lambda: any(t.startswith("Time zone set: Asia/Tokyo") for t in texts_of(fakes, USER)),
        "the zone",
    )
    when = WrittenWhen(10, TOKYO)
    fakes.openai.script(
        "gpt-5",
        ToolCallReply("schedule_task", lambda: {"when": when.write(), "task": TASK}),
        Reply("Scheduled."),
        *([run] if run else []),
    )
    fakes.tg.push(fakes.tg.make_text_update(USER, USER, f"at that time: {TASK}"))
    await wait_until(lambda: any("🗓 Task scheduled" in t for t in texts_of(fakes, USER)), "it")


async def kill(proc: object) -> None:
    os.kill(proc.pid, signal.SIGKILL)  # type: ignore[attr-defined]
    await proc.wait()  # type: ignore[attr-defined]
    assert proc.returncode == -signal.SIGKILL  # type: ignore[attr-defined]


async def test_kill_9_between_claim_and_send_answers_once_after_restart(tmp_path: Path) -> None:
    db_path = tmp_path / "bot.sqlite3"
    async with FakeServers() as fakes:
        async with restartable_bot(fakes, db_path, user=USER) as proc:
            # The run's model is slow: the bot is killed while it waits for it.
            await set_task(fakes, run=Reply(ANSWER, delay=60))
            await wait_until(lambda: run_requests(fakes) == 1, "the run", 90)
            await kill(proc)
        assert delivery(db_path) == [(None, "running")]
        assert answers(fakes) == []

        fakes.openai.script("gpt-5", Reply(ANSWER))
        async with restartable_bot(fakes, db_path, user=USER) as proc:
            await wait_until(lambda: delivery(db_path) == [("sent", "delivered")], "it", 120)
            proc.send_signal(signal.SIGTERM)
            await proc.wait()
        assert answers(fakes) == [f"🗓 {TASK}\n\n{ANSWER}"]
        assert run_requests(fakes) == 2  # run again: nothing had reached the chat


async def test_kill_9_between_send_and_mark_answers_once_after_restart(tmp_path: Path) -> None:
    db_path = tmp_path / "bot.sqlite3"
    async with FakeServers() as fakes:
        async with restartable_bot(fakes, db_path, user=USER) as proc:
            await set_task(fakes)
            fakes.openai.script("gpt-5", Reply(ANSWER))
            # The answer is edited into its message, and the bot never hears that it was.
            fakes.tg.hold_after("editMessageText")
            await wait_until(lambda: answers(fakes) == [f"🗓 {TASK}\n\n{ANSWER}"], "it", 90)
            await kill(proc)
        assert delivery(db_path) == [(None, "sending")]

        async with restartable_bot(fakes, db_path, user=USER) as proc:
            await wait_until(lambda: delivery(db_path) == [("sent", "delivered")], "mark", 120)
            proc.send_signal(signal.SIGTERM)
            await proc.wait()
        # Once in the chat: the edit made again was "not modified"; the model not asked again.
        assert answers(fakes) == [f"🗓 {TASK}\n\n{ANSWER}"]
        assert run_requests(fakes) == 1
        sends = [c for c in fakes.tg.calls_of("sendMessage") if c.params.get("chat_id") in
                 (USER, str(USER)) and str(c.params.get("text", "")).startswith("🗓 ")]  # fmt: skip
        assert len(sends) == 1
        edits = [c for c in fakes.tg.calls_of("editMessageText") if not c.ok]
        assert edits and all("not modified" in (c.error or "") for c in edits)
        [kept] = query(
            db_path,
            "SELECT content FROM messages WHERE role = 'assistant' AND content LIKE '🗓 %' "
            "AND content NOT LIKE '%Task scheduled%'",
        )
        assert kept["content"] == f"🗓 {TASK}\n\n{ANSWER}"
