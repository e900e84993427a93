"""Fake LLM gateways (OpenAI-compatible, Groq, Anthropic) on 127.0.0.1 for tests and benchmarks.

They speak the real wire formats closely enough that the real litellm parses them, and they
reproduce the providers' real error bodies, because the transport layer must be
proven against what providers actually send rather than against our own idea of it.

Beyond the shared API: `fp.invalid_keys` (a set of keys answered with the provider's 401),
`fp.enforce_rate_limit(rps, burst, ...)` (a provider-side limit, see `ProviderLimit`: every
answer then carries the provider's real rate-limit headers, and requests past the limit get
its real 429 body with retry-after, counted in `fp.rate_limited`) and a `headers=` option on
Reply/ToolCallReply/Fault (extra response headers), for key-rotation and pacing tests and the
retry-storm and burst benchmarks.

Chat tools: `ToolCallReply` answers with one tool call (or several, `also=[...]`), streaming or
not, in the provider's own format, its arguments given or computed when it answers (a time "in
3 seconds" written as a real model writes it); `Respond(fn)` computes the step from the request
body (a summarising consolidation model, a model that reads its tool results). A ToolCallReply
sent to a request that offers no tools, or says `tool_choice: none`, is answered with its `text`
instead (as a real model then must). Each recorded request exposes `system_text()`,
`tool_results()`, `tool_names()` and `tool_choice()` in one shape whatever the protocol.

Usage::

    async with FakeProvider("groq") as fp:
        fp.script("qwen/qwen3-32b", Fault("rate_limit_429", retry_after=1), Reply("hi"))
        ...  # point litellm at fp.base_url
        assert fp.requests[0].api_key == "gsk-test"
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import math
import random
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web

PROVIDER_KINDS = ("openai", "groq", "anthropic")

ANTHROPIC_IMAGE_MAX_BYTES = 5 * 1024 * 1024
# Faults only one provider sends (each fake serves its own body for `rate_limit_429`).
PROVIDER_FAULTS = {
    "quota_429": "openai",  # insufficient_quota; Groq's daily cap is groq_tpd_429
    "overloaded_529": "anthropic",
    "anthropic_rate_limit_429": "anthropic",
}
FAULT_KINDS = (
    "rate_limit_429",
    "quota_429",
    "overloaded_529",
    "anthropic_rate_limit_429",
    "server_500",
    "bad_gateway_502",
    "cloudflare_524",
    "unauthorized_401",
    "bad_request_400",
    "tool_use_failed_400",
    "tool_use_failed_stream",
    "throttling_in_200",
    "arrearage_in_200",
    "gemini_429",
    "groq_tpm_429",
    "groq_tpd_429",
    "groq_413",
    "empty_200",
    "hang",
    "disconnect",
    "midstream_disconnect",
)


@dataclass
class Reply:
    """A successful text answer. Streams as SSE chunks of `chunk_chars` characters."""

    text: str
    chunk_chars: int = 8
    split_utf8: bool = False
    delay: float = 0.0
    chunk_delay: float = 0.0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    headers: dict[str, str] | None = None
    send_usage: bool = True  # False: a gateway that never reports usage in a stream
    # A gateway that never ends its stream: the text's chunks again and again (ignoring
    # max_tokens), until the client hangs up. Set a chunk_delay.
    endless: bool = False


Arguments = dict[str, Any] | str
# Arguments computed when the fake answers: what a model writes from the time in its prompt.
ArgumentsSource = Arguments | Callable[[], Arguments]


@dataclass
class ToolCallReply:
    """A tool call; a str `arguments` is sent verbatim (it may be invalid JSON on purpose).

    `arguments` may be a callable returning them, called once when the fake answers the
    request: a real model writes a time ("in 3 seconds") when it answers, from the current time
    its prompt gives, not when the test scripted it.

    `also` adds further calls to the same answer (parallel tool calls), each a (name, arguments)
    pair, whose arguments may be callables too. `text` is said before the calls, or alone when
    the request allows no tool call.
    """

    name: str = "save_memory"
    arguments: ArgumentsSource = field(default_factory=dict)
    text: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    headers: dict[str, str] | None = None
    also: list[tuple[str, ArgumentsSource]] = field(default_factory=list)
    chunk_chars: int = 8
    delay: float = 0.0
    chunk_delay: float = 0.0  # between the streamed chunks of `text`, as Reply's

    def written(self) -> ToolCallReply:
        """This answer with its computed arguments called: the one the fake sends."""
        return replace(
            self,
            arguments=_written(self.arguments),
            also=[(name, _written(args)) for name, args in self.also],
        )

    @property
    def arguments_text(self) -> str:
        return _arguments_text(self.arguments)

    def calls(self) -> list[tuple[str, str]]:
        """(name, arguments JSON text) of every call in this answer."""
        return [(self.name, self.arguments_text)] + [
            (name, _arguments_text(args)) for name, args in self.also
        ]


def _written(arguments: ArgumentsSource) -> Arguments:
    return arguments() if callable(arguments) else arguments


def _arguments_text(arguments: ArgumentsSource) -> str:
    if callable(arguments):
        raise TypeError("computed arguments are written when the fake answers (see written())")
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False)


@dataclass
class Fault:
    """A failure with the provider's real body (see FAULT_KINDS)."""

    kind: str
    retry_after: float | None = None
    after_chars: int = 0
    headers: dict[str, str] | None = None

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}")


@dataclass
class Respond:
    """A step computed from the request body when the request arrives."""

    fn: Callable[[RecordedRequest], Reply | ToolCallReply | Fault]


Step = Reply | ToolCallReply | Fault | Respond


