"""One bounded GET that connects only to addresses checked at connect time.

How the others got it wrong, and what this does instead:
- nanobot checked a URL's address and then let httpx resolve the name again to connect, so a
  name answering "public" to the check and 127.0.0.1 to the connection got through (#4611).
  Here the check lives inside the connection: `GuardedBackend.connect_tcp` (httpcore's network
  backend hook) resolves the name once, checks every address, and opens the socket to a checked
  IP. httpcore keeps the URL's host for SNI and the Host header, so TLS and virtual hosts work.
- nanobot followed redirects inside httpx without checking their targets (#3928). Here
  redirects are followed by hand, at most MAX_REDIRECTS, and each one connects through the same
  guarded backend (a pooled connection is reused only for the origin it was checked for).
- Proxy variables in the environment would make the proxy resolve the name: the client ignores
  them (trust_env=False), so no request leaves except by this path.

Bounds: the whole read (DNS, connect, TLS, redirects, body) gets one deadline; the body is read
as a stream and stops at a byte cap, so 12 MB of HTML or a page that trickles forever ends in
bounded time and memory. A compressed body is read raw and decoded here in pieces of at most
64 KiB, each counted against the cap (web/decoding.py): a deflate bomb ends at the cap, and
no single call on the loop inflates more than one piece.
"""

from __future__ import annotations

import asyncio
import http
import ipaddress
import socket
import ssl
import typing
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from functools import cache

import anyio._backends._asyncio  # see MAX_REDIRECTS
import anyio.streams.tls  # noqa: F401 - loaded now, not at the first TLS read
import certifi
import httpcore
import httpx

from web.addresses import Allowance, IPAddress, check_address
from web.decoding import ACCEPT_ENCODING, Decoder, coding_of
from web.errors import (
    BadUrlError,
    BlockedAddressError,
    ConnectFailedError,
    DnsError,
    HttpStatusError,
    TlsError,
    TooLargeError,
    TooManyRedirectsError,
    TooSlowError,
    UnsupportedTypeError,
    WebError,
)
from web.hosts import plain_host

# httpcore loads anyio's asyncio backend at the first connection: 20–70 ms of imports on the
# chat loop at the first read. The imports above load it with this module, at start-up.

MAX_REDIRECTS = 5
# Longest a whole read may take: DNS, connections, redirects and the body together.
READ_TIMEOUT_SECONDS = 20.0
# Largest body read: an HTML page or a text (real articles weigh 50 KB–2 MB), and a PDF.
MAX_PAGE_BYTES = 5 * 1024 * 1024
MAX_PDF_BYTES = 10 * 1024 * 1024
USER_AGENT = "Mozilla/5.0 (compatible; mnemobot; +https://github.com/mnemobot)"
ACCEPT = (
    "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.8,"
    "application/pdf;q=0.8,*/*;q=0.1"
)
_REDIRECTS = frozenset({301, 302, 303, 307, 308})

# A host (a plain name, or an address in its canonical spelling) and a port.
Origin = tuple[str, int]
# getaddrinfo's shape: (family, type, proto, canonname, sockaddr).
AddrInfo = list[tuple[typing.Any, ...]]
Resolver = Callable[[str, int], Awaitable[AddrInfo]]


async def system_resolver(host: str, port: int) -> AddrInfo:
    """The system's resolver (getaddrinfo in a thread, as asyncio does it)."""
    return await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)


