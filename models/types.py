"""Plain data the transport hands to its callers. No litellm or Telegram types leak out."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from models import ModelsError

Message = dict[str, Any]  # OpenAI-format chat message: {"role": ..., "content": ..., ...}

# Why a model was skipped when its gateway has no key: callers tell "not configured" apart
# from a passing failure (a voice note with no transcription key at all gets its own answer).
NO_KEY = "no key configured"


class Outcome(StrEnum):
    """What one provider attempt amounted to, whatever the HTTP status said."""

    SUCCESS = "success"
    RATE_LIMIT = "rate_limit"  # retryable after a wait
    QUOTA = "quota"  # billing / spend cap / daily cap: fall back, never retry
    BAD_REQUEST = "bad_request"  # do not retry on the same model
    AUTH = "auth"  # skip this key / gateway, report it
    UNAVAILABLE = "unavailable"  # provider down, 5xx, overloaded, connection error
    TIMEOUT = "timeout"
    EMPTY = "empty"  # no text, no tool calls, no finish reason
    SKIPPED = "skipped"  # not attempted: breaker open, bucket full, no key configured
    LOCAL = "local"  # ours, not the provider's: a provider worker lost, a call not encodable

    @property
    def retryable(self) -> bool:
        return self in (Outcome.RATE_LIMIT, Outcome.UNAVAILABLE, Outcome.TIMEOUT, Outcome.EMPTY)


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # raw JSON text as the model produced it; callers validate


@dataclass(frozen=True)
class Usage:
    """Tokens and cost of a call. `estimated`: the provider reported nothing (a cancelled or
    broken stream, a gateway without usage chunks), so we counted prompt and received text."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    audio_seconds: float = 0.0  # transcription is billed by the second, not by the token
    estimated: bool = False

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.cost_usd + other.cost_usd,
            self.audio_seconds + other.audio_seconds,
            self.estimated or other.estimated,
        )


@dataclass(frozen=True)
class Spend:
    """What one provider attempt cost, reported the moment the attempt ends, however it ends:
    answered, failed after text (the fallback then answers) or a transcription that timed out,
    or cut off by a cancellation (a /cancel, a stop of the bot). Every request a provider may
    bill is reported exactly once.
    """

    model_id: str
    gateway: str
    usage: Usage
    ended: str  # "success", "failed", "cancelled" or "cut" (the answer's time or size ran out)


SpendCallback = Callable[[Spend], None]


@dataclass(frozen=True)
class Attempt:
    """One request sent (or skipped) while serving a call; logged and shown in /stats."""

    model_id: str
    gateway: str
    outcome: Outcome
    detail: str = ""  # short, secret-free reason ("429 rate_limit_exceeded", "timeout 30s")
    key_index: int | None = None  # position of the key used, never the key itself
    status_code: int | None = None
    latency_s: float = 0.0
    retry_after_s: float | None = None
    refused_param: str | None = None  # see models.errors.Classified


# `ChatResult.finish_reason` of a stream ended by its deadline (Transport.stream), not the model.
TIME_LIMIT = "time_limit"
# `ChatResult.finish_reason` of a stream cut at its `AnswerBounds` (Transport.stream).
SIZE_LIMIT = "size_limit"


@dataclass(frozen=True)
class AnswerBounds:
    """How much of one streamed answer is kept, stored and sent on: characters of text, tool
    calls, and characters of one call's arguments. Only time bounded an answer before, so a
    gateway streaming fast could pour megabytes into the chat (thousands of Telegram messages)
    or into tool calls (stored, and sent back with every later round). Past any bound the
    request is closed, what came is billed (`Spend.ended` "cut"), and the answer ends with
    `finish_reason` SIZE_LIMIT: its text up to the bound, none of its tool calls."""

    text_chars: int
    tool_calls: int
    tool_argument_chars: int


@dataclass
class ChatResult:
    """A completed call: which model really answered, what it said, what it cost."""

    model_id: str
    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    attempts: list[Attempt] = field(default_factory=list)
    requested_model_id: str = ""
    queued_s: float = 0.0  # waited for turns in gateway queues (our own pacing), not provider

    @property
    def fell_back(self) -> bool:
        return bool(self.requested_model_id) and self.model_id != self.requested_model_id


@dataclass
class Transcription:
    """Speech turned into text: which model did it, what it heard, what it cost (`usage`: this
    attempt's; every billable attempt, this one included, was told to the caller's `on_spend`).
    """

    model_id: str
    text: str
    usage: Usage = field(default_factory=Usage)
    attempts: list[Attempt] = field(default_factory=list)
    requested_model_id: str = ""


@dataclass(frozen=True)
class TextDelta:
    """A piece of streamed text, always whole characters."""

    text: str


@dataclass(frozen=True)
class StreamRestart:
    """The model failed after text was shown; the reply restarts on `to_model`."""

    from_model: str
    to_model: str
    reason: str


@dataclass(frozen=True)
class StreamDone:
    result: ChatResult


StreamEvent = TextDelta | StreamRestart | StreamDone


class TransportError(ModelsError):
    """Every model tried failed. `attempts` says which failed how (no secrets). What failed
    attempts may still have cost was told to the caller's `on_spend` as each ended."""

    def __init__(self, message: str, attempts: list[Attempt]) -> None:
        super().__init__(message)
        self.attempts = attempts

    @property
    def last_outcome(self) -> Outcome | None:
        return self.attempts[-1].outcome if self.attempts else None
