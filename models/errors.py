"""The one error table: what a provider failure amounts to, decided from what was on the wire.

litellm's exception classes are not evidence: it turns any message mentioning "rate limit" into
RateLimitError whatever the status, reports connection errors as 500, a Cloudflare 524 as Timeout
on one path and APIError on another, and errors inside HTTP 200 as anything from
InternalServerError to a bare ValueError. So we dig out the real HTTP status, headers and body
(the httpx response in the exception chain, or the parsed body litellm kept) and classify those.

`detail` strings are built only from status codes and provider error codes, never from provider
messages: OpenAI echoes part of a rejected key in its 401 message.
"""

from __future__ import annotations

import ast
import asyncio
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from models.policy.ratelimits import latest_reset, parse_duration, retry_after_header
from models.types import Outcome

__all__ = [
    "Classified",
    "Evidence",
    "classify",
    "classify_exception",
    "evidence_from_exception",
    "evidence_from_wire",
    "parse_retry_after",
]


@dataclass(frozen=True)
class Classified:
    """What one failure amounts to, and what it says about the key that was used.

    `per_model` is true when the provider counts the limit per model (rate limits, daily
    token caps): only that (key, model) rests, the key keeps serving the gateway's other
    models. False for account-wide verdicts (unpaid bill, rejected key): the whole key rests.
    """

    outcome: Outcome
    detail: str
    status_code: int | None = None
    retry_after_s: float | None = None
    per_model: bool = False
    # A request parameter a 400 refused, as one of our own names (never the provider's words):
    # "tool_choice" lets consolidation retry with automatic choice (see _refused_param).
    refused_param: str | None = None


@dataclass
class Evidence:
    """What we could recover about one failed call, independent of litellm's exception class."""

    status_code: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    bodies: list[Any] = field(default_factory=list)  # parsed JSON bodies found anywhere
    raw_text: str = ""  # the raw body when it was not JSON (HTML error pages)
    messages: list[str] = field(default_factory=list)  # exception texts, last resort only
    timed_out: bool = False
    connection_failed: bool = False
    malformed_200: bool = False  # the provider answered 200 with something that is no completion


# --- evidence extraction ----------------------------------------------------------------------


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        current = todo.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        for nxt in (
            getattr(current, "original_exception", None),
            current.__cause__,
            current.__context__,
        ):
            if isinstance(nxt, BaseException):
                todo.append(nxt)


def _response_of(exc: BaseException) -> Any:
    try:
        return getattr(exc, "response", None)
    except Exception:  # some SDK exceptions raise when the response is absent
        return None


def _lower_headers(headers: Any) -> dict[str, str]:
    if not headers:
        return {}
    try:
        items = headers.items()
    except AttributeError:
        return {}
    return {str(k).lower(): str(v) for k, v in items}


def evidence_from_wire(status: int | None, headers: Mapping[str, str], body: Any) -> Evidence:
    """Evidence from what our HTTP hook saw (see models/worker/wire.py)."""
    ev = Evidence(status_code=status, headers={k.lower(): v for k, v in headers.items()})
    if body is not None:
        ev.bodies.append(body)
    return ev


