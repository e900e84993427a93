"""The guarded fetch (web/fetch.py) against a fake site on loopback addresses.

127.0.0.1 is allowed through WEB_ALLOW_PRIVATE's parsing in these tests (the fake lives there);
127.0.0.2, loopback too, is not, and stands for every address a page must never reach. The
backend that really opens sockets is wrapped by a recorder that refuses anything outside
127.0.0.0/8, so a broken guard fails a test without a packet leaving the machine.
"""

from __future__ import annotations

import asyncio
import gzip
import ipaddress
import socket
import ssl
import subprocess
import tracemalloc
import typing
import zlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpcore
import pytest
from aiohttp import web

from tests.fakes.web import FakeSite
from web.addresses import parse_allowance
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
)
from web.fetch import MAX_PAGE_BYTES, AddrInfo, fetch, guarded_client, with_scheme

ALLOW_FIRST = parse_allowance("127.0.0.1")
GUARD = 30  # seconds any one test may wait for anything: a broken bound fails, never hangs


class Recorder(httpcore.AsyncNetworkBackend):
    """The socket opener under the guard: records every address it is asked to connect to,
    and connects only inside 127.0.0.0/8."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self._real = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        self.asked.append(host)
        if ipaddress.ip_address(host) not in ipaddress.ip_network("127.0.0.0/8"):
            raise httpcore.ConnectError(f"test recorder: no connection outside loopback ({host})")
        return await self._real.connect_tcp(host, port, timeout, local_address, socket_options)

    async def sleep(self, seconds: float) -> None:
        await self._real.sleep(seconds)


def names(table: dict[str, list[str]]) -> typing.Callable[[str, int], typing.Awaitable[AddrInfo]]:
    """A resolver answering from `table` like getaddrinfo (unknown names: EAI_NONAME)."""

    async def resolver(host: str, port: int) -> AddrInfo:
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port)) for address in table[host]
        ]

    return resolver


@pytest.fixture
async def site() -> AsyncIterator[FakeSite]:
    async with FakeSite() as fake:
        yield fake


async def _fetch(url: str, **kwargs: typing.Any) -> typing.Any:
    allowance = kwargs.pop("allowance", ALLOW_FIRST)
    resolver = kwargs.pop("resolver", None)
    recorder = kwargs.pop("recorder", Recorder())
    tls = kwargs.pop("tls", None)
    options = {"resolver": resolver} if resolver else {}
    client, _ = guarded_client(allowance, inner=recorder, tls=tls, **options)
    async with asyncio.timeout(GUARD), client:
        return await fetch(url, client, **kwargs)


async def test_a_redirect_to_a_loopback_address_outside_the_allowance_never_reaches_it(
    site: FakeSite,
) -> None:
    target = site.url("/article", "127.0.0.2")
    with pytest.raises(BlockedAddressError) as caught:
        await _fetch(site.url(f"/redirect?to={target}"))
    assert "127.0.0.2" in str(caught.value) and "loopback" in str(caught.value)
    assert site.requests["127.0.0.1"] == 1
    assert site.requests["127.0.0.2"] == 0


async def test_the_metadata_address_is_refused_without_a_connection_attempt() -> None:
    recorder = Recorder()
    for url, resolver in (
        ("http://169.254.169.254/latest/meta-data/", None),
        ("http://[::ffff:169.254.169.254]/latest/meta-data/", None),
        ("http://metadata.test/computeMetadata/v1/", names({"metadata.test": ["169.254.169.254"]})),
    ):
        with pytest.raises(BlockedAddressError) as caught:
            await _fetch(url, resolver=resolver, recorder=recorder)
        assert "metadata" in str(caught.value) or "link-local" in str(caught.value)
    assert recorder.asked == []


async def test_a_name_answering_a_refused_and_an_allowed_address_connects_only_to_the_allowed(
    site: FakeSite,
) -> None:
    """One lookup per connection, and the socket goes to an address that passed the check:
    a rebinding name cannot slip 127.0.0.2 in beside an allowed address."""
    lookups: list[str] = []
    table = names({"mixed.test": ["127.0.0.2", "127.0.0.1"]})

    async def counting(host: str, port: int) -> AddrInfo:
        lookups.append(host)
        return await table(host, port)

    recorder = Recorder()
    url = f"http://mixed.test:{site.ports['127.0.0.1']}/article"
    fetched = await _fetch(url, resolver=counting, recorder=recorder)
    assert fetched.kind == "html"
    assert recorder.asked == ["127.0.0.1"] and lookups == ["mixed.test"]
    assert site.requests["127.0.0.2"] == 0


async def test_an_allowed_name_keeps_its_host_header(site: FakeSite) -> None:
    """WEB_ALLOW_PRIVATE may list a name (a SearXNG on the LAN); the request still says that
    name to the server although the socket went to the address."""
    port = site.ports["127.0.0.2"]
    fetched = await _fetch(
        f"http://searxng.lan:{port}/echo",
        allowance=parse_allowance("searxng.lan"),
        resolver=names({"searxng.lan": ["127.0.0.2"]}),
    )
    assert fetched.body == f"Host: searxng.lan:{port}".encode()
    assert site.requests["127.0.0.2"] == 1


async def test_at_most_five_redirects_are_followed(site: FakeSite) -> None:
    fetched = await _fetch(site.url("/chain/4"))  # 5 redirects, then the article
    assert fetched.url == site.url("/article") and fetched.kind == "html"
    before = site.requests["127.0.0.1"]
    with pytest.raises(TooManyRedirectsError):
        await _fetch(site.url("/chain/5"))
    assert site.requests["127.0.0.1"] - before == 6  # the first request and five redirects


async def test_a_redirect_to_another_scheme_is_refused(site: FakeSite) -> None:
    for target in ("file:///etc/passwd", "gopher://127.0.0.1:70/"):
        with pytest.raises(BadUrlError):
            await _fetch(site.url(f"/redirect?to={target}"))
    for url in ("file:///etc/passwd", "ftp://example.org/", "http://", "not a url"):
        with pytest.raises(BadUrlError):
            await _fetch(url)
    # A link written without a scheme is read as https; other schemes stay what they are.
    assert with_scheme(" example.org/a ") == "https://example.org/a"
    for url in ("http://example.org/", "javascript:alert(1)", "data:text/html,x"):
        assert with_scheme(url) == url


async def test_twelve_megabytes_of_html_end_at_the_cap(site: FakeSite) -> None:
    with pytest.raises(TooLargeError) as caught:
        await _fetch(site.url("/big"))
    assert "5 MB" in str(caught.value)
    # The stream was given up at the cap: the fake could not write all 12 MB.
    assert site.sent_bytes["big"] < 12 * 1024 * 1024
    with pytest.raises(TooLargeError):
        await _fetch(site.url("/big-declared"))
    assert site.sent_bytes["big-declared"] < 12 * 1024 * 1024


async def test_a_compressed_page_is_counted_after_decompression(site: FakeSite) -> None:
    """12 MB of HTML sent gzipped (about 12 KB on the wire) is still 12 MB: too large."""
    body = gzip.compress(b"<p>" + b"a" * (12 * 1024 * 1024) + b"</p>")
    assert len(body) < 100_000
    site.pages["bomb"] = ("text/html", body)
    site.headers["bomb"] = {"Content-Encoding": "gzip"}
    with pytest.raises(TooLargeError):
        await _fetch(site.url("/page/bomb"))


async def _failure_and_peak(site: FakeSite, body: bytes, coding: str) -> tuple[Exception, int]:
    """The error fetching `body` sent with Content-Encoding `coding` ends in, and the most
    memory Python held meanwhile (tracemalloc counts zlib's output buffers too)."""
    site.pages["bomb"] = ("text/html", body)
    site.headers["bomb"] = {"Content-Encoding": coding}
    tracemalloc.start()
    try:
        with pytest.raises((TooLargeError, UnsupportedTypeError)) as caught:
            await _fetch(site.url("/page/bomb"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return caught.value, peak


async def test_a_deflate_bomb_ends_at_the_cap_within_the_cap_s_memory(site: FakeSite) -> None:
    """64 KiB of deflate inflating to 64 MiB: read raw and inflated a piece at a time, it ends
    at the 5 MB cap, and this process never held much more than the cap."""
    body = zlib.compress(b"\0" * (64 * 1024 * 1024), 9)
    assert len(body) <= 66 * 1024
    failure, peak = await _failure_and_peak(site, body, "deflate")
    assert isinstance(failure, TooLargeError) and "5 MB" in str(failure)
    assert peak < 2 * MAX_PAGE_BYTES, f"peak {peak / 2**20:.1f} MiB"


async def test_a_body_encoded_twice_is_refused_before_it_is_decoded(site: FakeSite) -> None:
    """`gzip, gzip` on 1 KiB would inflate to 512 MiB in one call: it is refused by its header."""
    body = gzip.compress(gzip.compress(b"\0" * (64 * 1024 * 1024), 9), 9)
    failure, peak = await _failure_and_peak(site, body, "gzip, gzip")
    assert isinstance(failure, UnsupportedTypeError)
    assert "encoded several times (gzip, gzip)" in str(failure)
    assert peak < 4 * 1024 * 1024, f"peak {peak / 2**20:.1f} MiB"


async def test_only_bounded_codings_are_asked_for(site: FakeSite) -> None:
    site.pages["plain"] = ("text/plain", b"hello")
    assert (await _fetch(site.url("/page/plain"))).body == b"hello"
    assert site.accept_encodings == ["gzip, deflate"]


async def test_a_trickling_page_ends_at_the_deadline(site: FakeSite) -> None:
    with pytest.raises(TooSlowError) as caught:
        await _fetch(site.url("/trickle"), timeout=1.0)
    assert "within 1 s" in str(caught.value)
    assert site.sent_bytes["trickle"] < 300


async def test_kinds_that_are_not_read_are_refused_before_their_body(site: FakeSite) -> None:
    site.pages["png"] = ("image/png", b"\x89PNG\r\n\x1a\n" + b"\x00" * MAX_PAGE_BYTES)
    with pytest.raises(UnsupportedTypeError) as caught:
        await _fetch(site.url("/page/png"))
    assert "image/png" in str(caught.value)
    site.pages["bare"] = ("", b"<!DOCTYPE html><html><body><p>hi</p></body></html>")
    assert (await _fetch(site.url("/page/bare"))).kind == "html"  # sniffed
    site.pages["pdf"] = ("application/octet-stream", b"%PDF-1.7\n...")
    assert (await _fetch(site.url("/page/pdf"))).kind == "pdf"
    site.pages["json"] = ("application/ld+json", b'{"a": 1}')
    assert (await _fetch(site.url("/page/json"))).kind == "json"


async def test_error_statuses_dns_and_refused_connections_are_errors(site: FakeSite) -> None:
    with pytest.raises(HttpStatusError) as status:
        await _fetch(site.url("/status/404"))
    assert status.value.status == 404 and "404" in str(status.value)
    with pytest.raises(DnsError) as dns:
        await _fetch("http://nothing.invalid/", resolver=names({}))
    assert "nothing.invalid resolves to no address" in str(dns.value)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(ConnectFailedError):
        await _fetch(f"http://127.0.0.1:{port}/")


async def test_the_system_resolver_is_the_one_checked(site: FakeSite) -> None:
    """ "localhost" goes through getaddrinfo (/etc/hosts, no DNS traffic) and is loopback."""
    recorder = Recorder()
    with pytest.raises(BlockedAddressError):
        await _fetch(
            f"http://localhost:{site.ports['127.0.0.2']}/",
            allowance=parse_allowance(""),
            recorder=recorder,
        )
    assert recorder.asked == []


# TLS: a certificate for site.test, served on 127.0.0.1.


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-subj", "/CN=site.test", "-addext", "subjectAltName=DNS:site.test",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


@pytest.fixture
async def tls_site(certificate: tuple[Path, Path]) -> AsyncIterator[int]:
    cert, key = certificate
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    seen: list[str] = []

    async def echo(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Host", ""))
        return web.Response(text=f"Host: {request.headers.get('Host', '')}")

    app = web.Application()
    app.router.add_get("/echo", echo)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context).start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


async def test_tls_is_checked_against_the_urls_name_while_the_socket_goes_to_the_address(
    tls_site: int, certificate: tuple[Path, Path]
) -> None:
    allowance = parse_allowance("site.test, other.test")
    resolver = names({"site.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]})
    trusting = ssl.create_default_context(cafile=str(certificate[0]))
    fetched = await _fetch(
        f"https://site.test:{tls_site}/echo", allowance=allowance, resolver=resolver, tls=trusting
    )
    assert fetched.body == f"Host: site.test:{tls_site}".encode()
    # The same server under another name: the certificate does not match what was asked for.
    with pytest.raises(TlsError) as mismatch:
        await _fetch(
            f"https://other.test:{tls_site}/echo",
            allowance=allowance,
            resolver=resolver,
            tls=trusting,
        )
    assert "other.test" in str(mismatch.value)
    # With the CAs a real read trusts, a self-signed certificate is a TLS error, said as one.
    with pytest.raises(TlsError) as untrusted:
        await _fetch(f"https://site.test:{tls_site}/echo", allowance=allowance, resolver=resolver)
    assert "certificate" in str(untrusted.value)


def asked_resolver() -> tuple[list[str], typing.Callable[[str, int], typing.Awaitable[AddrInfo]]]:
    """A resolver that records every name it is asked and answers 127.0.0.1 (a fake: a name
    reaching it is the failure these tests look for)."""
    asked: list[str] = []
    answer = names({})

    async def resolver(host: str, port: int) -> AddrInfo:
        asked.append(host)
        return await answer(host, port)

    return asked, resolver


@pytest.mark.parametrize(
    "host", ["127.1", "0x7f000001", "2130706433", "017700000001", "0x7f.0.0.1", "127.0.1"]
)
async def test_ip_literals_in_every_form_are_judged_without_a_resolver(
    site: FakeSite, host: str
) -> None:
    """The forms getaddrinfo (and a browser) read as 127.0.0.1 are that address: refused when
    it is not allowed, connected to when it is, and never handed to a resolver."""
    asked, resolver = asked_resolver()
    recorder = Recorder()
    port = site.ports["127.0.0.1"]
    with pytest.raises(BlockedAddressError) as caught:
        await _fetch(
            f"http://{host}:{port}/article",
            allowance=parse_allowance(""),
            resolver=resolver,
            recorder=recorder,
        )
    assert "loopback" in str(caught.value)
    assert recorder.asked == []
    fetched = await _fetch(f"http://{host}:{port}/article", resolver=resolver, recorder=recorder)
    assert fetched.kind == "html" and recorder.asked == ["127.0.0.1"]
    assert asked == []


@pytest.mark.parametrize(
    "host",
    [
        "1.2.3.4.5",  # ends in a number, no address
        "08.0.0.1",  # 08 is no octal number
        "a_b.example",  # not letters, digits and hyphens
        "%31%32%37.0.0.1",
        "d41d8cd98f00b204e9800998ecf8427e.evil.test",  # an MD5, hex
        "mfrggzdfmztwq2lknnwg23tpobyxe43u.evil.test",  # base32 of "abcdefghijklmnopqrstu"
        "k7q2m9x4p1v8n3z6w5r0.evil.test",
        "12345678901234567890123.evil.test",
        "a.b.c.d.e.f.g.h.i.evil.test",  # more labels than a site's name has
        ("x" * 63 + ".") * 4 + "test",  # past 253 characters
    ],
)
async def test_a_host_that_is_not_a_plain_name_never_reaches_the_resolver(host: str) -> None:
    asked, resolver = asked_resolver()
    recorder = Recorder()
    with pytest.raises(BadUrlError):
        await _fetch(f"http://{host}/page", resolver=resolver, recorder=recorder)
    assert asked == [] and recorder.asked == []


async def test_a_redirect_to_an_ip_literal_form_is_judged_without_a_resolver(
    site: FakeSite,
) -> None:
    asked, resolver = asked_resolver()
    recorder = Recorder()
    target = f"http://0x7f000002:{site.ports['127.0.0.2']}/article"
    with pytest.raises(BlockedAddressError):
        await _fetch(site.url(f"/redirect?to={target}"), resolver=resolver, recorder=recorder)
    assert asked == [] and recorder.asked == ["127.0.0.1"]
    assert site.requests["127.0.0.2"] == 0


async def test_plain_names_still_go_to_the_resolver() -> None:
    asked, resolver = asked_resolver()
    for host in ("news.example.org", "xn--bcher-kva.example", "ec2-54-1-2-3.compute-1.example"):
        with pytest.raises(DnsError):
            await _fetch(f"http://{host}/", resolver=resolver)
    assert asked == ["news.example.org", "xn--bcher-kva.example", "ec2-54-1-2-3.compute-1.example"]
