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

import asyncio
import json
import ssl
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx
from litellm.llms.custom_httpx.http_handler import AsyncHTTPHandler
from openai import AsyncOpenAI

from models.gateways import Gateway
from models.offloop import on_loop
from models.sockets import transport

_MAX_BODY_CHARS = 20_000

# Connection pools. httpx keeps 20 idle connections of at most 100 per client by default: past
# 100 concurrent streams requests queue inside the pool, and after every burst all but 20
# connections are closed and reopened (TCP and TLS set-up, a thread for the DNS lookup each).
# But one big pool is no answer either: httpcore scans every connection of a pool whenever a
# request starts or ends (a socket check per idle one, and a quadratic count of idle ones), which
# at 500 connections was a third of the provider loop's CPU. So each gateway (and key) gets
# POOL_SHARDS small clients used in turn.
POOL_SHARDS = 8
SHARD_LIMITS = httpx.Limits(max_connections=64, max_keepalive_connections=32, keepalive_expiry=30.0)


class SendGate(Protocol):
    """The gateway's send spacing for one request (`_Slot` in models/transport.py)."""

    def send_now(self) -> bool:
        """From any thread, without waiting: True when the request may leave now."""

    async def before_send(self) -> None:
        """On the attempt's loop: wait until the request may leave."""


@dataclass
class WireRecord:
    """The last HTTP response seen for one attempt."""

    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    error_body: Any = None  # parsed JSON body when it is not a completion
    # Passed right before the request leaves (the gateway's send spacing, models/pacing.py).
    gate: SendGate | None = None
    # The loop that started the attempt, where the pacer lives (the request itself is sent
    # from the provider loop, models/offloop.py).
    loop: asyncio.AbstractEventLoop | None = None

    @property
    def has_error_body(self) -> bool:
        return self.error_body is not None


_current: ContextVar[WireRecord | None] = ContextVar("mnemobot_wire_record", default=None)


def current_record() -> WireRecord | None:
    """The record of the attempt this code runs for, if any."""
    return _current.get()


def start_record() -> WireRecord:
    record = WireRecord(loop=asyncio.get_running_loop())
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
    if record is None or record.gate is None:
        return
    gate, record.gate = record.gate, None
    if gate.send_now():
        return  # the usual case: no round trip through the attempt's (busy) loop
    await on_loop(record.loop, gate.before_send)


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
        self._clients: dict[tuple[str, str, str, int], Any] = {}
        self._http: list[httpx.AsyncClient] = []  # ours to close (handed to litellm's handler)
        self._turn = 0
        # One TLS context for every client: building one costs ~50 ms of CPU, and each shard
        # would otherwise build its own (two for litellm's handler) during the first requests.
        self._tls: ssl.SSLContext | None = None

    def _tls_context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = httpx.create_ssl_context()
        return self._tls

    def _transport(self) -> httpx.AsyncHTTPTransport:
        return transport(SHARD_LIMITS, self._tls_context())

    def prepare(self, gateway: Gateway, key_index: int, key: str) -> None:
        """Build every shard's client for this gateway and key now (start-up), not during the
        first requests."""
        for _ in range(POOL_SHARDS):
            self.client_for(gateway, key_index, key)

    def client_for(self, gateway: Gateway, key_index: int, key: str) -> Any:
        # The OpenAI SDK client carries its key; litellm's handler gets the key per call.
        self._turn = (self._turn + 1) % POOL_SHARDS
        slot = (
            gateway.name,
            gateway.api_base,
            key if gateway.protocol == "openai" else "",
            self._turn,
        )
        client = self._clients.get(slot)
        if client is None:
            hooks = {"request": [_on_request], "response": [_on_response]}
            if gateway.protocol == "openai":
                client = AsyncOpenAI(
                    api_key=key,
                    base_url=gateway.api_base,
                    max_retries=0,
                    http_client=httpx.AsyncClient(event_hooks=hooks, transport=self._transport()),
                )
            else:
                client = AsyncHTTPHandler(event_hooks=hooks, ssl_verify=self._tls_context())
                # litellm's handler builds its client with httpx's default pool; give it ours.
                http = httpx.AsyncClient(
                    event_hooks=hooks, follow_redirects=True, transport=self._transport()
                )
                self._http.append(http)
                client.client = http
            self._clients[slot] = client
        return client

    def sdk_client_for(self, gateway: Gateway, key_index: int, key: str) -> Any:
        """An OpenAI SDK client for `gateway` bound to `key` (transcription requests)."""
        if gateway.protocol == "openai":
            return self.client_for(gateway, key_index, key)
        slot = (f"{gateway.name}:sdk", gateway.api_base, key, 0)
        client = self._clients.get(slot)
        if client is None:
            client = AsyncOpenAI(
                api_key=key,
                base_url=gateway.api_base,
                max_retries=0,
                http_client=httpx.AsyncClient(
                    event_hooks={"response": [_on_response]}, transport=self._transport()
                ),
            )
            self._clients[slot] = client
        return client

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        http, self._http = self._http, []
        for client in [*clients, *http]:
            try:
                await (client.aclose() if isinstance(client, httpx.AsyncClient) else client.close())
            except Exception:  # closing must not fail shutdown
                pass
