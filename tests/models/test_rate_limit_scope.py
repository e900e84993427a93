"""Each provider's real 429 (and its kin): what it amounts to, and what rests afterwards.

Groq's per-minute 429 ends with an upgrade link to ".../settings/billing"; read as free text it
looks like an unpaid bill, which would rest the whole Groq key and skip qwen3 and llama-4-scout
on the same key with it. The verdict comes from the structured fields first (code, retry-after,
"per minute"), and only the (key, model) rests for a limit the provider counts per model. Real
litellm over HTTP against the fake Groq gateway, one key.
"""

from __future__ import annotations

import pytest

from models.calls import CallOptions
from models.types import Outcome, TransportError
from tests.fakes.providers import Fault
from tests.support.transport import TEST_KEYS, make_transport

HI = [{"role": "user", "content": "hi"}]
A = "llama-3.3-70b-versatile"  # chain: A -> qwen3-32b -> llama-4-scout -> gpt-4.1-mini -> haiku
B, B_WIRE = "qwen3-32b", "qwen/qwen3-32b"
C, C_WIRE = "llama-4-scout-17b-16e-instruct", "meta-llama/llama-4-scout-17b-16e-instruct"
GROQ_KEY = TEST_KEYS["groq"]

# body served for A -> (outcome, what rests: "model" = (key, A) only, "key" = whole key,
# None = nothing; the shortest rest in seconds when something rests)
BODIES: dict[str, tuple[Fault, Outcome, str | None, float]] = {
    "Groq 429 TPM (billing link inside)": (
        Fault("groq_tpm_429"),
        Outcome.RATE_LIMIT,
        "model",
        1.0,
    ),
    "Groq 429 TPD": (Fault("groq_tpd_429"), Outcome.QUOTA, "model", 700.0),
    "Groq 413 too large for TPM": (Fault("groq_413"), Outcome.BAD_REQUEST, None, 0.0),
    "Gemini nested RESOURCE_EXHAUSTED": (Fault("gemini_429"), Outcome.RATE_LIMIT, "model", 25.0),
}


@pytest.mark.parametrize("name", sorted(BODIES))
async def test_real_bodies_outcome_and_what_rests(
    fake_openai, fake_groq, fake_anthropic, name: str
) -> None:
    fault, outcome, scope, rest_s = BODIES[name]
    # No phase-1 retries: the next model is asked at once, so the rest is what we observe.
    t = make_transport(fake_openai, fake_groq, fake_anthropic, backoff=(), quota_cooldown=600)
    fake_groq.script(A, fault)
    result = await t.complete(A, HI, CallOptions(timeout=5))
    first = result.attempts[0]
    assert (first.model_id, first.outcome) == (A, outcome)
    key0 = t.status()["gateways"]["groq"]["keys"][0]
    assert_rests(key0, scope, A, rest_s)
    if scope == "key":
        # Nothing else was asked on Groq: the account is the problem.
        assert result.model_id == "gpt-4.1-mini"
        assert [r.model for r in fake_groq.requests] == [A]
    else:
        # The key serves the next model of the chain right away.
        assert result.model_id == B
        assert [(r.model, r.api_key) for r in fake_groq.requests] == [
            (A, GROQ_KEY),
            (B_WIRE, GROQ_KEY),
        ]
    await t.aclose()


def assert_rests(key: dict, scope: str | None, model: str, rest_s: float) -> None:
    """The key's status: resting whole ("key"), for `model` only ("model"), or not at all."""
    if scope == "key":
        assert not key["available"] and key["cooling_s"] >= rest_s
        return
    assert key["available"], key
    if scope == "model":
        assert list(key["model_rests"]) == [model]
        assert key["model_rests"][model]["cooling_s"] >= rest_s
    else:
        assert key["model_rests"] == {}


# The other providers' bodies, each from its own fake: (gateway, model, fault, outcome, what
# rests, the shortest rest in seconds when something rests).
OWN_BODIES: dict[str, tuple[str, str, Fault, Outcome, str | None, float]] = {
    "OpenAI 429 TPM": ("openai", "gpt-4.1", Fault("rate_limit_429"), Outcome.RATE_LIMIT,
                       "model", 3.8),
    "OpenAI insufficient_quota": ("openai", "gpt-4.1", Fault("quota_429"), Outcome.QUOTA, "key",
                                  500.0),
    "Anthropic 429 rate_limit_error": ("anthropic", "claude-haiku-4-5",
                                       Fault("anthropic_rate_limit_429", retry_after=9),
                                       Outcome.RATE_LIMIT, "model", 8.0),
    "Anthropic 529 overloaded": ("anthropic", "claude-haiku-4-5", Fault("overloaded_529"),
                                 Outcome.UNAVAILABLE, None, 0.0),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(OWN_BODIES))
async def test_real_bodies_of_openai_and_anthropic_rest_what_they_name(
    fake_openai, fake_groq, fake_anthropic, name: str
) -> None:
    gateway, model, fault, outcome, scope, rest_s = OWN_BODIES[name]
    t = make_transport(fake_openai, fake_groq, fake_anthropic, backoff=(), quota_cooldown=600)
    {"openai": fake_openai, "anthropic": fake_anthropic}[gateway].script(model, fault)
    with pytest.raises(TransportError) as caught:
        await t.complete(model, HI, CallOptions(timeout=5, walk_chain=False))
    [attempt] = caught.value.attempts
    assert (attempt.model_id, attempt.outcome) == (model, outcome)
    assert_rests(t.status()["gateways"][gateway]["keys"][0], scope, model, rest_s)
    await t.aclose()


async def test_groq_tpm_429_on_llama_leaves_qwen3_and_scout_on_the_same_key(
    fake_openai, fake_groq, fake_anthropic
) -> None:
    """The consolidation chain after one routine per-minute 429 on its head."""
    t = make_transport(fake_openai, fake_groq, fake_anthropic)  # default retry_after_cap 0.5
    fake_groq.script(A, Fault("groq_tpm_429"))

    first = await t.complete(A, HI, CallOptions(timeout=5))
    assert [(a.model_id, a.outcome) for a in first.attempts] == [
        (A, Outcome.RATE_LIMIT),
        (B, Outcome.SUCCESS),
    ]
    assert first.attempts[0].retry_after_s == 2.0
    scout = await t.complete(C, HI, CallOptions(timeout=5, walk_chain=False))
    assert scout.model_id == C
    # While A rests for its 2 s, the next call goes to qwen3 on the same key, not to OpenAI.
    again = await t.complete(A, HI, CallOptions(timeout=5))
    assert [(a.model_id, a.outcome) for a in again.attempts] == [
        (A, Outcome.SKIPPED),
        (B, Outcome.SUCCESS),
    ]
    assert [(r.model, r.api_key) for r in fake_groq.requests] == [
        (A, GROQ_KEY),
        (B_WIRE, GROQ_KEY),
        (C_WIRE, GROQ_KEY),
        (B_WIRE, GROQ_KEY),
    ]
    assert fake_openai.requests == [] and fake_anthropic.requests == []
    rest = t.status()["gateways"]["groq"]["keys"][0]["model_rests"][A]
    assert rest["reason"] == "rate_limit" and 0 < rest["cooling_s"] <= 2.0
    await t.aclose()
