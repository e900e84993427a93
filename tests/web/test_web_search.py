"""web/search.py against a SearXNG-shaped fake, and against the real engine (Debian's searx)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from tests.fakes.loopback import loopback_server
from tests.fakes.web import FakeSearx, searx_result
from tests.support.searx_engine import real_searx, require_searx
from web.errors import BlockedAddressError, SearchError
from web.search import format_results, search

GUARD = 60


@pytest.fixture
async def searx() -> AsyncIterator[FakeSearx]:
    async with FakeSearx() as fake:
        yield fake


async def _search(base: str, query: str = "weather porto", limit: int = 5):
    async with asyncio.timeout(GUARD):
        return await search(query, limit, base_url=base)


async def test_results_come_back_as_title_url_and_snippet(searx: FakeSearx) -> None:
    searx.results = [
        searx_result(f"https://example.org/{n}", f"Porto weather {n}", f"Sunny, {20 + n} °C")
        for n in range(8)
    ] + [searx_result("ftp://example.org/x", "not http", "")]
    results = await _search(searx.base_url, "  weather   porto ", limit=3)
    assert [r.url for r in results] == [f"https://example.org/{n}" for n in range(3)]
    assert results[0].title == "Porto weather 0" and results[0].snippet == "Sunny, 20 °C"
    assert searx.queries == [{"q": "weather porto", "format": "json"}]
    text = format_results(results)
    assert text.startswith("1. Porto weather 0\nhttps://example.org/0\nSunny, 20 °C")


async def test_json_off_is_one_line_saying_what_to_change(searx: FakeSearx) -> None:
    searx.formats = ["html"]
    with pytest.raises(SearchError) as caught:
        await _search(searx.base_url)
    line = str(caught.value)
    assert "\n" not in line and "403" in line and "search.formats" in line and "json" in line


async def test_the_limiter_is_one_line_too(searx: FakeSearx) -> None:
    searx.status = 429
    with pytest.raises(SearchError) as caught:
        await _search(searx.base_url)
    assert "429" in str(caught.value) and "limiter" in str(caught.value)


async def test_an_empty_search_is_an_error_naming_the_engines_that_failed(
    searx: FakeSearx,
) -> None:
    searx.unresponsive = [["duckduckgo", "timeout"], ["brave", "CAPTCHA"]]
    with pytest.raises(SearchError) as caught:
        await _search(searx.base_url)
    assert "found nothing" in str(caught.value)
    assert "duckduckgo: timeout" in str(caught.value) and "brave: CAPTCHA" in str(caught.value)


async def test_the_backend_s_own_host_is_reached_and_no_other_private_one() -> None:
    """WEB_SEARCH_URL's host (loopback here, as a LAN SearXNG is private) needs no
    WEB_ALLOW_PRIVATE; a redirect from it to another private host is refused all the same."""
    reached: list[str] = []

    async def elsewhere(request: web.Request) -> web.Response:
        reached.append(request.path)
        return web.json_response({"results": [searx_result("https://example.org/", "x", "")]})

    other = web.Application()
    other.router.add_get("/search", elsewhere)
    async with loopback_server(other) as other_base:
        moved = other_base.replace("127.0.0.1", "127.0.0.2")

        async def redirect(request: web.Request) -> web.Response:
            raise web.HTTPFound(f"{moved}/search?{request.query_string}")

        backend = web.Application()
        backend.router.add_get("/search", redirect)
        async with loopback_server(backend) as base:
            with pytest.raises(BlockedAddressError) as caught:
                await _search(base)
    assert "127.0.0.2" in str(caught.value) and reached == []


async def test_a_backend_that_is_down_is_an_error() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(Exception) as caught:
        await _search(f"http://127.0.0.1:{port}")
    assert "127.0.0.1" in str(caught.value)


# The real engine: searx asks an engine of ours on loopback, and answers its JSON API.


async def _engine(answer: dict) -> web.Application:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response(answer)

    app = web.Application()
    app.router.add_get("/api", handler)
    return app


async def test_the_real_engine_answers_results_in_searxngs_shape(tmp_path: Path) -> None:
    require_searx()
    answer = {"results": [{"url": "https://example.org/porto", "title": "Porto", "content": "Sun"}]}
    async with loopback_server(await _engine(answer)) as engine:
        async with real_searx(f"{engine}/api", tmp_path) as base:
            results = await _search(base)
    assert [(r.title, r.url, r.snippet) for r in results] == [
        ("Porto", "https://example.org/porto", "Sun")
    ]


async def test_the_real_engine_finding_nothing_is_an_error(tmp_path: Path) -> None:
    require_searx()
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    async with real_searx(f"http://127.0.0.1:{port}/api", tmp_path) as base:
        with pytest.raises(SearchError) as caught:
            await _search(base)
    assert "found nothing" in str(caught.value) and "loopback" in str(caught.value)
