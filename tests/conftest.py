"""Shared fixtures. The litellm flags must be set before anything imports litellm."""

from __future__ import annotations

import asyncio
import io
import os

from primitives.litellm_env import LITELLM_FLAGS

os.environ.update(LITELLM_FLAGS)

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_timeout
from telegram import Bot

from memory.db import Database
from tests.fakes.providers import FakeProvider
from tests.fakes.telegram import FakeTelegram
from tests.support.shared_workers import close_shared_workers
from tests.support.transport import TG_TOKEN, make_transport


@pytest.fixture
async def tg() -> AsyncIterator[FakeTelegram]:
    """The fake Bot API on 127.0.0.1."""
    async with FakeTelegram(token=TG_TOKEN) as fake:
        yield fake


@pytest.fixture
async def bot(tg: FakeTelegram) -> AsyncIterator[Bot]:
    """The real PTB Bot talking to the fake Bot API."""
    async with Bot(TG_TOKEN, base_url=tg.base_url) as real_bot:
        yield real_bot


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    """A migrated SQLite file of the test's own (as the bot lays it out, DATA_DIR/bot.sqlite3),
    closed after the test: every test that needs a plain database takes this one."""
    database = await Database.open(tmp_path / "data" / "bot.sqlite3")
    try:
        yield database
    finally:
        await database.close()


@pytest.fixture
async def fake_openai() -> AsyncIterator[FakeProvider]:
    async with FakeProvider("openai") as fp:
        yield fp


@pytest.fixture
async def fake_groq() -> AsyncIterator[FakeProvider]:
    async with FakeProvider("groq") as fp:
        yield fp


@pytest.fixture
async def fake_anthropic() -> AsyncIterator[FakeProvider]:
    async with FakeProvider("anthropic") as fp:
        yield fp


@pytest.fixture
async def in_process_workers() -> AsyncIterator[Any]:
    """litellm on the test's own loop, no worker process (tests/fakes/workers.py): for unit
    tests of the transport, `make_transport(..., workers=in_process_workers)`."""
    from tests.fakes.workers import InProcessWorkers  # imports litellm: only where it is used

    workers = InProcessWorkers()
    yield workers
    await workers.aclose()


@pytest.fixture
async def transport(fake_openai, fake_groq, fake_anthropic):
    t = make_transport(fake_openai, fake_groq, fake_anthropic)
    yield t
    await t.aclose()


@pytest.fixture(scope="session", autouse=True)
async def shared_worker_pool() -> AsyncIterator[None]:
    """The session's shared provider worker pool (tests/support/shared_workers.py) stops at
    its end."""
    yield
    await close_shared_workers()


SLOW_TIMEOUT_S = 600  # pyproject's bound is 300 s a test; the slow-marked crash runs get twice


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A slow-marked test (restarts, kill -9, fault runs) gets the longer per-test bound
    unless it names its own."""
    for item in items:
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT_S))


def _dump_stacks_and_tasks(terminal: Any) -> None:
    """pytest-timeout's dump of the threads' stacks, then every task of the running event
    loop with the line it waits at: an async test's hang sits in a task (a teardown, a
    scheduler, a fake's handler), and the main thread's stack shows only the loop's select."""
    _dump_thread_stacks(terminal)
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    for task in asyncio.all_tasks(loop):
        stack = io.StringIO()
        task.print_stack(limit=8, file=stack)
        terminal.sep("~", title=f"Task {task.get_name()}")
        terminal.write(stack.getvalue())


_dump_thread_stacks = pytest_timeout.dump_stacks
pytest_timeout.dump_stacks = _dump_stacks_and_tasks
