"""The chat tools against the real store and the real consolidation stack over HTTP.

The race the issue names: a consolidation starts from memory version N; while its model is
still answering, the chat model remembers (or forgets) a fact, making version N+1. The job's
commit must keep that write — not overwrite it, and not bring a forgotten fact back.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from pathlib import Path

from agent.tools.memory import ChatTools, format_hits
from memory.forget import forget_chat
from memory.recall.search import Recall
from memory.recall.terms import query_terms
from models.types import ToolCall
from tests.fakes.providers import ToolCallReply
from tests.support.consolidation_stack import Stack, closed_session, open_stack
from tests.support.memory_sessions import oasst_conversations

CHAT = 42


def call(name: str, **args: object) -> ToolCall:
    return ToolCall(f"call_{name}", name, json.dumps(args, ensure_ascii=False))


async def _start_slow_job(stack: Stack, memory_update: str) -> asyncio.Task[int]:
    """A closed session whose consolidation answers after a pause; returns once the model
    has the request (so the job has read the memory version it will commit against)."""
    stack.groq.set_default(
        "*",
        ToolCallReply(
            arguments={"history_entry": "[2026-03-01 09:00] x", "memory_update": memory_update},
            delay=0.5,
        ),
    )
    await closed_session(stack, CHAT)
    task = asyncio.create_task(stack.worker.run_due())
    for _ in range(500):
        if stack.groq.requests:
            return task
        await asyncio.sleep(0.01)
    raise AssertionError("the consolidation request never arrived")


async def test_a_fact_remembered_during_a_consolidation_survives_its_commit(
    tmp_path: Path,
) -> None:
    stack = await open_stack(tmp_path / "db.sqlite3")
    try:
        tools = ChatTools(stack.db, memory_max_chars=6000)
        job = await _start_slow_job(stack, "- Name: Rina")
        outcome = await tools.run(CHAT, call("remember", fact="Daughter's name is Ana"))
        assert outcome.ok and outcome.receipt is not None
        await job

        memory = await stack.repo.get(CHAT)
        assert memory.content.splitlines() == ["- Name: Rina", "- Daughter's name is Ana"]
        # Replayed, not re-run: one consolidation request, and the edit log is emptied.
        assert len(stack.groq.requests) == 1
        assert await stack.db.fetchall("SELECT id FROM memory_edits") == []
        assert len(await stack.repo.history(CHAT)) == 1
    finally:
        await stack.close()


async def test_a_fact_forgotten_during_a_consolidation_does_not_come_back(
    tmp_path: Path,
) -> None:
    stack = await open_stack(tmp_path / "db.sqlite3")
    try:
        tools = ChatTools(stack.db, memory_max_chars=6000)
        await tools.run(CHAT, call("remember", fact="The user smokes"))
        # The slow job read the memory with the fact and copies it (reworded) into its result.
        job = await _start_slow_job(stack, "- Name: Rina\n- Smokes: the user smokes")
        outcome = await tools.run(CHAT, call("forget_fact", fact="the user smokes"))
        assert outcome.receipt is not None and outcome.receipt.text == "The user smokes"
        await job
        memory = await stack.repo.get(CHAT)
        assert memory.content == "- Name: Rina"
        # The words the user asked to forget are not kept anywhere for the replay either.
        assert await stack.db.fetchall("SELECT id FROM memory_edits") == []
    finally:
        await stack.close()


async def test_edits_are_kept_only_while_a_consolidation_runs(tmp_path: Path) -> None:
    stack = await open_stack(tmp_path / "db.sqlite3")
    try:
        tools = ChatTools(stack.db, memory_max_chars=6000)
        await tools.run(CHAT, call("remember", fact="Lives in Porto"))
        await tools.run(CHAT, call("forget_fact", fact="Lives in Porto"))
        assert await stack.db.fetchall("SELECT id FROM memory_edits") == []
        job = await _start_slow_job(stack, "- Name: Rina")
        await tools.run(CHAT, call("remember", fact="Has a cat"))
        rows = await stack.db.fetchall("SELECT kind, fact FROM memory_edits")
        assert [(r["kind"], r["fact"]) for r in rows] == [("remember", "Has a cat")]
        await job
        assert await stack.db.fetchall("SELECT id FROM memory_edits") == []
    finally:
        await stack.close()


async def test_a_forget_during_a_consolidation_discards_it_and_the_tool_edits(
    tmp_path: Path,
) -> None:
    """/forget while a consolidation runs: the job is dropped at its commit (not replayed, not
    run again from the cleared memory), and the tools' edits log is gone with the memory."""
    stack = await open_stack(tmp_path / "db.sqlite3")
    try:
        tools = ChatTools(stack.db, memory_max_chars=6000)
        await tools.run(CHAT, call("remember", fact="The user smokes"))
        job = await _start_slow_job(stack, "- The user smokes\n- Name: Rina")
        await tools.run(CHAT, call("remember", fact="Likes tea"))
        await forget_chat(stack.db, CHAT, "2026-03-01T09:00:00.000Z")
        await job
        assert len(stack.groq.requests) == 1  # discarded, never run again
        assert (await stack.repo.get(CHAT)).content == ""
        assert await stack.db.fetchall("SELECT * FROM memory_edits") == []
        assert await stack.db.fetchall("SELECT * FROM history_entries") == []
    finally:
        await stack.close()


