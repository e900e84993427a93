"""Key rotation: several keys per gateway, used in turn; a bad key cools down, others carry on."""

from __future__ import annotations

import json
from typing import Any

import structlog

from bot.app import build_gateways
from bot.config import load_settings
from models.calls import CallOptions
from models.catalog import load_catalog
from models.transport import Transport
from models.types import Outcome
from tests.fakes.providers import Fault, Reply
from tests.support.shared_workers import shared_workers
from tests.support.transport import TEST_KEYS, make_transport

HI = [{"role": "user", "content": "hi"}]
KEYS = ("gsk_key_zero_0000", "gsk_key_one_1111", "gsk_key_two_2222")


def transport_with_groq_keys(
    fake_openai, fake_groq, fake_anthropic, keys=KEYS, gateway: str = "groq", **options: Any
) -> Transport:
    """A transport built as the bot builds it: GROQ_API_KEY (or `gateway`'s) holds the keys
    comma-separated (with the spaces people type), read by load_settings, turned into gateways
    by build_gateways; the keys then reach the fake over HTTP."""
    values = {
        "TELEGRAM_BOT_TOKEN": "123456:TEST-TOKEN",
        "GROQ_API_KEY": TEST_KEYS["groq"],
        "GROQ_API_BASE": fake_groq.base_url,
        "OPENAI_API_KEY": TEST_KEYS["openai"],
        "OPENAI_API_BASE": fake_openai.base_url,
        "ANTHROPIC_API_KEY": TEST_KEYS["anthropic"],
        "ANTHROPIC_API_BASE": fake_anthropic.base_url,
        "GROQ_RPS": 50,
        "OPENAI_RPS": 50,
        "ANTHROPIC_RPS": 50,
    }
    values[f"{gateway.upper()}_API_KEY"] = " , ".join(keys)
    settings = load_settings(**values)
    options.setdefault("backoff", (0.01, 0.02, 0.04))
    options.setdefault("retry_after_cap", 0.5)
    return Transport(load_catalog(), build_gateways(settings), workers=shared_workers(), **options)


async def test_keys_are_used_in_turn(fake_openai, fake_groq, fake_anthropic) -> None:
    t = transport_with_groq_keys(fake_openai, fake_groq, fake_anthropic)
    for _ in range(6):
        await t.complete("qwen3-32b", HI, CallOptions(timeout=5))
    assert [r.api_key for r in fake_groq.requests] == list(KEYS) * 2
    await t.aclose()


async def test_invalid_key_is_reported_once_and_not_hammered(
    fake_openai, fake_groq, fake_anthropic
) -> None:
    t = transport_with_groq_keys(fake_openai, fake_groq, fake_anthropic)
    fake_groq.invalid_keys.add(KEYS[1])
    with structlog.testing.capture_logs() as logs:
        results = [await t.complete("qwen3-32b", HI, CallOptions(timeout=5)) for _ in range(9)]
    assert all(r.model_id == "qwen3-32b" for r in results)  # nobody fell back
    used = [r.api_key for r in fake_groq.requests]
    assert used.count(KEYS[1]) == 1  # tried once, then rested
    assert used.count(KEYS[0]) + used.count(KEYS[2]) == 9
    rejected = [e for e in logs if e["event"] == "api_key_rejected"]
    assert len(rejected) == 1
    assert (rejected[0]["gateway"], rejected[0]["key_position"]) == ("groq", 1)
    assert all(key not in json.dumps(logs, default=str) for key in KEYS)
    status = t.status()["gateways"]["groq"]["keys"]
    assert [k["available"] for k in status] == [True, False, True]
    assert status[1]["reason"] == "auth"
    assert all(key not in json.dumps(t.status()) for key in KEYS)
    await t.aclose()


async def test_all_keys_invalid_skips_the_gateway(fake_openai, fake_groq, fake_anthropic) -> None:
    t = transport_with_groq_keys(fake_openai, fake_groq, fake_anthropic)
    fake_groq.invalid_keys.update(KEYS)
    fake_openai.set_default("*", Reply("openai answers"))
    result = await t.complete("llama-3.3-70b-versatile", HI, CallOptions(timeout=5))
    assert result.model_id == "gpt-4.1-mini"
    assert sorted(r.api_key for r in fake_groq.requests) == sorted(KEYS)  # each key once
    outcomes = [(a.model_id, a.outcome, a.key_index) for a in result.attempts]
    assert outcomes[:3] == [("llama-3.3-70b-versatile", Outcome.AUTH, i) for i in range(3)]
    assert [o[1] for o in outcomes[3:5]] == [Outcome.SKIPPED, Outcome.SKIPPED]
    # A second call does not touch Groq at all: every key is resting.
    fake_groq.requests.clear()
    await t.complete("llama-3.3-70b-versatile", HI, CallOptions(timeout=5))
    assert fake_groq.requests == []
    await t.aclose()


