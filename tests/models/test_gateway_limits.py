"""Per-gateway ceilings that make requests wait (never fail), and the global retry budget."""

from __future__ import annotations

import asyncio

import pytest

from models.calls import CallOptions
from models.catalog import load_catalog
from models.policy.breakers import RetryBudget
from models.policy.token_bucket import TokenBucket
from models.transport import Transport
from models.types import Outcome, TransportError
from tests.fakes.providers import Fault
from tests.support.clocks import SettableClock
from tests.support.shared_workers import shared_workers
from tests.support.transport import make_gateways, make_transport

HI = [{"role": "user", "content": "hi"}]


def test_bucket_hands_out_burst_then_says_how_long_until_the_next_token() -> None:
    clock = SettableClock(1000.0)
    bucket = TokenBucket(rate=4.0, burst=2.0, clock=clock)
    assert [bucket.try_take() for _ in range(3)] == [0.0, 0.0, 0.25]
    clock.advance(0.125)
    assert bucket.try_take() == pytest.approx(0.125)
    clock.advance(10.0)
    assert bucket.tokens == 2.0  # never more than the burst, however long it was idle


async def test_a_full_ceiling_makes_requests_wait_never_fall_back(
    fake_openai, fake_groq, fake_anthropic
) -> None:
    """Our own ceiling (GROQ_RPS) is a pace, not a refusal: every request waits for its turn on
    the model asked for, none skips down the chain."""
    gateways = make_gateways(fake_openai, fake_groq, fake_anthropic, {"groq": 8.0})
    t = Transport(load_catalog(), gateways, backoff=(), workers=shared_workers())
    await t.warm_up()  # the pace is under test, not a worker's first start
    results = await asyncio.gather(
        *(t.complete("qwen3-32b", HI, CallOptions(timeout=5)) for _ in range(12))
    )
    assert [r.model_id for r in results] == ["qwen3-32b"] * 12
    assert all(a.outcome is Outcome.SUCCESS for r in results for a in r.attempts)
    assert len(fake_groq.requests) == 12 and fake_openai.requests == []
    queue = t.status()["gateways"]["groq"]["queue"]
    # 8/s with a burst of 2: all but the first two had to queue, and were served.
    assert queue["served"] == 12 and queue["queued"] >= 10 and queue["waiting"] == 0
    assert queue["refused"] == queue["gave_up"] == 0
    assert sum(1 for r in results if r.queued_s > 0) >= 10
    await t.aclose()


async def test_a_turn_beyond_the_timeout_is_not_waited_for(
    fake_openai, fake_groq, fake_anthropic
) -> None:
    """Only when the pace puts a request's turn past its timeout does it move on, as a
    timeout would, and that is never recorded against the model's or gateway's health."""
    gateways = make_gateways(fake_openai, fake_groq, fake_anthropic, {"groq": 1.0})
    t = Transport(load_catalog(), gateways, backoff=(), bucket_burst=1.0, workers=shared_workers())
    await t.warm_up()  # the pace is under test, not a worker's first start
    results = await asyncio.gather(
        *(t.complete("qwen3-32b", HI, CallOptions(timeout=3)) for _ in range(5))
    )
    on_groq = [r for r in results if r.model_id == "qwen3-32b"]
    moved = [r for r in results if r.model_id != "qwen3-32b"]
    # One now, then one a second: two more come within 3 s (with 20 % to spare); two not.
    assert len(on_groq) == 3 and len(moved) == 2
    for result in moved:
        skipped = [a for a in result.attempts if a.outcome is Outcome.SKIPPED]
        assert skipped[0].detail == "no turn on the gateway within 3s"
        assert result.model_id == "gpt-4.1-mini"  # the first model on another gateway
    status = t.status()
    assert status["gateways"]["groq"]["breaker"] == "closed"
    assert status["gateways"]["groq"]["consecutive_failures"] == 0
    assert status["models"].get("qwen3-32b", {}).get("consecutive_failures", 0) == 0
    assert status["gateways"]["groq"]["queue"]["refused"] >= 2
    await t.aclose()


