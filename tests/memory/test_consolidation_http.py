"""Each failure mode of each layer, over HTTP: the memory is saved by a later model of the
chain, nothing is lost, and the log names the model that failed and how."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from memory.longterm import write_memory
from memory.store import to_iso
from models.calls import CallOptions
from primitives.tasks import stop_task
from tests.fakes.providers import Fault, Reply, Step, ToolCallReply
from tests.support.consolidation_stack import (
    CHAIN,
    GOOD_ARGS,
    WIRE,
    Stack,
    anthropic_first_catalog,
    closed_session,
    good_call,
    open_stack,
)
from tests.support.e2e_bot import wait_until


@pytest.fixture(autouse=True)
def plain_structlog() -> None:
    # Another test may have configured caching loggers; capture_logs needs fresh ones.
    structlog.reset_defaults()


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    s = await open_stack(tmp_path / "c.sqlite3", attempt_timeout=2.0)
    yield s
    await s.close()


def failures(logs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["model"], e["outcome"]) for e in logs if e["event"] == "consolidation_model_failed"]


async def consolidate_once(stack: Stack, chat_id: int = 1) -> tuple[list[dict[str, Any]], str]:
    ids, job_id = await closed_session(stack, chat_id)
    with capture_logs() as logs:
        await stack.worker.run_due()
    job = await stack.queue.get(job_id)
    assert job is not None and job.state == "done", job
    assert await stack.store.messages_by_ids(ids) == []  # consolidated, then truncated
    history = await stack.repo.history(chat_id)
    assert len(history) == 1 and history[0].entry == GOOD_ARGS["history_entry"]
    assert (await stack.repo.get(chat_id)).content == GOOD_ARGS["memory_update"]
    return logs, history[0].model_id


HEAD = CHAIN[0]

# (fault on the head model, outcomes the log may give it). Faults are the model's default, so
# the transport's own retries on that model all fail too.
HTTP_FAULTS: dict[str, tuple[Step, set[str]]] = {
    "429 with Retry-After": (Fault("rate_limit_429", retry_after=1), {"rate_limit"}),
    "Groq per-day 429": (Fault("groq_tpd_429"), {"quota"}),
    "500": (Fault("server_500"), {"unavailable"}),
    "502 HTML": (Fault("bad_gateway_502"), {"unavailable"}),
    "Cloudflare 524 HTML": (Fault("cloudflare_524"), {"unavailable", "timeout"}),
    "Groq tool_use_failed": (Fault("tool_use_failed_400"), {"bad_request"}),
    "Throttling inside 200": (Fault("throttling_in_200"), {"rate_limit", "unavailable"}),
    "Arrearage inside 200": (Fault("arrearage_in_200"), {"quota"}),
    "Gemini nested 429": (Fault("gemini_429"), {"rate_limit"}),
    "empty 200": (Fault("empty_200"), {"empty"}),
    "connection dropped": (Fault("disconnect"), {"unavailable"}),
    "hang past the timeout": (Fault("hang"), {"timeout"}),
}
# Billing is the account's (the whole key rests); rate limits are per model, so a 429 on the
# head leaves the key free for the next Groq model.
GATEWAY_WIDE = {"Arrearage inside 200"}
TASK_FAILURES: dict[str, tuple[Step, set[str]]] = {
    "text reply instead of the tool": (
        Reply("Summary: Rina moves billing to PostgreSQL."),
        {"no_tool_call"},
    ),
    "another tool called": (
        ToolCallReply(name="search_web", arguments={"q": "x"}),
        {"no_tool_call"},
    ),
    "invalid JSON arguments": (
        ToolCallReply(arguments='{"history_entry": "[2026-03-01] x", "memory_update": '),
        {"invalid_json"},
    ),
    "object-valued fields": (
        ToolCallReply(arguments={"history_entry": {"text": "x"}, "memory_update": {"name": "R"}}),
        {"invalid_arguments"},
    ),
    "missing field": (
        ToolCallReply(arguments={"history_entry": "[2026-03-01 09:00] x"}),
        {"invalid_arguments"},
    ),
    "empty memory update": (good_call(memory_update="  "), {"empty_memory"}),
    "empty history entry": (good_call(history_entry=""), {"empty_history"}),
}


@pytest.mark.parametrize("name", sorted(HTTP_FAULTS) + sorted(TASK_FAILURES))
async def test_failure_on_the_head_model_is_saved_by_the_next(stack: Stack, name: str) -> None:
    step, outcomes = HTTP_FAULTS.get(name) or TASK_FAILURES[name]
    stack.groq.set_default(WIRE[HEAD], step)

    def write(conn: sqlite3.Connection) -> None:  # memory exists, so an empty update is invalid
        conn.execute("INSERT INTO chats(chat_id, created_at, updated_at) VALUES (1, 'x', 'x')")
        write_memory(conn, 1, "- Name: Rina", over_budget=False, now=to_iso(stack.clock()))

    await stack.db.run_in_transaction(write)

    logs, saved_by = await consolidate_once(stack)

    failed = failures(logs)
    assert failed[0][0] == HEAD and failed[0][1] in outcomes, failed
    if name in GATEWAY_WIDE:
        # A billing error is the Groq account's: the transport cools its key,
        # its other models are skipped without a request, and OpenAI saves.
        assert saved_by == "gpt-4.1-mini"
        assert failed[1:] == [(CHAIN[1], "skipped"), (CHAIN[2], "skipped")]
        assert stack.requests_for(CHAIN[1]) == stack.requests_for(CHAIN[2]) == []
    else:
        assert saved_by == CHAIN[1]
        assert len(failed) == 1
    attempts = await stack.db.fetchall(
        "SELECT model_id, outcome FROM consolidation_attempts ORDER BY id"
    )
    assert [(a["model_id"], a["outcome"]) for a in attempts] == [
        *failed,
        (saved_by, "saved"),
    ]


@pytest.mark.parametrize(
    ("kind", "outcomes"),
    [("overloaded_529", {"unavailable"}), ("anthropic_rate_limit_429", {"rate_limit"})],
)
async def test_anthropic_faults_fall_through_to_the_next_gateway(
    tmp_path: Path, kind: str, outcomes: set[str]
) -> None:
    stack = await open_stack(
        tmp_path / "a.sqlite3", catalog=anthropic_first_catalog(), head="claude-haiku-4-5"
    )
    try:
        stack.anthropic.set_default("*", Fault(kind, retry_after=1))
        logs, saved_by = await consolidate_once(stack)
    finally:
        await stack.close()
    assert saved_by == "llama-3.3-70b-versatile"
    failed = failures(logs)
    assert len(failed) == 1 and failed[0][0] == "claude-haiku-4-5" and failed[0][1] in outcomes


async def test_a_401_on_the_groq_gateway_moves_to_openai_and_leaks_no_key(
    tmp_path: Path,
) -> None:
    stack = await open_stack(tmp_path / "k.sqlite3")
    try:
        stack.groq.set_default("*", Fault("unauthorized_401"))
        logs, saved_by = await consolidate_once(stack)
        job = (await stack.db.fetchall("SELECT last_error FROM consolidation_jobs"))[0]
        details = await stack.db.fetchall("SELECT detail FROM consolidation_attempts")
    finally:
        await stack.close()
    assert saved_by == "gpt-4.1-mini"
    assert [m for m, _ in failures(logs)] == CHAIN[:3]
    assert {o for _, o in failures(logs)} <= {"auth", "skipped"}
    text = repr(logs) + repr([dict(r) for r in details]) + repr(dict(job))
    assert "gsk_test_groq_key_0001" not in text and "0001" not in text


FORCED = {"type": "function", "function": {"name": "save_memory"}}


@pytest.mark.parametrize(
    ("model", "refusal", "forced", "auto"),
    [
        ("llama-3.3-70b-versatile", "groq_value", FORCED, "auto"),
        ("gpt-4.1-mini", "openai_param", FORCED, "auto"),
        (
            "claude-haiku-4-5",
            "anthropic_thinking",
            {"type": "tool", "name": "save_memory"},
            {"type": "auto"},
        ),
    ],
)
async def test_a_refused_forced_tool_choice_is_retried_with_auto_on_the_same_model(
    tmp_path: Path, model: str, refusal: str, forced: Any, auto: Any
) -> None:
    # Each gateway answers every forced request with its real refusal (tests/fakes/providers.py
    # TOOL_CHOICE_REFUSALS); the same model then saves with automatic choice, nothing fails.
    stack = await open_stack(tmp_path / "c.sqlite3", head=model)
    try:
        gateway = stack.consolidator.catalog.get(model).gateway
        provider = {"groq": stack.groq, "openai": stack.openai, "anthropic": stack.anthropic}
        provider[gateway].refuse_forced_tool_choice[WIRE[model]] = refusal
        logs, saved_by = await consolidate_once(stack)
        choices = [r.body["tool_choice"] for r in stack.requests_for(model)]
        others = [r for p in stack.providers for r in p.requests if r.model != WIRE[model]]
    finally:
        await stack.close()
    assert saved_by == model
    assert failures(logs) == []
    assert choices == [forced, auto]
    assert any(e["event"] == "consolidation_tool_choice_rejected" for e in logs)
    assert others == []  # the chain did not move on


async def test_a_model_failing_the_forced_call_is_not_asked_again_with_auto(stack: Stack) -> None:
    # Groq's tool_use_failed means the choice was accepted and the model failed it: the
    # chain moves on rather than asking the same model to answer freely.
    stack.groq.set_default(WIRE[HEAD], Fault("tool_use_failed_400"))
    _, saved_by = await consolidate_once(stack)
    assert saved_by == CHAIN[1]
    assert [r.body["tool_choice"] for r in stack.requests_for(HEAD)] == [FORCED]


async def test_two_task_failures_then_a_transport_failure_then_saved(stack: Stack) -> None:
    """The seed's production log: three models fail three different ways, the fourth saves."""
    stack.groq.set_default(WIRE[CHAIN[0]], Fault("tool_use_failed_400"))
    stack.groq.set_default(WIRE[CHAIN[1]], Reply("I summarised it for you."))
    stack.groq.set_default(WIRE[CHAIN[2]], Fault("server_500"))
    logs, saved_by = await consolidate_once(stack)
    assert saved_by == "gpt-4.1-mini"
    assert failures(logs) == [
        (CHAIN[0], "bad_request"),
        (CHAIN[1], "no_tool_call"),
        (CHAIN[2], "unavailable"),
    ]
    # Each model was asked with the tool forced, on its own gateway and protocol.
    for model in CHAIN[:4]:
        body = stack.requests_for(model)[0].body
        assert body["tool_choice"] == {"type": "function", "function": {"name": "save_memory"}}
        assert body["tools"][0]["function"]["name"] == "save_memory"
    assert stack.requests_for("claude-haiku-4-5") == []