@dataclass
class RecordedRequest:
    path: str
    api_key: str | None
    model: str | None
    body: dict[str, Any]
    stream: bool
    at: float

    @property
    def is_transcription(self) -> bool:
        return self.path.endswith("/audio/transcriptions")

    def image_parts(self) -> list[dict[str, str]]:
        """Every image the request carried: {"media_type", "data"} (base64), in order.

        OpenAI sends `{"type": "image_url", "image_url": {"url": "data:<type>;base64,<b64>"}}`;
        Anthropic `{"type": "image", "source": {"type": "base64", "media_type", "data"}}`.
        """
        found: list[dict[str, str]] = []
        for message in self.body.get("messages") or []:
            content = message.get("content")
            if not isinstance(content, list):
                continue
            for part in content:
                if not isinstance(part, dict):
                    continue
                if part.get("type") == "image_url":
                    url = (part.get("image_url") or {}).get("url", "")
                    head, _, data = url.partition(",")
                    media_type = head.removeprefix("data:").removesuffix(";base64")
                    found.append({"media_type": media_type, "data": data})
                elif part.get("type") == "image":
                    source = part.get("source") or {}
                    found.append(
                        {"media_type": source.get("media_type", ""), "data": source.get("data", "")}
                    )
        return found

    def system_text(self) -> str:
        """The system prompt, whether sent as a message (OpenAI, Groq) or `system` (Anthropic)."""
        system = self.body.get("system")
        if system is not None:
            return _text_of(system)
        return "\n".join(
            _text_of(m.get("content"))
            for m in self.body.get("messages") or []
            if m.get("role") == "system"
        )

    def tool_names(self) -> list[str]:
        """Names of the tools offered (OpenAI `function.name`, Anthropic `name`)."""
        names = []
        for tool in self.body.get("tools") or []:
            function = tool.get("function")
            names.append(function.get("name") if isinstance(function, dict) else tool.get("name"))
        return [n for n in names if n]

    def tool_choice(self) -> Any:
        return self.body.get("tool_choice")

    def allows_tool_call(self) -> bool:
        choice = self.tool_choice()
        if choice == "none" or (isinstance(choice, dict) and choice.get("type") == "none"):
            return False
        return bool(self.tool_names())

    def tool_calls(self) -> list[dict[str, Any]]:
        """Tool calls of earlier assistant turns in the request: {id, name, arguments}."""
        found = []
        for message in self.body.get("messages") or []:
            if message.get("role") != "assistant":
                continue
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                found.append(
                    {
                        "id": call.get("id"),
                        "name": function.get("name"),
                        "arguments": json.loads(function.get("arguments") or "{}"),
                    }
                )
            content = message.get("content")
            if isinstance(content, list):
                for block in content:
                    if isinstance(block, dict) and block.get("type") == "tool_use":
                        found.append(
                            {"id": block.get("id"), "name": block.get("name"),
                             "arguments": block.get("input")}
                        )  # fmt: skip
        return found

    def tool_results(self) -> list[dict[str, Any]]:
        """Tool results the client sent back: {id, content} (OpenAI `role: tool` messages,
        Anthropic `tool_result` blocks in a user turn)."""
        found = []
        for message in self.body.get("messages") or []:
            if message.get("role") == "tool":
                found.append(
                    {"id": message.get("tool_call_id"), "content": _text_of(message.get("content"))}
                )
            content = message.get("content")
            if message.get("role") == "user" and isinstance(content, list):
                for block in content:
                    if isinstance(block, dict) and block.get("type") == "tool_result":
                        found.append(
                            {"id": block.get("tool_use_id"),
                             "content": _text_of(block.get("content"))}
                        )  # fmt: skip
        return found


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "") if isinstance(part, dict) else str(part) for part in content
        )
    return str(content)


@dataclass
class ProviderLimit:
    """A provider-side limit as the real ones work: a bucket of `burst` requests refilled at
    `rps` (OpenAI enforces its per-minute limit in such short slices), a per-minute token
    bucket, and for Groq a per-day request count. The headers state it in each provider's own
    units: requests per minute (OpenAI, Anthropic) or per day (Groq), tokens per minute."""

    rps: float
    burst: float = 1.0
    tokens_per_minute: float = 1_000_000.0
    requests_per_day: float = 14_400.0
    tokens: float = 0.0
    token_bucket: float = 0.0
    day_used: int = 0
    updated: float = 0.0

    def __post_init__(self) -> None:
        self.tokens = self.burst
        self.token_bucket = self.tokens_per_minute
        self.updated = time.monotonic()

    def refill(self) -> None:
        now = time.monotonic()
        elapsed = now - self.updated
        self.tokens = min(self.burst, self.tokens + elapsed * self.rps)
        self.token_bucket = min(
            self.tokens_per_minute, self.token_bucket + elapsed * self.tokens_per_minute / 60
        )
        self.updated = now

    def admit(self, prompt_tokens: int) -> float | None:
        """None when the request is admitted (and counted); else seconds until it would be."""
        self.refill()
        if self.tokens < 1:
            return (1 - self.tokens) / self.rps
        if self.token_bucket < prompt_tokens:
            return (prompt_tokens - self.token_bucket) / (self.tokens_per_minute / 60)
        if self.day_used >= self.requests_per_day:
            return 86_400.0
        self.tokens -= 1
        self.token_bucket -= prompt_tokens
        self.day_used += 1
        return None

    def headers(self, kind: str) -> dict[str, str]:
        """The provider's own rate-limit headers, as it sends them on every response."""
        self.refill()
        rpm = self.rps * 60
        requests_full_s = (self.burst - self.tokens) / self.rps
        tokens_full_s = (self.tokens_per_minute - self.token_bucket) / (self.tokens_per_minute / 60)
        if kind == "anthropic":
            now = datetime.now(UTC)

            def stamp(seconds: float) -> str:
                moment = now + timedelta(seconds=math.ceil(seconds))
                return moment.strftime("%Y-%m-%dT%H:%M:%SZ")

            out = {
                "anthropic-ratelimit-requests-limit": _number(rpm),
                "anthropic-ratelimit-requests-remaining": str(math.floor(self.tokens)),
                "anthropic-ratelimit-requests-reset": stamp(requests_full_s),
            }
            for name in ("tokens", "input-tokens", "output-tokens"):
                out[f"anthropic-ratelimit-{name}-limit"] = _number(self.tokens_per_minute)
                out[f"anthropic-ratelimit-{name}-remaining"] = str(math.floor(self.token_bucket))
                out[f"anthropic-ratelimit-{name}-reset"] = stamp(tokens_full_s)
            return out
        if kind == "groq":  # requests per day, tokens per minute
            limit, remaining = self.requests_per_day, self.requests_per_day - self.day_used
            reset = self.day_used * 86_400 / self.requests_per_day
        else:
            limit, remaining, reset = rpm, math.floor(self.tokens), requests_full_s
        return {
            "x-ratelimit-limit-requests": _number(limit),
            "x-ratelimit-remaining-requests": _number(max(0, remaining)),
            "x-ratelimit-reset-requests": go_duration(reset),
            "x-ratelimit-limit-tokens": _number(self.tokens_per_minute),
            "x-ratelimit-remaining-tokens": str(max(0, math.floor(self.token_bucket))),
            "x-ratelimit-reset-tokens": go_duration(tokens_full_s),
        }


