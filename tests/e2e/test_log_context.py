"""A log line of a reminder's delivery, a scheduled task's run or a consolidation job carries
its chat and its reminder's, task's or job's id from structlog's context, bound once where each
runs (reminders/scheduler.py, memory/consolidation/worker.py), as a handled update carries its
chat (bot/lifecycle.py). The lines below are the ones that do not name the chat themselves,
and a provider attempt of a task's run, which never knew it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from tests.e2e.test_e2e_reminders import fall_due, in_an_hour, marked, schedule
from tests.e2e.test_e2e_tasks import LISBON, due, set_task, settled, task_bot
from tests.fakes.providers import Fault, Reply
from tests.support.e2e_bot import OWNER, bot_under_test
from tests.support.memory_sessions import SettableClock

CHAT = OWNER


@contextmanager
def context_logs() -> Iterator[list[dict[str, Any]]]:
    """Every event logged meanwhile, with the context merged in as the bot's pipeline does."""
    with structlog.testing.capture_logs(
        processors=[structlog.contextvars.merge_contextvars]
    ) as logs:
        yield logs


def named(logs: list[dict[str, Any]], event: str) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"] == event]


async def test_a_reminders_delivery_lines_carry_its_chat_and_id(tmp_path: Path) -> None:
    clock = SettableClock(datetime.now(UTC))
    async with bot_under_test(tmp_path, clock=clock) as bot:
        await bot.ask(CHAT, "/timezone Europe/Lisbon")
        when = in_an_hour(clock, LISBON)
        schedule(bot, when, "water the plants")
        await bot.ask(CHAT, "remind me to water the plants")
        [reminder] = await bot.rows("SELECT id FROM reminders")
        with context_logs() as logs:
            fall_due(bot, clock, when, LISBON)
            await marked(bot)
        [sent] = named(logs, "reminder_sent")
        assert (sent["chat_id"], sent["reminder_id"]) == (CHAT, reminder["id"])


async def test_a_task_runs_lines_carry_its_chat_and_task_id_down_to_the_provider_call(
    tmp_path: Path,
) -> None:
    clock = SettableClock(datetime.now(UTC))
    async with task_bot(tmp_path, clock) as (bot, _):
        when = in_an_hour(clock, LISBON)
        await set_task(bot, when, "tell me the ferry times")
        [task] = await bot.rows("SELECT id FROM reminders")
        # A first attempt that fails is logged by the transport, which knows no chat.
        bot.openai.script("gpt-5", Fault("server_500"), Reply("The ferry leaves at nine."))
        with context_logs() as logs:
            due(bot, clock, when)
            await settled(bot)
        ids = (CHAT, task["id"])
        for event in ("task_ran", "task_delivered", "reminder_sent"):
            [line] = named(logs, event)
            assert (line["chat_id"], line["task_id"]) == ids, event
        attempts = named(logs, "provider_attempt")
        assert attempts and all((a["chat_id"], a["task_id"]) == ids for a in attempts)
