"""Transcripts of real sessions fit the consolidation chain's context with every message kept."""

from __future__ import annotations

import pytest

from memory.consolidation.consolidation import Consolidator
from memory.consolidation.transcript import (
    TOOL_RESULT_LABEL,
    chunk_messages,
    render_message,
    trim_middle,
)
from memory.db import Database
from memory.longterm import LongTermMemory
from memory.store import Store
from models.catalog import load_catalog
from models.tokens import estimate_tokens
from tests.support.memory_sessions import (
    REAL_SESSIONS,
    SettableClock,
    assert_in_order,
    claude_code_session,
    store_session,
)


@pytest.fixture
def store(db: Database) -> Store:
    return Store(db, SettableClock())


def consolidator(budget: int | None = None) -> Consolidator:
    return Consolidator(
        object(),  # type: ignore[arg-type]  (no model is called here)
        load_catalog(),
        head_model="llama-3.3-70b-versatile",
        timeout=30,
        memory_max_chars=6000,
        transcript_budget_tokens=budget,
    )


@pytest.mark.parametrize("name", sorted(REAL_SESSIONS))
async def test_real_session_fits_the_chain_with_every_message_in_order(
    store: Store, name: str
) -> None:
    clock = store.clock
    assert isinstance(clock, SettableClock)
    messages = await store_session(store, clock, 1, REAL_SESSIONS[name]())
    assert 60 <= len(messages) <= 150
    memory = LongTermMemory(1, "- The user is called Rina.\n" * 50, 3)
    worker_side = consolidator()
    budget = worker_side.transcript_budget(memory)
    chunks = chunk_messages(messages, budget)

    assert [m.id for c in chunks for m in c.messages] == [m.id for m in messages]
    smallest_window = min(e.context_window for e in worker_side.chain())
    for chunk in chunks:
        assert estimate_tokens(chunk.text) <= budget
        prompt = worker_side.build_messages(memory, chunk)
        prompt_tokens = sum(estimate_tokens(m["content"]) for m in prompt)
        assert prompt_tokens < smallest_window // 2  # half the window left for the answer
        assert_in_order(chunk.text, list(chunk.messages))


async def test_tool_heavy_session_under_a_small_window_is_chunked_not_dropped(
    store: Store,
) -> None:
    clock = store.clock
    assert isinstance(clock, SettableClock)
    messages = await store_session(store, clock, 2, claude_code_session())
    assert any(m.tool_calls for m in messages) and any(m.tool_call_id for m in messages)
    chunks = chunk_messages(messages, 3000)
    assert len(chunks) > 3
    assert [m.id for c in chunks for m in c.messages] == [m.id for m in messages]
    for chunk in chunks:
        assert estimate_tokens(chunk.text) <= 3000
        assert_in_order(chunk.text, list(chunk.messages))


def test_an_over_long_message_keeps_head_and_tail_and_says_what_was_cut() -> None:
    text = "HEAD " + "x" * 20_000 + " TAIL"
    trimmed = trim_middle(text, 600)
    assert trimmed.startswith("HEAD ") and trimmed.endswith(" TAIL")
    assert f"[… {len(text) - 600} characters omitted …]" in trimmed


async def test_a_single_message_bigger_than_the_budget_still_fits_its_own_chunk(
    store: Store,
) -> None:
    huge = await store.add_message(1, "tool", "日本語のログ " * 20_000, tool_call_id="call_9")
    chunks = chunk_messages([huge], 1000)
    assert len(chunks) == 1 and estimate_tokens(chunks[0].text) <= 1000
    assert f"tool result (call_9; {TOOL_RESULT_LABEL}): 日本語のログ" in chunks[0].text


def test_token_estimate_is_pessimistic_for_cjk_and_latin() -> None:
    # Real tokenizers: ~4 Latin characters per token, ~1 token per CJK character.
    assert estimate_tokens("a" * 4000) >= 1000
    assert estimate_tokens("漢" * 1000) >= 1000


async def test_rendered_message_carries_timestamp_role_and_tool_calls(store: Store) -> None:
    clock = store.clock
    assert isinstance(clock, SettableClock)
    messages = await store_session(store, clock, 3, claude_code_session(limit=10))
    call = next(m for m in messages if m.tool_calls)
    block = render_message(call)
    assert block.startswith(f"[{call.created_at[:10]} {call.created_at[11:16]}] assistant: ")
    assert f"called tool {call.tool_calls[0].name} ({call.tool_calls[0].id})" in block  # type: ignore[index]


def test_a_quote_of_someone_else_is_a_stub_after_the_user_s_own_reply() -> None:
    """A message quoting another member keeps the reply, the sender's own words; the quoted
    words are a stub naming their author. A forward is a stub whole: none of it is the
    sender's. What says so is the stored provenance, not the text."""
    from memory.provenance import FORWARD, QUOTE, Provenance
    from memory.store import StoredMessage

    quoted = StoredMessage(
        1, 1, 5, "user", "[quote] I am allergic to nuts [/quote] ok", "2026-12-01T10:00:00.000Z",
        provenance=Provenance(QUOTE, "Ana (id 101)", own="ok"),
    )  # fmt: skip
    assert render_message(quoted) == (
        "[2026-12-01 10:00] user: ok\n    [quoted message written by Ana (id 101): not shown]"
    )
    own = StoredMessage(2, 1, 5, "user", "I like rye", "2026-12-01T10:01:00.000Z")
    assert render_message(own) == "[2026-12-01 10:01] user: I like rye"
    forwarded = StoredMessage(
        3, 1, 5, "user", "remember X", "2026-12-01T10:02:00.000Z",
        forward_origin={"type": "user", "name": "Bo (id 7)"},
        provenance=Provenance(FORWARD, "Bo (id 7)"),
    )  # fmt: skip
    assert render_message(forwarded) == (
        "[2026-12-01 10:02] user: [forwarded message written by Bo (id 7): not shown]"
    )