async def test_no_provider_sees_more_than_its_ceiling(
    fake_openai, fake_groq, fake_anthropic
) -> None:
    rate = 20.0
    gateways = make_gateways(fake_openai, fake_groq, fake_anthropic, {"groq": rate})
    t = Transport(load_catalog(), gateways, bucket_burst=1.0, backoff=(), workers=shared_workers())
    await asyncio.gather(*(t.complete("qwen3-32b", HI, CallOptions(timeout=5)) for _ in range(30)))
    times = sorted(r.at for r in fake_groq.requests)
    assert len(times) == 30
    # In every one-second window: at most rate + burst requests (slowness only spreads them).
    worst = max(sum(1 for u in times if s <= u < s + 1.0) for s in times)
    assert worst <= rate + 1
    await t.aclose()


def test_retry_budget_drains_refills_with_success_and_trickles() -> None:
    clock = SettableClock(1000.0)
    budget = RetryBudget(initial=2, cap=3, ratio=0.5, per_second=0.1, clock=clock)
    assert [budget.try_spend() for _ in range(3)] == [True, True, False]
    budget.record_success()
    budget.record_success()
    assert budget.try_spend() and not budget.try_spend()
    clock.advance(10)  # 0.1 per second
    assert budget.try_spend()
    clock.advance(1000)
    assert budget.balance == 3  # capped
    assert (budget.spent, budget.denied) == (4, 2)


async def test_empty_budget_leaves_first_attempt_and_chain_walk_only(
    fake_openai, fake_groq, fake_anthropic
) -> None:
    t = make_transport(
        fake_openai, fake_groq, fake_anthropic,
        backoff=(0.0, 0.0, 0.0), retry_budget_initial=2, retry_budget_ratio=0.0,
        retry_budget_per_second=0.0, breaker_threshold=100, gateway_breaker_threshold=100,
    )  # fmt: skip
    fake_groq.set_default("llama-3.3-70b-versatile", Fault("server_500"))
    first = await t.complete("llama-3.3-70b-versatile", HI, CallOptions(timeout=5))
    # 1 attempt + 2 budgeted retries on the head, then the walk to qwen3 answers.
    assert [a.model_id for a in first.attempts].count("llama-3.3-70b-versatile") == 3
    assert first.model_id == "qwen3-32b"
    for _ in range(3):
        later = await t.complete("llama-3.3-70b-versatile", HI, CallOptions(timeout=5))
        heads = [a for a in later.attempts if a.model_id == "llama-3.3-70b-versatile"]
        assert len(heads) == 1 and later.model_id == "qwen3-32b"
    assert len(fake_groq.requests) == (3 + 1) + 3 * (1 + 1)  # no storm against the broken head
    assert t.status()["retry_budget"]["denied"] >= 4
    await t.aclose()


async def test_successes_earn_retries_back(fake_openai, fake_groq, fake_anthropic) -> None:
    t = make_transport(
        fake_openai, fake_groq, fake_anthropic,
        backoff=(0.0, 0.0, 0.0), retry_budget_initial=0, retry_budget_ratio=0.5,
        retry_budget_per_second=0.0, breaker_threshold=100,
    )  # fmt: skip
    for _ in range(2):
        await t.complete("qwen3-32b", HI, CallOptions(timeout=5))  # two successes: one retry earned
    assert t.policy.retry_budget.balance == pytest.approx(1.0)
    fake_groq.script("qwen/qwen3-32b", Fault("server_500"), Fault("server_500"))
    with pytest.raises(TransportError) as caught:
        await t.complete("qwen3-32b", HI, CallOptions(timeout=5, walk_chain=False))
    # One earned retry: two attempts, and the third (which would have succeeded) never sent.
    assert [a.outcome for a in caught.value.attempts] == [Outcome.UNAVAILABLE] * 2
    assert len(fake_groq.requests) == 4
    await t.aclose()
