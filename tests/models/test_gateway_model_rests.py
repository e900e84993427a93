"""Rate limits rest a key for one model; quota and rejected keys rest the whole key.

Providers count request and token rate limits per model, and bill per account. So a 429 for
llama-3.3-70b-versatile must not keep qwen3-32b (same gateway, same key) from being asked,
while an unpaid bill or an invalid key must stop every model on that key. Real litellm over
HTTP against the fake providers, one Groq key (position 0).
"""

from __future__ import annotations

import pytest

from models.calls import CallOptions
from models.policy.keys import KeyRing
from models.types import Outcome, TransportError
from tests.fakes.providers import Fault, Reply
from tests.support.clocks import SettableClock
from tests.support.transport import TEST_KEYS, make_transport

HI = [{"role": "user", "content": "hi"}]
A = "llama-3.3-70b-versatile"  # chain: A -> qwen3-32b -> llama-4-scout -> gpt-4.1-mini
B = "qwen3-32b"
B_WIRE = "qwen/qwen3-32b"
GROQ_KEY = TEST_KEYS["groq"]

RATE_LIMITS = {
    "Groq's 429 with Retry-After": Fault("rate_limit_429", retry_after=60),
    "throttling inside 200": Fault("throttling_in_200"),
    "Gemini nested 429": Fault("gemini_429"),
}
# (OpenAI's insufficient_quota, which Groq never sends, rests the key too: test_gateway_keys.)
ACCOUNT_WIDE = {
    "Arrearage inside 200": (Fault("arrearage_in_200"), Outcome.QUOTA, "quota"),
    "401": (Fault("unauthorized_401"), Outcome.AUTH, "auth"),
}


def _rate_limited_transport(fake_openai, fake_groq, fake_anthropic):
    # No phase-1 retries and a long rest, so what happens next depends only on the rest's scope.
    return make_transport(
        fake_openai, fake_groq, fake_anthropic, backoff=(), rate_limit_cooldown=60.0
    )


@pytest.mark.parametrize("name", sorted(RATE_LIMITS))
async def test_rate_limit_on_one_model_leaves_the_key_to_the_others(
    fake_openai, fake_groq, fake_anthropic, name: str
) -> None:
    t = _rate_limited_transport(fake_openai, fake_groq, fake_anthropic)
    fake_groq.script(A, RATE_LIMITS[name])

    result = await t.complete(A, HI, CallOptions(timeout=5))
    assert [(a.model_id, a.outcome, a.key_index) for a in result.attempts] == [
        (A, Outcome.RATE_LIMIT, 0),
        (B, Outcome.SUCCESS, 0),
    ]
    # B on its own: key 0 is used, not skipped.
    result = await t.complete(B, HI, CallOptions(timeout=5, walk_chain=False))
    assert result.model_id == B
    # A itself rests on key 0: skipped without a request, B answers.
    result = await t.complete(A, HI, CallOptions(timeout=5))
    assert [a.outcome for a in result.attempts] == [Outcome.SKIPPED, Outcome.SUCCESS]
    assert [(r.model, r.api_key) for r in fake_groq.requests] == [
        (A, GROQ_KEY),
        (B_WIRE, GROQ_KEY),
        (B_WIRE, GROQ_KEY),
        (B_WIRE, GROQ_KEY),
    ]
    assert fake_openai.requests == []

    key0 = t.status()["gateways"]["groq"]["keys"][0]
    assert key0["available"] and key0["reason"] == ""
    assert list(key0["model_rests"]) == [A]
    assert key0["model_rests"][A]["reason"] == "rate_limit"
    assert key0["model_rests"][A]["cooling_s"] > 20  # Gemini asks for 26 s
    await t.aclose()


