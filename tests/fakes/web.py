"""A fake web site and a fake SearXNG on loopback addresses, for the web tools' tests.

`FakeSite` serves the same routes on several loopback addresses at once (127.0.0.1 and
127.0.0.2 are both loopback on Linux) and counts the requests that reached each address, so a
test can show that a redirect to an address outside WEB_ALLOW_PRIVATE never reached it.
`FakeSearx` answers `/search` as SearXNG does: its JSON shape (results with parsed_url,
engines, positions, score, category, …; unresponsive_engines as [name, error] pairs), and with
`json` not in its formats, werkzeug's own 403 page, as `flask.abort(403)` sends it.
"""

from __future__ import annotations

import asyncio
import gzip
import json
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import TracebackType
from urllib.parse import urlsplit

from aiohttp import web

TESTDATA = Path(__file__).resolve().parents[2].parent / "shared" / "testdata"
WEB_EXTRACTION = TESTDATA / "web-extraction"
# A page of the extraction benchmark: a real news article with its navigation and footer.
ARTICLE_KEY = "08f793762792bd252c75fb57544cdf506ffcc04785136cb87503f02364b82b56"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def benchmark_page(key: str = ARTICLE_KEY) -> tuple[bytes, str]:
    """(the saved page's UTF-8 bytes, its human-annotated article body)."""
    html = gzip.decompress((WEB_EXTRACTION / "html" / f"{key}.html.gz").read_bytes())
    truth = json.loads((WEB_EXTRACTION / "ground-truth.json").read_text(encoding="utf-8"))
    return html, truth[key]["articleBody"]