async def test_every_model_failing_keeps_everything_and_recovers_later(stack: Stack) -> None:
    for provider in stack.providers:
        provider.set_default("*", Fault("server_500"))
    ids, job_id = await closed_session(stack, 5)
    with capture_logs() as logs:
        await stack.worker.run_due()
    job = await stack.queue.get(job_id)
    assert job is not None and job.state == "pending" and job.attempts == 1
    assert job.last_error is not None and all(m in job.last_error for m in CHAIN)
    assert len(await stack.store.messages_by_ids(ids)) == 4
    assert await stack.repo.history(5) == []
    assert [m for m, _ in failures(logs)] == CHAIN
    rescheduled = [e for e in logs if e["event"] == "consolidation_job_failed"]
    assert rescheduled[0]["retry_in_s"] == 60 and rescheduled[0]["messages_kept"] == 4

    await stack.worker.run_due()  # not due yet: nothing is sent
    assert (await stack.queue.get(job_id)).attempts == 1  # type: ignore[union-attr]

    for provider in stack.providers:
        provider.set_default("*", good_call())
    stack.clock.advance(61)
    with capture_logs() as logs:
        await stack.worker.run_due()
    job = await stack.queue.get(job_id)
    assert job is not None and job.state == "done" and job.saved_by_model == CHAIN[0]
    assert await stack.store.messages_by_ids(ids) == []
    assert [e["model"] for e in logs if e["event"] == "consolidation_saved"] == [CHAIN[0]]


