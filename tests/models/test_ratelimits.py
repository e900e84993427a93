"""The one reader of providers' rate-limit headers (models/policy/ratelimits.py), with the header
forms the providers send: Go durations for OpenAI and Groq resets, retry-after in seconds; and
the error table taking a 429's wait from it. The windows read from whole header sets, Anthropic's
RFC 3339 resets included, are tested with the pacer that learns from them (test_pacing.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from models.errors import classify, evidence_from_wire
from models.policy.ratelimits import (
    exhausted_until_reset,
    latest_reset,
    parse_duration,
    retry_after_header,
)
from models.types import Outcome


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1s", 1),
        ("12ms", 0.012),
        ("6m0s", 360),
        ("2m59.56s", 179.56),
        ("26s", 26),
        ("1m30.5s", 90.5),
        ("120ms", 0.12),
        ("2h", 7200),
        ("7", 7),
        (" 7 ", 7),
        ("soon", None),
        ("6m0sx", None),
        ("", None),
    ],
)
def test_parse_duration(text: str, seconds: float | None) -> None:
    assert parse_duration(text) == (pytest.approx(seconds) if seconds is not None else None)


def test_retry_after_in_seconds_milliseconds_or_a_date() -> None:
    assert retry_after_header({"Retry-After": "7"}) == 7
    assert retry_after_header({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert retry_after_header({"retry-after-ms": "soon", "retry-after": "9"}) == 9
    past = format_datetime(datetime(2015, 10, 21, 7, 28, tzinfo=UTC), usegmt=True)
    assert retry_after_header({"retry-after": past}) == 0.0
    future = format_datetime(datetime.now(UTC) + timedelta(seconds=120), usegmt=True)
    assert 110 < (retry_after_header({"retry-after": future}) or 0) <= 120
    assert retry_after_header({"retry-after": "whenever"}) is None
    assert retry_after_header({"x-ratelimit-reset-requests": "2s"}) is None


def test_latest_reset_is_the_later_of_the_go_duration_resets() -> None:
    headers = {"x-ratelimit-reset-requests": "2m59.56s", "X-RateLimit-Reset-Tokens": "6m0s"}
    assert latest_reset(headers) == 360
    assert latest_reset({"x-ratelimit-reset-tokens": "12ms"}) == pytest.approx(0.012)
    assert latest_reset({"x-ratelimit-reset-tokens": "later"}) is None
    assert latest_reset({"retry-after": "7"}) is None


def test_success_headers_announce_a_spent_window() -> None:
    assert exhausted_until_reset(
        {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "2.5s"}
    ) == pytest.approx(2.5)
    assert exhausted_until_reset(
        {
            "x-ratelimit-remaining-requests": "0",
            "x-ratelimit-reset-requests": "1s",
            "x-ratelimit-remaining-tokens": "0",
            "x-ratelimit-reset-tokens": "6m0s",
        }
    ) == pytest.approx(360)
    assert (
        exhausted_until_reset(
            {"x-ratelimit-remaining-requests": "12", "x-ratelimit-reset-requests": "2.5s"}
        )
        is None
    )
    assert exhausted_until_reset({"x-ratelimit-remaining-requests": "0"}) is None


def test_a_429s_wait_comes_from_its_headers_before_its_body() -> None:
    body = {"error": {"message": "Please try again in 1.5s.", "code": "rate_limit_exceeded"}}
    headers = {"retry-after": "2", "x-ratelimit-reset-requests": "6m0s"}
    assert classify(evidence_from_wire(429, headers, body)).retry_after_s == 2
    resets_only = {"x-ratelimit-reset-requests": "1s", "x-ratelimit-reset-tokens": "2m59.56s"}
    limited = classify(evidence_from_wire(429, resets_only, {"error": {"code": "tokens"}}))
    assert limited.outcome is Outcome.RATE_LIMIT
    assert limited.retry_after_s == pytest.approx(179.56)
    assert classify(evidence_from_wire(429, resets_only, body)).retry_after_s == 1.5
