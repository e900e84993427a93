"""Web search through a SearXNG instance's JSON API (WEB_SEARCH_URL).

`GET {WEB_SEARCH_URL}/search?q=…&format=json`. SearXNG answers 403 when `json` is not in its
`search.formats` (the default settings enable only html), and 429 when its limiter takes the bot
for a scraper: each gets one line that says what to change, since that is what an owner setting
it up meets first. A search that finds nothing is an error naming the engines that failed
(SearXNG's `unresponsive_engines`), never an empty success the model would fill in (hermes
#99533).

The backend is reached through the same guarded client as pages, with an allowance of its own:
the one host of WEB_SEARCH_URL, which the owner chose, may be private (a SearXNG on the LAN or
in the compose network) without being listed in WEB_ALLOW_PRIVATE. That allowance serves
searches only: web_read refuses the backend's origin (`backend_origin`), so a page cannot have
the model read the owner's search backend, and WEB_ALLOW_PRIVATE stays for pages.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import httpx

from web.addresses import Allowance, parse_allowance
from web.errors import HttpStatusError, SearchError, WebError
from web.fetch import Origin, Resolver, fetch, guarded_client, loaded_tls, origin, system_resolver

SEARCH_TIMEOUT_SECONDS = 15.0
MAX_ANSWER_BYTES = 2 * 1024 * 1024
MAX_RESULTS = 10
# A snippet longer than this is cut: the model reads the page itself when it needs more.
MAX_SNIPPET_CHARS = 400


@dataclass(frozen=True)
class SearchResult:
    title: str
    url: str
    snippet: str


def backend_allowance(base: str) -> Allowance:
    """What the search may reach although private: the backend's own host, nothing else (a
    redirect from it to another private host is refused)."""
    return parse_allowance([httpx.URL(base).host])


def backend_origin(base: str | None) -> frozenset[Origin]:
    """The backend's origin, which web_read refuses (none when no backend is set)."""
    return frozenset({origin(httpx.URL(base))}) if base else frozenset()


def search_url(base: str, query: str) -> str:
    """The JSON API address under `base` (which may carry a path: https://host/searxng)."""
    url = httpx.URL(base.rstrip("/") + "/search")
    return str(url.copy_merge_params({"q": query, "format": "json"}))


async def search(
    query: str,
    limit: int,
    *,
    base_url: str,
    resolver: Resolver = system_resolver,
    timeout: float = SEARCH_TIMEOUT_SECONDS,  # noqa: ASYNC109 - one deadline for the search
) -> list[SearchResult]:
    """At most `limit` (1–10) results for `query`; raises SearchError (or another WebError
    on the way there: address refused, too slow, …) when there are none."""
    query = " ".join(query.split())
    if not query:
        raise SearchError("the search query is empty")
    limit = max(1, min(MAX_RESULTS, limit))
    tls = await loaded_tls()
    allowance = backend_allowance(base_url)
    client, _ = guarded_client(allowance, resolver=resolver, timeout=timeout, tls=tls)
    async with client:
        try:
            answer = await fetch(
                search_url(base_url, query), client, timeout=timeout, max_bytes=MAX_ANSWER_BYTES
            )
        except HttpStatusError as exc:
            raise SearchError(_status_line(base_url, exc)) from None
    if answer.kind != "json":
        raise SearchError(f"the search backend at {base_url} did not answer JSON")
    try:
        data = json.loads(answer.body)
    except ValueError:
        raise SearchError(f"the search backend at {base_url} sent invalid JSON") from None
    results = _results(data, limit)
    if not results:
        raise SearchError(_nothing_found(query, data))
    return results


def _status_line(base_url: str, exc: HttpStatusError) -> str:
    if exc.status == 403:
        return (
            f"the search backend at {base_url} refuses JSON (HTTP 403): add json to "
            "search.formats in its settings.yml"
        )
    if exc.status == 429:
        return (
            f"the search backend at {base_url} rate-limited the bot (HTTP 429): turn its "
            "limiter off (server.limiter: false) for the bot's use"
        )
    return f"the search backend failed: {exc}"


def _results(data: object, limit: int) -> list[SearchResult]:
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        return []
    found: list[SearchResult] = []
    seen: set[str] = set()
    for item in data["results"]:
        if not isinstance(item, dict):
            continue
        url = str(item.get("url") or "")
        if not url.startswith(("http://", "https://")) or url in seen:
            continue
        seen.add(url)
        snippet = " ".join(str(item.get("content") or "").split())
        if len(snippet) > MAX_SNIPPET_CHARS:
            snippet = snippet[: MAX_SNIPPET_CHARS - 1].rstrip() + "…"
        title = " ".join(str(item.get("title") or "").split()) or url
        found.append(SearchResult(title=title, url=url, snippet=snippet))
        if len(found) == limit:
            break
    return found


def _nothing_found(query: str, data: object) -> str:
    failed: list[str] = []
    if isinstance(data, dict) and isinstance(data.get("unresponsive_engines"), list):
        for entry in data["unresponsive_engines"]:
            if isinstance(entry, list | tuple) and entry:
                failed.append(": ".join(str(part) for part in entry[:2]))
    line = f"the search found nothing for {query!r}"
    if failed:
        line += f"; engines that failed: {', '.join(failed[:5])}"
    return line


def format_results(results: list[SearchResult]) -> str:
    """The results as the model reads them: one numbered block per result."""
    blocks = []
    for number, result in enumerate(results, 1):
        block = f"{number}. {result.title}\n{result.url}"
        if result.snippet:
            block += f"\n{result.snippet}"
        blocks.append(block)
    return "\n\n".join(blocks)


__all__ = ["SearchResult", "WebError", "format_results", "search", "search_url"]