async def test_remember_respects_memory_max_chars_and_duplicates(tmp_path: Path) -> None:
    stack = await open_stack(tmp_path / "db.sqlite3")
    try:
        tools = ChatTools(stack.db, memory_max_chars=500)
        first = await tools.run(CHAT, call("remember", fact="a" * 400))
        assert first.ok and first.receipt is not None
        again = await tools.run(CHAT, call("remember", fact="A" * 400 + "."))
        assert again.ok and again.receipt is None and "already in memory" in again.content
        over = await tools.run(CHAT, call("remember", fact="b" * 200))
        assert not over.ok and over.receipt is None
        assert "over its limit of 500" in over.content and "forget_fact" in over.content
        assert (await stack.repo.get(CHAT)).content == "- " + "a" * 400
        too_long = await tools.run(CHAT, call("remember", fact="c" * 501))
        assert not too_long.ok and "under 500 characters" in too_long.content
    finally:
        await stack.close()


async def test_bad_arguments_get_an_answer_the_model_can_act_on(tmp_path: Path) -> None:
    stack = await open_stack(tmp_path / "db.sqlite3")
    try:
        tools = ChatTools(stack.db, memory_max_chars=6000)
        broken = await tools.run(CHAT, ToolCall("c1", "remember", '{"fact": '))
        assert not broken.ok and "not valid JSON" in broken.content
        empty = await tools.run(CHAT, call("remember", fact="  \n "))
        assert not empty.ok and "non-empty" in empty.content
        unknown = await tools.run(CHAT, call("save_memory", history_entry="x"))
        assert not unknown.ok and (
            "cancel_reminder, forget_fact, list_reminders, recall, remember, schedule_reminder"
            in unknown.content
        )
        missing = await tools.run(CHAT, call("forget_fact", fact="never said this"))
        assert not missing.ok and "nothing was removed" in missing.content
        for n in range(4):
            await tools.run(CHAT, call("remember", fact=f"Project Atlas milestone {n} is due"))
        vague = await tools.run(CHAT, call("forget_fact", fact="Project Atlas milestone"))
        assert not vague.ok and "4 lines match" in vague.content
        assert len((await stack.repo.get(CHAT)).content.splitlines()) == 4
        limit = await tools.run(CHAT, call("recall", query="Atlas", limit=99))
        assert limit.ok
        nul = await tools.run(CHAT, call("recall", query="\x00\x00\x00"))  # "\u0000" in JSON
        assert nul.ok and nul.content.startswith("no earlier conversation matches")
    finally:
        await stack.close()