def go_duration(seconds: float) -> str:
    """Go's time.Duration text, as OpenAI and Groq send resets: 12ms, 1s, 6m0s, 2m59.56s."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))}ms"
    minutes, rest = divmod(round(seconds, 2), 60)
    text = f"{rest:.2f}".rstrip("0").rstrip(".") + "s"
    return f"{int(minutes)}m{text}" if minutes else text


# --- real error bodies, as the providers send them ------------------------------------------

_OPENAI_RATE_LIMIT = {
    "error": {
        "message": (
            "Rate limit reached for gpt-4.1 in organization org-FAKE on tokens per min (TPM): "
            "Limit 30000, Used 26113, Requested 5834. Please try again in 3.89s. Visit "
            "https://platform.openai.com/account/rate-limits to learn more."
        ),
        "type": "tokens",
        "param": None,
        "code": "rate_limit_exceeded",
    }
}
_OPENAI_QUOTA = {
    "error": {
        "message": (
            "You exceeded your current quota, please check your plan and billing details. For "
            "more information on this error, read the docs: "
            "https://platform.openai.com/docs/guides/error-codes/api-errors."
        ),
        "type": "insufficient_quota",
        "param": None,
        "code": "insufficient_quota",
    }
}
_ANTHROPIC_OVERLOADED = {
    "type": "error",
    "error": {"type": "overloaded_error", "message": "Overloaded"},
    "request_id": "req_011CFAKEoverloaded",
}
_ANTHROPIC_RATE_LIMIT = {
    "type": "error",
    "error": {
        "type": "rate_limit_error",
        "message": (
            "This request would exceed the rate limit for your organization (FAKE) of 50 "
            "input tokens per minute. For details, refer to: "
            "https://docs.claude.com/en/api/rate-limits."
        ),
    },
    "request_id": "req_011CFAKEratelimit",
}
_OPENAI_SERVER_ERROR = {
    "error": {
        "message": (
            "The server had an error while processing your request. Sorry about that! You can "
            "retry your request, or contact us through our help center if the error persists."
        ),
        "type": "server_error",
        "param": None,
        "code": None,
    }
}
_ANTHROPIC_SERVER_ERROR = {
    "type": "error",
    "error": {"type": "api_error", "message": "Internal server error"},
    "request_id": "req_011CFAKEapierror",
}
_BAD_GATEWAY_HTML = (
    "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
    "<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>cloudflare</center>\r\n"
    "</body>\r\n</html>\r\n"
)
_CLOUDFLARE_524_HTML = (
    '<!DOCTYPE html>\n<!--[if lt IE 7]> <html class="no-js ie6 oldie" lang="en-US"> '
    '<![endif]-->\n<html class="no-js" lang="en-US">\n<head>\n'
    "<title>api.example.com | 524: A timeout occurred</title>\n"
    '<meta charset="UTF-8" />\n</head>\n<body>\n<div id="cf-wrapper">\n'
    '<h1><span class="cf-error-type">Error</span> <span class="cf-error-code">524</span></h1>\n'
    "<h2>A timeout occurred</h2>\n<p>The origin web server timed out responding to this "
    "request.</p>\n<span>Cloudflare Ray ID: <strong>8f0fake0524</strong></span>\n"
    "</div>\n</body>\n</html>\n"
)
_GROQ_TOOL_USE_FAILED = {
    "error": {
        "message": (
            "Failed to call a function. Please adjust your prompt. See 'failed_generation' "
            "for more details."
        ),
        "type": "invalid_request_error",
        "code": "tool_use_failed",
        "failed_generation": '<function=save_memory>{"history_entry": "[2026-11-30 09:00] ',
    }
}
_THROTTLING_IN_200 = {
    "code": "Throttling.RateQuota",
    "message": "Requests rate limit exceeded",
    "request_id": "5b4c0a2e-fake-4f1b-9c1e-throttling",
}
_ARREARAGE_IN_200 = {
    "error": {
        "code": "Arrearage",
        "message": "Access denied, please make sure your account is in good standing.",
        "type": "Arrearage",
    }
}
_GEMINI_429 = {
    "error": {
        "code": 429,
        "status": "RESOURCE_EXHAUSTED",
        "message": (
            "You exceeded your current quota, please check your plan and billing details. "
            "Quota exceeded for metric: generativelanguage.googleapis.com/"
            "generate_content_free_tier_requests, limit: 10"
        ),
        "details": [
            {
                "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                "violations": [
                    {
                        "quotaMetric": "generativelanguage.googleapis.com/"
                        "generate_content_free_tier_requests",
                        "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
                    }
                ],
            },
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "26s"},
        ],
    }
}

# Groq, verbatim shapes of its real bodies (note the billing link inside a rate limit).
_GROQ_UPGRADE = (
    " Need more tokens? Upgrade to Dev Tier today at https://console.groq.com/settings/billing"
)


def _groq_tokens_error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "tokens", "code": "rate_limit_exceeded"}}


def _groq_tpm_429(model: str, wait_s: float = 1.5) -> dict[str, Any]:
    return _groq_tokens_error(
        f"Rate limit reached for model `{model}` in organization `org_x` service tier "
        "`on_demand` on tokens per minute (TPM): Limit 12000, Used 11000, Requested 2000. "
        f"Please try again in {go_duration(wait_s)}." + _GROQ_UPGRADE
    )


def _groq_tpd_429(model: str) -> dict[str, Any]:
    return _groq_tokens_error(
        f"Rate limit reached for model `{model}` in organization `org_x` service tier "
        "`on_demand` on tokens per day (TPD): Limit 200000, Used 197277, Requested 4476. "
        "Please try again in 12m37.296s." + _GROQ_UPGRADE
    )


def _groq_413(model: str) -> dict[str, Any]:
    return _groq_tokens_error(
        f"Request too large for model `{model}` in organization `org_x` service tier "
        "`on_demand` on tokens per minute (TPM): Limit 6000, Requested 15041, please reduce "
        "your message size and try again." + _GROQ_UPGRADE
    )


# What providers really answer when a request forces a tool and the model or mode cannot be
# forced (found in public issue threads; the fake sends them verbatim, ids aside):
TOOL_CHOICE_REFUSALS: dict[str, dict[str, Any]] = {
    # Anthropic with extended thinking and tool_choice {"type": "tool"|"any"}: the message in
    # mastra-ai/mastra#7507, usestrix/strix#503, can1357/oh-my-pi#341 (HTTP 400).
    "anthropic_thinking": {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "Thinking may not be enabled when tool_choice forces tool use.",
        },
        "request_id": "req_011CFAKEtoolchoice",
    },
    # OpenAI names the refused parameter in `param` (body quoted in OpenHands' FAQ and in
    # several SDK comments: "Invalid value for 'tool_choice': ..."; HTTP 400).
    "openai_param": {
        "error": {
            "message": (
                "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' "
                "are specified."
            ),
            "type": "invalid_request_error",
            "param": "tool_choice",
            "code": None,
        }
    },
    # Groq refusing a tool_choice value (brianpetro/obsidian-smart-connections#942; HTTP 400).
    "groq_value": {
        "error": {
            "message": "Only allowed string values for 'tool_choice' are none, auto, and required",
            "type": "invalid_request_error",
        }
    },
    # Qwen3 in thinking mode behind an OpenAI-compatible API (cloudwego/eino#994; HTTP 400).
    "qwen_thinking": {
        "error": {
            "message": (
                "<400> InternalError.Algo.InvalidParameter: The tool_choice parameter does not "
                "support being set to required or object in thinking mode"
            ),
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_parameter_error",
        },
        "id": "chatcmpl-5bf78562-fake-9de2-8d10-5429ef761b7e",
        "request_id": "5bf78562-fake-9de2-8d10-5429ef761b7e",
    },
}


def _forces_a_tool(body: dict[str, Any]) -> bool:
    """tool_choice naming a tool or requiring one, in either wire format."""
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        return choice.get("type") in ("function", "tool", "any")
    return choice == "required"


def _rate_limit_body(kind: str, model: str, limit: ProviderLimit, wait_s: float) -> Any:
    """Each provider's own 429 body for a request over its per-minute request limit."""
    rpm = _number(limit.rps * 60)
    wait = go_duration(wait_s)
    if kind == "anthropic":
        return {
            "type": "error",
            "error": {
                "type": "rate_limit_error",
                "message": (
                    f"This request would exceed the rate limit for your organization (FAKE) of "
                    f"{rpm} requests per minute. For details, refer to: "
                    "https://docs.claude.com/en/api/rate-limits. You can see the response "
                    "headers for current usage. Please reduce the prompt length or the maximum "
                    "tokens requested, or try again later. You may also contact sales at "
                    "https://www.anthropic.com/contact-sales to discuss your options for a rate "
                    "limit increase."
                ),
            },
            "request_id": "req_011CFAKEratelimit",
        }
    if kind == "groq":
        return {
            "error": {
                "message": (
                    f"Rate limit reached for model `{model}` in organization `org_x` service "
                    f"tier `on_demand` on requests per minute (RPM): Limit {rpm}, Used {rpm}, "
                    f"Requested 1. Please try again in {wait}. Need more tokens? Upgrade to Dev "
                    "Tier today at https://console.groq.com/settings/billing"
                ),
                "type": "requests",
                "code": "rate_limit_exceeded",
            }
        }
    return {
        "error": {
            "message": (
                f"Rate limit reached for {model} in organization org-FAKE on requests per min "
                f"(RPM): Limit {rpm}, Used {rpm}, Requested 1. Please try again in {wait}. Visit "
                "https://platform.openai.com/account/rate-limits to learn more."
            ),
            "type": "requests",
            "param": None,
            "code": "rate_limit_exceeded",
        }
    }


