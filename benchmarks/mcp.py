"""MCP calls through the bot's hub against the same calls made directly with the SDK.

Two servers run as the bot would run them (our MCPServer, tests/fakes/mcp_servers/ours.py, and the
real mcp-server-time, both over stdio through the launcher). Measured:
- latency of a read-only call through `McpHub.call` (metering, the ledger's two writes, the
  result made bounded text) and of the same call on a session of the bare SDK: the overhead is
  the difference of their medians;
- the event loop's worst lag while 20 calls run at once, one of them a 5 MB result;
- the restarts after one crash (the next call is served again);
- memory: the bot process's RSS before the SDK is loaded and with both servers up, and what
  the two server processes hold.

Prints `mcp: calls=N p50_ms=… p99_ms=… overhead_p50_ms=… loop_lag_max_ms=… restarts=…` and a
`mcp_rss:` line. Run: `.venv/bin/python -m benchmarks.mcp`.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from benchmarks.common import LoopLag, percentile
from mcp_client.hub import McpHub
from memory.db import Database
from memory.mcp_calls import McpCalls
from primitives.backoff import Backoff
from tests.support.mcp_stack import BOT_ENV, config, ours_entry, time_entry, until

CALLS = 300
CONCURRENT = 20
HUGE_CHARS = 5_000_000


def rss_mb(pid: int | str = "self") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def direct_latencies(n: int) -> list[float]:
    """The same read-only call on a bare SDK session (no launcher, no hub, no ledger)."""
    import mcp

    entry = ours_entry()
    params = mcp.StdioServerParameters(
        command=entry["command"], args=entry["args"], env={**BOT_ENV, **entry["env"]}
    )
    times = []
    async with mcp.Client(params, read_timeout_seconds=30) as client:
        for i in range(20):  # warm-up
            await client.call_tool("lookup", {"query": f"warm {i}"})
        for i in range(n):
            started = time.perf_counter()
            await client.call_tool("lookup", {"query": f"q{i}"})
            times.append(time.perf_counter() - started)
    return times


async def main() -> None:
    before_sdk_mb = rss_mb()
    from mcp_client.connection import Connection  # noqa: F401 - loads the SDK, as the bot does

    with tempfile.TemporaryDirectory() as tmp:
        db = await Database.open(Path(tmp) / "bench.sqlite3")
        hub = McpHub(
            config({"ours": ours_entry(timeout=30), "time": time_entry()}),
            McpCalls(db),
            daily_calls=10_000,
            backoff=Backoff.doubling(0.2, 300.0),
            environ=dict(BOT_ENV),
        )
        await hub.start(wait_seconds=60)
        lookup = hub.tool("ours_lookup")
        huge = hub.tool("ours_huge")
        crash = hub.tool("ours_crash")
        pid_tool = hub.tool("ours_pid")
        assert lookup and huge and crash and pid_tool, [t.name for t in hub.tools(admin=True)]
        with_servers_mb = rss_mb()
        ours_pid = int((await hub.call(pid_tool, {}, chat_id=1, user_id=1)).text.split()[-1])
        servers_mb = rss_mb(ours_pid)

        for i in range(20):  # warm-up
            await hub.call(lookup, {"query": f"warm {i}"}, chat_id=1, user_id=1)
        through_hub = []
        for i in range(CALLS):
            started = time.perf_counter()
            result = await hub.call(lookup, {"query": f"q{i}"}, chat_id=1, user_id=1)
            through_hub.append(time.perf_counter() - started)
            assert result.ok, result.text
        direct = await direct_latencies(CALLS)

        lag = LoopLag(0.005)
        lag.start()
        await asyncio.sleep(0.2)
        calls = [hub.call(huge, {"chars": HUGE_CHARS}, chat_id=2, user_id=2)]
        calls += [
            hub.call(lookup, {"query": f"c{i}"}, chat_id=3 + i, user_id=3 + i)
            for i in range(CONCURRENT - 1)
        ]
        results = await asyncio.gather(*calls)
        await asyncio.sleep(0.2)
        await lag.stop()
        assert all(r.ok for r in results), [r.text[:80] for r in results if not r.ok]
        assert "[… cut: the result has 5,000,000 characters" in results[0].text

        connection = hub.connections["ours"]
        crashed = await hub.call(crash, {}, chat_id=1, user_id=1)
        assert not crashed.ok
        await until(lambda: connection.restarts >= 1 and str(connection.state) == "up",
                    what="restart")  # fmt: skip
        served = await hub.call(lookup, {"query": "after the crash"}, chat_id=1, user_id=1)
        assert served.ok
        restarts = sum(c.restarts for c in hub.connections.values())
        await hub.stop()
        await db.close()

    p50 = percentile(through_hub, 50) * 1000
    p99 = percentile(through_hub, 99) * 1000
    direct_p50 = percentile(direct, 50) * 1000
    print(
        f"mcp: calls={CALLS} p50_ms={p50:.2f} p99_ms={p99:.2f} "
        f"overhead_p50_ms={p50 - direct_p50:.2f} loop_lag_max_ms={lag.max_s() * 1000:.1f} "
        f"restarts={restarts}"
    )
    print(
        f"mcp_rss: bot_mb_before_sdk={before_sdk_mb:.1f} bot_mb_two_servers_up="
        f"{with_servers_mb:.1f} ours_server_mb={servers_mb:.1f} direct_p50_ms={direct_p50:.2f}"
    )


if __name__ == "__main__":
    asyncio.run(main())
