"""The error table, proven with the real bodies through the real litellm over HTTP.

Each fault is served by a fake gateway; the transport makes one attempt (no retries, no chain)
and the attempt's outcome must be what the body means, whatever exception litellm raised.
"""

from __future__ import annotations

import json

import pytest
import structlog

from models.calls import CallOptions
from models.errors import (
    Evidence,
    classify,
    classify_exception,
    evidence_from_wire,
    parse_retry_after,
)
from models.types import Outcome, StreamDone, TransportError
from tests.fakes.providers import (
    _GROQ_TOOL_USE_FAILED,
    PROVIDER_FAULTS,
    TOOL_CHOICE_REFUSALS,
    FakeProvider,
    Fault,
    _bad_request_body,
)
from tests.support.transport import TEST_KEYS, make_transport

MODEL_ON = {"openai": "gpt-4.1", "groq": "qwen3-32b", "anthropic": "claude-haiku-4-5"}
HI = [{"role": "user", "content": "hi"}]

# fault kind -> (outcome, status code the attempt reports, retry-after seconds or None)
TABLE: dict[str, tuple[Outcome, int | None, float | None]] = {
    "rate_limit_429": (Outcome.RATE_LIMIT, 429, None),  # each provider's own: see below
    "quota_429": (Outcome.QUOTA, 429, None),
    "overloaded_529": (Outcome.UNAVAILABLE, 529, None),
    "anthropic_rate_limit_429": (Outcome.RATE_LIMIT, 429, None),
    "server_500": (Outcome.UNAVAILABLE, 500, None),
    "bad_gateway_502": (Outcome.UNAVAILABLE, 502, None),
    "cloudflare_524": (Outcome.TIMEOUT, 524, None),
    "unauthorized_401": (Outcome.AUTH, 401, None),
    "bad_request_400": (Outcome.BAD_REQUEST, 400, None),
    "tool_use_failed_400": (Outcome.BAD_REQUEST, 400, None),
    "throttling_in_200": (Outcome.RATE_LIMIT, 200, None),
    "arrearage_in_200": (Outcome.QUOTA, 200, None),
    "gemini_429": (Outcome.RATE_LIMIT, 429, 26.0),
    "groq_tpm_429": (Outcome.RATE_LIMIT, 429, 2.0),  # retry-after header, billing link inside
    "groq_tpd_429": (Outcome.QUOTA, 429, 758.0),  # a daily cap: fall back, do not retry
    "groq_413": (Outcome.BAD_REQUEST, 413, None),  # too large for TPM: no wait helps
    "empty_200": (Outcome.EMPTY, 200, None),
    "disconnect": (Outcome.UNAVAILABLE, None, None),
}


async def _one_attempt(kind: str, fault: Fault, *, stream: bool, limit_s: float = 5.0):
    async with (
        FakeProvider("openai") as o,
        FakeProvider("groq") as g,
        FakeProvider("anthropic") as a,
    ):
        fp = {"openai": o, "groq": g, "anthropic": a}[kind]
        fp.script("*", fault)
        t = make_transport(o, g, a, backoff=())
        try:
            with pytest.raises(TransportError) as caught:
                if stream:
                    async for event in t.stream(
                        MODEL_ON[kind], HI, CallOptions(timeout=limit_s, walk_chain=False)
                    ):
                        assert not isinstance(event, StreamDone)
                else:
                    await t.complete(
                        MODEL_ON[kind], HI, CallOptions(timeout=limit_s, walk_chain=False)
                    )
        finally:
            await t.aclose()
        assert len(fp.requests) == 1
        [attempt] = caught.value.attempts
        return attempt