def _unauthorized_body(kind: str, api_key: str | None) -> dict[str, Any]:
    if kind == "anthropic":
        return {
            "type": "error",
            "error": {"type": "authentication_error", "message": "invalid x-api-key"},
            "request_id": "req_011CFAKEauth",
        }
    if kind == "groq":
        return {
            "error": {
                "message": "Invalid API Key",
                "type": "invalid_request_error",
                "code": "invalid_api_key",
            }
        }
    # OpenAI masks the key but echoes its ends: a reason never to log provider messages raw.
    key = api_key or ""
    masked = f"{key[:3]}{'*' * 10}{key[-4:]}" if len(key) > 8 else "********"
    return {
        "error": {
            "message": (
                f"Incorrect API key provided: {masked}. You can find your API key at "
                "https://platform.openai.com/account/api-keys."
            ),
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }


def _bad_request_body(kind: str) -> dict[str, Any]:
    if kind == "anthropic":
        return {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "messages: text content blocks must be non-empty",
            },
            "request_id": "req_011CFAKEbadrequest",
        }
    return {
        "error": {
            "message": (
                "Invalid 'messages[1].content': string too long. Expected a string with "
                "maximum length 10485760, but got a string with length 10485761 instead."
            ),
            "type": "invalid_request_error",
            "param": "messages[1].content",
            "code": "string_above_max_length",
        }
    }


# --- the fake ---------------------------------------------------------------------------------