@pytest.mark.parametrize("name", sorted(ACCOUNT_WIDE))
async def test_quota_or_auth_failure_on_one_model_rests_the_key_for_all(
    fake_openai, fake_groq, fake_anthropic, name: str
) -> None:
    t = _rate_limited_transport(fake_openai, fake_groq, fake_anthropic)
    fault, outcome, reason = ACCOUNT_WIDE[name]
    fake_groq.script(A, fault)

    result = await t.complete(A, HI, CallOptions(timeout=5))
    assert result.model_id == "gpt-4.1-mini"
    assert [a.outcome for a in result.attempts] == [
        outcome,
        Outcome.SKIPPED,
        Outcome.SKIPPED,
        Outcome.SUCCESS,
    ]
    with pytest.raises(TransportError) as caught:
        await t.complete(B, HI, CallOptions(timeout=5, walk_chain=False))
    assert [a.outcome for a in caught.value.attempts] == [Outcome.SKIPPED]
    assert [r.model for r in fake_groq.requests] == [A]  # nothing else reached Groq

    key0 = t.status()["gateways"]["groq"]["keys"][0]
    assert not key0["available"] and key0["reason"] == reason
    assert key0["model_rests"] == {}
    await t.aclose()


async def test_spent_window_in_success_headers_rests_only_that_model(
    fake_openai, fake_groq, fake_anthropic
) -> None:
    t = make_transport(fake_openai, fake_groq, fake_anthropic)
    spent = {"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "45s"}
    fake_groq.script(A, Reply("last one for now", headers=spent))

    assert (await t.complete(A, HI, CallOptions(timeout=5))).model_id == A
    result = await t.complete(A, HI, CallOptions(timeout=5))
    assert [(a.model_id, a.outcome) for a in result.attempts] == [
        (A, Outcome.SKIPPED),
        (B, Outcome.SUCCESS),
    ]
    assert [r.model for r in fake_groq.requests] == [A, B_WIRE]
    rest = t.status()["gateways"]["groq"]["keys"][0]["model_rests"][A]
    assert rest["reason"] == "rate_limit_window_spent"
    await t.aclose()


async def test_other_model_uses_the_key_while_a_bare_429_waits_out_its_backoff(
    fake_openai, fake_groq, fake_anthropic
) -> None:
    """A bare 429 (Anthropic's, without retry-after) rests the key for Sonnet exactly as long
    as our backoff; Haiku meanwhile is served on the same key."""
    sonnet, haiku = "claude-sonnet-4-5", "claude-haiku-4-5"
    clock = SettableClock(1000.0)
    during_wait: list[str] = []
    t = None

    async def sleep(seconds: float) -> None:
        if seconds >= 30.0 and t is not None:  # A's backoff: another chat asks B meanwhile
            answer = await t.complete(haiku, HI, CallOptions(timeout=5, walk_chain=False))
            during_wait.append(answer.model_id)
        clock.advance(seconds)

    t = make_transport(
        fake_openai, fake_groq, fake_anthropic, backoff=(30.0,), sleep=sleep, clock=clock
    )
    fake_anthropic.script(sonnet, Fault("anthropic_rate_limit_429"))
    result = await t.complete(sonnet, HI, CallOptions(timeout=5, walk_chain=False))
    assert [(a.outcome, a.key_index) for a in result.attempts] == [
        (Outcome.RATE_LIMIT, 0),
        (Outcome.SUCCESS, 0),
    ]
    assert during_wait == [haiku]
    assert [r.model for r in fake_anthropic.requests] == [sonnet, haiku, sonnet]
    await t.aclose()


def test_model_rests_expire_and_leave_the_status() -> None:
    clock = SettableClock(1000.0)
    ring = KeyRing("groq", ("k0", "k1"), clock)
    assert ring.cool(0, 10.0, "rate_limit", model="m1")
    assert not ring.cool(0, 5.0, "rate_limit", model="m1")  # already resting: log once
    assert ring.pick("m1") == (1, "k1")
    assert ring.pick("m1") == (1, "k1")  # key 0 stays skipped for m1
    assert ring.pick("m2") == (0, "k0")  # and serves m2
    ring.cool(1, 4.0, "rate_limit", model="m1")
    assert ring.pick("m1") is None
    assert ring.status()[0]["model_rests"] == {"m1": {"cooling_s": 10.0, "reason": "rate_limit"}}
    clock.advance(10.0)
    assert ring.pick("m1") is not None
    assert [s["model_rests"] for s in ring.status()] == [{}, {}]
