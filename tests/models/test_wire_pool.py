"""The provider clients' connection pools (models/worker/sockets.py): httpcore's pool runs on our
socket-keeping backend, and with it still notices a keep-alive connection the server closed
(the readiness check is what that backend answers itself)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import httpcore
import httpx
import pytest

from bot.app import TELEGRAM_LIMITS, telegram_request
from models.gateways import Gateway
from models.worker.clients import SHARD_LIMITS, ClientPool
from models.worker.sockets import SocketKeepingBackend, is_readable, transport

RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok"


class OneAnswerServer:
    """Answers one request per connection, then closes it: a keep-alive the server ended."""

    def __init__(self) -> None:
        self.connections = 0
        self.closed = asyncio.Event()  # a connection was closed by us, the server
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        await reader.readuntil(b"\r\n\r\n")
        writer.write(RESPONSE)
        await writer.drain()
        writer.close()
        await writer.wait_closed()
        self.closed.set()  # on loopback the client's socket holds our FIN from now on

    @property
    def url(self) -> str:
        assert self.server is not None
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/"


@pytest.fixture
async def server() -> AsyncIterator[OneAnswerServer]:
    answering = OneAnswerServer()
    answering.server = await asyncio.start_server(answering.handle, "127.0.0.1", 0)
    try:
        yield answering
    finally:
        answering.server.close()
        await answering.server.wait_closed()


async def test_a_connection_the_server_closed_is_not_reused(server: OneAnswerServer) -> None:
    context = httpx.create_ssl_context()
    async with httpx.AsyncClient(transport=transport(SHARD_LIMITS, context)) as client:
        first = await client.get(server.url)
        await server.closed.wait()
        second = await client.get(server.url)

    assert (first.text, second.text) == ("ok", "ok")
    assert server.connections == 2  # the closed one was dropped, a new one opened


def test_is_readable_tells_pending_data_and_a_gone_socket() -> None:
    left, right = socket.socketpair()
    try:
        assert is_readable(left) is False
        right.sendall(b"x")
        assert is_readable(left) is True
    finally:
        left.close()
        right.close()
    assert is_readable(left) is True  # closed: fileno() is -1
    assert is_readable(None) is True


async def test_every_provider_client_pool_uses_the_socket_keeping_backend() -> None:
    pool = ClientPool()
    openai = Gateway(name="openai", protocol="openai", api_base="http://127.0.0.1:9/v1")
    anthropic = Gateway(name="anthropic", protocol="anthropic", api_base="http://127.0.0.1:9")
    try:
        http_clients = [
            pool.client_for(openai, 0, "sk-test")._client,
            pool.client_for(anthropic, 0, "sk-test").client,
            pool.sdk_client_for(anthropic, 0, "sk-test")._client,
        ]
        for client in http_clients:
            connection_pool = client._transport._pool
            assert isinstance(connection_pool, httpcore.AsyncConnectionPool)
            assert isinstance(connection_pool._network_backend, SocketKeepingBackend)
    finally:
        await pool.aclose()


async def test_the_bot_api_client_keeps_its_sockets_and_more_idle_connections() -> None:
    request = telegram_request()
    try:
        await request.initialize()
        connection_pool = request._client._transport._pool
        assert isinstance(connection_pool._network_backend, SocketKeepingBackend)
        assert (
            connection_pool._max_keepalive_connections == TELEGRAM_LIMITS.max_keepalive_connections
        )
    finally:
        await request.shutdown()