async def test_consolidation_usage_is_priced_from_the_catalog(stack: Stack) -> None:
    stack.groq.set_default(WIRE[HEAD], Reply("no tool", prompt_tokens=500, completion_tokens=50))
    await consolidate_once(stack)
    rows = await stack.db.fetchall(
        "SELECT model_id, prompt_tokens, completion_tokens, cost_usd FROM usage "
        "WHERE purpose = 'consolidation' ORDER BY id"
    )
    by_model = {r["model_id"]: r for r in rows}
    # The failed text reply was billed too: background work is never free.
    assert by_model[HEAD]["cost_usd"] == pytest.approx((500 * 0.59 + 50 * 0.79) / 1e6)
    saver = by_model[CHAIN[1]]
    assert saver["prompt_tokens"] == 900
    expected = (saver["prompt_tokens"] * 0.29 + saver["completion_tokens"] * 0.59) / 1e6
    assert saver["cost_usd"] == pytest.approx(expected)


async def test_time_spent_waiting_behind_chat_is_not_the_models_timeout(tmp_path: Path) -> None:
    # Consolidation yields to chat in the gateway's queue (models/policy/pacing.py). Its timeout
    # bounds the model's answer, not the wait: here it waits ~1.1 s behind a chat at the learned
    # pace of 0.9/s, then the model answers in 1.5 s; 2.6 s in all, past the 2 s timeout.
    stack = await open_stack(
        tmp_path / "q.sqlite3", head="gpt-4.1-mini", attempt_timeout=2.0, latency=1.5
    )
    try:
        stack.openai.enforce_rate_limit(1.0, burst=2.0)  # 60 a minute, said in the headers
        await stack.transport.complete(
            "gpt-4.1-mini", [{"role": "user", "content": "hi"}], CallOptions(timeout=10)
        )
        _, job_id = await closed_session(stack, 1)
        chats = [
            asyncio.create_task(
                stack.transport.complete(
                    "gpt-4.1-mini",
                    [{"role": "user", "content": f"chat {n}"}],
                    CallOptions(timeout=10, user_key=f"user {n}"),
                )
            )
            for n in range(1)
        ]
        await asyncio.sleep(0.05)  # the chats are in the queue first
        with capture_logs() as logs:
            await stack.worker.run_due()
        await asyncio.gather(*chats)

        job = await stack.queue.get(job_id)
        assert job is not None and job.state == "done", job
        assert failures(logs) == []  # before: ('gpt-4.1-mini', 'timeout'), 'no answer within 2s'
        saved = [e for e in logs if e["event"] == "consolidation_saved"]
        assert [e["model"] for e in saved] == ["gpt-4.1-mini"]
        sent = [r.body["messages"][-1]["content"] for r in stack.openai.requests[1:]]
        assert sent[0] == "chat 0"  # chat went first
        assert stack.openai.rate_limited == 0
    finally:
        await stack.close()


