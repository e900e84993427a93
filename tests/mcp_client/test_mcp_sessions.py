"""The MCP hub against real servers over real MCP: our MCPServer over stdio and over streamable
HTTP on 127.0.0.1, and the real mcp-server-time — never a mock of the SDK.

What a supervised session must do: one long-lived process per server; every call bounded by
the server's timeout while other calls are answered; a crash costs one tool error, then the
server is back; a server's environment is PATH, HOME, LANG and its `env`; a huge result is cut;
nothing is left running after a stop, nor after kill -9 of the process that started it.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest

from mcp_client.config import McpConfig
from mcp_client.connection import ServerState
from mcp_client.hub import McpHub, McpTool
from memory.db import Database
from memory.mcp_calls import McpCalls
from primitives.backoff import Backoff
from tests.support.mcp_stack import (
    BOT_ENV,
    alive,
    config,
    free_port,
    kill_quietly,
    ours_entry,
    ours_over_http,
    time_entry,
    until,
)
from tests.support.paths import REPO
from tests.support.waits import within

CHAT, USER = 5, 50
FAST = Backoff.doubling(0.2, 1.0)


@pytest.fixture
async def hub_of(db: Database) -> AsyncIterator[Any]:
    """hub_of(config, **options) starts a hub; every hub started is stopped after the test."""
    started: list[McpHub] = []

    async def start(cfg: McpConfig, **options: Any) -> McpHub:
        hub = McpHub(cfg, McpCalls(db), backoff=FAST, environ=dict(BOT_ENV), **options)
        started.append(hub)
        await hub.start(wait_seconds=60)
        return hub

    try:
        yield start
    finally:
        for hub in started:
            await hub.stop()


def named(hub: McpHub, name: str) -> McpTool:
    tool = hub.tool(name)
    assert tool is not None, [t.name for t in hub.tools(admin=True)]
    return tool


async def call(hub: McpHub, name: str, **arguments: Any) -> Any:
    return await hub.call(named(hub, name), arguments, chat_id=CHAT, user_id=USER)


async def server_pid(hub: McpHub, server: str = "ours") -> int:
    result = await call(hub, f"{server}_pid")
    assert result.ok, result.text
    return int(result.text.splitlines()[-1])


async def test_a_read_only_call_is_answered_by_one_long_lived_process(
    hub_of: Any, db: Database
) -> None:
    hub = await hub_of(config({"ours": ours_entry()}))
    first = await server_pid(hub)
    result = await call(hub, "ours_lookup", query="Ana Lima")
    assert result.ok and result.outcome == "ok"
    assert result.text.endswith("found: Ana Lima (member since 2019)")
    assert result.text.startswith("Untrusted result of the tool 'lookup'")
    assert await server_pid(hub) == first  # the same process: a session, not a spawn per call
    assert hub.connections["ours"].restarts == 0
    rows = await db.fetchall(
        "SELECT model_id, purpose, outcome, cost_usd, duration_ms >= 0 AS timed, user_id"
        " FROM usage ORDER BY id"
    )
    assert [tuple(r) for r in rows] == [
        ("ours/pid", "mcp", "ok", 0.0, 1, USER),
        ("ours/lookup", "mcp", "ok", 0.0, 1, USER),
        ("ours/pid", "mcp", "ok", 0.0, 1, USER),
    ]


async def test_a_hang_is_bounded_by_the_timeout_while_another_call_is_answered(
    hub_of: Any,
) -> None:
    hub = await hub_of(config({"ours": ours_entry(timeout=2)}))
    hanging = asyncio.create_task(call(hub, "ours_hang"))
    answered = await call(hub, "ours_lookup", query="during the hang")
    assert answered.ok and "found: during the hang" in answered.text
    assert not hanging.done()  # the other call came back while this one still waits
    hung = await hanging
    assert not hung.ok and hung.outcome == "timeout"
    assert "no answer within 2 s" in hung.text
    # The session survived its hung call: no restart, the next call is served.
    assert (await call(hub, "ours_lookup", query="after")).ok
    assert hub.connections["ours"].restarts == 0


async def test_a_crash_is_one_tool_error_then_the_server_is_back(hub_of: Any) -> None:
    hub = await hub_of(config({"ours": ours_entry()}))
    before = await server_pid(hub)
    crashed = await call(hub, "ours_crash")
    assert not crashed.ok and crashed.outcome == "closed"
    assert "connection closed" in crashed.text
    connection = hub.connections["ours"]
    await until(lambda: connection.restarts == 1 and connection.state is ServerState.UP,
                what="the restart")  # fmt: skip
    assert not alive(before)
    after = await call(hub, "ours_lookup", query="later")
    assert after.ok and "found: later" in after.text
    assert await server_pid(hub) != before


async def test_a_server_that_dies_between_calls_is_restarted_without_a_call(
    hub_of: Any,
) -> None:
    hub = await hub_of(config({"ours": ours_entry()}))
    pid = await server_pid(hub)
    kill_quietly(pid)
    connection = hub.connections["ours"]
    await until(lambda: connection.restarts == 1 and connection.state is ServerState.UP,
                what="the restart")  # fmt: skip
    assert await server_pid(hub) != pid


async def test_a_server_sees_path_home_lang_and_its_env_and_no_secret(hub_of: Any) -> None:
    hub = await hub_of(config({"ours": ours_entry(env={"TZ": "Europe/Lisbon"})}))
    result = await call(hub, "ours_env_list")
    assert result.ok
    env = json.loads(result.text.splitlines()[-1])
    assert sorted(env) == ["HOME", "LANG", "NOTES_FILE", "PATH", "TZ"]
    assert env["TZ"] == "Europe/Lisbon" and env["PATH"] == BOT_ENV["PATH"]
    for secret in ("SECRET-BOT-TOKEN", "sk-secret-openai", "notes-secret-token"):
        assert secret not in result.text


async def test_a_huge_result_is_cut_with_a_marker(hub_of: Any) -> None:
    hub = await hub_of(config({"ours": ours_entry()}), max_result_chars=15_000)
    result = await call(hub, "ours_huge", chars=5_000_000)
    assert result.ok
    body = result.text.split("\n", 1)[1]
    assert body.startswith("y" * 15_000 + "\n[… cut: the result has 5,000,000 characters")
    assert len(body) < 15_100


async def test_an_image_becomes_a_note_and_an_error_result_is_a_tool_error(hub_of: Any) -> None:
    hub = await hub_of(config({"ours": ours_entry()}))
    picture = await call(hub, "ours_picture")
    assert picture.ok
    assert "[image (image/png, about 69 bytes): not shown, text only]" in picture.text
    assert "iVBOR" not in picture.text  # never base64 in context
    failed = await call(hub, "ours_fails")
    assert not failed.ok and failed.outcome == "error"
    assert failed.text.startswith("error: the tool reported a failure.")


async def test_stop_leaves_no_server_process_even_one_deaf_to_end_of_input(
    hub_of: Any, db: Database
) -> None:
    hub = McpHub(
        config({"ours": ours_entry(env={"OURS_IGNORE_EOF": "1"})}),
        McpCalls(db),
        backoff=FAST,
        environ=dict(BOT_ENV),
    )
    await hub.start(wait_seconds=60)
    pid = await server_pid(hub)
    await hub.stop()
    assert not alive(pid)
    assert hub.connections["ours"].state is ServerState.STOPPED


FAKE_BOT = """
import asyncio
from mcp_client.connection import Connection
from tests.support.mcp_stack import BOT_ENV, config, ours_entry