def evidence_from_exception(
    exc: BaseException,
    wire_status: int | None = None,
    wire_headers: Mapping[str, str] | None = None,
    wire_body: Any = None,
) -> Evidence:
    """Collect status, headers and bodies from an exception and everything it wraps.

    What the wire hook saw comes first: it is the provider's own status and body, untouched
    by litellm's parsing.
    """
    ev = evidence_from_wire(wire_status, wire_headers or {}, wire_body)
    names = " ".join(type(e).__name__ for e in _chain(exc))
    for current in _chain(exc):
        response = _response_of(current)
        status = getattr(response, "status_code", None)
        text = ""
        if response is not None and isinstance(status, int):
            try:
                text = response.text or ""
            except Exception:  # a streamed response that was never read
                text = ""
            # litellm fabricates 500 responses with an empty body; only a body proves the wire.
            if text and ev.status_code is None:
                ev.status_code = status
            if text:
                _add_text(ev, text)
            if not ev.headers and text:
                ev.headers = _lower_headers(getattr(response, "headers", None))
        if not ev.headers:
            ev.headers = _lower_headers(getattr(current, "litellm_response_headers", None))
        body = getattr(current, "body", None)
        if isinstance(body, (dict, list)):
            ev.bodies.append(body)
        message = getattr(current, "message", None) or str(current)
        if message:
            ev.messages.append(str(message))
            _add_embedded_json(ev, str(message))
        if isinstance(current, (asyncio.TimeoutError, TimeoutError)):
            ev.timed_out = True
    if ev.status_code is None:
        # No body on the wire reached us; fall back to what litellm says the status was.
        for current in _chain(exc):
            for attr in ("provider_status_code", "status_code"):
                value = getattr(current, attr, None)
                if isinstance(value, int) and value not in (500,):
                    ev.status_code = value
                    break
            if ev.status_code is not None:
                break
    joined = " ".join(ev.messages).lower()
    if "timeout" in names.lower() or "timed out" in joined:
        ev.timed_out = True
    if any(
        marker in joined
        for marker in (
            "connection error",
            "server disconnected",
            "payload is not completed",
            "connection reset",
            "connection refused",
            "connecterror",
            "remoteprotocolerror",
            "incomplete chunked read",
        )
    ):
        ev.connection_failed = True
    if any(
        marker in joined
        for marker in (
            "no attribute 'service_tier'",
            "no 'choices'",
            "'content'",
            "stream ended before a finish_reason",
            "invalid literal for int()",
        )
    ):
        ev.malformed_200 = True
    return ev


def _add_text(ev: Evidence, text: str) -> None:
    parsed = _try_json(text)
    if parsed is not None:
        ev.bodies.append(parsed)
    elif not ev.raw_text:
        ev.raw_text = text


def _try_json(text: str) -> Any:
    text = text.strip()
    if text.startswith(("b'", 'b"')):
        try:
            text = ast.literal_eval(text).decode("utf-8", "replace")
        except (ValueError, SyntaxError, AttributeError):
            return None
    if not text.startswith(("{", "[")):
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    try:  # litellm sometimes formats a dict with repr()
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, (dict, list)) else None


def _add_embedded_json(ev: Evidence, message: str) -> None:
    """Exception texts like "GroqException - {...}" or "AnthropicException - b'{...}'"."""
    for marker in ("b'{", 'b"{', "{", "["):
        start = message.find(marker)
        if start < 0:
            continue
        parsed = _try_json(message[start:])
        if parsed is None and marker.startswith("b"):
            continue
        if parsed is not None:
            ev.bodies.append(parsed)
        return


# --- classification ---------------------------------------------------------------------------

_QUOTA_CODES = {
    "insufficient_quota",
    "arrearage",
    "billing_hard_limit_reached",
    "billing_not_active",
    "billing_error",
    "credit_balance_too_low",
    "quota_exceeded",
    "spend_limit_reached",
}
_QUOTA_PHRASES = (
    "exceeded your current quota",
    "credit balance is too low",
    "spend limit",
    "spending limit",
    "usage limit",
    "billing",
    "account is not active",
    "in good standing",
)
# A limit counted per day: waiting minutes or hours is what it takes (Groq's TPD / RPD).
_PER_DAY_PHRASES = ("per day", "(tpd)", "(rpd)", "daily")
# A limit counted per minute (or second): over in seconds. "per min" covers OpenAI's "per min".
_PER_MINUTE_PHRASES = ("per minute", "per min", "(tpm)", "(rpm)", "per second")
# A single request bigger than the per-minute allowance (Groq's 413): no wait makes it fit.
_TOO_LARGE_PHRASES = ("request too large", "reduce your message size")
_URL = re.compile(r"https?://\S+")
_RATE_LIMIT_CODES = {
    "rate_limit_exceeded",
    "rate_limit_error",
    "ratelimitexceeded",
    "too_many_requests",
    "resource_exhausted",
    "throttling",
    "tokens",
    "requests",
}
_AUTH_CODES = {
    "invalid_api_key",
    "authentication_error",
    "permission_error",
    "invalid_authentication",
    "unauthorized",
    "permission_denied",
    "unauthenticated",
}
_UNAVAILABLE_CODES = {"overloaded_error", "api_error", "server_error", "service_unavailable"}
_BAD_REQUEST_CODES = {
    "tool_use_failed",
    "invalid_request_error",
    "context_length_exceeded",
    "string_above_max_length",
    "invalid_value",
    "model_not_found",
    "not_found_error",
}