class FakeProvider:
    """One fake gateway. Every request is recorded; scripted steps decide each answer."""

    def __init__(self, kind: str, *, name: str | None = None, latency: float = 0.0) -> None:
        if kind not in PROVIDER_KINDS:
            raise ValueError(f"unknown provider kind {kind!r}")
        self.kind = kind
        self.name = name or kind
        self.latency = latency
        self.requests: list[RecordedRequest] = []
        self._scripts: dict[str, deque[Step]] = {}
        self._defaults: dict[str, Step] = {}
        self._failure_rate = 0.0
        self._failure_kinds: list[str] = []
        self._rng = random.Random(0)
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        # Keys this gateway rejects with its real 401 body, whatever the script says.
        self.invalid_keys: set[str] = set()
        # What the fake "hears" in uploaded audio: sha256 of the file -> transcript.
        self.speech: dict[str, str] = {}
        self.speech_seconds: dict[str, float] = {}
        # Optional provider-side rate limit (see enforce_rate_limit); rejections are counted.
        self._limit_terms: tuple[float, float, float, float] | None = None
        self.limits: dict[str, ProviderLimit] = {}  # per model, as providers count them
        self.rate_limited = 0
        # While set to an Event that is not set, answers wait for it (the request is already
        # recorded): a test holds a call in flight, acts, then lets the call complete.
        self.gate: asyncio.Event | None = None
        self.answered = 0  # requests whose answer was sent (or failed) after the gate
        self.streams_cut = 0  # streamed answers the client hung up on before their end
        self.cut_at: list[float] = []  # when each of those hang-ups was seen (monotonic)
        self.hangs_cut = 0  # requests held by Fault("hang") until the client hung up
        self.rate_limited_at: list[float] = []
        # Wire model -> TOOL_CHOICE_REFUSALS key: that model answers every request that forces
        # a tool with the refusal (HTTP 400), as a provider does; automatic choice works.
        self.refuse_forced_tool_choice: dict[str, str] = {}

    # lifecycle

    async def start(self) -> None:
        app = web.Application()
        path = "/v1/messages" if self.kind == "anthropic" else self._chat_path
        app.router.add_post(path, self._handle)
        if self.kind != "anthropic":  # Anthropic has no transcription endpoint
            audio_path = self._chat_path.replace("/chat/completions", "/audio/transcriptions")
            app.router.add_post(audio_path, self._handle_transcription)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, shutdown_timeout=0.5)
        await site.start()
        server = site._server  # the only way aiohttp exposes the bound port
        assert server is not None
        self._port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeProvider:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def _chat_path(self) -> str:
        return "/openai/v1/chat/completions" if self.kind == "groq" else "/v1/chat/completions"

    @property
    def base_url(self) -> str:
        if self._port is None:
            raise RuntimeError("FakeProvider not started")
        root = f"http://127.0.0.1:{self._port}"
        return {"openai": f"{root}/v1", "groq": f"{root}/openai/v1", "anthropic": root}[self.kind]

    # scripting

    def script(self, model: str, *steps: Step) -> None:
        """Queue steps for a wire model ("*" = any model), consumed one per request."""
        for step in steps:
            self._check_own(step)
        self._scripts.setdefault(model, deque()).extend(steps)

    def set_default(self, model: str, step: Step) -> None:
        self._check_own(step)
        self._defaults[model] = step

    def _check_own(self, step: Step | str) -> None:
        """A fault one provider alone sends cannot come from another's fake."""
        kind = step.kind if isinstance(step, Fault) else step
        owner = PROVIDER_FAULTS.get(kind) if isinstance(kind, str) else None
        if owner is not None and owner != self.kind:
            raise ValueError(f"{kind!r} is {owner}'s fault; the {self.kind} fake never sends it")

    def set_failure_mix(self, rate: float, kinds: list[str], seed: int) -> None:
        for kind in kinds:
            if kind not in FAULT_KINDS:
                raise ValueError(f"unknown fault kind {kind!r}")
            self._check_own(kind)
        self._failure_rate = rate
        self._failure_kinds = list(kinds)
        self._rng = random.Random(seed)

    def enforce_rate_limit(
        self,
        rps: float | None,
        burst: float = 1.0,
        *,
        tokens_per_minute: float = 1_000_000.0,
        requests_per_day: float = 14_400.0,
    ) -> None:
        """Limit each model of this provider as a real one is (see `ProviderLimit`; providers
        count per model): every answer carries the rate-limit headers, and a request past the
        limit gets the provider's real 429 body with retry-after. None turns it off."""
        self.limits.clear()
        self._limit_terms = (
            None if rps is None else (rps, burst, tokens_per_minute, requests_per_day)
        )

    def _limit(self, model: str) -> ProviderLimit | None:
        if self._limit_terms is None:
            return None
        if model not in self.limits:
            self.limits[model] = ProviderLimit(*self._limit_terms)
        return self.limits[model]

    def _limit_headers(self, model: str) -> dict[str, str]:
        limit = self._limit(model)
        return limit.headers(self.kind) if limit is not None else {}

    def _over_limit(self, model: str, body: dict[str, Any]) -> web.Response | None:
        limit = self._limit(model)
        if limit is None:
            return None
        wait = limit.admit(_prompt_tokens(body))
        if wait is None:
            return None
        self.rate_limited += 1
        self.rate_limited_at.append(time.monotonic())
        headers = {"retry-after": str(max(1, math.ceil(wait))), **self._limit_headers(model)}
        if self.kind == "groq":
            headers["x-ratelimit-reset-requests"] = go_duration(wait)
        return _json_response(
            _rate_limit_body(self.kind, model, limit, wait), status=429, headers=headers
        )

    def reset(self) -> None:
        self._scripts.clear()
        self._defaults.clear()
        self.requests.clear()
        self._failure_rate = 0.0
        self._failure_kinds = []
        self.invalid_keys.clear()
        self._limit_terms = None
        self.limits.clear()
        self.rate_limited = 0
        self.refuse_forced_tool_choice.clear()

    def _next_step(self, model: str) -> Step | None:
        for key in (model, "*"):
            queue = self._scripts.get(key)
            if queue:
                return queue.popleft()
        if self._failure_rate and self._rng.random() < self._failure_rate:
            return Fault(self._rng.choice(self._failure_kinds))
        return self._defaults.get(model) or self._defaults.get("*")

    # request handling

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _json_response({"error": {"message": "invalid JSON body"}}, status=400)
        if self.kind == "anthropic":
            api_key = request.headers.get("x-api-key")
        else:
            auth = request.headers.get("Authorization", "")
            api_key = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None
        model = body.get("model")
        stream = bool(body.get("stream"))
        recorded = RecordedRequest(request.path, api_key, model, body, stream, time.monotonic())
        self.requests.append(recorded)
        if api_key in self.invalid_keys:
            return await self._fault(request, Fault("unauthorized_401"), body, api_key, stream)
        limited = self._over_limit(model or "", body)
        if limited is not None:
            return limited
        limit_headers = self._limit_headers(model or "")
        refusal = self.refuse_forced_tool_choice.get(model or "")
        if refusal is not None and _forces_a_tool(body):
            return _json_response(TOOL_CHOICE_REFUSALS[refusal], status=400)
        oversized = self._oversized_image(recorded)
        if oversized is not None:
            return _json_response(oversized, status=400)
        if self.gate is not None:
            await self.gate.wait()
        try:
            step = self._next_step(model or "")
            if isinstance(step, Respond):
                step = step.fn(recorded)
            if step is None:
                step = Reply(f"echo: {_last_user_text(body)}")
            if isinstance(step, ToolCallReply) and not recorded.allows_tool_call():
                # No tools offered, or tool_choice none: a real model must answer in words.
                words = step.text or f"echo: {_last_user_text(body)}"
                step = Reply(words, chunk_chars=step.chunk_chars)
            if self.latency:
                await asyncio.sleep(self.latency)
            if isinstance(step, Fault):
                return await self._fault(request, step, body, api_key, stream)
            if getattr(step, "delay", 0.0):
                await asyncio.sleep(step.delay)  # type: ignore[union-attr]
            if isinstance(step, ToolCallReply):
                step = step.written()  # after any delay: the model writes as it answers
            if limit_headers:  # the provider's own headers on every answer, the step's win
                step = replace(step, headers={**limit_headers, **(step.headers or {})})
            if stream:
                return await self._stream(request, step, body)
            return self._complete(step, body)
        finally:
            self.answered += 1

    def _oversized_image(self, recorded: RecordedRequest) -> dict[str, Any] | None:
        """Anthropic's real refusal of an image over 5 MB (counted on its base64 text)."""
        if self.kind != "anthropic":
            return None
        for index, image in enumerate(recorded.image_parts()):
            size = len(image["data"])
            if size > ANTHROPIC_IMAGE_MAX_BYTES:
                return {
                    "type": "error",
                    "error": {
                        "type": "invalid_request_error",
                        "message": (
                            f"messages.0.content.{index}.image.source.base64: image exceeds 5 MB "
                            f"maximum: {size} bytes > {ANTHROPIC_IMAGE_MAX_BYTES} bytes"
                        ),
                    },
                    "request_id": "req_011CFAKEimagesize",
                }
        return None

    def hears(self, audio: bytes, transcript: str, seconds: float | None = None) -> None:
        """Answer transcription requests uploading exactly `audio` with `transcript`; a
        verbose_json answer (Whisper's) reports `seconds` as the audio's duration."""
        digest = hashlib.sha256(audio).hexdigest()
        self.speech[digest] = transcript
        if seconds is not None:
            self.speech_seconds[digest] = seconds

    def transcription_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.is_transcription]

    async def _handle_transcription(self, request: web.Request) -> web.StreamResponse:
        """POST .../audio/transcriptions (multipart): OpenAI's and Groq's transcription API."""
        auth = request.headers.get("Authorization", "")
        api_key = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None
        fields: dict[str, Any] = {}
        audio = b""
        if request.content_type != "multipart/form-data":
            return _json_response(
                {"error": {"message": "request Content-Type isn't multipart/form-data"}},
                status=400,
            )
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            if part.filename is not None:  # type: ignore[union-attr]
                audio = await part.read()  # type: ignore[union-attr]
                fields["file"] = {
                    "filename": part.filename,  # type: ignore[union-attr]
                    "content_type": part.headers.get("Content-Type", ""),
                    "size": len(audio),
                    "sha256": hashlib.sha256(audio).hexdigest(),
                }
            elif part.name:
                fields[part.name] = await part.text()  # type: ignore[union-attr]
        model = fields.get("model")
        self.requests.append(
            RecordedRequest(request.path, api_key, model, fields, False, time.monotonic())
        )
        if api_key in self.invalid_keys:
            return await self._fault(request, Fault("unauthorized_401"), fields, api_key, False)
        limited = self._over_limit(model or "", {"messages": []})
        if limited is not None:
            return limited
        step = self._next_step(model or "")
        if self.latency:
            await asyncio.sleep(self.latency)
        if isinstance(step, Fault):
            return await self._fault(request, step, fields, api_key, False)
        if isinstance(step, Reply):
            if step.delay:
                await asyncio.sleep(step.delay)
            text = step.text
        else:
            digest = fields.get("file", {}).get("sha256", "")
            text = self.speech.get(digest, f"[fake transcript of {len(audio)} bytes]")
        return _json_response(self._transcription_body(model or "", fields, text))

    def _transcription_body(self, model: str, fields: dict[str, Any], text: str) -> dict[str, Any]:
        """The provider's own success shape for the response format asked for: Groq's json is
        the text and its request id; both Whisper endpoints' verbose_json adds the task, the
        language, the `duration` decoded and the segments (OpenAI's also a duration usage)."""
        seconds = self.speech_seconds.get(fields.get("file", {}).get("sha256", ""), 1.0)
        verbose = fields.get("response_format") == "verbose_json"
        if self.kind == "groq":
            body: dict[str, Any] = {"text": text, "x_groq": {"id": _id("req_")}}
            if verbose:
                body = {
                    "task": "transcribe",
                    "language": "English",
                    "duration": seconds,
                    "text": text,
                    "segments": _whisper_segments(text, seconds),
                    "x_groq": body["x_groq"],
                }
            return body
        if verbose:  # whisper-1
            return {
                "task": "transcribe",
                "language": "english",
                "duration": seconds,
                "text": text,
                "segments": _whisper_segments(text, seconds),
                "usage": {"type": "duration", "seconds": math.ceil(seconds)},
            }
        # gpt-4o(-mini)-transcribe: text plus token usage
        tokens = max(1, len(text) // 4)
        return {
            "text": text,
            "usage": {
                "type": "tokens",
                "input_tokens": 50,
                "input_token_details": {"text_tokens": 0, "audio_tokens": 50},
                "output_tokens": tokens,
                "total_tokens": 50 + tokens,
            },
        }

    # success bodies

    def _usage(
        self, step: Reply | ToolCallReply, body: dict[str, Any], text: str
    ) -> tuple[int, int]:
        prompt = step.prompt_tokens
        if prompt is None:
            prompt = _prompt_tokens(body)
        completion = step.completion_tokens
        if completion is None:
            completion = max(1, len(text) // 4)
        return prompt, completion

    def _complete(self, step: Reply | ToolCallReply, body: dict[str, Any]) -> web.Response:
        model = body.get("model", "")
        text = step.text
        tool_args = "".join(a for _, a in step.calls()) if isinstance(step, ToolCallReply) else ""
        prompt, completion = self._usage(step, body, text + tool_args)
        headers = dict(step.headers or {})
        if self.kind == "anthropic":
            content: list[dict[str, Any]] = []
            if text:
                content.append({"type": "text", "text": text})
            stop_reason = "end_turn"
            if isinstance(step, ToolCallReply):
                for name, arguments in step.calls():
                    try:
                        tool_input = json.loads(arguments)
                    except json.JSONDecodeError:
                        tool_input = arguments  # not an object: the client must notice
                    content.append(
                        {"type": "tool_use", "id": _id("toolu_"), "name": name,
                         "input": tool_input}
                    )  # fmt: skip
                stop_reason = "tool_use"
            payload: dict[str, Any] = {
                "id": _id("msg_"),
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": content,
                "stop_reason": stop_reason,
                "stop_sequence": None,
                "usage": {"input_tokens": prompt, "output_tokens": completion},
            }
            return _json_response(payload, headers=headers)
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        finish = "stop"
        if isinstance(step, ToolCallReply):
            message["tool_calls"] = [
                {"id": _id("call_"), "type": "function",
                 "function": {"name": name, "arguments": arguments}}
                for name, arguments in step.calls()
            ]  # fmt: skip
            finish = "tool_calls"
        elif not text:
            message["content"] = ""
        payload = {
            "id": _id("chatcmpl-"),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
            "system_fingerprint": "fp_fake",
        }
        self._groq_fields(payload)
        return _json_response(payload, headers=headers)

    def _groq_fields(self, payload: dict[str, Any], usage: dict[str, Any] | None = None) -> None:
        if self.kind != "groq":
            return
        payload["service_tier"] = "on_demand"
        payload["x_groq"] = {"id": _id("req_")}
        if usage is not None:
            payload["x_groq"]["usage"] = usage

    # streaming

    async def _start_sse(
        self, request: web.Request, headers: dict[str, str] | None
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            status=200,
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                **(headers or {}),
            },
        )
        await response.prepare(request)
        return response

    async def _stream(
        self, request: web.Request, step: Reply | ToolCallReply, body: dict[str, Any]
    ) -> web.StreamResponse:
        response = await self._start_sse(request, step.headers)
        chunk_chars = max(1, getattr(step, "chunk_chars", 8))
        split_utf8 = getattr(step, "split_utf8", False)
        chunk_delay = getattr(step, "chunk_delay", 0.0)
        text = step.text
        pieces = [text[i : i + chunk_chars] for i in range(0, len(text), chunk_chars)]
        tool_args = step.arguments_text if isinstance(step, ToolCallReply) else ""
        prompt, completion = self._usage(step, body, text + tool_args)
        events = (
            self._anthropic_events(body, pieces, step, tool_args, prompt, completion)
            if self.kind == "anthropic"
            else self._openai_events(body, pieces, step, tool_args, prompt, completion)
        )
        if getattr(step, "endless", False):
            # After the opening events (message start; Anthropic's ping and block start),
            # the text's own chunks in a loop: never a finish, never usage.
            opening = 3 if self.kind == "anthropic" else 1
            content = events[opening : opening + len(pieces)]
            events = itertools.chain(events[:opening], itertools.cycle(content))
        try:
            for index, event in enumerate(events):
                if chunk_delay and index:
                    await asyncio.sleep(chunk_delay)
                data = event.encode("utf-8")
                if split_utf8:
                    for i in range(len(data)):
                        await response.write(data[i : i + 1])
                else:
                    await response.write(data)
            await response.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            self.streams_cut += 1
            self.cut_at.append(time.monotonic())
        return response

    def _openai_events(
        self,
        body: dict[str, Any],
        pieces: list[str],
        step: Reply | ToolCallReply,
        tool_args: str,
        prompt: int,
        completion: int,
    ) -> list[str]:
        model = body.get("model", "")
        chunk_id = _id("chatcmpl-")
        created = int(time.time())

        def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
            payload: dict[str, Any] = {
                "id": chunk_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "system_fingerprint": "fp_fake",
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
                ],
            }
            if self.kind == "groq":
                payload["service_tier"] = "on_demand"
            payload.update(extra)
            return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"

        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        first_extra = {"x_groq": {"id": _id("req_")}} if self.kind == "groq" else {}
        events = [chunk({"role": "assistant", "content": ""}, **first_extra)]
        events += [chunk({"content": piece}) for piece in pieces]
        finish = "stop"
        if isinstance(step, ToolCallReply):
            # OpenAI's shape: the first delta of each call has index, id, type and name with
            # empty arguments; the arguments follow in pieces under the same index.
            for index, (name, arguments) in enumerate(step.calls()):
                opening = {
                    "index": index,
                    "id": _id("call_"),
                    "type": "function",
                    "function": {"name": name, "arguments": ""},
                }
                events.append(chunk({"tool_calls": [opening]}))
                for i in range(0, len(arguments), 16):
                    piece = {"index": index, "function": {"arguments": arguments[i : i + 16]}}
                    events.append(chunk({"tool_calls": [piece]}))
            finish = "tool_calls"
        send_usage = getattr(step, "send_usage", True)
        last_extra = (
            {"x_groq": {"id": _id("req_"), "usage": usage}}
            if self.kind == "groq" and send_usage
            else {}
        )
        events.append(chunk({}, finish, **last_extra))
        if send_usage and (body.get("stream_options") or {}).get("include_usage"):
            usage_chunk: dict[str, Any] = {
                "id": chunk_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "system_fingerprint": "fp_fake",
                "choices": [],
                "usage": usage,
            }
            if self.kind == "groq":
                usage_chunk["service_tier"] = "on_demand"
            events.append(f"data: {json.dumps(usage_chunk)}\n\n")
        events.append("data: [DONE]\n\n")
        return events

    def _anthropic_events(
        self,
        body: dict[str, Any],
        pieces: list[str],
        step: Reply | ToolCallReply,
        tool_args: str,
        prompt: int,
        completion: int,
    ) -> list[str]:
        def event(name: str, payload: dict[str, Any]) -> str:
            return f"event: {name}\ndata: {json.dumps(payload, ensure_ascii=False)}\n\n"

        events = [
            event(
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": _id("msg_"),
                        "type": "message",
                        "role": "assistant",
                        "model": body.get("model", ""),
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": {"input_tokens": prompt, "output_tokens": 1},
                    },
                },
            ),
            event("ping", {"type": "ping"}),
        ]
        index = 0
        if pieces:
            events.append(
                event(
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": 0,
                        "content_block": {"type": "text", "text": ""},
                    },
                )
            )
            for piece in pieces:
                events.append(
                    event(
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": 0,
                            "delta": {"type": "text_delta", "text": piece},
                        },
                    )
                )
            events.append(event("content_block_stop", {"type": "content_block_stop", "index": 0}))
            index = 1
        stop_reason = "end_turn"
        if isinstance(step, ToolCallReply):
            for name, arguments in step.calls():
                block = {"type": "tool_use", "id": _id("toolu_"), "name": name, "input": {}}
                events.append(
                    event(
                        "content_block_start",
                        {"type": "content_block_start", "index": index, "content_block": block},
                    )
                )
                for i in range(0, len(arguments), 16):
                    delta = {"type": "input_json_delta", "partial_json": arguments[i : i + 16]}
                    events.append(
                        event(
                            "content_block_delta",
                            {"type": "content_block_delta", "index": index, "delta": delta},
                        )
                    )
                events.append(
                    event("content_block_stop", {"type": "content_block_stop", "index": index})
                )
                index += 1
            stop_reason = "tool_use"
        events.append(
            event(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                    "usage": {"output_tokens": completion},
                },
            )
        )
        events.append(event("message_stop", {"type": "message_stop"}))
        return events

    # faults

    async def _fault(
        self,
        request: web.Request,
        fault: Fault,
        body: dict[str, Any],
        api_key: str | None,
        stream: bool,
    ) -> web.StreamResponse:
        kind = fault.kind
        headers = dict(fault.headers or {})
        if fault.retry_after is not None:
            headers["retry-after"] = _number(fault.retry_after)
        self._check_own(fault)
        if kind in ("rate_limit_429", "anthropic_rate_limit_429"):
            return self._rate_limit_429(str(body.get("model", "")), fault, headers)
        if kind == "quota_429":
            return _json_response(_OPENAI_QUOTA, status=429, headers=headers)
        if kind == "overloaded_529":
            return _json_response(_ANTHROPIC_OVERLOADED, status=529, headers=headers)
        if kind == "anthropic_rate_limit_429":
            return _json_response(_ANTHROPIC_RATE_LIMIT, status=429, headers=headers)
        if kind == "server_500":
            payload = _ANTHROPIC_SERVER_ERROR if self.kind == "anthropic" else _OPENAI_SERVER_ERROR
            return _json_response(payload, status=500, headers=headers)
        if kind == "bad_gateway_502":
            return web.Response(
                text=_BAD_GATEWAY_HTML, status=502, content_type="text/html", headers=headers
            )
        if kind == "cloudflare_524":
            return web.Response(
                text=_CLOUDFLARE_524_HTML, status=524, content_type="text/html", headers=headers
            )
        if kind == "unauthorized_401":
            return _json_response(
                _unauthorized_body(self.kind, api_key), status=401, headers=headers
            )
        if kind == "bad_request_400":
            return _json_response(_bad_request_body(self.kind), status=400, headers=headers)
        if kind == "tool_use_failed_400" or (kind == "tool_use_failed_stream" and not stream):
            return _json_response(_GROQ_TOOL_USE_FAILED, status=400, headers=headers)
        if kind == "tool_use_failed_stream":
            response = await self._start_sse(request, headers)
            await response.write(
                f"event: error\ndata: {json.dumps(_GROQ_TOOL_USE_FAILED)}\n\n".encode()
            )
            await response.write_eof()
            return response
        if kind == "throttling_in_200":
            return _json_response(_THROTTLING_IN_200, status=200, headers=headers)
        if kind == "arrearage_in_200":
            return _json_response(_ARREARAGE_IN_200, status=200, headers=headers)
        if kind == "gemini_429":
            return _json_response(_GEMINI_429, status=429, headers=headers)
        model = str(body.get("model", ""))
        if kind == "groq_tpm_429":  # Groq rounds the wait up into its retry-after header
            headers.setdefault("retry-after", "2")
            return _json_response(_groq_tpm_429(model), status=429, headers=headers)
        if kind == "groq_tpd_429":
            headers.setdefault("retry-after", "758")
            return _json_response(_groq_tpd_429(model), status=429, headers=headers)
        if kind == "groq_413":
            return _json_response(_groq_413(model), status=413, headers=headers)
        if kind == "empty_200":
            return await self._empty(request, body, stream, headers)
        if kind == "hang":
            # Held until the client gives up (its hang-up is counted) or server cleanup.
            # aiohttp tells a handler nothing when its client hangs up, so the fake looks.
            while request.transport is not None and not request.transport.is_closing():  # noqa: ASYNC110
                await asyncio.sleep(0.05)
            self.hangs_cut += 1
            return web.Response(status=504)
        if kind == "disconnect":
            _drop(request)
            return web.Response(status=500)
        # midstream_disconnect
        text = self._default_text(body)
        while len(text) < fault.after_chars + 1:
            text += " lorem ipsum"
        response = await self._start_sse(request, headers)
        step = Reply(text, chunk_chars=8)
        pieces = [text[i : i + 8] for i in range(0, fault.after_chars, 8)]
        pieces[-1:] = [p[: fault.after_chars - 8 * (len(pieces) - 1)] for p in pieces[-1:]]
        events = (
            self._anthropic_events(body, pieces, step, "", 1, 1)
            if self.kind == "anthropic"
            else self._openai_events(body, pieces, step, "", 1, 1)
        )
        # Keep the opening chunks and the text, drop the closing ones: the stream just stops.
        keep = len(pieces) + (3 if self.kind == "anthropic" else 1)
        try:
            for event in events[:keep]:
                await response.write(event.encode("utf-8"))
            await asyncio.sleep(0.01)
        except ConnectionResetError:
            pass
        _drop(request)
        return response

    def _rate_limit_429(
        self, model: str, fault: Fault, headers: dict[str, str]
    ) -> web.StreamResponse:
        """This provider's own 429: OpenAI's tokens-per-minute body; Groq's,
        always with a retry-after header (it rounds the wait up) and the billing link inside;
        Anthropic's rate_limit_error."""
        if self.kind == "anthropic":
            return _json_response(_ANTHROPIC_RATE_LIMIT, status=429, headers=headers)
        if self.kind == "groq":
            wait = fault.retry_after if fault.retry_after is not None else 1.5
            headers.setdefault("retry-after", _number(math.ceil(wait)))
            headers.setdefault("x-ratelimit-reset-requests", go_duration(wait))
            return _json_response(_groq_tpm_429(model, wait), status=429, headers=headers)
        return _json_response(_OPENAI_RATE_LIMIT, status=429, headers=headers)

    def _default_text(self, body: dict[str, Any]) -> str:
        step = self._defaults.get(body.get("model", "")) or self._defaults.get("*")
        if isinstance(step, Reply):
            return step.text
        return f"echo: {_last_user_text(body)}"

    async def _empty(
        self, request: web.Request, body: dict[str, Any], stream: bool, headers: dict[str, str]
    ) -> web.StreamResponse:
        model = body.get("model", "")
        if self.kind == "anthropic":
            if stream:
                response = await self._start_sse(request, headers)
                await response.write_eof()
                return response
            return _json_response(
                {
                    "id": _id("msg_"),
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 1, "output_tokens": 0},
                },
                headers=headers,
            )
        if stream:
            response = await self._start_sse(request, headers)
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
            return response
        payload: dict[str, Any] = {
            "id": _id("chatcmpl-"),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": ""},
                    "logprobs": None,
                    "finish_reason": None,
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 0, "total_tokens": 1},
        }
        self._groq_fields(payload)
        return _json_response(payload, headers=headers)


