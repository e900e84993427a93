"""A small aiohttp server of a test's own on 127.0.0.1 (a webhook receiver, a gateway that
misbehaves one particular way), for the tests that need one beside the fakes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web


@asynccontextmanager
async def loopback_server(app: web.Application) -> AsyncIterator[str]:
    """Serve `app` on a free port of 127.0.0.1 while the block runs; yields its base URL
    (`http://127.0.0.1:PORT`, no trailing slash). Stopped however the block ends."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()
