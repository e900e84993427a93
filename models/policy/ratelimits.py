"""What a provider says about its own rate limits, read from the headers of any response.

Providers know the account's real limits (they depend on the tier) and send them on every
response, so the transport paces itself by what they say rather than by a guess in settings:

- OpenAI and OpenAI-compatible gateways: ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``;
  limits are per minute, resets are Go durations (``1s``, ``12ms``, ``6m0s``, ``2m59.56s``) until
  the window is whole again.
- Groq: the same names, but its request limit is per DAY (RPD); its token limit is per minute.
- Anthropic: ``anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,
  reset}``; limits per minute, resets are RFC 3339 timestamps.

A window is a bucket the provider refills evenly over its period (``limit`` per ``period_s``);
``remaining`` = 0 means nothing more until the reset.

Groq does not send its per-minute request limit in headers at all; its 429 says it in words
("on requests per minute (RPM): Limit 30, ..."), as OpenAI's does ("requests per min (RPM)").
`refusal_windows` reads those, so one refusal sets the pace for the requests after it.

This is the one reader of these headers: the error table (models/errors.py) takes a 429's
wait from `retry_after_header` and `latest_reset` here, and a success that spends a window from
`exhausted_until_reset`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

MINUTE = 60.0
DAY = 86_400.0


@dataclass(frozen=True)
class Window:
    """One limit the provider reported: `limit` per `period_s`, `remaining` now, full in
    `reset_s` seconds. `unit` is "requests" or "tokens".

    `reset_late_s`: how much later than `reset_s` the reset may really come. Anthropic stamps
    its resets to the whole second, so the moment can be up to a second after the stamp. A
    rest until the reset ends at the stamp (the pacer's refill still counts what is left);
    the pacer counts the window full only at the latest moment the stamp allows, or a reset
    read early lets a burst into a window the provider still has short."""

    name: str  # "requests", "tokens", "input-tokens", "output-tokens"
    unit: str
    limit: float
    remaining: float
    reset_s: float
    period_s: float
    reset_late_s: float = 0.0

    @property
    def full_in_s(self) -> float:
        """Seconds until the window is surely full again."""
        return self.reset_s + self.reset_late_s

    @property
    def rate_per_s(self) -> float:
        return self.limit / self.period_s


def read_windows(
    protocol: str, headers: Mapping[str, str], *, now: datetime | None = None
) -> list[Window]:
    """Every complete window in `headers` (names in lower case); [] when the provider sent none."""
    lowered = _lower(headers)
    if any(name.startswith("anthropic-ratelimit-") for name in lowered):
        return _anthropic(lowered, now or datetime.now(UTC))
    request_period = DAY if protocol == "groq" else MINUTE
    windows = []
    for unit, period in (("requests", request_period), ("tokens", MINUTE)):
        limit, remaining, reset_s = _openai_fields(lowered, unit)
        window = _window(unit, unit, period, limit, remaining, reset_s)
        if window is not None:
            windows.append(window)
    return windows


def retry_after_header(headers: Mapping[str, str]) -> float | None:
    """Seconds a refusal asks us to wait: ``retry-after-ms``, else ``retry-after`` in seconds
    (``7``), as a Go duration or as an HTTP date; None when neither says anything usable."""
    lowered = _lower(headers)
    if "retry-after-ms" in lowered:
        try:
            return max(0.0, float(lowered["retry-after-ms"]) / 1000)
        except ValueError:
            pass
    if "retry-after" in lowered:
        value = lowered["retry-after"].strip()
        seconds = parse_duration(value)
        if seconds is not None:
            return seconds
        try:
            moment = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            moment = None
        if moment is not None:
            return max(0.0, (moment - datetime.now(UTC)).total_seconds())
    return None


def latest_reset(headers: Mapping[str, str]) -> float | None:
    """Seconds until the later of the ``x-ratelimit-reset-{requests,tokens}`` resets."""
    lowered = _lower(headers)
    known = [_openai_fields(lowered, unit)[2] for unit in ("requests", "tokens")]
    resets = [reset for reset in known if reset is not None]
    return max(resets) if resets else None


def exhausted_until_reset(headers: Mapping[str, str]) -> float | None:
    """On a success: seconds until the key may be used again if a window is already spent
    (``x-ratelimit-remaining-*`` at 0 with its reset, even when no limit came with them)."""
    lowered = _lower(headers)
    waits = []
    for unit in ("requests", "tokens"):
        _, remaining, reset_s = _openai_fields(lowered, unit)
        if remaining is None or reset_s is None:
            continue
        try:
            if float(remaining) > 0:
                continue
        except ValueError:
            continue
        waits.append(reset_s)
    return max(waits) if waits else None


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


def parse_duration(text: str) -> float | None:
    """Go's duration text (``12ms``, ``1s``, ``6m0s``, ``2m59.56s``) or bare seconds (``7``)
    -> seconds; None when it is neither."""
    text = text.strip().lower()
    if not text:
        return None
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    total = 0.0
    matched = ""
    for number, unit in _DURATION_PART.findall(text):
        value = float(number)
        total += {"ms": value / 1000, "s": value, "m": value * 60, "h": value * 3600}[unit]
        matched += number + unit
    return total if matched and matched == text.replace(" ", "") else None


def _lower(headers: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in headers.items()}


def _openai_fields(
    lowered: Mapping[str, str], unit: str
) -> tuple[str | None, str | None, float | None]:
    """``x-ratelimit-{limit,remaining,reset}-{unit}``: limit and remaining as sent, the reset
    in seconds."""
    return (
        lowered.get(f"x-ratelimit-limit-{unit}"),
        lowered.get(f"x-ratelimit-remaining-{unit}"),
        _duration(lowered.get(f"x-ratelimit-reset-{unit}")),
    )


_REFUSAL = re.compile(
    r"on (requests|tokens) per (min(?:ute)?|day) \((?:RPM|TPM|RPD|TPD)\): limit (\d+)",
    re.IGNORECASE,
)


def refusal_windows(body: Any, retry_after_s: float | None) -> list[Window]:
    """Windows named in a 429's message ("... on requests per minute (RPM): Limit 30 ..."),
    spent until `retry_after_s`."""
    windows = []
    for message in _messages(body):
        for unit, per, limit in _REFUSAL.findall(message):
            period = DAY if per.lower() == "day" else MINUTE
            unit = unit.lower()
            name = unit if unit == "tokens" and period == MINUTE else f"{unit}-per-{per[:3]}"
            reset = retry_after_s if retry_after_s is not None else period / float(limit)
            windows.append(Window(name, unit, float(limit), 0.0, reset, period))
    return windows


def _messages(body: Any) -> Iterator[str]:
    if isinstance(body, dict):
        for key, value in body.items():
            if key == "message" and isinstance(value, str):
                yield value
            else:
                yield from _messages(value)
    elif isinstance(body, list):
        for item in body:
            yield from _messages(item)


def _anthropic(lowered: Mapping[str, str], now: datetime) -> list[Window]:
    windows = []
    for name in ("requests", "tokens", "input-tokens", "output-tokens"):
        prefix = f"anthropic-ratelimit-{name}"
        moment = _moment(lowered.get(f"{prefix}-reset"))
        window = _window(
            name,
            "requests" if name == "requests" else "tokens",
            MINUTE,
            lowered.get(f"{prefix}-limit"),
            lowered.get(f"{prefix}-remaining"),
            None if moment is None else max(0.0, (moment - now).total_seconds()),
        )
        if window is not None:
            # A stamp to the whole second (no fraction) may stand for a moment a second later.
            late = 1.0 if moment is not None and moment.microsecond == 0 else 0.0
            windows.append(replace(window, reset_late_s=late))
    return windows


def _window(
    name: str,
    unit: str,
    period: float,
    limit: str | None,
    remaining: str | None,
    reset_s: float | None,
) -> Window | None:
    try:
        limit_n = float(limit) if limit is not None else None
        remaining_n = float(remaining) if remaining is not None else None
    except ValueError:
        return None
    if limit_n is None or remaining_n is None or limit_n <= 0:
        return None
    if reset_s is None:
        # No reset given: assume the window refills evenly from what is left.
        reset_s = (limit_n - remaining_n) / limit_n * period
    return Window(name, unit, limit_n, max(0.0, remaining_n), max(0.0, reset_s), period)


def _duration(value: str | None) -> float | None:
    return parse_duration(value) if value else None


def _moment(value: str | None) -> datetime | None:
    """RFC 3339 (``2026-11-30T16:20:00Z``) → an aware datetime; None when absent or broken."""
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
