"""Shared fixtures. The litellm flags must be set before anything imports litellm."""

from __future__ import annotations

import asyncio
import io
import os

from primitives.litellm_env import LITELLM_FLAGS

os.environ.update(LITELLM_FLAGS)

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_timeout
from telegram import Bot

from models.worker.pool import WORKER, WorkerSettings
from tests.fakes.providers import FakeProvider
from tests.fakes.telegram import FakeTelegram

TG_TOKEN = "123456:TEST-TOKEN"


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


# Keys the fakes see; tests assert on them (and that they never reach logs).
TEST_KEYS = {
    "openai": "sk-test-openai-0001",
    "groq": "gsk_test_groq_0001",
    "anthropic": "sk-ant-test-0001",
}


def make_gateways(
    openai: FakeProvider,
    groq: FakeProvider,
    anthropic: FakeProvider,
    rps: dict[str, float] | None = None,
):
    """Gateways over the three fakes, one test key each (requests per second per gateway)."""
    rps = rps or {}
    from models.gateways import Gateway

    fakes = {"openai": openai, "groq": groq, "anthropic": anthropic}
    return {
        name: Gateway(name, name, fp.base_url, (TEST_KEYS[name],), rps.get(name, 50.0))
        for name, fp in fakes.items()
    }


def make_transport(openai: FakeProvider, groq: FakeProvider, anthropic: FakeProvider, **options):
    """A Transport over the three fakes with the default catalog and fast backoff."""
    from models.catalog import load_catalog
    from models.transport import Transport

    options.setdefault("backoff", (0.01, 0.02, 0.04))
    options.setdefault("retry_after_cap", 0.5)
    return Transport(load_catalog(), make_gateways(openai, groq, anthropic), **options)


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


@pytest.fixture(autouse=True)
async def one_provider_worker_between_tests() -> AsyncIterator[None]:
    """The provider worker pool is one per process, on the run's one loop. A test that
    builds the bot here (`prepare`) configures it from the machine (2 workers on 2 CPUs), and
    under load the pool then grows a second worker on its own: the next test would start with
    a pool it did not ask for. Each test starts from the default, one worker at most. The
    extra ones are stopped on the loop (`stop`), never by closing their sockets behind it: the
    loop would go on watching a descriptor number the next socket then reuses."""
    yield
    WORKER.configure(WorkerSettings())
    for extra in WORKER.workers[1:]:
        WORKER.workers.remove(extra)
        await extra.stop()


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
