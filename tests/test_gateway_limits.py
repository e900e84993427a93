"""Per-gateway token buckets with a bounded wait, and the global retry budget."""

from __future__ import annotations

import asyncio

import pytest

from models.limits import RetryBudget, TokenBucket
from models.types import Outcome, TransportError
from tests.conftest import FakeClock, make_gateways, make_transport
from tests.fakes.providers import Fault

HI = [{"role": "user", "content": "hi"}]


def test_bucket_hands_out_burst_then_says_how_long_until_the_next_token() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate=4.0, burst=2.0, clock=clock)
    assert [bucket.try_take() for _ in range(3)] == [0.0, 0.0, 0.25]
    clock.advance(0.125)
    assert bucket.try_take() == pytest.approx(0.125)
    clock.advance(10.0)
    assert bucket.tokens == 2.0  # never more than the burst, however long it was idle


async def test_waiters_are_served_in_order_and_late_ones_refused() -> None:
    clock = FakeClock()

    async def sleep(seconds: float) -> None:
        clock.advance(seconds)
        await asyncio.sleep(0)

    bucket = TokenBucket(rate=10.0, burst=1.0, clock=clock, sleep=sleep)
    served: list[int] = []

    async def take(n: int) -> None:
        if await bucket.acquire(max_wait=0.35):
            served.append(n)

    await asyncio.gather(*(take(n) for n in range(6)))
    # One token now, then one every 0.1 s: callers 1-3 fit in 0.35 s, 4 and 5 are refused.
    assert served == [0, 1, 2, 3]
    assert clock.now == pytest.approx(1000.3)


async def test_full_bucket_falls_back_to_another_gateway_instead_of_queueing(
    fake_openai, fake_groq, fake_anthropic
) -> None:
    from models.catalog import load_catalog
    from models.transport import Transport

    clock = FakeClock()  # moves only when the transport sleeps
    gateways = make_gateways(fake_openai, fake_groq, fake_anthropic, {"groq": 8.0})

    async def sleep(seconds: float) -> None:  # time passes only when someone waits
        clock.advance(seconds)
        await asyncio.sleep(0)

    t = Transport(load_catalog(), gateways, backoff=(), bucket_wait=0.3, clock=clock, sleep=sleep)
    results = await asyncio.gather(*(t.complete("qwen3-32b", HI, timeout=5) for _ in range(12)))
    # Groq's bucket: 8/s, burst 8/4 = 2. Two take the burst; the next two would get a token
    # within 0.3 s (after 0.125 s and 0.25 s) and queue; the other eight would wait longer,
    # so they fall back to OpenAI at once instead of queueing.
    assert len(fake_groq.requests) == 4
    assert len(fake_openai.requests) == 8
    fell_back = [r for r in results if r.model_id == "gpt-4.1-mini"]
    assert len(fell_back) == 8
    details = {a.detail for r in fell_back for a in r.attempts if a.outcome is Outcome.SKIPPED}
    assert details == {"gateway request budget full"}
    await t.aclose()


async def test_no_provider_sees_more_than_its_bucket(
    fake_openai, fake_groq, fake_anthropic
) -> None:
    rate = 20.0
    t = make_transport(
        fake_openai, fake_groq, fake_anthropic, bucket_burst=1.0, bucket_wait=10.0, backoff=()
    )
    state = t.gateway_state("groq")
    from models.limits import TokenBucket as Bucket

    state.bucket = Bucket(rate, 1.0, t._clock, asyncio.sleep)
    # The first request to a provider does one-time work (litellm's tokenizer and provider
    # modules, the first connection: 0.1-1 s of CPU) while the bucket keeps granting, and the
    # requests granted meanwhile then leave together. The claim is about the pace after that.
    await t.warm_up()
    await t.complete("qwen3-32b", HI, timeout=5)
    fake_groq.requests.clear()
    await asyncio.gather(*(t.complete("qwen3-32b", HI, timeout=5) for _ in range(30)))
    times = sorted(r.at for r in fake_groq.requests)
    assert len(times) == 30
    # In every one-second window: at most rate + burst requests (slowness only spreads them).
    worst = max(sum(1 for u in times if s <= u < s + 1.0) for s in times)
    assert worst <= rate + 1
    await t.aclose()


def test_retry_budget_drains_refills_with_success_and_trickles() -> None:
    clock = FakeClock()
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
    first = await t.complete("llama-3.3-70b-versatile", HI, timeout=5)
    # 1 attempt + 2 budgeted retries on the head, then the walk to qwen3 answers.
    assert [a.model_id for a in first.attempts].count("llama-3.3-70b-versatile") == 3
    assert first.model_id == "qwen3-32b"
    for _ in range(3):
        later = await t.complete("llama-3.3-70b-versatile", HI, timeout=5)
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
        await t.complete("qwen3-32b", HI, timeout=5)  # two successes: one retry earned
    assert t.retry_budget.balance == pytest.approx(1.0)
    fake_groq.script("qwen/qwen3-32b", Fault("server_500"), Fault("server_500"))
    with pytest.raises(TransportError) as caught:
        await t.complete("qwen3-32b", HI, timeout=5, walk_chain=False)
    # One earned retry: two attempts, and the third (which would have succeeded) never sent.
    assert [a.outcome for a in caught.value.attempts] == [Outcome.UNAVAILABLE] * 2
    assert len(fake_groq.requests) == 4
    await t.aclose()
