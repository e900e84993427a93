"""Two event loops in one process, one after the other, each with a bot's services built by the
composition root and a real call through its provider worker pool to a fake provider.

A provider worker pool belongs to the loop that first used it: one pool per process (a
module-level one) made the second `asyncio.run` fail every call ("the provider worker pool
runs on one event loop"), which is what a benchmark with two parts or a second bot in one
interpreter does. The root builds a pool per bot, so both loops are answered. The same holds
for the document readers' slots: semaphores waited on in one loop refuse the next, so each bot
gets its own set, and each loop here reads more documents at once than there are slots.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from telegram import Bot

from bot.app import open_services, prepare
from bot.lifecycle import UpdateTracker
from media.document_reader import FILE_READERS, read_document
from models.calls import CallOptions
from tests.fakes.providers import Reply
from tests.support.e2e_bot import FakeServers, fake_settings


async def _one_bot_answers(db_path: Path, n: int) -> str:
    async with FakeServers() as fakes:
        settings = fake_settings(fakes, DATABASE_PATH=db_path)
        bot = Bot(settings.TELEGRAM_BOT_TOKEN.get_secret_value(), base_url=fakes.tg.base_url)
        services = await open_services(prepare(settings), bot, UpdateTracker())
        try:
            fakes.openai.script("gpt-5", Reply(f"answer from loop {n}"))
            messages = [{"role": "user", "content": f"hello from loop {n}"}]
            result = await services.transport.complete("gpt-5", messages, CallOptions(timeout=30))
            # One reader more than there are slots: the last one waits on the slots' semaphore,
            # which ties it to this loop.
            documents = await asyncio.gather(
                *(
                    read_document(
                        f"page {i} of loop {n}".encode(),
                        file_name="a.txt",
                        mime_type="text/plain",
                        token_budget=100,
                        timeout=60,
                        slots=services.readers,
                    )
                    for i in range(FILE_READERS + 1)
                )
            )
            assert [d.text for d in documents] == [
                f"page {i} of loop {n}" for i in range(FILE_READERS + 1)
            ]
            return result.text
        finally:
            await services.close()


def test_two_event_loops_in_one_process_both_get_answers(tmp_path: Path) -> None:
    answers: list[str] = []
    errors: list[BaseException] = []

    def two_runs() -> None:
        # A thread of its own: asyncio.run leaves the thread with no current loop, and this
        # test's thread shares one with the rest of the session.
        try:
            for n in (1, 2):
                answers.append(asyncio.run(_one_bot_answers(tmp_path / f"bot{n}.sqlite3", n)))
        except BaseException as error:  # handed to the test's thread
            errors.append(error)

    runner = threading.Thread(target=two_runs, name="two-loops")
    runner.start()
    runner.join(timeout=240)
    assert not runner.is_alive(), "the two runs did not finish"
    assert errors == []
    assert answers == ["answer from loop 1", "answer from loop 2"]