async def main():
    server = config({"ours": ours_entry(env={"OURS_IGNORE_EOF": "1"})}).servers[0]
    connection = Connection(server, environ=dict(BOT_ENV))
    connection.start()
    await connection.settled()
    result = await connection.call("pid", {})
    print("PID", result.content[0].text, flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


async def test_kill_9_of_the_bot_takes_its_stdio_servers_along() -> None:
    """The server ignores the end of its input, so only the launcher's parent-death signal
    can end it once the process that started it is gone."""
    bot = await asyncio.create_subprocess_exec(
        sys.executable, "-c", FAKE_BOT, cwd=REPO, stdout=subprocess.PIPE
    )
    pid = 0
    try:
        assert bot.stdout is not None
        line = b""
        while not line.startswith(b"PID "):  # the log writes to stdout too
            line = await within(bot.stdout.readline(), timeout=60)
            assert line, "the fake bot ended before it printed the server's pid"
        pid = int(line.split()[1])
        assert alive(pid)
        bot.kill()
        await bot.wait()
        await until(lambda: not alive(pid), timeout=10, what="the server's end")
    finally:
        kill_quietly(bot.pid)
        await bot.wait()
        if pid:
            kill_quietly(pid)  # no orphan left behind by a failing run


async def test_a_server_that_cannot_start_is_reported_and_the_others_work(
    hub_of: Any,
) -> None:
    hub = await hub_of(
        config({"broken": {"command": "no-such-mcp-server-here"}, "ours": ours_entry()})
    )
    broken = hub.connections["broken"]
    assert broken.state is ServerState.FAILED
    assert "'no-such-mcp-server-here' is not on the server's PATH" in (broken.last_error or "")
    assert (await call(hub, "ours_lookup", query="still here")).ok
    [status] = [s for s in await hub.status() if s.name == "broken"]
    assert status.state == "failed" and status.tools == 0


async def test_the_real_mcp_server_time_answers(hub_of: Any) -> None:
    hub = await hub_of(config({"time": time_entry()}))
    names = sorted(t.name for t in hub.tools(admin=False))
    assert names == ["time_convert_time", "time_get_current_time"]
    assert all(t.runs_at_once for t in hub.tools(admin=False))  # marked read-only
    result = await call(hub, "time_get_current_time", timezone="Asia/Tokyo")
    assert result.ok, result.text
    answer = json.loads(result.text.split("\n", 1)[1])
    assert answer["timezone"] == "Asia/Tokyo" and answer["datetime"].endswith("+09:00")


async def test_our_streamable_http_server_answers_and_comes_back_after_it_died(
    hub_of: Any,
) -> None:
    port = free_port()
    async with ours_over_http(port) as (url, process):
        hub = await hub_of(config({"web": {"url": url, "timeout": 5}}))
        result = await call(hub, "web_lookup", query="over http")
        assert result.ok and "found: over http" in result.text
        process.kill()
        await process.wait()
        down = await call(hub, "web_lookup", query="while down")
        assert not down.ok and down.outcome == "closed", down.text
    connection = hub.connections["web"]
    async with ours_over_http(port):
        await until(lambda: connection.state is ServerState.UP and connection.restarts >= 1,
                    what="the new session")  # fmt: skip
        again = await call(hub, "web_lookup", query="back again")
        assert again.ok and "found: back again" in again.text


async def test_the_daily_cap_counts_every_call_and_refuses_past_it(
    hub_of: Any, db: Database
) -> None:
    hub = await hub_of(config({"ours": ours_entry(timeout=1)}), daily_calls=3)
    assert (await call(hub, "ours_lookup", query="one")).ok
    assert (await call(hub, "ours_hang")).outcome == "timeout"  # a failure counts too
    assert (await call(hub, "ours_fails")).outcome == "error"
    refused = await call(hub, "ours_lookup", query="four")
    assert not refused.ok and refused.outcome is None
    assert "daily limit of 3 MCP calls" in refused.text
    assert await McpCalls(db).today(USER) == 3
    [status] = await hub.status()
    assert (status.calls_today, status.failures_today) == (3, 2)
    # Another user still has their own calls.
    other = await hub.call(named(hub, "ours_lookup"), {"query": "x"}, chat_id=6, user_id=60)
    assert other.ok
