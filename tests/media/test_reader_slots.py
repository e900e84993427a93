"""The bounded readers' slots (media/document_reader.py): web pages have a share of their own,
and the wait for a slot is bounded — past it a reader is refused ("busy"), which the web tool
returns as a clear tool error, instead of a queue that hangs whoever is at its end.

Real child processes: a child whose request holds SLEEP blocks (a stuck read holding its slot);
any other runs the real document child on the bytes it was sent.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import media.document_reader
from agent.tools.web import WebSettings, WebTools
from media.document_reader import (
    FILE_READERS,
    PAGE_READERS,
    ReaderSlots,
    read_document,
    read_page,
)
from media.documents import DocumentError
from memory.db import Database
from memory.web_calls import WebCalls
from models.types import ToolCall
from primitives.tasks import stop_tasks
from tests.fakes.web import FakeSite
from web.addresses import parse_allowance

_SLEEP_OR_READ = (
    "import io, sys, time\n"
    "data = sys.stdin.buffer.read()\n"
    "if b'SLEEP' in data:\n"
    "    time.sleep(3600)\n"
    "sys.stdin = io.TextIOWrapper(io.BytesIO(data))\n"
    "from media.document_child import main\n"
    "main()\n"
)
PAGE = b"<html><body><article><p>" + b"Slots of their own for pages. " * 20 + b"</p></article>"
# The test's own bound on anything that could hang: a reader without a bound fails here.
TEST_BOUND_S = 30


class Children(list[asyncio.subprocess.Process]):
    """Every reader child started; `started(n)` waits until n have been."""

    def __init__(self) -> None:
        super().__init__()
        self.changed = asyncio.Condition()

    async def started(self, count: int) -> None:
        async with asyncio.timeout(TEST_BOUND_S), self.changed:
            await self.changed.wait_for(lambda: len(self) >= count)


@pytest.fixture
def children(monkeypatch: pytest.MonkeyPatch) -> Children:
    """The reader children the test starts (each killed with its reader's cancel)."""
    monkeypatch.setattr(media.document_reader, "_BOOT", _SLEEP_OR_READ)
    started = Children()
    spawn = asyncio.create_subprocess_exec

    async def watched(*args: Any, **kwargs: Any) -> asyncio.subprocess.Process:
        process = await spawn(*args, **kwargs)
        async with started.changed:
            started.append(process)
            started.changed.notify_all()
        return process

    monkeypatch.setattr(asyncio, "create_subprocess_exec", watched)
    return started


@pytest.fixture
def slots() -> ReaderSlots:
    """One bot's reader slots, shared by every reader of the test as the bot shares them."""
    return ReaderSlots()


@pytest.fixture
async def stuck() -> AsyncIterator[list[asyncio.Task[Any]]]:
    """Readers started by a test to hold slots; cancelled (their children killed) at the end."""
    tasks: list[asyncio.Task[Any]] = []
    yield tasks
    await stop_tasks(tasks)


def _stuck_document(slots: ReaderSlots) -> Any:
    return read_document(
        b"SLEEP", file_name="a.txt", mime_type=None, token_budget=100, timeout=600, slots=slots
    )


async def test_with_every_file_slot_held_a_document_is_refused_busy_and_a_page_still_reads(
    children: Children, stuck: list[asyncio.Task[Any]], slots: ReaderSlots
) -> None:
    stuck.extend(asyncio.create_task(_stuck_document(slots)) for _ in range(FILE_READERS))
    await children.started(FILE_READERS)

    with pytest.raises(DocumentError) as caught:
        async with asyncio.timeout(TEST_BOUND_S):
            await read_document(
                b"hello", file_name="b.txt", mime_type=None, token_budget=100, timeout=30,
                slots=slots, slot_wait=0.3,
            )  # fmt: skip
    assert caught.value.reason == "busy"
    assert len(children) == FILE_READERS  # the refused one started no child

    # A page has its own share: it reads at once while every file slot is held.
    async with asyncio.timeout(TEST_BOUND_S):
        page = await read_page(PAGE, content_type="text/html", kind="html", timeout=30, slots=slots)
    assert "Slots of their own for pages." in page.text

    # A slot that comes free is taken by the next reader.
    stuck[0].cancel()  # its slot comes free: the case tested
    async with asyncio.timeout(TEST_BOUND_S):
        document = await read_document(
            b"hello", file_name="b.txt", mime_type=None, token_budget=100, timeout=30, slots=slots
        )
    assert document.text.strip() == "hello"


async def test_web_read_with_the_page_slots_held_is_a_clear_tool_error(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    children: Children,
    stuck: list[asyncio.Task[Any]],
    slots: ReaderSlots,
) -> None:
    monkeypatch.setattr(media.document_reader, "SLOT_WAIT_SECONDS", 0.3)
    stuck.extend(
        asyncio.create_task(
            read_page(b"SLEEP", content_type="text/html", kind="html", timeout=600, slots=slots)
        )
        for _ in range(PAGE_READERS)
    )
    await children.started(PAGE_READERS)
    db = await Database.open(tmp_path / "db.sqlite3")
    try:
        async with FakeSite() as site:
            settings = WebSettings(
                search_url=None,
                allowance=parse_allowance("127.0.0.1"),
                read_max_chars=15_000,
                daily_calls=10,
            )
            web = WebTools(settings, WebCalls(db), slots)
            call = ToolCall("c1", "web_read", json.dumps({"url": site.url("/article")}))
            async with asyncio.timeout(TEST_BOUND_S):
                outcome = await web.run(1, 1, call)
        assert not outcome.ok
        assert (
            "error:" in outcome.content and "page reader of the bot stayed busy" in outcome.content
        )
    finally:
        await db.close()