async def resolve(host: str, port: int, resolver: Resolver) -> list[IPAddress]:
    """The addresses `host` resolves to, in the resolver's order. An IP literal, in any form
    the resolver would read as one, is itself and never reaches the resolver; a host that is
    not a plain name is refused before it could reach DNS (web/hosts.py)."""
    target = plain_host(host)
    if not isinstance(target, str):
        return [target]
    try:
        infos = await resolver(target, port)
    except (socket.gaierror, UnicodeError) as exc:
        detail = getattr(exc, "strerror", None) or str(exc)
        raise DnsError(f"{host} resolves to no address ({detail})") from None
    addresses: list[IPAddress] = []
    for info in infos:
        address = ipaddress.ip_address(info[4][0].split("%")[0])
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise DnsError(f"{host} resolves to no address")
    return addresses


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend with the address check inside connect_tcp: the name is
    resolved once, only addresses that pass are connected to (a name answering both a public
    and a private address is connected to the public one), and `attempts` records every
    address a socket was opened to (tests read it)."""

    def __init__(
        self,
        allowance: Allowance,
        resolver: Resolver = system_resolver,
        inner: httpcore.AsyncNetworkBackend | None = None,
        refused: frozenset[Origin] = frozenset(),
    ) -> None:
        self._allowance = allowance
        self._resolver = resolver
        self._refused = refused
        self._inner = inner or httpcore.AnyIOBackend()
        self.attempts: list[tuple[str, int]] = []

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        if (str(plain_host(host)), port) in self._refused:
            raise BlockedAddressError(
                f"refused: {host}:{port} is the search backend, which only web_search uses"
            )
        addresses = await resolve(host, port, self._resolver)
        allowed: list[IPAddress] = []
        refused: BlockedAddressError | None = None
        for address in addresses:
            try:
                check_address(host, address, self._allowance)
            except BlockedAddressError as exc:
                refused = refused or exc
            else:
                allowed.append(address)
        if not allowed:
            assert refused is not None
            raise refused
        failure: Exception | None = None
        for address in allowed:
            self.attempts.append((str(address), port))
            try:
                return await self._inner.connect_tcp(
                    str(address), port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise BlockedAddressError("refused: unix sockets are not web addresses")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


@cache
def default_tls() -> ssl.SSLContext:
    """The CA bundle httpx itself uses, loaded once (loading it costs tens of milliseconds)."""
    return ssl.create_default_context(cafile=certifi.where())


async def loaded_tls() -> ssl.SSLContext:
    """default_tls(), its first load done in a thread: 25–50 ms of parsing the CA bundle
    would otherwise stall the chat loop at the first read."""
    return await asyncio.to_thread(default_tls)


class GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx's transport over a connection pool whose only way out is a GuardedBackend.

    httpx 0.28 builds its pool without a network_backend argument, so the pool is replaced
    after construction; the tests of the address rules fail if a later httpx stops using it."""

    def __init__(self, backend: GuardedBackend, *, tls: ssl.SSLContext | None = None) -> None:
        tls = tls or default_tls()
        # verify=tls: httpx would otherwise load the CA bundle again for a pool it never uses
        # (tens of milliseconds on the loop, per read).
        super().__init__(verify=tls, trust_env=False, retries=0)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=tls,
            max_connections=4,
            max_keepalive_connections=2,
            retries=0,
            network_backend=backend,
        )


def guarded_client(
    allowance: Allowance,
    *,
    resolver: Resolver = system_resolver,
    tls: ssl.SSLContext | None = None,
    timeout: float = READ_TIMEOUT_SECONDS,
    inner: httpcore.AsyncNetworkBackend | None = None,
    refused: frozenset[Origin] = frozenset(),
) -> tuple[httpx.AsyncClient, GuardedBackend]:
    """A client whose every connection goes through a GuardedBackend (no proxies, no
    automatic redirects, no cookies kept between reads: make one per read or search).
    `inner` is the backend that really opens sockets (tests put a recorder there); `refused`
    are origins never connected to, whatever the allowance (web_read: the search backend)."""
    backend = GuardedBackend(allowance, resolver, inner, refused)
    client = httpx.AsyncClient(
        transport=GuardedTransport(backend, tls=tls),
        follow_redirects=False,
        trust_env=False,
        timeout=httpx.Timeout(timeout),
        headers={"User-Agent": USER_AGENT, "Accept": ACCEPT, "Accept-Encoding": ACCEPT_ENCODING},
    )
    return client, backend


@dataclass(frozen=True)
class Fetched:
    """A body read within the bounds, and what is known about it."""

    url: str  # the final URL, after redirects
    kind: str  # "html", "text", "json" or "pdf"
    content_type: str  # the Content-Type header as sent ("" when none)
    body: bytes


def with_scheme(url: str) -> str:
    """`url`, with https:// in front when it has no scheme at all ("example.org/page": models
    and users often write a link that way)."""
    url = url.strip()
    if "://" not in url and not url.lower().startswith(("mailto:", "javascript:", "data:")):
        return f"https://{url}"
    return url


def check_url(url: str) -> httpx.URL:
    """`url` parsed, if it is http(s) with a host; raises BadUrlError."""
    try:
        parsed = httpx.URL(url.strip())
    except (httpx.InvalidURL, TypeError, ValueError):
        raise BadUrlError(f"not a valid URL: {url[:200]}") from None
    if parsed.scheme not in ("http", "https"):
        raise BadUrlError(
            f"only http and https URLs are read, not {parsed.scheme or 'this'}: {url}"
        )
    if not parsed.host:
        raise BadUrlError(f"the URL has no host: {url[:200]}")
    plain_host(parsed.raw_host.decode("ascii", errors="replace"))
    return parsed


def origin(url: httpx.URL) -> Origin:
    """`url`'s host as connections see it (web/hosts.py's spelling) and its port."""
    port = url.port or (443 if url.scheme == "https" else 80)
    return str(plain_host(url.raw_host.decode("ascii", errors="replace"))), port


def content_kind(content_type: str, head: bytes) -> str | None:
    """ "html", "text", "json", "pdf" or None (a kind not read). With no useful Content-Type
    the first bytes decide (a PDF's signature, an HTML document's first tag)."""
    mime = content_type.split(";")[0].strip().lower()
    if mime in ("text/html", "application/xhtml+xml"):
        return "html"
    if mime == "application/pdf":
        return "pdf"
    if mime == "application/json" or mime.endswith("+json"):
        return "json"
    if mime.startswith("text/"):
        return "text"
    if mime in ("", "application/octet-stream", "binary/octet-stream"):
        start = head.lstrip(b"\xef\xbb\xbf \t\r\n")[:64].lower()
        if start.startswith(b"%pdf-"):
            return "pdf"
        if start.startswith((b"<!doctype html", b"<html")):
            return "html"
    return None


