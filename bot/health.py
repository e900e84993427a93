"""A tiny local HTTP endpoint for monitoring: `GET /healthz` → JSON liveness and queue figures.

It runs in both polling and webhook mode on its own port (HEALTH_PORT), bound to 127.0.0.1 by
default so only the host's monitor (or a reverse proxy the operator sets up) can reach it. The
figures come from a callable so this module knows nothing of the store or the worker.

200 means "up and taking updates"; 503 means "stopping", "the figures could not be read"
(e.g. the database is locked or gone) or "the event loop is lagging" (`loop_lag_ms`, the worst
of the last minute, past the watch's limit: bot/loop_watch.py), which is what a monitor
should page about. A loop frozen outright cannot answer at all: the check's time-out is the
signal then.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog
from aiohttp import web

from bot.loop_watch import LoopWatch

log = structlog.get_logger(__name__)

Figures = Callable[[], Mapping[str, Any] | Awaitable[Mapping[str, Any]]]


class HealthServer:
    """Serves `/healthz` until `stop()`. `port=0` picks a free port (see `.port`)."""

    def __init__(
        self,
        figures: Figures,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        loop_watch: LoopWatch | None = None,
    ) -> None:
        self._figures = figures
        self._loop_watch = loop_watch
        self._host = host
        self._requested_port = port
        self._runner: web.AppRunner | None = None
        self._started_at = time.monotonic()
        self.status = "ok"
        self.port: int | None = None

    def mark_stopping(self) -> None:
        """From now on /healthz answers 503 "stopping", so a monitor does not route to us."""
        self.status = "stopping"

    async def _healthz(self, request: web.Request) -> web.Response:
        body: dict[str, Any] = {
            "status": self.status,
            "uptime_s": round(time.monotonic() - self._started_at, 1),
        }
        try:
            figures = self._figures()
            if inspect.isawaitable(figures):
                figures = await figures
            body.update(figures)
        except Exception as exc:  # a monitor must get an answer, not a hung socket
            log.warning("health_figures_failed", error=type(exc).__name__)
            body["status"] = "error"
            body["error"] = type(exc).__name__
        if self._loop_watch is not None:
            body["loop_lag_ms"] = round(self._loop_watch.lag_s() * 1000)
            if body["status"] == "ok" and self._loop_watch.over_limit():
                body["status"] = "loop_lagging"
        code = 200 if body["status"] == "ok" else 503
        return web.json_response(body, status=code)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._requested_port)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        log.info("health_endpoint_started", host=self._host, port=self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> HealthServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
