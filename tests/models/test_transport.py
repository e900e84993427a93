"""Transport basics over real litellm and the fake gateways: answers, usage, chain walk.

litellm runs on the test's loop (tests/fakes/workers.py), not in a worker process."""

from __future__ import annotations

import pytest

from models.calls import CallOptions
from models.types import Outcome, StreamDone, StreamRestart, TextDelta, TransportError
from tests.fakes.providers import Fault, Reply
from tests.support.shared_workers import shared_workers
from tests.support.transport import TEST_KEYS, make_gateways, make_transport

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
async def transport(fake_openai, fake_groq, fake_anthropic, in_process_workers):
    """Unit tests of the transport: litellm on the test's loop, no worker process."""
    t = make_transport(fake_openai, fake_groq, fake_anthropic, workers=in_process_workers)
    yield t
    await t.aclose()


async def test_complete_returns_text_usage_and_catalog_cost(transport, fake_openai) -> None:
    fake_openai.script("gpt-5", Reply("hello", prompt_tokens=1000, completion_tokens=500))
    result = await transport.complete("gpt-5", HI, CallOptions(timeout=5))
    assert result.text == "hello"
    assert result.model_id == result.requested_model_id == "gpt-5"
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (1000, 500)
    # gpt-5: $1.25 in, $10 out per million tokens
    assert result.usage.cost_usd == pytest.approx((1000 * 1.25 + 500 * 10.0) / 1e6)
    [attempt] = result.attempts
    assert attempt.outcome is Outcome.SUCCESS and attempt.key_index == 0
    [request] = fake_openai.requests
    assert request.api_key == TEST_KEYS["openai"] and request.model == "gpt-5"


async def test_chain_walk_resolves_each_model_to_its_own_gateway(
    transport, fake_openai, fake_groq, fake_anthropic
) -> None:
    # llama-3.3 -> qwen3 -> llama-4-scout (groq) -> gpt-4.1-mini (openai) -> claude-haiku
    fake_groq.set_default("*", Fault("server_500"))
    fake_openai.set_default("*", Fault("bad_request_400"))
    fake_anthropic.set_default("*", Reply("from haiku"))
    result = await transport.complete("llama-3.3-70b-versatile", HI, CallOptions(timeout=5))
    assert result.model_id == "claude-haiku-4-5" and result.fell_back
    groq_models = [r.model for r in fake_groq.requests]
    # phase 1: first attempt + 3 retries on the head, then one attempt per fallback
    assert groq_models == ["llama-3.3-70b-versatile"] * 4 + [
        "qwen/qwen3-32b",
        "meta-llama/llama-4-scout-17b-16e-instruct",
    ]
    assert {r.api_key for r in fake_groq.requests} == {TEST_KEYS["groq"]}
    assert [(r.model, r.api_key, r.path) for r in fake_openai.requests] == [
        ("gpt-4.1-mini", TEST_KEYS["openai"], "/v1/chat/completions")
    ]
    assert [(r.model, r.api_key, r.path) for r in fake_anthropic.requests] == [
        ("claude-haiku-4-5", TEST_KEYS["anthropic"], "/v1/messages")
    ]
    assert [a.outcome for a in result.attempts][-3:] == [
        Outcome.UNAVAILABLE,
        Outcome.BAD_REQUEST,
        Outcome.SUCCESS,
    ]


async def test_walk_chain_false_stops_after_phase_one(transport, fake_groq, fake_openai) -> None:
    fake_groq.set_default("*", Fault("server_500"))
    with pytest.raises(TransportError) as caught:
        await transport.complete("qwen3-32b", HI, CallOptions(timeout=5, walk_chain=False))
    assert {a.model_id for a in caught.value.attempts} == {"qwen3-32b"}
    assert len(fake_groq.requests) == 4
    assert fake_openai.requests == []


async def test_every_model_failing_raises_with_attempts(transport, fake_openai) -> None:
    fake_openai.set_default("*", Fault("bad_request_400"))
    with pytest.raises(TransportError) as caught:
        await transport.complete("gpt-5", HI, CallOptions(timeout=5))
    assert [a.model_id for a in caught.value.attempts] == ["gpt-5", "gpt-5-mini", "gpt-4.1"]
    assert caught.value.last_outcome is Outcome.BAD_REQUEST
    assert TEST_KEYS["openai"] not in str(caught.value)


