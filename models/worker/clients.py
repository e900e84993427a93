"""The HTTP clients handed to litellm in the provider worker (models/worker/child.py), each
carrying the wire hooks of models/worker/wire.py."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from typing import Any

import httpx
from litellm.llms.custom_httpx.http_handler import AsyncHTTPHandler
from openai import AsyncOpenAI

from models.gateways import Gateway
from models.worker.sockets import transport
from models.worker.wire import on_request, on_response

# Connection pools. httpx keeps 20 idle connections of at most 100 per client by default: past
# 100 concurrent streams requests queue inside the pool, and after every burst all but 20
# connections are closed and reopened (TCP and TLS set-up, a thread for the DNS lookup each).
# But one big pool is no answer either: httpcore scans every connection of a pool whenever a
# request starts or ends (a socket check per idle one, and a quadratic count of idle ones), which
# at 500 connections takes a third of the provider loop's CPU. So each gateway (and key) gets
# POOL_SHARDS small clients used in turn.
POOL_SHARDS = 8
SHARD_LIMITS = httpx.Limits(max_connections=64, max_keepalive_connections=32, keepalive_expiry=30.0)


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
            hooks: dict[str, list[Callable[..., Any]]] = {
                "request": [on_request],
                "response": [on_response],
            }
            if gateway.protocol == "openai":
                # The SDK takes an httpx client as well as an httpx2 one (at run time it checks
                # both, `is_legacy_httpx_async_client`); its parameter's hint names only httpx2.
                http = httpx.AsyncClient(event_hooks=hooks, transport=self._transport())
                client = AsyncOpenAI(
                    api_key=key,
                    base_url=gateway.api_base,
                    max_retries=0,
                    http_client=http,  # type: ignore[arg-type]  # httpx accepted, see above
                )
            else:
                client = AsyncHTTPHandler(event_hooks=hooks, ssl_verify=self._tls_context())
                # litellm's handler builds its client with httpx's default pool; give it ours.
                # Redirects are not followed: httpx drops only `Authorization` on the way, so
                # Anthropic's `x-api-key` would go to whatever host a gateway redirects to.
                http = httpx.AsyncClient(
                    event_hooks=hooks, follow_redirects=False, transport=self._transport()
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
            http = httpx.AsyncClient(
                event_hooks={"response": [on_response]}, transport=self._transport()
            )
            client = AsyncOpenAI(
                api_key=key,
                base_url=gateway.api_base,
                max_retries=0,
                http_client=http,  # type: ignore[arg-type]  # httpx accepted, as in client_for
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