async def fetch(
    url: str,
    client: httpx.AsyncClient,
    *,
    timeout: float = READ_TIMEOUT_SECONDS,  # noqa: ASYNC109 - one deadline for the whole read
    max_bytes: int = MAX_PAGE_BYTES,
    max_pdf_bytes: int = MAX_PDF_BYTES,
    max_redirects: int = MAX_REDIRECTS,
) -> Fetched:
    """GET `url` within one deadline, following at most `max_redirects` redirects, each
    checked like the first; the body of an HTML, text, JSON or PDF answer. Every failure is a
    WebError with one sentence for the model."""
    current = check_url(url)
    try:
        async with asyncio.timeout(timeout):
            for _ in range(max_redirects + 1):
                async with client.stream("GET", current) as response:
                    if response.status_code in _REDIRECTS and "location" in response.headers:
                        current = check_url(str(current.join(response.headers["location"])))
                        continue
                    return await _body(response, max_bytes, max_pdf_bytes)
            raise TooManyRedirectsError(f"more than {max_redirects} redirects from {url}")
    except TimeoutError:
        raise TooSlowError(f"{current.host} did not answer in full within {timeout:g} s") from None
    except httpx.TimeoutException:
        raise TooSlowError(f"{current.host} did not answer in full within {timeout:g} s") from None
    except httpx.ConnectError as exc:
        raise _connect_failure(current, exc) from None
    except httpx.HTTPError as exc:
        raise ConnectFailedError(f"{current.host}: {type(exc).__name__}: {exc}"[:300]) from None


async def _body(response: httpx.Response, max_bytes: int, max_pdf_bytes: int) -> Fetched:
    """The answer's body, refused before reading when its status or kind is wrong, and cut
    off with TooLargeError as soon as it passes its cap."""
    host = response.url.host
    if response.status_code >= 400:
        raise HttpStatusError(
            f"{host} answered HTTP {response.status_code} {_phrase(response.status_code)}".strip(),
            response.status_code,
        )
    if response.status_code != 200:
        raise HttpStatusError(
            f"{host} answered HTTP {response.status_code}, not a page", response.status_code
        )
    content_type = response.headers.get("content-type", "")
    coding = coding_of(response.headers.get("content-encoding", ""), host)
    pieces = _decoded(response, Decoder(coding), max(max_bytes, max_pdf_bytes), host)
    async with aclosing(pieces):
        head = b""
        async for piece in pieces:
            head = piece
            break
        kind = content_kind(content_type, head)
        if kind is None:
            shown = content_type.split(";")[0] or "no content type"
            raise UnsupportedTypeError(
                f"{host} sent {shown}; web_read reads HTML, plain text, JSON and PDF"
            )
        cap = max_pdf_bytes if kind == "pdf" else max_bytes
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > cap:
            raise TooLargeError(_too_large(host, cap))
        body = bytearray(head)
        async for piece in pieces:
            body += piece
            if len(body) > cap:
                raise TooLargeError(_too_large(host, cap))
    if len(body) > cap:
        raise TooLargeError(_too_large(host, cap))
    return Fetched(str(response.url), kind, content_type, bytes(body))


async def _decoded(
    response: httpx.Response, decoder: Decoder, cap: int, host: str | None
) -> AsyncGenerator[bytes, None]:
    """The body's decoded pieces (each at most one zlib call's worth), read from the raw
    stream; more than `cap` raw bytes is too large whatever they decode to. The loop gets a
    turn between pieces, so a page decoding at the cap does not hold up other chats."""
    raw = 0
    async for chunk in response.aiter_raw():
        raw += len(chunk)
        if raw > cap:
            raise TooLargeError(_too_large(host, cap))
        for piece in decoder.feed(chunk):
            yield piece
            await asyncio.sleep(0)
    for piece in decoder.finish():
        yield piece


def _phrase(status: int) -> str:
    """The standard phrase of a status (never the server's own words: they reach the model)."""
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""


def _too_large(host: str | None, cap: int) -> str:
    return f"the answer of {host} is larger than {cap / (1024 * 1024):g} MB, the most read"


def _connect_failure(url: httpx.URL, exc: httpx.ConnectError) -> WebError:
    """A TLS failure or a plain connection failure, told apart by the ssl error underneath."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ssl.SSLError):
            reason = getattr(cause, "verify_message", None) or cause.reason or str(cause)
            return TlsError(f"TLS with {url.host} failed: {reason}")
        cause = cause.__cause__ or cause.__context__
    text = str(exc)
    if "SSL" in text or "certificate" in text.lower() or "TLS" in text:
        return TlsError(f"TLS with {url.host} failed: {text[:200]}")
    return ConnectFailedError(f"could not connect to {url.host}: {text[:200] or 'refused'}")
