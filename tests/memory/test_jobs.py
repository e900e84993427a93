"""The durable queue and worker: invariants 1, 3, 4, 5 on a real SQLite file.

The model side is a scripted stand-in for the transport (the HTTP path has its own tests in
test_consolidation_http.py); everything of ours — store, queue, commit, worker — is real.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable
from datetime import timedelta

import pytest
import structlog

from memory.consolidation.consolidation import Consolidator
from memory.consolidation.jobs import JobQueue
from memory.consolidation.stats import consolidation_stats
from memory.consolidation.worker import MAX_CONFLICTS_PER_RUN, ConsolidationWorker
from memory.db import Database
from memory.forget import forget_chat
from memory.longterm import MemoryRepository, write_memory
from memory.store import Store, to_iso
from models.calls import CallOptions
from models.catalog import load_catalog
from models.types import (
    Attempt,
    ChatResult,
    Message,
    Outcome,
    Spend,
    ToolCall,
    TransportError,
    Usage,
)
from primitives.clock import utc_now
from tests.support.consolidation_stack import CHAIN
from tests.support.memory_sessions import SettableClock, framed


def save_call(history: str, memory: str) -> ChatResult:
    args = json.dumps({"history_entry": history, "memory_update": memory})
    return ChatResult(
        model_id="",
        text="",
        tool_calls=[ToolCall("call_1", "save_memory", args)],
        finish_reason="tool_calls",
        usage=Usage(1000, 200),
    )


def down(model_id: str) -> TransportError:
    attempt = Attempt(model_id, "groq", Outcome.UNAVAILABLE, "500 server error")
    return TransportError("down", [attempt])


Responder = Callable[[str, list[Message]], ChatResult]
CATALOG = load_catalog()


class ScriptedTransport:
    """Answers per model from a function; records every prompt it was sent."""

    def __init__(self, responder: Responder) -> None:
        self.responder = responder
        self.calls: list[tuple[str, list[Message]]] = []
        self.gate: asyncio.Event | None = None
        self.in_flight = 0
        self.max_in_flight = 0

    async def complete(
        self,
        model_id: str,
        messages: list[Message],
        options: CallOptions,
    ) -> ChatResult:
        assert options.walk_chain is False
        on_spend = options.on_spend
        self.calls.append((model_id, messages))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.gate is not None:
                await self.gate.wait()
            result = self.responder(model_id, messages)
        finally:
            self.in_flight -= 1
        result.model_id = model_id
        if on_spend is not None:  # as the transport tells it: priced from the catalog
            entry = CATALOG.get(model_id)
            tokens = (result.usage.prompt_tokens, result.usage.completion_tokens)
            priced = Usage(*tokens, cost_usd=entry.cost_usd(*tokens))
            on_spend(Spend(model_id, entry.gateway, priced, "success"))
        return result


def remembering(memory_of: Callable[[str], str] | None = None) -> Responder:
    """A model that appends the transcript's first line to whatever memory it was shown."""

    def respond(model_id: str, messages: list[Message]) -> ChatResult:
        user = messages[-1]["content"]
        current = framed(user, "current_memory")
        first_line = framed(user, "transcript").split("\n", 1)[0]
        base = "" if current.startswith("(empty") else current + "\n"
        return save_call(f"[2026-03-01 09:00] {first_line}", base + f"- {first_line}")

    return respond