# Each fake's own 429: OpenAI's body says "Please try again in 3.89s"; Groq's carries a
# retry-after header (the 1.5 s its body names, rounded up); Anthropic's names no wait.
RATE_LIMIT_WAIT = {"openai": 3.89, "groq": 2.0, "anthropic": None}
# Faults one provider alone sends are tried on that provider only.
CASES = [
    (fault, provider)
    for fault in sorted(TABLE)
    for provider in ("openai", "groq", "anthropic")
    if PROVIDER_FAULTS.get(fault, provider) == provider
]


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize(("fault", "provider"), CASES)
async def test_error_table(fault: str, provider: str, stream: bool) -> None:
    outcome, status, retry_after = TABLE[fault]
    if fault == "rate_limit_429":
        retry_after = RATE_LIMIT_WAIT[provider]
    attempt = await _one_attempt(provider, Fault(fault), stream=stream)
    assert attempt.outcome is outcome, attempt
    assert attempt.status_code == status, attempt
    if retry_after is not None:
        assert attempt.retry_after_s == pytest.approx(retry_after)
    # Details are built from status and provider codes only: never from the messages.
    assert "sk-" not in attempt.detail and TEST_KEYS[provider] not in attempt.detail


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
async def test_groq_tool_use_failed_is_a_bad_request_even_as_bare_valueerror(stream) -> None:
    attempt = await _one_attempt("groq", Fault("tool_use_failed_stream"), stream=stream)
    assert attempt.outcome is Outcome.BAD_REQUEST
    assert "tool_use_failed" in attempt.detail


@pytest.mark.parametrize("provider", ["openai", "groq", "anthropic"])
async def test_retry_after_header_beats_the_body_hint(provider: str) -> None:
    attempt = await _one_attempt(provider, Fault("rate_limit_429", retry_after=7), stream=False)
    assert attempt.retry_after_s == 7


@pytest.mark.parametrize("provider", ["openai", "groq", "anthropic"])
async def test_midstream_disconnect_is_unavailable(provider: str) -> None:
    attempt = await _one_attempt(
        provider, Fault("midstream_disconnect", after_chars=5), stream=True
    )
    assert attempt.outcome is Outcome.UNAVAILABLE


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize("provider", ["openai", "groq", "anthropic"])
async def test_hang_is_a_timeout(provider: str, stream: bool) -> None:
    attempt = await _one_attempt(provider, Fault("hang"), stream=stream, limit_s=0.3)
    assert attempt.outcome is Outcome.TIMEOUT


async def test_auth_failure_never_logs_the_key() -> None:
    with structlog.testing.capture_logs() as logs:
        attempt = await _one_attempt("openai", Fault("unauthorized_401"), stream=False)
    assert attempt.outcome is Outcome.AUTH and attempt.key_index == 0
    rejected = [e for e in logs if e["event"] == "api_key_rejected"]
    assert rejected and rejected[0]["gateway"] == "openai" and rejected[0]["key_position"] == 0
    dumped = json.dumps(logs, default=str)
    assert TEST_KEYS["openai"] not in dumped and TEST_KEYS["openai"][-4:] not in dumped


# --- the table on bodies no fake sends -----------------------------------------------------------


def _classify_body(status: int | None, body: object, headers: dict | None = None):
    return classify(evidence_from_wire(status, headers or {}, body))


