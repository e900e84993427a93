"""What crosses between the bot and its provider worker process (models/worker/pool.py), and
the failures of the crossing. The messages themselves and their framing: models/worker/protocol.py.

A call carries its gateway without keys and only the key it is sent with. A streamed chunk
crosses as a small tuple, not as litellm's pydantic object: building and pickling those would
cost the bot the CPU the worker exists to take away. On the bot's side the
tuple becomes the few attributes the transport reads (`usage`, `choices[i].delta`), and a whole
response (non-streamed completion, transcription) becomes plain attribute objects with the same
names litellm's have.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from models import ModelsError
from models.errors import Classified
from models.gateways import Gateway

# (status, headers, error body) of the last HTTP response the worker saw for one call, and when
# its request left, on the machine's monotonic clock (time.monotonic(); None: it never did).
WireFields = tuple[int | None, dict[str, str], Any, float | None]


class LocalError(ModelsError):
    """A call that failed on our side of the wire, never the provider's doing: the transport
    counts it against no breaker, key or retry budget. `retry`: the same call may succeed on
    another worker."""

    retry = True


class WorkerLostError(LocalError):
    """The worker stopped answering, died or sent a frame we could not read."""


class CallNotEncodedError(LocalError):
    """The call's arguments could not be pickled (or are too large): it never left the bot,
    and sending it again would fail the same way."""

    retry = False


class FrameError(ModelsError):
    """A frame that cannot be a message (its length is beyond protocol.MAX_FRAME, or what it
    holds is no message of models/worker/protocol.py)."""


@dataclass(frozen=True)
class ClientSpec:
    """Which HTTP client the worker should hand litellm: one per transport (`pool`), gateway and
    key, as models/wire.ClientPool builds them. `sdk` asks for an OpenAI SDK client on any
    gateway (transcription)."""

    pool: int
    gateway: Gateway
    key_index: int
    key: str = field(repr=False)
    sdk: bool = False

    def __post_init__(self) -> None:
        # Only the key in use crosses: the gateway goes without its other keys.
        if self.gateway.keys:
            object.__setattr__(self, "gateway", dataclasses.replace(self.gateway, keys=()))


class ProviderCallError(ModelsError):
    """A call that failed in the worker, already classified there (where the exception and the
    HTTP response it came with were)."""

    def __init__(self, classified: Classified) -> None:
        super().__init__(classified.detail)
        self.classified = classified


# --- streamed chunks ----------------------------------------------------------------------------

ChunkData = tuple[tuple[int, int] | None, tuple[tuple[str | None, str | None, Any], ...]]


def chunk_data(chunk: Any) -> ChunkData:
    """litellm's ModelResponseStream → (usage, ((finish_reason, content, tool_calls), ...))."""
    usage = getattr(chunk, "usage", None)
    counts = None
    if reported_usage(usage):
        prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
        counts = (prompt, int(getattr(usage, "completion_tokens", 0) or 0))
    choices = []
    for choice in getattr(chunk, "choices", None) or []:
        delta = getattr(choice, "delta", None)
        calls = getattr(delta, "tool_calls", None) if delta is not None else None
        content = getattr(delta, "content", None) if delta is not None else None
        choices.append((choice.finish_reason, content, _tool_call_dicts(calls) if calls else None))
    return counts, tuple(choices)


def _tool_call_dicts(calls: Any) -> list[dict[str, Any]]:
    out = []
    for call in calls:
        function = _field(call, "function")
        out.append(
            {
                "index": _field(call, "index"),
                "id": _field(call, "id"),
                "function": None
                if function is None
                else {"name": _field(function, "name"), "arguments": _field(function, "arguments")},
            }
        )
    return out


def _field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


@dataclass(slots=True)
class RemoteUsage:
    prompt_tokens: int
    completion_tokens: int


@dataclass(slots=True)
class RemoteDelta:
    content: str | None
    tool_calls: list[dict[str, Any]] | None


@dataclass(slots=True)
class RemoteChoice:
    finish_reason: str | None
    delta: RemoteDelta


@dataclass(slots=True)
class RemoteChunk:
    usage: RemoteUsage | None
    choices: list[RemoteChoice]


def chunk_from(data: ChunkData) -> RemoteChunk:
    counts, choices = data
    return RemoteChunk(
        RemoteUsage(*counts) if counts else None,
        [RemoteChoice(finish, RemoteDelta(content, calls)) for finish, content, calls in choices],
    )


# --- whole responses ----------------------------------------------------------------------------


def response_data(response: Any) -> tuple[Any, dict[str, str]]:
    """A whole litellm response → (its fields as plain data, the headers litellm kept)."""
    dump = getattr(response, "model_dump", None)
    data = dump() if callable(dump) else {"text": getattr(response, "text", None)}
    if isinstance(data, dict) and not reported_usage(data.get("usage")):
        data["usage"] = None
    return data, hidden_headers(response)


def reported_usage(usage: Any) -> bool:
    """Whether a usage says something. The worker turns litellm's token counter off
    (models/worker/child.py), so litellm fills the usage a provider did not report with zeros;
    no provider bills a request at no tokens at all, so zeros mean "not reported", and the
    bot estimates it (flagged as an estimate) instead of recording a free request."""
    if usage is None:
        return False
    if isinstance(usage, dict):
        counts = (usage.get("prompt_tokens"), usage.get("completion_tokens"))
    else:
        counts = (getattr(usage, "prompt_tokens", 0), getattr(usage, "completion_tokens", 0))
    return any(int(count or 0) for count in counts)


def hidden_headers(response: Any) -> dict[str, str]:
    hidden = getattr(response, "_hidden_params", None) or {}
    headers = hidden.get("additional_headers") or {}
    return {str(name): str(value) for name, value in headers.items()}


def response_from(data: Any, headers: dict[str, str]) -> Any:
    """Plain attribute objects with litellm's field names, and `_hidden_params` as litellm's."""
    response = _namespace(data)
    if not isinstance(response, SimpleNamespace):
        response = SimpleNamespace(value=response)
    response._hidden_params = {"additional_headers": headers}
    return response


def _namespace(value: Any) -> Any:
    if isinstance(value, dict):
        return SimpleNamespace(**{str(k): _namespace(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_namespace(v) for v in value]
    return value
