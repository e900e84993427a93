"""What really came back over HTTP, recorded beside litellm rather than through it.

litellm loses the body of an error sent inside HTTP 200 (`{"code":"Throttling.RateQuota",...}`
becomes "'ModelResponse' object has no attribute 'service_tier'", a KeyError, or an empty
"successful" stream). So every request goes through HTTP clients of ours carrying an httpx
response hook that notes the status, the headers and, for JSON bodies, the body, into a
`WireRecord` the transport created for that one attempt. The record travels in a ContextVar
holding a mutable object, so it reaches the hook whatever task or context copy litellm uses.

Streamed (SSE) bodies are never read here: only JSON bodies, which litellm reads whole anyway.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import httpx
from litellm.llms.custom_httpx.http_handler import AsyncHTTPHandler
from openai import AsyncOpenAI

from models.gateways import Gateway

_MAX_BODY_CHARS = 20_000


@dataclass
class WireRecord:
    """The last HTTP response seen for one attempt."""

    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    error_body: Any = None  # parsed JSON body when it is not a completion
    # Awaited right before the request leaves (the gateway's send spacing, models/pacing.py).
    before_send: Callable[[], Awaitable[None]] | None = None

    @property
    def has_error_body(self) -> bool:
        return self.error_body is not None


_current: ContextVar[WireRecord | None] = ContextVar("mnemobot_wire_record", default=None)


def start_record() -> WireRecord:
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


async def _on_request(request: httpx.Request) -> None:
    """The last moment before a request leaves: wait for the gateway's send spacing, so
    requests admitted in pace but delayed by litellm's set-up do not arrive in a bunch."""
    record = _current.get()
    if record is None or record.before_send is None:
        return
    gate, record.before_send = record.before_send, None
    await gate()


async def _on_response(response: httpx.Response) -> None:
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


class ClientPool:
    """HTTP clients handed to litellm (`client=`), all carrying the wire hook.

    The OpenAI SDK client binds a key, so openai-protocol gateways get one client per key;
    litellm's own handler (Groq, Anthropic) takes the key per call and is shared per gateway.
    Transcription goes through the OpenAI SDK on every gateway (litellm 1.110.2 sends
    `groq/` audio through it too), so `sdk_client_for` gives an SDK client per key anywhere.
    """

    def __init__(self) -> None:
        self._clients: dict[tuple[str, str, str], Any] = {}

    def client_for(self, gateway: Gateway, key_index: int, key: str) -> Any:
        # The OpenAI SDK client carries its key; litellm's handler gets the key per call.
        slot = (gateway.name, gateway.api_base, key if gateway.protocol == "openai" else "")
        client = self._clients.get(slot)
        if client is None:
            hooks = {"request": [_on_request], "response": [_on_response]}
            if gateway.protocol == "openai":
                client = AsyncOpenAI(
                    api_key=key,
                    base_url=gateway.api_base,
                    max_retries=0,
                    http_client=httpx.AsyncClient(event_hooks=hooks),
                )
            else:
                client = AsyncHTTPHandler(event_hooks=hooks)
            self._clients[slot] = client
        return client

    def sdk_client_for(self, gateway: Gateway, key_index: int, key: str) -> Any:
        """An OpenAI SDK client for `gateway` bound to `key` (transcription requests)."""
        if gateway.protocol == "openai":
            return self.client_for(gateway, key_index, key)
        slot = (f"{gateway.name}:sdk", gateway.api_base, key)
        client = self._clients.get(slot)
        if client is None:
            client = AsyncOpenAI(
                api_key=key,
                base_url=gateway.api_base,
                max_retries=0,
                http_client=httpx.AsyncClient(event_hooks={"response": [_on_response]}),
            )
            self._clients[slot] = client
        return client

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            try:
                await client.close()
            except Exception:  # closing must not fail shutdown
                pass