async def until(predicate: Callable[[], bool], limit_s: float = 10.0) -> None:
    for _ in range(int(limit_s / 0.01)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


@pytest.fixture
def clock() -> SettableClock:
    return SettableClock()


def make_worker(
    db: Database,
    clock: SettableClock,
    transport: ScriptedTransport,
    *,
    delays: tuple[float, ...] = (60, 300, 1800),
    concurrency: int = 2,
    budget: int | None = None,
    window: int | None = None,
    keep_recent: int = 3,
) -> tuple[Store, ConsolidationWorker]:
    store = Store(db, clock, memory_window=window, keep_recent=keep_recent)
    consolidator = Consolidator(
        transport,
        load_catalog(),
        head_model=CHAIN[0],
        timeout=5,
        memory_max_chars=2000,
        transcript_budget_tokens=budget,
    )
    worker = ConsolidationWorker(
        store,
        consolidator,
        retry_delays=delays,
        concurrency=concurrency,
        memory_max_chars=2000,
        clock=clock,
    )
    return store, worker


async def chat_session(store: Store, chat_id: int, texts: list[str]) -> list[int]:
    ids = []
    for i, text in enumerate(texts):
        role = "user" if i % 2 == 0 else "assistant"
        message = await store.add_message(chat_id, role, text, user_id=chat_id)
        ids.append(message.id)
    return ids


async def test_new_enqueues_in_its_transaction_and_skips_empty_sessions(
    db: Database, clock: SettableClock
) -> None:
    store, _ = make_worker(db, clock, ScriptedTransport(remembering()))
    first = await store.start_new_session(1)  # nothing to close yet
    assert first.job_id is None
    empty = await store.start_new_session(1)  # closes an empty session
    assert empty.closed_session_id is not None and empty.job_id is None
    await chat_session(store, 1, ["hello", "hi"])
    result = await store.start_new_session(1)
    assert result.job_id is not None
    job = await JobQueue(store).get(result.job_id)
    assert job is not None and job.state == "pending"
    assert job.session_id == result.closed_session_id


async def test_commit_applies_memory_history_deletion_usage_and_attempts_together(
    db: Database, clock: SettableClock
) -> None:
    transport = ScriptedTransport(remembering())
    store, worker = make_worker(db, clock, transport)
    old_ids = await chat_session(store, 7, ["I am Rina, I use Go", "Noted, Rina"])
    result = await store.start_new_session(7)
    kept = await store.add_message(7, "user", "this is the new session", user_id=7)

    assert await worker.run_due() == 1

    repo = MemoryRepository(db)
    memory = await repo.get(7)
    assert "I am Rina, I use Go" in memory.content and memory.version == 1
    history = await repo.history(7)
    assert len(history) == 1 and history[0].model_id == CHAIN[0]
    assert history[0].entry.startswith("[2026-03-01 09:00]")
    assert await store.messages_by_ids(old_ids) == []
    assert [m.id for m in await store.session_messages(result.new_session_id)] == [kept.id]
    job = await JobQueue(store).get(result.job_id or 0)
    assert job is not None and job.state == "done" and job.saved_by_model == CHAIN[0]
    usage = await db.fetchall("SELECT * FROM usage WHERE purpose = 'consolidation'")
    assert len(usage) == 1 and usage[0]["user_id"] == 7
    # 1000 prompt tokens at $0.59/M + 200 completion at $0.79/M (catalog prices).
    assert usage[0]["cost_usd"] == pytest.approx((1000 * 0.59 + 200 * 0.79) / 1e6)
    attempts = await db.fetchall("SELECT model_id, outcome FROM consolidation_attempts")
    assert [(a["model_id"], a["outcome"]) for a in attempts] == [(CHAIN[0], "saved")]


async def test_every_model_failing_keeps_messages_and_follows_the_retry_schedule(
    db: Database, clock: SettableClock
) -> None:
    healthy = {"value": False}

    def respond(model_id: str, messages: list[Message]) -> ChatResult:
        if not healthy["value"]:
            raise down(model_id)
        return remembering()(model_id, messages)

    transport = ScriptedTransport(respond)
    store, worker = make_worker(db, clock, transport, delays=(60, 300))
    ids = await chat_session(store, 3, ["keep me", "kept"])
    job_id = (await store.start_new_session(3)).job_id or 0
    queue = JobQueue(store)

    expected_waits = [60, 300, 300]  # the last delay repeats
    for run, wait in enumerate(expected_waits, start=1):
        assert await worker.run_due() == 1
        job = await queue.get(job_id)
        assert job is not None and job.state == "pending" and job.attempts == run
        assert job.next_attempt_at == to_iso(clock.now + timedelta(seconds=wait))
        assert job.last_error is not None and "claude-haiku-4-5: unavailable" in job.last_error
        assert len(await store.messages_by_ids(ids)) == 2  # nothing deleted
        assert await worker.run_due() == 0  # not due yet
        clock.advance(wait)

    assert len(transport.calls) == 3 * len(CHAIN)
    healthy["value"] = True
    assert await worker.run_due() == 1
    job = await queue.get(job_id)
    assert job is not None and job.state == "done" and job.attempts == 0
    assert await store.messages_by_ids(ids) == []
    outcomes = await db.fetchall(
        "SELECT outcome, COUNT(*) AS n FROM consolidation_attempts GROUP BY outcome"
    )
    assert {r["outcome"]: r["n"] for r in outcomes} == {"unavailable": 15, "saved": 1}


async def test_two_quick_news_run_in_order_each_from_the_previous_memory(
    db: Database, clock: SettableClock
) -> None:
    transport = ScriptedTransport(remembering())
    store, worker = make_worker(db, clock, transport, concurrency=4)
    await chat_session(store, 5, ["first session fact", "ok"])
    await store.start_new_session(5)
    await chat_session(store, 5, ["second session fact", "ok"])
    await store.start_new_session(5)

    await worker.run_due()

    prompts = [m[-1]["content"] for _, m in transport.calls]
    assert len(prompts) == 2
    assert "first session fact" in framed(prompts[0], "transcript")
    # The second job saw the first job's committed memory, and kept it.
    assert "- [2026-03-01 09:00] user: first session fact" in framed(prompts[1], "current_memory")
    memory = await MemoryRepository(db).get(5)
    assert memory.version == 2
    assert memory.content.index("first session fact") < memory.content.index("second session")


async def test_a_later_job_waits_while_the_earlier_one_of_its_chat_waits_for_retry(
    db: Database, clock: SettableClock
) -> None:
    def respond(model_id: str, messages: list[Message]) -> ChatResult:
        if "poisoned" in messages[-1]["content"]:
            raise down(model_id)
        return remembering()(model_id, messages)

    transport = ScriptedTransport(respond)
    store, worker = make_worker(db, clock, transport, concurrency=4)
    await chat_session(store, 8, ["poisoned first session", "ok"])
    first = (await store.start_new_session(8)).job_id
    await chat_session(store, 8, ["second session", "ok"])
    second = (await store.start_new_session(8)).job_id
    await chat_session(store, 9, ["another chat", "ok"])
    other = (await store.start_new_session(9)).job_id

    await worker.run_due()
    queue = JobQueue(store)
    states = {j: (await queue.get(j or 0)).state for j in (first, second, other)}  # type: ignore[union-attr]
    assert states == {first: "pending", second: "pending", other: "done"}
    assert not any("second session" in m[-1]["content"] for _, m in transport.calls)


async def test_forget_during_consolidation_discards_it_for_good(
    db: Database, clock: SettableClock
) -> None:
    transport = ScriptedTransport(remembering())
    store, worker = make_worker(db, clock, transport)
    repo = MemoryRepository(db)
    await chat_session(store, 4, ["old secret", "ok"])
    await store.start_new_session(4)
    await worker.run_due()
    assert "old secret" in await repo.content(4)

    await chat_session(store, 4, ["new topic", "ok"])
    await store.start_new_session(4)
    transport.gate = asyncio.Event()
    run = asyncio.create_task(worker.run_due())
    await until(lambda: len(transport.calls) >= 2)
    await forget_chat(db, 4, to_iso(clock.now))  # while the model is "thinking"
    transport.gate.set()
    await run
    calls = len(transport.calls)
    clock.advance(3600)
    await worker.run_due()

    # The run that was in flight was refused at commit and dropped: not redone, not queued.
    memory = await repo.get(4)
    assert memory.content == "" and await repo.history(4) == []
    assert len(transport.calls) == calls == 2
    assert await db.fetchall("SELECT * FROM consolidation_jobs WHERE state != 'done'") == []
    assert await db.fetchall("SELECT * FROM messages WHERE chat_id = 4") == []
    # The model was paid for the discarded run: its spend is in the ledger.
    spent = await db.fetchall("SELECT * FROM usage WHERE purpose = 'consolidation'")
    assert len(spent) == 2


async def test_messages_that_vanished_meanwhile_are_not_claimed_by_the_commit(
    db: Database, clock: SettableClock
) -> None:
    transport = ScriptedTransport(remembering())
    store, worker = make_worker(db, clock, transport)
    ids = await chat_session(store, 6, ["one", "two", "three", "four"])
    await store.start_new_session(6)
    transport.gate = asyncio.Event()
    run = asyncio.create_task(worker.run_due())
    await until(lambda: len(transport.calls) >= 1)

    def write(conn: sqlite3.Connection) -> None:  # e.g. an operator removed a message by hand
        conn.execute("DELETE FROM messages WHERE id = ?", (ids[0],))

    await db.run_in_transaction(write)
    transport.gate.set()
    await run

    history = await MemoryRepository(db).history(6)
    assert len(history) == 1 and history[0].message_count == 3
    assert "one" not in framed(transport.calls[-1][1][-1]["content"], "transcript")
    assert await store.messages_by_ids(ids) == []


async def test_start_resets_interrupted_jobs_and_resumes_them(
    db: Database, clock: SettableClock
) -> None:
    transport = ScriptedTransport(remembering())
    store, worker = make_worker(db, clock, transport)
    await chat_session(store, 2, ["survives restarts", "ok"])
    job_id = (await store.start_new_session(2)).job_id or 0
    queue = JobQueue(store)
    assert [j.id for j in await queue.claim_due(to_iso(clock.now), 5)] == [job_id]
    assert await worker.run_due() == 0  # a running job is not claimed twice

    await worker.start()  # what a restart does
    try:
        for _ in range(200):
            job = await queue.get(job_id)
            if job is not None and job.state == "done":
                break
            await asyncio.sleep(0.02)
    finally:
        await worker.stop(grace=1)
    job = await queue.get(job_id)
    assert job is not None and job.state == "done"
    assert len(await MemoryRepository(db).history(2)) == 1


async def test_stop_leaves_a_hung_job_to_resume(db: Database, clock: SettableClock) -> None:
    transport = ScriptedTransport(remembering())
    transport.gate = asyncio.Event()
    store, worker = make_worker(db, clock, transport)
    ids = await chat_session(store, 11, ["hangs", "ok"])
    job_id = (await store.start_new_session(11)).job_id or 0
    await worker.start()
    await until(lambda: len(transport.calls) >= 1)
    await worker.stop(grace=0.05)
    job = await JobQueue(store).get(job_id)
    assert job is not None and job.state == "running"
    assert len(await store.messages_by_ids(ids)) == 2

    transport.gate.set()
    _, again = make_worker(db, clock, transport)
    await again.start()
    try:
        for _ in range(200):
            job = await JobQueue(store).get(job_id)
            if job is not None and job.state == "done":
                break
            await asyncio.sleep(0.02)
    finally:
        await again.stop(grace=1)
    assert job is not None and job.state == "done"
    assert await store.messages_by_ids(ids) == []


async def test_concurrency_is_bounded_across_chats(db: Database, clock: SettableClock) -> None:
    transport = ScriptedTransport(remembering())
    transport.gate = asyncio.Event()
    store, worker = make_worker(db, clock, transport, concurrency=2)
    for chat_id in (21, 22, 23, 24):
        await chat_session(store, chat_id, [f"chat {chat_id}", "ok"])
        await store.start_new_session(chat_id)
    run = asyncio.create_task(worker.run_due())
    await until(lambda: len(transport.calls) >= 2)
    # Two slots, both busy: the queue itself shows two claimed and two left waiting (a claim
    # precedes its call, so a third call would show as a third running job first).
    states = await db.fetchall("SELECT state FROM consolidation_jobs ORDER BY id")
    assert sorted(r["state"] for r in states) == ["pending", "pending", "running", "running"]
    assert len(transport.calls) == 2
    transport.gate.set()
    assert await run == 4
    assert transport.max_in_flight == 2


async def test_window_consolidates_all_but_the_recent_tail_once(
    db: Database, clock: SettableClock
) -> None:
    transport = ScriptedTransport(remembering())
    store, worker = make_worker(db, clock, transport, window=6, keep_recent=3)
    ids = await chat_session(store, 12, [f"message {i}" for i in range(7)])
    jobs = await db.fetchall("SELECT * FROM consolidation_jobs")
    assert len(jobs) == 1 and jobs[0]["kind"] == "window"
    ids += await chat_session(store, 12, ["message 7", "message 8"])
    assert len(await db.fetchall("SELECT * FROM consolidation_jobs")) == 1  # one at a time

    await worker.run_due()
    session = await store.active_session(12)
    remaining = [m.content for m in await store.session_messages(session)]
    # The job covered messages 0..3 (all but the last 3 of the 7 at trigger time).
    assert remaining == ["message 4", "message 5", "message 6", "message 7", "message 8"]
    history = await MemoryRepository(db).history(12)
    assert len(history) == 1 and history[0].message_count == 4


async def test_a_session_too_big_for_one_request_is_committed_chunk_by_chunk(
    db: Database, clock: SettableClock
) -> None:
    transport = ScriptedTransport(remembering())
    store, worker = make_worker(db, clock, transport, budget=60)
    texts = [f"paragraph {i}: " + "lorem ipsum dolor sit amet " * 3 for i in range(10)]
    ids = await chat_session(store, 13, texts)
    await store.start_new_session(13)
    await worker.run_due()

    history = await MemoryRepository(db).history(13)
    assert len(history) == len(transport.calls) > 1
    transcripts = [framed(m[-1]["content"], "transcript") for _, m in transport.calls]
    seen = [i for t in transcripts for i in range(10) if f"paragraph {i}:" in t]
    assert seen == list(range(10))  # every message once, in order
    assert sum(h.message_count for h in history) == 10
    assert await store.messages_by_ids(ids) == []


async def test_window_never_cuts_between_a_tool_call_and_its_results(
    db: Database, clock: SettableClock
) -> None:
    transport = ScriptedTransport(remembering())
    store, worker = make_worker(db, clock, transport, window=6, keep_recent=3)
    await chat_session(store, 14, ["q1", "a1", "q2"])
    call = ToolCall("call_1", "search", '{"q": "x"}')
    await store.add_message(14, "assistant", "", tool_calls=[call])
    await store.add_message(14, "tool", "result 1", tool_call_id="call_1")
    await store.add_message(14, "tool", "result 2", tool_call_id="call_1")
    await store.add_message(14, "assistant", "final answer")  # 7th message: over the window
    await worker.run_due()
    session = await store.active_session(14)
    assert [m.content for m in await store.session_messages(session)] == ["final answer"]


async def test_stats_show_queue_depth_failures_and_outcomes_per_model(
    db: Database, clock: SettableClock
) -> None:
    healthy = {"value": False}

    def respond(model_id: str, messages: list[Message]) -> ChatResult:
        if not healthy["value"]:
            raise down(model_id)
        return remembering()(model_id, messages)

    store, worker = make_worker(db, clock, ScriptedTransport(respond))
    await chat_session(store, 15, ["a", "b"])
    await store.start_new_session(15)
    await chat_session(store, 16, ["c", "d"])
    await store.start_new_session(16)
    await worker.run_due()

    stats = await consolidation_stats(db)
    assert (stats.pending, stats.running, stats.done, stats.failed_awaiting_retry) == (2, 0, 0, 2)
    assert stats.oldest_pending_at == to_iso(clock.now)
    assert stats.outcomes == {model: {"unavailable": 2} for model in CHAIN}

    healthy["value"] = True
    clock.advance(60)
    await worker.run_due()
    stats = await consolidation_stats(db)
    assert (stats.pending, stats.done, stats.failed_awaiting_retry) == (0, 2, 0)
    assert stats.oldest_pending_at is None
    assert stats.outcomes[CHAIN[0]] == {"unavailable": 2, "saved": 2}
    assert stats.mean_attempts_per_saved == stats.max_attempts_per_saved == 6


async def test_the_worker_sleeps_while_a_later_job_waits_behind_a_running_one(
    db: Database, clock: SettableClock
) -> None:
    transport = ScriptedTransport(remembering())
    transport.gate = asyncio.Event()
    store, worker = make_worker(db, clock, transport)
    claims = 0
    claim_due = worker.queue.claim_due

    async def counting_claim_due(now: str, limit: int) -> list:
        nonlocal claims
        claims += 1
        return await claim_due(now, limit)

    worker.queue.claim_due = counting_claim_due  # type: ignore[method-assign]
    await chat_session(store, 17, ["first", "ok"])
    await store.start_new_session(17)
    await chat_session(store, 17, ["second", "ok"])
    store.on_job_enqueued = worker.notify
    await worker.start()
    try:
        await until(lambda: len(transport.calls) == 1 and worker.passes == 1)
        passes = worker.passes
        await store.start_new_session(17)  # due now, but must wait for the first job
        # The enqueue wakes the worker; wait for that look at the queue, then see what it
        # decided: nothing to launch, and a long sleep rather than a short poll.
        await until(lambda: worker.passes > passes)
        assert worker.last_idle_s == worker.idle_poll_seconds  # no busy polling while blocked
        assert claims == 2 and len(transport.calls) == 1
        transport.gate.set()
        await until(lambda: len(transport.calls) == 2)
    finally:
        transport.gate.set()
        await worker.stop(grace=1)


class MemoryMovingTransport(ScriptedTransport):
    """While each answer is on its way, the chat's memory is rewritten by something that is not
    a replayable edit (as another writer would): every commit meets a moved version."""

    def __init__(self, responder: Responder, db: Database, chat_id: int) -> None:
        super().__init__(responder)
        self.db, self.chat_id = db, chat_id

    async def complete(
        self, model_id: str, messages: list[Message], options: CallOptions
    ) -> ChatResult:
        if len(self.calls) > 2 * MAX_CONFLICTS_PER_RUN:
            # Released for "now", the job was claimed and paid for again, endlessly. Fail the
            # run instead (the worker treats it as a crash, which does wait) and let it show.
            raise RuntimeError("run again at once")

        def rewrite(conn: sqlite3.Connection) -> None:
            write_memory(conn, self.chat_id, f"moved {len(self.calls)}", over_budget=False,
                         now=to_iso(utc_now()))  # fmt: skip

        await self.db.run_in_transaction(rewrite)
        return await super().complete(model_id, messages, options)


async def test_a_job_whose_memory_keeps_changing_waits_before_it_runs_again(
    db: Database, clock: SettableClock
) -> None:
    """After MAX_CONFLICTS_PER_RUN conflicts the job is given back for the first retry delay,
    not for "now": at now it would be claimed and run (paid) again by the very next look."""
    transport = MemoryMovingTransport(remembering(), db, 5)
    store, worker = make_worker(db, clock, transport, delays=(60, 300))
    await chat_session(store, 5, ["my memory keeps moving", "so it does"])
    job_id = (await store.start_new_session(5)).job_id or 0

    assert await worker.run_due() == 1
    assert len(transport.calls) == MAX_CONFLICTS_PER_RUN
    job = await JobQueue(store).get(job_id)
    assert job is not None and job.state == "pending"
    assert job.next_attempt_at == to_iso(clock.now + timedelta(seconds=60))
    assert await worker.run_due() == 0  # not due: nothing more is paid for now
    assert len(transport.calls) == MAX_CONFLICTS_PER_RUN
    clock.advance(60)
    assert await worker.run_due() == 1


@pytest.mark.parametrize("delays", [(0.0,), (60.0, 0.0)])
async def test_a_zero_retry_delay_is_refused(
    db: Database, clock: SettableClock, delays: tuple[float, ...]
) -> None:
    with pytest.raises(ValueError, match="more than 0"):
        make_worker(db, clock, ScriptedTransport(remembering()), delays=delays)


async def test_a_jobs_log_lines_carry_its_chat_and_job_id(db: Database) -> None:
    """The worker binds the job's chat and id once, in the job's own task: the lines of the
    run carry them without each call naming them."""
    store, worker = make_worker(db, SettableClock(), ScriptedTransport(remembering()))
    await chat_session(store, 7, ["my cousin lives in Quillabamba", "noted"])
    await store.start_new_session(7)
    with structlog.testing.capture_logs(
        processors=[structlog.contextvars.merge_contextvars]
    ) as logs:
        assert await worker.run_due() == 1
    [job] = await db.fetchall("SELECT id FROM consolidation_jobs")
    lines = [e for e in logs if e["event"].startswith("consolidation_")]
    events = {e["event"] for e in lines}
    assert {"consolidation_job_started", "consolidation_chunk_committed"} <= events
    assert all((e["chat_id"], e["job_id"]) == (7, job["id"]) for e in lines), lines
