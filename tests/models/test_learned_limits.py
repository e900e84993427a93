"""The transport paces itself by the limits providers report, over real HTTP with real litellm.

The fakes enforce a limit the way the providers do and say so in their real rate-limit headers
(no *_RPS ceiling is configured here): the transport must learn the pace from those headers,
wait out a spent window's reset, and let chat go before consolidation.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from models.calls import CallOptions
from models.catalog import load_catalog
from models.policy.pacing import Priority
from models.transport import Transport
from models.types import Outcome
from tests.fakes.providers import Reply
from tests.support.clocks import SettableClock
from tests.support.e2e_bot import wait_until
from tests.support.shared_workers import shared_workers
from tests.support.transport import make_gateways

HI = [{"role": "user", "content": "hi"}]


def _transport(fake_openai, fake_groq, fake_anthropic, **options) -> Transport:
    gateways = make_gateways(fake_openai, fake_groq, fake_anthropic)
    gateways = {
        name: type(g)(g.name, g.protocol, g.api_base, g.keys, None)  # no ceiling: learned only
        for name, g in gateways.items()
    }
    options.setdefault("backoff", ())
    return Transport(load_catalog(), gateways, workers=shared_workers(), **options)


@pytest.mark.parametrize("model", ["gpt-4.1", "claude-haiku-4-5"])
async def test_the_headers_set_the_pace_and_the_provider_never_refuses(
    fake_openai, fake_groq, fake_anthropic, model: str
) -> None:
    fake = fake_openai if model == "gpt-4.1" else fake_anthropic
    fake.enforce_rate_limit(10.0, burst=2.0)  # 600 requests a minute, in slices of a second
    t = _transport(fake_openai, fake_groq, fake_anthropic)
    await t.warm_up()  # the learned pace is under test, not a worker's first start
    # A generous bound: the claim is that nobody is refused, not how fast a loaded machine is.
    results = await asyncio.gather(
        *(t.complete(model, HI, CallOptions(timeout=30)) for _ in range(25))
    )
    assert [r.model_id for r in results] == [model] * 25  # nobody moved down the chain
    assert fake.rate_limited == 0 and len(fake.requests) == 25
    gateway = "openai" if model == "gpt-4.1" else "anthropic"
    learned = t.status()["gateways"][gateway]["queue"]["models"][model]
    assert learned["learned"] and learned["pace_per_s"] == pytest.approx(9.0)  # 0.9 x 600/60
    assert learned["windows"]["requests"]["limit"] == 600
    await t.aclose()


async def test_without_the_learned_pace_the_same_load_is_refused(
    fake_openai, fake_groq, fake_anthropic
) -> None:
    """The control: the same burst sent all at once (what a model-less client does) is what
    the fake answers with 429s, so the test above proves the pacing, not a lenient fake."""
    import aiohttp

    fake_openai.enforce_rate_limit(10.0, burst=2.0)
    body = {"model": "gpt-4.1", "messages": HI}
    headers = {"Authorization": "Bearer sk-x"}
    async with aiohttp.ClientSession() as http:

        async def one() -> int:
            url = fake_openai.base_url + "/chat/completions"
            async with http.post(url, json=body, headers=headers) as resp:
                return resp.status

        statuses = await asyncio.gather(*(one() for _ in range(25)))
    assert statuses.count(429) >= 20 and fake_openai.rate_limited >= 20


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
async def test_a_spent_window_is_waited_out_until_its_reset(
    fake_openai, fake_groq, fake_anthropic, protocol: str
) -> None:
    """remaining = 0 means wait until the reset: the next request waits (on the transport's
    clock) instead of failing or falling back, then goes to the same model."""
    clock = SettableClock(1000.0)

    async def sleep(seconds: float) -> None:
        clock.advance(seconds)
        await asyncio.sleep(0)

    if protocol == "openai":
        fake, model = fake_openai, "gpt-4.1"
        spent = {
            "x-ratelimit-limit-requests": "60",
            "x-ratelimit-remaining-requests": "0",
            "x-ratelimit-reset-requests": "1.5s",
        }
    else:
        fake, model = fake_anthropic, "claude-haiku-4-5"
        reset = (datetime.now(UTC) + timedelta(seconds=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
        spent = {
            "anthropic-ratelimit-requests-limit": "60",
            "anthropic-ratelimit-requests-remaining": "0",
            "anthropic-ratelimit-requests-reset": reset,
        }
    fake.script("*", Reply("that was the last one", headers=spent))
    t = _transport(fake_openai, fake_groq, fake_anthropic, clock=clock, sleep=sleep)
    first = await t.complete(model, HI, CallOptions(timeout=10))
    assert first.model_id == model
    started = clock.now
    second = await t.complete(model, HI, CallOptions(timeout=10))
    assert second.model_id == model and [a.outcome for a in second.attempts] == [Outcome.SUCCESS]
    assert clock.now - started >= 1.5  # the reset was waited for before sending
    assert len(fake.requests) == 2
    await t.aclose()


async def test_a_reset_later_than_the_timeout_moves_on_at_once(
    fake_openai, fake_groq, fake_anthropic
) -> None:
    spent = {
        "x-ratelimit-limit-requests": "60",
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": "6m0s",
    }
    fake_openai.script("gpt-4.1", Reply("last one for six minutes", headers=spent))
    t = _transport(fake_openai, fake_groq, fake_anthropic)
    assert (await t.complete("gpt-4.1", HI, CallOptions(timeout=5))).model_id == "gpt-4.1"
    # gpt-5's chain: gpt-5 -> gpt-5-mini -> gpt-4.1; gpt-4.1 alone has no fallback.
    result = await t.complete("gpt-5-mini", HI, CallOptions(timeout=5))
    assert result.model_id == "gpt-5-mini"  # other models of the gateway are not held back
    with pytest.raises(Exception) as caught:
        await t.complete("gpt-4.1", HI, CallOptions(timeout=5))
    assert [a.detail for a in caught.value.attempts] == ["all keys cooling down"]
    await t.aclose()


async def test_consolidation_yields_to_chat_and_catches_up_when_chat_is_idle(
    fake_openai, fake_groq, fake_anthropic
) -> None:
    fake_openai.enforce_rate_limit(4.0, burst=1.0)
    t = _transport(fake_openai, fake_groq, fake_anthropic)
    await t.complete("gpt-4.1", [{"role": "user", "content": "warm-up"}], CallOptions(timeout=10))

    def ask(text: str, priority: Priority) -> asyncio.Task:
        return asyncio.create_task(
            t.complete(
                "gpt-4.1",
                [{"role": "user", "content": text}],
                CallOptions(timeout=30, user_key=text, priority=priority),
            )
        )

    def jobs_queued_or_sent() -> bool:
        queue = t.status()["gateways"]["openai"]["queue"]
        return queue["waiting_background"] + queue["served"] == 1 + 5  # warm-up and the jobs

    jobs = [ask(f"job {n}", Priority.BACKGROUND) for n in range(5)]
    await wait_until(jobs_queued_or_sent, "the jobs in the queue, before any chat")
    chats = [ask(f"chat {n}", Priority.CHAT) for n in range(5)]
    results = await asyncio.gather(*jobs, *chats)
    assert {r.model_id for r in results} == {"gpt-4.1"}
    order = [r.body["messages"][-1]["content"] for r in fake_openai.requests][1:]
    # The first job may have gone before any chat arrived; then every chat went first.
    first_chat = min(i for i, text in enumerate(order) if text.startswith("chat"))
    assert first_chat <= 1
    assert all(text.startswith("chat") for text in order[first_chat : first_chat + 5])
    assert sorted(order) == sorted([f"job {n}" for n in range(5)] + [f"chat {n}" for n in range(5)])
    assert fake_openai.rate_limited == 0
    await t.aclose()


async def test_groqs_refusal_names_its_per_minute_limit_and_sets_the_pace(
    fake_openai, fake_groq, fake_anthropic
) -> None:
    """Groq's headers give requests per DAY only; its 429 says the per-minute limit in words.
    The slow start lets few requests go before that is known; the refusal then sets the pace,
    and every request is answered (a refused one by the next model of its chain)."""
    fake_groq.enforce_rate_limit(4.0, burst=1.0)
    t = _transport(fake_openai, fake_groq, fake_anthropic, backoff=(0.05,), retry_after_cap=2.0)
    results = await asyncio.gather(
        *(t.complete("qwen3-32b", HI, CallOptions(timeout=20)) for _ in range(12))
    )
    assert len(results) == 12 and all(r.text for r in results)  # everyone answered
    learned = t.status()["gateways"]["groq"]["queue"]["models"]["qwen/qwen3-32b"]
    assert learned["pace_per_s"] == pytest.approx(0.9 * 4.0)  # from "(RPM): Limit 240"
    assert learned["windows"]["requests"]["per_s"] == 86_400  # the header's per-day limit
    # The slow start: few ever met a refusal (one or two per model before its limit was known).
    assert fake_groq.rate_limited <= 4
    await t.aclose()
