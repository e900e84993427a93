"""Real sessions consolidated over HTTP: the transcript the model received (read back from the
fake provider's recorded request) holds every message, in order, with its timestamp."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from models.catalog import Catalog, load_catalog
from tests.support.consolidation_stack import CHAIN, WIRE, Stack, open_stack
from tests.support.memory_sessions import (
    REAL_SESSIONS,
    SettableClock,
    assert_in_order,
    store_session,
)


def small_window_catalog(window: int) -> Catalog:
    entries = [replace(e, context_window=window) for e in load_catalog().entries.values()]
    return Catalog.build(entries)


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    s = await open_stack(tmp_path / "r.sqlite3")
    yield s
    await s.close()


async def load(stack: Stack, chat_id: int, name: str) -> list:
    clock = SettableClock()
    stack.store.clock = clock
    stored = await store_session(stack.store, clock, chat_id, REAL_SESSIONS[name]())
    stack.store.clock = stack.clock
    return stored


@pytest.mark.parametrize("name", sorted(REAL_SESSIONS))
async def test_real_session_reaches_the_model_whole_and_in_order(stack: Stack, name: str) -> None:
    stored = await load(stack, 1, name)
    assert 60 <= len(stored) <= 150
    await stack.store.start_new_session(1)
    await stack.worker.run_due()

    requests = stack.requests_for(CHAIN[0])
    assert len(requests) == 1  # fits one request of the chain's smallest window
    transcript = requests[0].body["messages"][-1]["content"]
    assert_in_order(transcript, stored)
    assert await stack.store.messages_by_ids([m.id for m in stored]) == []
    assert len(await stack.repo.history(1)) == 1


async def test_tool_heavy_session_over_a_small_window_goes_chunk_by_chunk(
    tmp_path: Path,
) -> None:
    stack = await open_stack(tmp_path / "w.sqlite3", catalog=small_window_catalog(16_000))
    try:
        stored = await load(stack, 2, "claude_code")
        await stack.store.start_new_session(2)
        await stack.worker.run_due()
        requests = stack.requests_for(CHAIN[0])
        history = await stack.repo.history(2)
        remaining = await stack.store.messages_by_ids([m.id for m in stored])
    finally:
        await stack.close()

    assert len(requests) > 1 and len(history) == len(requests)
    assert remaining == []
    assert sum(h.message_count for h in history) == len(stored)
    position = 0
    for request, entry in zip(requests, history, strict=True):
        part = stored[position : position + entry.message_count]
        assert_in_order(request.body["messages"][-1]["content"], part)
        position += entry.message_count
        assert len(str(request.body)) // 4 < 16_000  # even by a crude count it fits
    # Each chunk started from the memory the previous chunk saved.
    assert all("(empty" not in r.body["messages"][-1]["content"] for r in requests[1:])
    assert WIRE[CHAIN[0]] == requests[0].model
