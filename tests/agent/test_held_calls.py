"""Held tool calls beyond writes and web calls in the usage ledger: where a web read may go at
once (agent/tools/egress.py), the ledger rows each web call leaves (memory/web_calls.py), and
the migration that opens `pending_writes` to every held family and moves the day's web calls
into the ledger — on a real database and the fake site and SearXNG on loopback."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from agent.tools.egress import origin_of, origins_in
from agent.tools.web import WebSettings, WebTools
from media.document_reader import ReaderSlots
from memory.db import Database
from memory.pending_writes import PendingWrites
from memory.store import to_iso
from memory.usage import UsageLedger
from memory.web_calls import WebCalls
from models.types import ToolCall
from primitives.clock import utc_now
from tests.fakes.web import FakeSearx, FakeSite, searx_result
from tests.support.old_schema import database_before
from web.addresses import parse_allowance

CHAT, USER = 7, 70


def test_the_origins_a_user_s_words_name() -> None:
    text = (
        "read https://News.Example.org/a?b=1, then (example.com/menu) and 127.0.0.1:8080/x; "
        "mail me at someone@mail.example.net, or file.txt, http://[::1]:9/ok."
    )
    assert origins_in(text) == {
        ("https", "news.example.org", 443),
        ("https", "example.com", 443),
        ("http", "example.com", 80),
        ("https", "127.0.0.1", 8080),
        ("http", "127.0.0.1", 8080),
        ("https", "file.txt", 443),
        ("http", "file.txt", 80),
        ("http", "::1", 9),
    }
    assert origin_of("HTTP://Example.ORG.:80/path") == ("http", "example.org", 80)
    assert origin_of("https://bücher.example/x") == ("https", "xn--bcher-kva.example", 443)
    assert origin_of("ftp://example.org/") is None
    assert origin_of("http://example.org:99999/") is None


async def test_each_web_call_is_a_ledger_row_with_its_purpose_and_the_cap_reads_them(
    db: Database,
) -> None:
    async with FakeSite() as site, FakeSearx() as searx:
        searx.results = [searx_result(site.url("/article"), "Local news", "Today")]
        settings = WebSettings(
            search_url=searx.base_url,
            allowance=parse_allowance("127.0.0.1"),
            read_max_chars=15_000,
            daily_calls=3,
        )
        web = WebTools(settings, WebCalls(db), ReaderSlots())
        read = ToolCall("c1", "web_read", json.dumps({"url": site.url("/article")}))
        found = await web.run(CHAT, USER, ToolCall("c2", "web_search", '{"query": "news"}'))
        assert found.links == (site.url("/article"),)
        assert (await web.run(CHAT, USER, read)).ok
        assert (await web.run(CHAT, USER, read)).ok  # from the chat's cache: not a new call
        failed = ToolCall("c3", "web_read", json.dumps({"url": site.url("/status/404")}))
        assert not (await web.run(CHAT, USER, failed)).ok  # a failed call counts too
        capped = ToolCall("c4", "web_read", json.dumps({"url": site.url("/page/x")}))
        outcome = await web.run(CHAT, USER, capped)
        assert not outcome.ok and "daily limit of 3 web calls" in outcome.content

    rows = await db.fetchall(
        "SELECT chat_id, user_id, model_id, purpose, prompt_tokens, cost_usd FROM usage ORDER BY id"
    )
    assert [dict(r) for r in rows] == [
        {"chat_id": CHAT, "user_id": USER, "model_id": model, "purpose": "web",
         "prompt_tokens": 0, "cost_usd": 0.0}
        for model in ("web_search", "web_read", "web_read")
    ]  # fmt: skip
    report = await UsageLedger(db).report(USER)
    lines = {(line.model_id, line.purpose): line.calls for line in report.today.lines}
    assert lines == {("web_read", "web"): 2, ("web_search", "web"): 1}
    assert await WebCalls(db).today(USER) == 3


async def test_the_migration_keeps_held_rows_their_ids_and_the_day_s_web_calls(
    tmp_path: Path,
) -> None:
    db = await database_before(tmp_path / "m.sqlite3", "held_calls")
    now = to_iso(utc_now())

    def write(conn: sqlite3.Connection) -> None:
        for _ in range(5):
            conn.execute(
                "INSERT INTO pending_writes(chat_id, user_id, tool, arguments, created_at, "
                "expires_at) VALUES (?, ?, 'remember', '{\"fact\": \"x\"}', ?, ?)",
                (CHAT, USER, now, now),
            )
        conn.execute("DELETE FROM pending_writes WHERE id > 2")  # /forget of newer ones
        conn.execute(
            "INSERT INTO usage(chat_id, user_id, model_id, purpose, prompt_tokens, "
            "completion_tokens, cost_usd, created_at) VALUES (?, ?, 'gpt-5', 'chat', 10, 5, "
            "0.01, ?)",
            (CHAT, USER, now),
        )
        for kind in ("read", "search", "read"):
            conn.execute(
                "INSERT INTO web_calls(chat_id, user_id, kind, created_at) VALUES (?, ?, ?, ?)",
                (CHAT, USER, kind, now),
            )

    await db.run_in_transaction(write)
    await db.close()

    db = await Database.open(tmp_path / "m.sqlite3")
    try:
        kept = await db.fetchall("SELECT id, tool, state FROM pending_writes ORDER BY id")
        assert [tuple(r) for r in kept] == [(1, "remember", "pending"), (2, "remember", "pending")]
        added = await PendingWrites(db).add(
            CHAT, user_id=USER, tool="web_read", arguments='{"url": "https://example.org"}'
        )
        assert added.id == 6  # never the id of a forgotten row a button may still carry
        with pytest.raises(ValueError):
            await PendingWrites(db).add(CHAT, user_id=USER, tool="no such tool!", arguments="{}")
        assert await WebCalls(db).today(USER) == 3
        report = await UsageLedger(db).report(USER)
        assert {(line.model_id, line.purpose): line.calls for line in report.today.lines} == {
            ("gpt-5", "chat"): 1,
            ("web_read", "web"): 2,
            ("web_search", "web"): 1,
        }
        assert await db.fetchall(
            "SELECT name FROM sqlite_master WHERE name = 'web_calls'"
        ) == []  # fmt: skip
    finally:
        await db.close()
