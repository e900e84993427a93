"""Pieces every benchmark needs the same way: percentiles, and a fake served from a child
process (so the fake's CPU is not the bot's or the load generator's)."""

from __future__ import annotations

import asyncio

from aiohttp import web


def percentile(values: list[float], q: float) -> float:
    """The `q`-th percentile (0–100) by the nearest rank of the sorted values; 0.0 if none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


async def serve_forever(app: web.Application) -> None:
    """Serve `app` on a free loopback port, print the port (the parent reads it), never return."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(site._server.sockets[0].getsockname()[1], flush=True)  # type: ignore[union-attr]
    await asyncio.Event().wait()
