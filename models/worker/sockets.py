"""httpcore's network backend, with each connection's socket kept at hand.

Whenever a request starts or ends, httpcore's pool asks every idle connection whether the
server closed it (`get_extra_info("is_readable")`). Through anyio, each such question rebuilds
the stream's attribute table, a `getpeername()` system call included, to reach the socket. With
a hundred streams in flight that was most of the provider loop's time while a burst of requests
started (measured by sampling the bot under benchmarks/turn_overhead.py). Here the socket is
looked up once, when the connection opens, and the readiness check is one `poll`.
"""

# ruff: noqa: ASYNC109 - httpcore's interface takes `timeout` arguments; we pass them through
from __future__ import annotations

import select
import socket
import ssl
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx


class _Stream(httpcore.AsyncNetworkStream):
    """anyio's stream, answering the pool's socket questions from the socket it opened with."""

    def __init__(self, inner: httpcore.AsyncNetworkStream, sock: socket.socket | None) -> None:
        self._inner = inner
        self._socket = sock

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        # TLS runs over the same socket: its readiness still tells whether the server closed.
        tls = await self._inner.start_tls(ssl_context, server_hostname, timeout)
        return _Stream(tls, self._socket)

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            return is_readable(self._socket)
        if info == "socket":
            return self._socket
        return self._inner.get_extra_info(info)


class SocketKeepingBackend(httpcore.AsyncNetworkBackend):
    """httpcore's own anyio backend, whose streams keep their socket (see the module)."""

    def __init__(self) -> None:
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        return _Stream(stream, stream.get_extra_info("socket"))

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._inner.connect_unix_socket(path, timeout, socket_options)
        return _Stream(stream, stream.get_extra_info("socket"))

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def is_readable(sock: socket.socket | None) -> bool:
    """Would a read return at once? For an idle connection: the server closed it (or sent
    something it should not have). A socket that is gone counts as readable, like httpcore's."""
    fd = -1 if sock is None else sock.fileno()
    if fd < 0:
        return True
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


def transport(limits: httpx.Limits, verify: ssl.SSLContext) -> httpx.AsyncHTTPTransport:
    """httpx's transport with the socket-keeping backend in its connection pool.

    httpx takes no backend argument, so the pool it built is given ours before any connection
    exists (tests/models/test_wire_pool.py checks this still holds for the pinned
    httpx/httpcore)."""
    built = httpx.AsyncHTTPTransport(limits=limits, verify=verify)
    pool = built._pool
    assert isinstance(pool, httpcore.AsyncConnectionPool), "a proxy transport: none here"
    pool._network_backend = SocketKeepingBackend()
    return built