def _error_objects(body: Any) -> Iterator[dict[str, Any]]:
    """Every dict that looks like an error: the body, its "error", lists of them, JSON-in-JSON."""
    stack = [body]
    depth = 0
    while stack and depth < 50:
        depth += 1
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            yield item
            for key in ("error", "errors"):
                if key in item:
                    stack.append(item[key])
            message = item.get("message")
            if isinstance(message, str) and message.strip().startswith(("{", "[")):
                stack.append(_try_json(message))  # double-encoded errors


def _codes(ev: Evidence) -> list[str]:
    codes: list[str] = []
    for body in ev.bodies:
        for obj in _error_objects(body):
            for key in ("code", "type", "status"):
                value = obj.get(key)
                if isinstance(value, str) and value and value != "error":
                    codes.append(value)
    return codes


def _body_messages(ev: Evidence) -> list[str]:
    out = []
    for body in ev.bodies:
        for obj in _error_objects(body):
            if isinstance(obj.get("message"), str):
                out.append(obj["message"])
    return out


def _refused_param(ev: Evidence, lowered_codes: set[str]) -> str | None:
    """ "tool_choice" when a 400 refuses the tool choice itself, else None.

    Providers say so in different ways (real bodies in tests/fakes/providers.py): OpenAI names
    the parameter in `param`; Anthropic ("Thinking may not be enabled when tool_choice forces
    tool use."), Groq, DeepSeek and Qwen only in the message. Only the fixed name leaves here,
    never the message. Groq's `tool_use_failed` ("Tool choice is required, but model did not
    call a tool") is not a refusal: the choice was accepted and the model failed it.
    """
    if "tool_use_failed" in lowered_codes:
        return None
    for body in ev.bodies:
        for obj in _error_objects(body):
            if obj.get("param") == "tool_choice":
                return "tool_choice"
            message = obj.get("message")
            if isinstance(message, str) and re.search(r"tool[_ ]choice", message, re.IGNORECASE):
                return "tool_choice"
    return None


def _html_title(text: str) -> str:
    match = re.search(r"<title>(.*?)</title>", text, re.IGNORECASE | re.DOTALL)
    if not match:
        return ""
    title = match.group(1).strip()
    code = re.search(r"\b(5\d\d)\b", title)
    return f"html {code.group(1)}" if code else "html page"


