"""The chat model's web tools (agent/tools/web.py): what is offered, the untrusted flag every
outcome carries, the per-chat cache, the daily cap — against the fake site and fake SearXNG on
loopback and a real database; and one turn end to end through real PTB and real litellm."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from agent.tools.web import CACHE_SECONDS, UNTRUSTED_NOTE, WebSettings, WebTools
from media.document_reader import ReaderSlots
from memory.db import Database
from memory.web_calls import WebCalls
from models.types import ToolCall
from tests.fakes.providers import Reply, ToolCallReply
from tests.fakes.web import FakeSearx, FakeSite, benchmark_page, searx_result
from tests.support.clocks import SettableClock
from tests.support.e2e_bot import FRIEND, OWNER, bot_under_test
from web.addresses import parse_allowance

CHAT = 7
USER = 70


@pytest.fixture
async def site() -> AsyncIterator[FakeSite]:
    async with FakeSite() as fake:
        yield fake


def tools(
    db: Database,
    *,
    search_url: str | None = None,
    daily: int = 100,
    clock: SettableClock[float] | None = None,
    allow: str = "127.0.0.1",
) -> WebTools:
    settings = WebSettings(
        search_url=search_url,
        allowance=parse_allowance(allow),
        read_max_chars=15_000,
        daily_calls=daily,
    )
    return WebTools(settings, WebCalls(db), ReaderSlots(), monotonic=clock or SettableClock(1000.0))


def call(name: str, **args: object) -> ToolCall:
    return ToolCall(f"call_{name}", name, json.dumps(args))


def offered(web: WebTools) -> list[str]:
    return [tool["function"]["name"] for tool in web.schemas()]


async def test_web_read_is_offered_unless_off_and_web_search_only_with_a_backend(
    db: Database,
) -> None:
    assert offered(tools(db)) == ["web_read"]
    assert offered(tools(db, search_url="http://127.0.0.1:1")) == ["web_search", "web_read"]
    assert offered(tools(db, search_url="http://127.0.0.1:1", daily=0)) == []
    outcome = await tools(db).run(CHAT, USER, call("web_search", query="porto"))
    assert not outcome.ok and "not available" in outcome.content


async def test_every_outcome_is_untrusted_errors_included(db: Database, site: FakeSite) -> None:
    web = tools(db)
    page = await web.run(CHAT, USER, call("web_read", url=site.url("/article")))
    assert page.ok and page.untrusted
    assert page.content.startswith(f"{UNTRUSTED_NOTE}\nSource: {site.url('/article')}\n")
    _, body = benchmark_page()
    assert body.split("\n")[0][:80] in page.content
    refused = await web.run(CHAT, USER, call("web_read", url="http://169.254.169.254/"))
    assert not refused.ok and refused.untrusted and refused.content.startswith("error: refused")
    bad = await web.run(CHAT, USER, call("web_read", url=""))
    assert not bad.ok and bad.untrusted


async def test_a_page_read_again_soon_comes_from_the_chats_cache(
    db: Database, site: FakeSite
) -> None:
    clock = SettableClock(1000.0)
    web = tools(db, clock=clock)
    first = await web.run(CHAT, USER, call("web_read", url=site.url("/article")))
    again = await web.run(CHAT, USER, call("web_read", url=site.url("/article")))
    assert again.content == first.content
    assert site.requests["127.0.0.1"] == 1 and await WebCalls(db).today(USER) == 1
    # Another chat has a cache of its own; and past CACHE_SECONDS the page is read anew.
    await web.run(CHAT + 1, USER, call("web_read", url=site.url("/article")))
    clock.now += CACHE_SECONDS + 1
    await web.run(CHAT, USER, call("web_read", url=site.url("/article")))
    assert site.requests["127.0.0.1"] == 3 and await WebCalls(db).today(USER) == 3
    web.forget_chat(CHAT)  # /forget: what the chat read is not kept either
    await web.run(CHAT, USER, call("web_read", url=site.url("/article")))
    assert site.requests["127.0.0.1"] == 4


async def test_the_daily_cap_counts_every_call_of_a_user_across_chats(
    db: Database, site: FakeSite
) -> None:
    web = tools(db, daily=2)
    assert (await web.run(CHAT, USER, call("web_read", url=site.url("/status/404")))).ok is False
    assert (await web.run(CHAT + 1, USER, call("web_read", url=site.url("/article")))).ok
    capped = await web.run(CHAT, USER, call("web_read", url=site.url("/page/none")))
    assert not capped.ok and "daily limit of 2 web calls" in capped.content
    assert site.requests["127.0.0.1"] == 2  # the capped call never left
    assert (await web.run(CHAT, USER + 1, call("web_read", url=site.url("/article")))).ok


async def test_a_search_through_the_tool(db: Database) -> None:
    async with FakeSearx() as searx:
        searx.results = [searx_result("https://example.org/p", "Porto weather", "Sunny")]
        web = tools(db, search_url=searx.base_url)
        outcome = await web.run(CHAT, USER, call("web_search", query="porto weather", limit=3))
        assert outcome.ok and outcome.untrusted
        assert "1. Porto weather\nhttps://example.org/p\nSunny" in outcome.content
        searx.formats = ["html"]
        web = tools(db, search_url=searx.base_url)
        refused = await web.run(CHAT, USER, call("web_search", query="other"))
        assert not refused.ok and "search.formats" in refused.content


async def test_the_search_backend_serves_searches_only(db: Database, site: FakeSite) -> None:
    """The backend's host is reached by web_search with nothing in WEB_ALLOW_PRIVATE, and
    never by web_read, even with its address listed there; pages on that address, at another
    port, are read as WEB_ALLOW_PRIVATE allows."""
    async with FakeSearx() as searx:
        searx.results = [searx_result("https://example.org/p", "Porto weather", "Sunny")]
        unlisted = tools(db, search_url=searx.base_url, allow="")
        found = await unlisted.run(CHAT, USER, call("web_search", query="porto"))
        assert found.ok and "Porto weather" in found.content
        web = tools(db, search_url=searx.base_url)
        for url in (
            f"{searx.base_url}/search?q=porto&format=json",
            site.url(f"/redirect?to={searx.base_url}/search?q=x%26format=json"),
            searx.base_url.replace("127.0.0.1", "0x7f000001") + "/search?q=y&format=json",
        ):
            read = await web.run(CHAT, USER, call("web_read", url=url))
            assert not read.ok and "search backend" in read.content, read.content
        assert [q["q"] for q in searx.queries] == ["porto"]
        page = await web.run(CHAT, USER, call("web_read", url=site.url("/article")))
        assert page.ok


async def test_a_turn_reads_a_page_and_answers_from_it(tmp_path: Path, site: FakeSite) -> None:
    """Real PTB and real litellm: the model asks for web_read, gets the page's main text with
    its source line inside the tool_result frame, and answers."""
    async with bot_under_test(tmp_path, WEB_ALLOW_PRIVATE="127.0.0.1") as bot:
        bot.openai.script(
            "gpt-5",
            ToolCallReply("web_read", {"url": site.url("/redirect?to=/article")}),
            Reply("The article says hello."),
        )
        bot.say(OWNER, "what does this page say?")
        # 60 s: the provider worker's first start takes seconds more on a loaded machine.
        await bot.wait(
            lambda: any(m.text.startswith("The article says hello.") for m in bot.messages(OWNER)),
            timeout=60,
        )
        second = [r for r in bot.openai.requests if r.model == "gpt-5"][-1]
        [result] = second.tool_results()
        assert f"Source: {site.url('/article')}" in result["content"]
        assert UNTRUSTED_NOTE in result["content"] and "<tool_result_" in result["content"]
        assert site.requests["127.0.0.1"] == 2  # the redirect and the article


async def test_a_long_page_reaches_a_long_context_model_whole(
    tmp_path: Path, site: FakeSite
) -> None:
    """WEB_READ_MAX_CHARS=100000 starts, and a page of 90,000 characters reaches the model
    whole, not trimmed to the prompt's default bound for tool results."""
    lines = [
        f"Paragraph {n}: the harbour opens at {n % 24:02d}:00 on weekdays." for n in range(1600)
    ]
    text = "\n\n".join(lines)[:90_000]
    site.pages["long"] = ("text/plain; charset=utf-8", text.encode())
    async with bot_under_test(
        tmp_path, WEB_ALLOW_PRIVATE="127.0.0.1", WEB_READ_MAX_CHARS="100000"
    ) as bot:
        bot.openai.script(
            "gpt-5", ToolCallReply("web_read", {"url": site.url("/page/long")}), Reply("Read.")
        )
        bot.say(OWNER, f"read {site.url('/page/long')}")
        await bot.wait(lambda: "Read." in bot.texts(OWNER), timeout=60)
        [result] = [r for r in bot.openai.requests if r.model == "gpt-5"][-1].tool_results()
        assert text.strip() in result["content"]
        assert "cut here" not in result["content"]


