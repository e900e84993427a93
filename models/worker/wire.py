"""What really came back over HTTP, recorded beside litellm rather than through it.

litellm loses the body of an error sent inside HTTP 200 (`{"code":"Throttling.RateQuota",...}`
becomes "'ModelResponse' object has no attribute 'service_tier'", a KeyError, or an empty
"successful" stream). So every request goes through HTTP clients of ours carrying an httpx
response hook that notes the status, the headers and, for JSON bodies, the body, into a
`WireRecord`. In the bot the transport creates the record of each attempt and hands it, with
the pacer's slot as the send gate, to the worker pool as parameters. In the worker process the
record of each call travels in a ContextVar holding a mutable object, the only way into a hook
litellm calls, and it reaches the hook whatever task or context copy litellm uses.

Streamed (SSE) bodies are never read here: only JSON bodies, which litellm reads whole anyway.
"""

from __future__ import annotations

import json
import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

_MAX_BODY_CHARS = 20_000


class SendGate(Protocol):
    """The gateway's send spacing for one request (`Slot` in models/policy/attempt_policy.py)."""

    def send_now(self) -> bool:
        """Without waiting: True when the request may leave now (and it counts as sent)."""

    async def before_send(self) -> None:
        """Wait until the request may leave."""

    def left(self, seconds_ago: float) -> None:
        """The request left `seconds_ago` (its set-up may outlast the permission to send)."""


@dataclass
class WireRecord:
    """The last HTTP response seen for one attempt."""

    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    error_body: Any = None  # parsed JSON body when it is not a completion
    # Passed right before the request leaves (the gateway's send spacing, models/policy/pacing.py;
    # in the worker process a stand-in that asks the bot, models/worker/child.py).
    gate: SendGate | None = None
    left_at: float | None = None  # time.monotonic() when the request left (after the gate)

    @property
    def has_error_body(self) -> bool:
        return self.error_body is not None


_current: ContextVar[WireRecord | None] = ContextVar("mnemobot_wire_record", default=None)


def start_record() -> WireRecord:
    """A record for the call this task makes now, where the HTTP hooks below find it (in the
    worker process: litellm calls them from its own code, so nothing can pass it to them)."""
    record = WireRecord()
    _current.set(record)
    return record


def _looks_like_completion(payload: Any) -> bool:
    if not isinstance(payload, dict):
        return False
    if payload.get("choices"):
        return True
    if isinstance(payload.get("text"), str) and "error" not in payload:
        return True  # a transcription: {"text": ...} (plus duration/segments/usage)
    return payload.get("type") == "message" and "content" in payload


async def on_request(request: httpx.Request) -> None:
    """The last moment before a request leaves: wait for the gateway's send spacing, so
    requests admitted in pace but delayed by litellm's set-up do not arrive in a bunch."""
    record = _current.get()
    if record is None:
        return
    gate, record.gate = record.gate, None
    if gate is not None and not gate.send_now():
        await gate.before_send()
    record.left_at = time.monotonic()


async def on_response(response: httpx.Response) -> None:
    record = _current.get()
    if record is None:
        return
    record.status = response.status_code
    record.headers = {k.lower(): v for k, v in response.headers.items()}
    record.error_body = None
    if "json" not in response.headers.get("content-type", ""):
        return
    await response.aread()
    text = response.text[:_MAX_BODY_CHARS]
    try:
        payload = json.loads(text)
    except json.JSONDecodeError:
        return
    if not _looks_like_completion(payload):
        record.error_body = payload