def _json_response(
    payload: Any, *, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    """Raw UTF-8 like the real providers (aiohttp's default would escape every non-ASCII char)."""
    return web.json_response(
        payload, status=status, headers=headers, dumps=lambda v: json.dumps(v, ensure_ascii=False)
    )


def _drop(request: web.Request) -> None:
    """Close the TCP connection without an HTTP response, as a crashed proxy would."""
    transport = request.transport
    if transport is not None:
        transport.abort()


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _whisper_segments(text: str, seconds: float) -> list[dict[str, Any]]:
    """verbose_json's segments as Whisper writes them (one segment for the fake's text)."""
    return [
        {
            "id": 0,
            "seek": 0,
            "start": 0.0,
            "end": seconds,
            "text": text,
            "tokens": [50364, 50414],
            "temperature": 0.0,
            "avg_logprob": -0.2,
            "compression_ratio": 1.1,
            "no_speech_prob": 0.01,
        }
    ]


def _id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]


def _prompt_tokens(body: dict[str, Any]) -> int:
    """What the fakes count as a request's prompt tokens (about 4 characters a token)."""
    return max(1, len(json.dumps(body.get("messages", []), ensure_ascii=False)) // 4)


def _last_user_text(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages") or []):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return "".join(
                part.get("text", "")
                for part in content
                if isinstance(part, dict) and part.get("type") == "text"
            )
    return ""