async def test_gateway_without_keys_is_skipped(fake_openai, fake_groq, fake_anthropic) -> None:
    from dataclasses import replace

    from models.catalog import load_catalog
    from models.transport import Transport

    # Configured without a Groq key (GROQ_API_KEY unset), not emptied afterwards.
    gateways = make_gateways(fake_openai, fake_groq, fake_anthropic)
    gateways["groq"] = replace(gateways["groq"], keys=())
    t = Transport(load_catalog(), gateways, backoff=(0.01,), workers=shared_workers())
    fake_openai.set_default("*", Reply("mini here"))
    result = await t.complete("llama-3.3-70b-versatile", HI, CallOptions(timeout=5))
    assert result.model_id == "gpt-4.1-mini"
    assert [a.outcome for a in result.attempts[:3]] == [Outcome.SKIPPED] * 3
    assert fake_groq.requests == []


async def test_stream_yields_text_then_done_with_usage(transport, fake_anthropic) -> None:
    fake_anthropic.script("*", Reply("streamed answer", chunk_chars=4, completion_tokens=7))
    events = [e async for e in transport.stream("claude-sonnet-4-5", HI, CallOptions(timeout=5))]
    assert isinstance(events[-1], StreamDone)
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert text == "streamed answer" == events[-1].result.text
    assert events[-1].result.usage.completion_tokens == 7
    assert events[-1].result.usage.cost_usd > 0
    assert fake_anthropic.requests[0].body["stream"] is True


async def test_stream_failure_before_text_falls_back_silently(
    transport, fake_groq, fake_openai
) -> None:
    fake_groq.set_default("*", Fault("unauthorized_401"))
    fake_openai.set_default("*", Reply("mini speaking"))
    events = [
        e async for e in transport.stream("llama-3.3-70b-versatile", HI, CallOptions(timeout=5))
    ]
    assert not any(isinstance(e, StreamRestart) for e in events)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "mini speaking"
    assert events[-1].result.model_id == "gpt-4.1-mini"
    # The rejected key is not tried again for the other Groq models of the chain.
    assert len(fake_groq.requests) == 1


async def test_stream_failure_after_text_restarts_on_next_model(transport, fake_groq) -> None:
    fake_groq.script("llama-3.3-70b-versatile", Fault("midstream_disconnect", after_chars=12))
    fake_groq.set_default("*", Reply("a complete answer from the fallback"))
    events = [
        e async for e in transport.stream("llama-3.3-70b-versatile", HI, CallOptions(timeout=5))
    ]
    kinds = [type(e).__name__ for e in events]
    restart_at = kinds.index("StreamRestart")
    assert "TextDelta" in kinds[:restart_at]  # text was shown before the failure
    restart = events[restart_at]
    assert (restart.from_model, restart.to_model) == ("llama-3.3-70b-versatile", "qwen3-32b")
    after = "".join(e.text for e in events[restart_at:] if isinstance(e, TextDelta))
    assert after == "a complete answer from the fallback"
    assert events[-1].result.model_id == "qwen3-32b"


async def test_a_stream_longer_than_the_timeout_is_not_cut(
    fake_openai, fake_groq, fake_anthropic, in_process_workers
) -> None:
    t = make_transport(
        fake_openai, fake_groq, fake_anthropic, workers=in_process_workers, timeout_grace=0.1
    )
    # 14 chunks 0.1 s apart: 1.3 s in total, with a 0.5 s timeout that applies to silence.
    text = "x" * 96
    fake_openai.script("*", Reply(text, chunk_chars=8, chunk_delay=0.1))
    events = [e async for e in t.stream("gpt-4.1", HI, CallOptions(timeout=0.5))]
    await t.aclose()
    assert isinstance(events[-1], StreamDone) and events[-1].result.text == text
    assert len(fake_openai.requests) == 1


async def test_a_stream_that_goes_silent_times_out_and_is_retried(
    fake_openai, fake_groq, fake_anthropic, in_process_workers
) -> None:
    t = make_transport(
        fake_openai, fake_groq, fake_anthropic, workers=in_process_workers, timeout_grace=0.1
    )
    fake_openai.script("gpt-5", Fault("hang"))
    events = [e async for e in t.stream("gpt-5", HI, CallOptions(timeout=0.3, walk_chain=True))]
    await t.aclose()
    result = events[-1].result
    assert [a.outcome for a in result.attempts] == [Outcome.TIMEOUT, Outcome.SUCCESS]
    assert result.model_id == "gpt-5" and len(fake_openai.requests) == 2