def test_double_encoded_error_inside_a_message_is_unpacked() -> None:
    inner = {"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": "slow down",
             "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                          "retryDelay": "12s"}]}}  # fmt: skip
    body = [{"error": {"code": 500, "message": json.dumps(inner), "status": "UNKNOWN"}}]
    result = _classify_body(500, body)
    assert result.outcome is Outcome.RATE_LIMIT
    assert result.retry_after_s == 12


@pytest.mark.parametrize(
    ("status", "message", "code", "outcome"),
    [
        (429, "Rate limit reached for model `llama-3.3-70b-versatile` on tokens per day (TPD): "
              "Limit 100000, Used 99000. Please try again in 7m12s.", "rate_limit_exceeded",
         Outcome.QUOTA),
        (400, "Your credit balance is too low to access the Anthropic API.",
         "invalid_request_error", Outcome.QUOTA),
        (429, "You exceeded your current quota", "insufficient_quota", Outcome.QUOTA),
        (429, "Rate limit reached for gpt-4.1 on requests per min (RPM)", "rate_limit_exceeded",
         Outcome.RATE_LIMIT),
        (403, "Permission denied", "permission_error", Outcome.AUTH),
        (404, "The model `x` does not exist", "model_not_found", Outcome.BAD_REQUEST),
        (503, "Service Unavailable", "service_unavailable", Outcome.UNAVAILABLE),
    ],
)  # fmt: skip
def test_quota_caps_and_limits_are_told_apart(status, message, code, outcome) -> None:
    body = {"error": {"message": message, "type": code, "code": code}}
    assert _classify_body(status, body).outcome is outcome


def test_rate_limit_per_day_is_not_retried_but_per_minute_is() -> None:
    per_day = _classify_body(429, {"error": {"message": "Limit reached on requests per day (RPD)",
                                             "code": "rate_limit_exceeded"}})  # fmt: skip
    assert per_day.outcome is Outcome.QUOTA and not per_day.outcome.retryable
    per_min = _classify_body(429, {"error": {"message": "Limit reached on requests per minute",
                                             "code": "rate_limit_exceeded"}})  # fmt: skip
    assert per_min.outcome.retryable


def test_bare_valueerror_with_an_error_body_in_its_cause_is_classified() -> None:
    class ProviderError(Exception):
        def __init__(self) -> None:
            super().__init__("Failed to call a function.")
            self.body = {"code": "tool_use_failed", "type": "invalid_request_error"}

    try:
        try:
            raise ProviderError()
        except ProviderError as inner:
            raise ValueError("invalid literal for int() with base 10: 'tool_use_failed'") from inner
    except ValueError as exc:
        result = classify_exception(exc)
    assert result.outcome is Outcome.BAD_REQUEST


def test_midstream_fallback_error_is_classified_by_its_original_exception() -> None:
    from litellm.exceptions import MidStreamFallbackError, RateLimitError

    original = RateLimitError("Rate limit reached", "groq", "qwen")
    original.litellm_response_headers = {"retry-after": "4"}
    exc = MidStreamFallbackError("stream broke", "qwen", "groq", original_exception=original)
    result = classify_exception(exc)
    assert result.outcome is Outcome.RATE_LIMIT
    assert result.retry_after_s == 4


def test_unknown_failure_without_evidence_is_retryable_not_success() -> None:
    result = classify(Evidence())
    assert result.outcome is Outcome.UNAVAILABLE and result.outcome.retryable


def test_retry_after_sources_in_order() -> None:
    assert parse_retry_after({"Retry-After-Ms": "1500", "retry-after": "9"}) == 1.5
    assert parse_retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0
    assert parse_retry_after({"x-ratelimit-reset-requests": "2s",
                              "x-ratelimit-reset-tokens": "6m0s"}) == 360  # fmt: skip
    hint = {"error": {"message": "Please try again in 1m2.5s."}}
    assert parse_retry_after({}, [hint]) == pytest.approx(62.5)
    assert parse_retry_after({}, []) is None


@pytest.mark.parametrize("refusal", sorted(TOOL_CHOICE_REFUSALS))
def test_a_refused_tool_choice_is_named_without_the_providers_words(refusal: str) -> None:
    result = classify(evidence_from_wire(400, {}, TOOL_CHOICE_REFUSALS[refusal]))
    assert result.outcome is Outcome.BAD_REQUEST
    assert result.refused_param == "tool_choice"
    assert "tool_choice" not in result.detail  # detail stays status and code only


@pytest.mark.parametrize("fault", ["tool_use_failed_400", "bad_request_400"])
def test_other_bad_requests_name_no_refused_parameter(fault: str) -> None:
    body = _GROQ_TOOL_USE_FAILED if fault == "tool_use_failed_400" else _bad_request_body("groq")
    assert classify(evidence_from_wire(400, {}, body)).refused_param is None