def classify(ev: Evidence) -> Classified:
    """The table. Order matters: specific body codes beat generic statuses."""
    status = ev.status_code
    codes = _codes(ev)
    lowered = {c.lower() for c in codes}
    code_label = next((c for c in codes if c.lower() not in ("invalid_request_error",)), "")
    if not code_label and codes:
        code_label = codes[0]
    body_text = " ".join(_body_messages(ev)).lower()
    retry_after = parse_retry_after(ev.headers, ev.bodies)
    prefix = str(status) if status is not None else ""

    def make(outcome: Outcome, what: str) -> Classified:
        detail = " ".join(part for part in (prefix, what) if part)
        refused = _refused_param(ev, lowered) if outcome is Outcome.BAD_REQUEST else None
        return Classified(outcome, detail[:120], status, retry_after, refused_param=refused)

    throttled = any(c.startswith("throttling") for c in lowered)
    # Free text is read last and without its links: Groq's per-minute 429 ends with "Upgrade
    # to Dev Tier today at https://console.groq.com/settings/billing", which is no bill.
    prose = _URL.sub(" ", body_text)
    rate_limited = bool(throttled or lowered & _RATE_LIMIT_CODES or status in (429, 413))
    if lowered & _QUOTA_CODES:
        return make(Outcome.QUOTA, code_label or "quota exhausted")
    if rate_limited and (status == 413 or any(p in prose for p in _TOO_LARGE_PHRASES)):
        # Waiting does not help, another model (or a smaller request) does; the key is fine.
        return make(Outcome.BAD_REQUEST, code_label or "request too large")
    if rate_limited and any(p in prose for p in _PER_DAY_PHRASES):
        # A daily cap of this model: fall back now, rest (key, model) until it resets.
        return replace(make(Outcome.QUOTA, code_label or "daily limit"), per_model=True)
    if rate_limited and (
        retry_after is not None or throttled or any(p in prose for p in _PER_MINUTE_PHRASES)
    ):
        return replace(make(Outcome.RATE_LIMIT, code_label or "rate limited"), per_model=True)
    if (status in (429, 402, 403, 400) or rate_limited or status == 200) and any(
        p in prose for p in _QUOTA_PHRASES
    ):
        return make(Outcome.QUOTA, code_label or "quota exhausted")
    if status == 402:
        return make(Outcome.QUOTA, code_label or "payment required")
    if status in (401, 403) or lowered & _AUTH_CODES:
        return make(Outcome.AUTH, code_label or "unauthorized")
    if rate_limited:
        return replace(make(Outcome.RATE_LIMIT, code_label or "rate limited"), per_model=True)
    if "tool_use_failed" in lowered:
        return make(Outcome.BAD_REQUEST, "tool_use_failed")
    if status in (408, 504, 524) or (ev.timed_out and (status is None or status >= 500)):
        return make(Outcome.TIMEOUT, _html_title(ev.raw_text) or code_label or "timeout")
    if lowered & _UNAVAILABLE_CODES or (status is not None and status >= 500):
        return make(Outcome.UNAVAILABLE, _html_title(ev.raw_text) or code_label or "server error")
    if status is not None and 400 <= status < 500:
        return make(Outcome.BAD_REQUEST, code_label or "bad request")
    if lowered & _BAD_REQUEST_CODES:
        return make(Outcome.BAD_REQUEST, code_label)
    if ev.timed_out:
        return make(Outcome.TIMEOUT, "timeout")
    if ev.connection_failed:
        return make(Outcome.UNAVAILABLE, "connection error")
    if ev.malformed_200 or status == 200 or codes:
        # An error object or garbage inside a 200 is a provider failure, not a success.
        return make(Outcome.UNAVAILABLE, f"error in 200 {code_label}".strip())
    return make(Outcome.UNAVAILABLE, "unrecognised failure")


def classify_exception(
    exc: BaseException,
    wire_status: int | None = None,
    wire_headers: Mapping[str, str] | None = None,
    wire_body: Any = None,
) -> Classified:
    return classify(evidence_from_exception(exc, wire_status, wire_headers, wire_body))


# --- retry hints ------------------------------------------------------------------------------

_TRY_AGAIN = re.compile(r"try again in ((?:\d+(?:\.\d+)?(?:ms|h|m|s))+)", re.IGNORECASE)


def parse_retry_after(headers: Mapping[str, str], bodies: list[Any] | None = None) -> float | None:
    """Seconds to wait, from Retry-After(-ms), RetryInfo or the message, x-ratelimit-reset-*.

    The headers are read by models/policy/ratelimits.py; only the bodies are read here."""
    seconds = retry_after_header(headers)
    if seconds is not None:
        return seconds
    for body in bodies or []:
        for obj in _error_objects(body):
            details = obj.get("details")
            if isinstance(details, list):
                for detail in details:
                    if isinstance(detail, dict) and isinstance(detail.get("retryDelay"), str):
                        seconds = parse_duration(detail["retryDelay"])
                        if seconds is not None:
                            return seconds
            message = obj.get("message")
            if isinstance(message, str):
                match = _TRY_AGAIN.search(message)
                if match:
                    seconds = parse_duration(match.group(1))
                    if seconds is not None:
                        return seconds
    return latest_reset(headers)