async def test_a_page_that_trickles_holds_only_its_own_chat(tmp_path: Path, site: FakeSite) -> None:
    """Real PTB and real litellm: while the owner's turn reads a page that sends a byte every
    0.2 s, a friend's message in another chat is answered; the read then ends at its
    deadline, and the model is told why and answers without it."""
    async with bot_under_test(tmp_path, WEB_ALLOW_PRIVATE="127.0.0.1") as bot:
        assert bot.services.agent is not None and bot.services.agent.web is not None
        web = bot.services.agent.web
        web.settings = replace(web.settings, read_timeout=8.0)
        bot.openai.script(
            "gpt-5",
            ToolCallReply("web_read", {"url": site.url("/trickle")}),
            Reply("Your friend got an answer."),
            Reply("That page never finished loading."),
        )
        bot.say(OWNER, "read this slow page")
        await bot.wait(lambda: site.sent_bytes["trickle"] > 0, timeout=60)
        bot.say(FRIEND, "hello", user_id=FRIEND)
        await bot.wait(
            lambda: [m.text for m in bot.messages(FRIEND)] == ["Your friend got an answer."],
            timeout=60,
        )
        # The friend was answered while the page was still being read.
        assert not any(m.text.startswith("That page") for m in bot.messages(OWNER))
        assert site.sent_bytes["trickle"] < 300
        await bot.wait(
            lambda: any(m.text.startswith("That page never") for m in bot.messages(OWNER)),
            timeout=60,
        )
        last = [r for r in bot.openai.requests if r.model == "gpt-5"][-1]
        [result] = last.tool_results()
        assert "did not answer in full within 8 s" in result["content"]