async def test_rate_limited_key_cools_down_and_the_next_key_retries_at_once(
    fake_openai, fake_groq, fake_anthropic
) -> None:
    t = transport_with_groq_keys(fake_openai, fake_groq, fake_anthropic, backoff=(30.0,))
    # Retry-After far beyond the cap: with one key we would fall back; with three, key 1 serves.
    fake_groq.script("qwen/qwen3-32b", Fault("rate_limit_429", retry_after=60))
    result = await t.complete("qwen3-32b", HI, CallOptions(timeout=5))
    assert result.model_id == "qwen3-32b"  # no backoff wait of 30 s either: test would hang
    assert [r.api_key for r in fake_groq.requests] == [KEYS[0], KEYS[1]]
    for _ in range(4):
        await t.complete("qwen3-32b", HI, CallOptions(timeout=5))
    assert KEYS[0] not in [r.api_key for r in fake_groq.requests[2:]]
    key0 = t.status()["gateways"]["groq"]["keys"][0]
    assert key0["available"]  # a rate limit is the model's: the key still serves the others
    cooling = key0["model_rests"]["qwen/qwen3-32b"]
    assert cooling["reason"] == "rate_limit" and cooling["cooling_s"] > 50
    await t.aclose()


async def test_single_key_with_long_retry_after_falls_back_instead_of_waiting(
    fake_openai, fake_groq, fake_anthropic
) -> None:
    t = make_transport(fake_openai, fake_groq, fake_anthropic, retry_after_cap=0.5)
    fake_groq.script("qwen/qwen3-32b", Fault("rate_limit_429", retry_after=60))
    result = await t.complete("qwen3-32b", HI, CallOptions(timeout=5))
    # qwen3 rate limited for 60 s (> cap): no wait, the next model on the chain answers with
    # the same key (the rate limit is qwen3's, not the key's).
    assert result.model_id == "llama-4-scout-17b-16e-instruct"
    assert [(r.model, r.api_key) for r in fake_groq.requests] == [
        ("qwen/qwen3-32b", TEST_KEYS["groq"]),
        ("meta-llama/llama-4-scout-17b-16e-instruct", TEST_KEYS["groq"]),
    ]
    # The next call for qwen3 leaves it alone while it rests and goes straight to the fallback.
    result = await t.complete("qwen3-32b", HI, CallOptions(timeout=5))
    assert result.model_id == "llama-4-scout-17b-16e-instruct"
    assert [a.outcome for a in result.attempts] == [Outcome.SKIPPED, Outcome.SUCCESS]
    assert len(fake_groq.requests) == 3
    await t.aclose()


async def test_short_retry_after_is_honoured_on_the_same_model(
    fake_openai, fake_groq, fake_anthropic
) -> None:
    t = make_transport(fake_openai, fake_groq, fake_anthropic, retry_after_cap=1.0)
    fake_groq.script("qwen/qwen3-32b", Fault("rate_limit_429", retry_after=0.2))
    result = await t.complete("qwen3-32b", HI, CallOptions(timeout=5))
    assert result.model_id == "qwen3-32b"
    first, second = fake_groq.requests
    assert second.at - first.at >= 0.2  # waited at least what the provider asked
    await t.aclose()


async def test_success_headers_with_a_spent_window_rest_the_key(
    fake_openai, fake_groq, fake_anthropic
) -> None:
    t = transport_with_groq_keys(fake_openai, fake_groq, fake_anthropic, KEYS[:2])
    spent = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "45s"}
    fake_groq.script("qwen/qwen3-32b", Reply("last one for now", headers=spent))
    for _ in range(4):
        await t.complete("qwen3-32b", HI, CallOptions(timeout=5))
    assert [r.api_key for r in fake_groq.requests] == [KEYS[0]] + [KEYS[1]] * 3
    await t.aclose()


async def test_quota_on_one_key_moves_to_the_next_key(
    fake_openai, fake_groq, fake_anthropic
) -> None:
    # OpenAI's insufficient_quota: the account behind the key is out of money.
    t = transport_with_groq_keys(fake_openai, fake_groq, fake_anthropic, KEYS[:2], "openai")
    fake_openai.script("gpt-4.1", Fault("quota_429"))
    with structlog.testing.capture_logs() as logs:
        result = await t.complete("gpt-4.1", HI, CallOptions(timeout=5))
    assert result.model_id == "gpt-4.1"
    assert [r.api_key for r in fake_openai.requests] == list(KEYS[:2])
    assert [a.outcome for a in result.attempts] == [Outcome.QUOTA, Outcome.SUCCESS]
    assert [e["key_position"] for e in logs if e["event"] == "api_key_out_of_quota"] == [0]
    await t.aclose()


async def test_single_key_rate_limit_without_hint_is_retried_after_backoff(
    fake_openai, fake_groq, fake_anthropic
) -> None:
    # Anthropic's 429 without retry-after names no wait: the key rests only as long as our
    # backoff.
    t = make_transport(fake_openai, fake_groq, fake_anthropic, backoff=(0.05, 0.1))
    fake_anthropic.script("claude-haiku-4-5", Fault("anthropic_rate_limit_429"))
    result = await t.complete("claude-haiku-4-5", HI, CallOptions(timeout=5))
    assert [a.outcome for a in result.attempts] == [Outcome.RATE_LIMIT, Outcome.SUCCESS]
    assert result.model_id == "claude-haiku-4-5" and len(fake_anthropic.requests) == 2
    await t.aclose()
