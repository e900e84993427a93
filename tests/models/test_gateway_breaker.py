"""Circuit breakers per model and per gateway: skip what keeps failing, probe, recover."""

from __future__ import annotations

import structlog

from models.calls import CallOptions
from models.policy.breakers import BreakerState, CircuitBreaker
from models.types import Outcome
from tests.fakes.providers import Fault, Reply
from tests.support.clocks import SettableClock
from tests.support.transport import make_transport

HI = [{"role": "user", "content": "hi"}]
HEAD = "llama-3.3-70b-versatile"


def test_breaker_opens_after_threshold_and_lets_one_probe_through() -> None:
    clock = SettableClock(1000.0)
    breaker = CircuitBreaker("model:x", threshold=3, cooldown=30.0, clock=clock)
    for _ in range(2):
        breaker.record_failure()
    assert breaker.allow()[0] and breaker.state is BreakerState.CLOSED
    change = breaker.record_failure()
    assert change is not None and change.new is BreakerState.OPEN
    assert breaker.allow() == (False, None)
    clock.advance(30.0)
    allowed, change = breaker.allow()
    assert allowed and change is not None and change.new is BreakerState.HALF_OPEN
    assert breaker.allow() == (False, None)  # the probe is in flight: nobody else
    breaker.record_failure()  # the probe failed: open again for a full cool-down
    assert breaker.state is BreakerState.OPEN and not breaker.allow()[0]
    clock.advance(30.0)
    assert breaker.allow()[0]
    assert breaker.record_success().new is BreakerState.CLOSED
    assert breaker.allow() == (True, None)


def test_probe_that_never_reports_is_forgotten_after_a_cooldown() -> None:
    clock = SettableClock(1000.0)
    breaker = CircuitBreaker("model:x", threshold=1, cooldown=10.0, clock=clock)
    breaker.record_failure()
    clock.advance(10.0)
    assert breaker.allow()[0]  # probe taken; its caller is then cancelled and never reports
    assert not breaker.allow()[0]
    clock.advance(10.0)
    assert breaker.allow()[0]


async def test_model_breaker_sends_requests_straight_to_the_fallback(
    fake_openai, fake_groq, fake_anthropic
) -> None:
    clock = SettableClock(1000.0)
    t = make_transport(
        fake_openai, fake_groq, fake_anthropic,
        backoff=(), breaker_threshold=3, breaker_cooldown=30.0, clock=clock,
    )  # fmt: skip
    fake_groq.set_default(HEAD, Fault("server_500"))
    fake_groq.set_default("qwen/qwen3-32b", Reply("qwen answers"))

    def head_requests() -> int:
        return sum(1 for r in fake_groq.requests if r.model == HEAD)

    with structlog.testing.capture_logs() as logs:
        for _ in range(3):
            assert (await t.complete(HEAD, HI, CallOptions(timeout=5))).model_id == "qwen3-32b"
        assert head_requests() == 3
        assert t.status()["models"][HEAD]["breaker"] == "open"
        for _ in range(5):
            result = await t.complete(HEAD, HI, CallOptions(timeout=5))
            assert result.attempts[0].outcome is Outcome.SKIPPED
            assert result.attempts[0].detail == "model circuit open"
        assert head_requests() == 3  # no request while open

        clock.advance(30.0)
        await t.complete(HEAD, HI, CallOptions(timeout=5))  # the probe: fails, open again
        assert head_requests() == 4
        await t.complete(HEAD, HI, CallOptions(timeout=5))
        assert head_requests() == 4

        fake_groq.set_default(HEAD, Reply("head is back"))
        clock.advance(30.0)
        probe = await t.complete(HEAD, HI, CallOptions(timeout=5))
        assert probe.model_id == HEAD and t.status()["models"][HEAD]["breaker"] == "closed"
        assert (await t.complete(HEAD, HI, CallOptions(timeout=5))).model_id == HEAD
    transitions = [
        (e["old_state"], e["new_state"])
        for e in logs
        if e["event"] == "circuit_breaker" and e["breaker"] == f"model:{HEAD}"
    ]
    assert transitions == [
        ("closed", "open"),
        ("open", "half_open"),
        ("half_open", "open"),
        ("open", "half_open"),
        ("half_open", "closed"),
    ]
    await t.aclose()


async def test_gateway_breaker_skips_every_model_of_a_failing_gateway(
    fake_openai, fake_groq, fake_anthropic
) -> None:
    clock = SettableClock(1000.0)
    t = make_transport(
        fake_openai, fake_groq, fake_anthropic,
        backoff=(), breaker_threshold=100, gateway_breaker_threshold=3, clock=clock,
    )  # fmt: skip
    fake_groq.set_default("*", Fault("cloudflare_524"))
    first = await t.complete(HEAD, HI, CallOptions(timeout=5))
    # head, qwen3 and scout each failed once: three in a row on Groq opens its breaker
    assert [a.outcome for a in first.attempts][:3] == [Outcome.TIMEOUT] * 3
    assert first.model_id == "gpt-4.1-mini"
    assert t.status()["gateways"]["groq"]["breaker"] == "open"
    fake_groq.requests.clear()
    second = await t.complete(HEAD, HI, CallOptions(timeout=5))
    assert fake_groq.requests == []
    assert [a.detail for a in second.attempts[:3]] == ["gateway circuit open"] * 3
    assert second.model_id == "gpt-4.1-mini"
    await t.aclose()


async def test_bad_requests_do_not_open_breakers(fake_openai, fake_groq, fake_anthropic) -> None:
    t = make_transport(fake_openai, fake_groq, fake_anthropic, backoff=(), breaker_threshold=2)
    fake_groq.set_default(HEAD, Fault("bad_request_400"))
    for _ in range(4):
        await t.complete(HEAD, HI, CallOptions(timeout=5))
    # A request the model rejects says nothing about the model's health.
    assert sum(1 for r in fake_groq.requests if r.model == HEAD) == 4
    assert t.status()["models"][HEAD]["breaker"] == "closed"
    await t.aclose()