async def test_multiline_facts_become_one_line(tmp_path: Path) -> None:
    stack = await open_stack(tmp_path / "db.sqlite3")
    try:
        tools = ChatTools(stack.db, memory_max_chars=6000)
        outcome = await tools.run(CHAT, call("remember", fact="Likes\n## tea\x00 and\tcoffee"))
        assert (await stack.repo.get(CHAT)).content == "- Likes ## tea and coffee"
        assert outcome.receipt is not None and outcome.receipt.text == "Likes ## tea and coffee"
    finally:
        await stack.close()


def keys(query: str) -> list[str]:
    return [term.key for term in query_terms(query)]


def test_query_terms_cut_cjk_at_particles_and_drop_function_words() -> None:
    assert keys("What did we decide about the trips to Porto?") == ["trip", "porto"]
    assert keys("東京の旅行予算は？") == ["東京", "旅行", "行予", "予算"]
    assert keys("我们讨论了北京") == ["们讨", "论了", "了北", "北京"]
    # The question's own words are not search terms; a word is stemmed in the language the
    # query's function words show (Portuguese here), and keeps its written form beside it.
    assert keys("kemarin kita bahas Honjou ya?") == ["honjou"]
    [lisboa] = query_terms("lembra do que falamos sobre Lisboa?")
    assert lisboa.forms[:2] == (("lisbo", 1.0), ("lisboa", 1.0))
    assert keys("2023 年に 42 人") == ["2023", "42"]


async def test_recall_ranks_history_and_unconsolidated_messages_on_one_scale(
    tmp_path: Path,
) -> None:
    """Real conversations in Chinese, Japanese, Korean and German: all but one stored as history
    entries, the last still as messages. A CJK term of each entry finds that entry first; words
    of the pending conversation find its message, except when the caller says the message is
    already in the prompt."""
    stack = await open_stack(tmp_path / "db.sqlite3")
    try:
        sessions = oasst_conversations(("zh", "ja", "ko", "de"), limit=6)
        now = "2026-03-01T09:00:00.000Z"
        *consolidated, pending = sessions

        def write(conn: sqlite3.Connection) -> None:
            for i, session in enumerate(consolidated):
                conn.execute(
                    "INSERT INTO history_entries(chat_id, session_id, entry, model_id, "
                    "first_message_at, created_at) VALUES (?, ?, ?, 'm', ?, ?)",
                    (CHAT, i + 1, " ".join(m.content for m in session)[:600],
                     session[0].at.isoformat(), now),
                )  # fmt: skip

        await stack.db.run_in_transaction(write)
        stored = [
            await stack.store.add_message(CHAT, m.role, m.content, user_id=CHAT) for m in pending
        ]
        recall = Recall(stack.db)
        checked = 0
        for session in consolidated:
            run = re.search(r"[\u3040-\u30ff\u4e00-\u9fff\uac00-\ud7af]{4,}", session[0].content)
            if run is None:
                continue
            term = run.group(0)[:4]
            hits = await recall.search(CHAT, term)
            assert hits[0].source == "history" and term in hits[0].text
            assert hits[0].at == session[0].at.isoformat()
            checked += 1
        assert checked >= 3

        query = " ".join([w for w in pending[0].content.split() if len(w) >= 6][:3])
        hits = await recall.search(CHAT, query)
        assert (hits[0].source, hits[0].ref_id) == ("message", stored[0].id)
        excluded = await recall.search(CHAT, query, exclude_message_ids=[m.id for m in stored])
        assert all(h.source == "history" for h in excluded)
        rendered = format_hits(query, hits).split("\n")
        assert rendered[0] == f"{len(hits)} result(s) for {query!r}, most relevant first:"
        assert "(the user's own words, not summarised yet)" in rendered[1]
    finally:
        await stack.close()