class FakeSite:
    """The same aiohttp app on each of `hosts` (each on its own free port).

    Routes: `/article` (a real benchmark page), `/page/{name}` (bodies a test sets with
    `pages[name] = (content_type, body)`, held part-way with `hold`), `/redirect?to=URL` (302),
    `/chain/{n}` (n redirects, then the article), `/big` (12 MB of HTML, streamed without a
    length), `/big-declared` (Content-Length 12 MB), `/trickle` (one byte every 0.2 s, for a
    minute at most), `/status/{code}`, `/echo` (the Host header it received, as text)."""

    def __init__(self, hosts: tuple[str, ...] = ("127.0.0.1", "127.0.0.2")) -> None:
        self.hosts = hosts
        self.requests: Counter[str] = Counter()  # local address -> requests that reached it
        self.paths: list[tuple[str, str]] = []  # (local address, path) in arrival order
        self.accept_encodings: list[str] = []  # each request's Accept-Encoding, in order
        self.pages: dict[str, tuple[str, bytes]] = {}
        self.headers: dict[str, dict[str, str]] = {}  # page name -> extra response headers
        # Page name -> an event its answer waits for: a test holds a read in flight, acts, then
        # lets it complete.
        self.gates: dict[str, asyncio.Event] = {}
        self.sent_bytes: Counter[str] = Counter()  # route -> bytes written before it ended
        # page name -> bytes sent before the page waits for release(name); held[name] is set
        # once they are written, so a test knows the read is under way.
        self.holds: dict[str, int] = {}
        self.held: dict[str, asyncio.Event] = {}
        self._released: dict[str, asyncio.Event] = {}
        self._runners: list[web.AppRunner] = []
        self.ports: dict[str, int] = {}

    def url(self, path: str, host: str | None = None) -> str:
        host = host or self.hosts[0]
        return f"http://{host}:{self.ports[host]}{path}"

    async def __aenter__(self) -> FakeSite:
        app = web.Application(middlewares=[self._count])
        app.router.add_get("/article", self._article)
        app.router.add_get("/page/{name}", self._page)
        app.router.add_get("/redirect", self._redirect)
        app.router.add_get("/chain/{n}", self._chain)
        app.router.add_get("/big", self._big)
        app.router.add_get("/big-declared", self._big_declared)
        app.router.add_get("/trickle", self._trickle)
        app.router.add_get("/status/{code}", self._status)
        app.router.add_get("/echo", self._echo)
        for host in self.hosts:
            runner = web.AppRunner(app, access_log=None, handle_signals=False)
            await runner.setup()
            self._runners.append(runner)
            await web.TCPSite(runner, host, 0).start()
            self.ports[host] = runner.addresses[0][1]
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for runner in self._runners:
            await runner.cleanup()

    @web.middleware
    async def _count(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        local = sockname[0] if sockname else "?"
        self.requests[local] += 1
        self.paths.append((local, request.path_qs))
        self.accept_encodings.append(request.headers.get("Accept-Encoding", ""))
        return await handler(request)

    async def _article(self, request: web.Request) -> web.StreamResponse:
        html, _ = benchmark_page()
        return web.Response(body=html, content_type="text/html", charset="utf-8")

    def hold(self, name: str, at: int) -> asyncio.Event:
        """Page `name` stops after its first `at` bytes until release(name); the event returned
        is set when those bytes are written."""
        self.holds[name] = at
        self._released[name] = asyncio.Event()
        self.held[name] = asyncio.Event()
        return self.held[name]

    def release(self, name: str) -> None:
        self._released[name].set()

    async def _page(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if name in self.gates:
            await self.gates[name].wait()
        content_type, body = self.pages[name]
        if name in self.holds:
            return await self._held_page(request, name, content_type, body)
        response = web.Response(body=body, headers=self.headers.get(name, {}))
        response.headers["Content-Type"] = content_type
        return response

    async def _held_page(
        self, request: web.Request, name: str, content_type: str, body: bytes
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers=self.headers.get(name, {}))
        response.headers["Content-Type"] = content_type
        response.enable_chunked_encoding()
        await response.prepare(request)
        at = self.holds[name]
        try:
            await response.write(body[:at])
            self.sent_bytes[name] += at
            self.held[name].set()
            async with asyncio.timeout(60):  # the fake gives up by itself
                await self._released[name].wait()
            for start in range(at, len(body), 16384):
                await response.write(body[start : start + 16384])
                self.sent_bytes[name] += len(body[start : start + 16384])
            await response.write_eof()
        except (ConnectionError, asyncio.CancelledError, TimeoutError):
            return response
        return response

    async def _redirect(self, request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound(request.query["to"])

    async def _chain(self, request: web.Request) -> web.StreamResponse:
        left = int(request.match_info["n"])
        raise web.HTTPFound("/article" if left <= 0 else f"/chain/{left - 1}")

    async def _big(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/html; charset=utf-8"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        chunk = b"<p>" + b"lorem ipsum dolor sit amet " * 2400 + b"</p>\n"  # ~64 KB
        try:
            await response.write(b"<html><body>")
            while self.sent_bytes["big"] < 12 * 1024 * 1024:
                await response.write(chunk)
                self.sent_bytes["big"] += len(chunk)
        except (ConnectionError, asyncio.CancelledError):
            return response
        await response.write_eof()
        return response

    async def _big_declared(self, request: web.Request) -> web.StreamResponse:
        size = 12 * 1024 * 1024
        response = web.StreamResponse(
            headers={"Content-Type": "text/html", "Content-Length": str(size)}
        )
        await response.prepare(request)
        try:
            for _ in range(size // 65536):
                await response.write(b"x" * 65536)
                self.sent_bytes["big-declared"] += 65536
        except (ConnectionError, asyncio.CancelledError):
            return response
        return response

    async def _trickle(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/html"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            for _ in range(300):  # a minute at most: the fake stops by itself
                await response.write(b"<")
                self.sent_bytes["trickle"] += 1
                await asyncio.sleep(0.2)
        except (ConnectionError, asyncio.CancelledError):
            return response
        return response

    async def _status(self, request: web.Request) -> web.StreamResponse:
        code = int(request.match_info["code"])
        return web.Response(status=code, text=f"status {code}")

    async def _echo(self, request: web.Request) -> web.StreamResponse:
        return web.Response(text=f"Host: {request.headers.get('Host', '')}")


# werkzeug's 403 page, byte for byte, as SearXNG's `flask.abort(403)` sends it.
FORBIDDEN_HTML = (
    "<!doctype html>\n<html lang=en>\n<title>403 Forbidden</title>\n<h1>Forbidden</h1>\n"
    "<p>You don&#39;t have the permission to access the requested resource. It is either "
    "read-protected or not readable by the server.</p>\n"
)


def searx_result(url: str, title: str, content: str, engine: str = "duckduckgo") -> dict:
    """One result as SearXNG's JSON API writes it."""
    parts = urlsplit(url)
    return {
        "url": url,
        "title": title,
        "content": content,
        "thumbnail": "",
        "engine": engine,
        "template": "default.html",
        "parsed_url": [parts.scheme, parts.netloc, parts.path, "", parts.query, parts.fragment],
        "img_src": "",
        "priority": "",
        "engines": [engine],
        "positions": [1],
        "score": 1.0,
        "category": "general",
        "publishedDate": None,
    }


class FakeSearx:
    """SearXNG's `/search` on 127.0.0.1. `formats` as in its settings.yml (json off: 403);
    `results` and `unresponsive` what the next searches answer; `queries` what arrived."""

    def __init__(self) -> None:
        self.formats: list[str] = ["html", "json"]
        self.results: list[dict] = []
        self.unresponsive: list[list[str]] = []
        self.status: int | None = None  # answer this status instead (429: the limiter)
        self.queries: list[dict[str, str]] = []
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    async def __aenter__(self) -> FakeSearx:
        app = web.Application()
        app.router.add_route("*", "/search", self._search)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.base_url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    async def _search(self, request: web.Request) -> web.StreamResponse:
        self.queries.append(dict(request.query))
        output_format = request.query.get("format", "html")
        if output_format not in self.formats:
            return web.Response(
                status=403, text=FORBIDDEN_HTML, content_type="text/html", charset="utf-8"
            )
        if self.status == 429:
            return web.Response(status=429, text="Too Many Requests")
        body = {
            "query": request.query.get("q", ""),
            "number_of_results": 0,
            "results": self.results,
            "answers": [],
            "corrections": [],
            "infoboxes": [],
            "suggestions": [],
            "unresponsive_engines": self.unresponsive,
        }
        return web.json_response(body)