async def test_a_consolidation_stopped_while_the_provider_holds_its_request_is_billed_once(
    stack: Stack,
) -> None:
    """The worker stops (its grace over) while the head model holds the request: the provider
    had the prompt and may bill it, so the cut-off request is in the ledger, once, as the
    transport estimated it; the job is left to resume and its messages stay."""
    stack.groq.set_default(WIRE[HEAD], Fault("hang"))
    ids, job_id = await closed_session(stack, 9)
    run = asyncio.create_task(stack.worker.run_due())
    await wait_until(lambda: bool(stack.requests_for(HEAD)), "the request to reach the provider")
    await stack.worker.stop(grace=0)
    await stop_task(run)
    rows = await stack.db.fetchall(
        "SELECT chat_id, user_id, model_id, prompt_tokens, completion_tokens, cost_usd, "
        "estimated FROM usage WHERE purpose = 'consolidation'"
    )
    assert [dict(r) for r in rows] == [
        {
            "chat_id": 9,
            "user_id": 9,
            "model_id": HEAD,
            "prompt_tokens": rows[0]["prompt_tokens"],
            "completion_tokens": 0,
            "cost_usd": pytest.approx(rows[0]["prompt_tokens"] * 0.59 / 1e6),
            "estimated": 1,
        }
    ]
    assert rows[0]["prompt_tokens"] > 100  # the whole prompt as sent, counted
    assert len(await stack.store.messages_by_ids(ids)) == 4
    job = await stack.queue.get(job_id)
    assert job is not None and job.state == "running"  # reset to pending at the next start
