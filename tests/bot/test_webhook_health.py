"""The health endpoint over real HTTP on 127.0.0.1, alone and in the running bot."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from bot.app import build_application, prepare
from bot.health import HealthServer
from bot.runner import serve
from tests.fakes.providers import Fault
from tests.support.e2e_bot import OWNER, FakeServers, fake_settings, free_port
from tests.support.shared_workers import shared_workers
from tests.support.waits import within


async def test_healthz_reports_figures_and_turns_503_when_stopping() -> None:
    depth = {"n": 3}

    async def figures() -> dict[str, int]:
        return {"queue_depth": depth["n"], "turns_in_flight": 1}

    async with HealthServer(figures) as server, aiohttp.ClientSession() as http:
        url = f"http://127.0.0.1:{server.port}/healthz"
        async with http.get(url) as response:
            assert response.status == 200
            body = await response.json()
        assert body["status"] == "ok"
        assert body["queue_depth"] == 3 and body["turns_in_flight"] == 1

        depth["n"] = 7
        async with http.get(url) as response:
            assert (await response.json())["queue_depth"] == 7

        server.mark_stopping()
        async with http.get(url) as response:
            assert response.status == 503
            assert (await response.json())["status"] == "stopping"

        async with http.get(f"http://127.0.0.1:{server.port}/other") as response:
            assert response.status == 404


async def test_healthz_answers_503_when_figures_fail() -> None:
    def figures() -> dict[str, int]:
        raise RuntimeError("database is locked: /secret/path")

    async with HealthServer(figures) as server, aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{server.port}/healthz") as response:
            assert response.status == 503
            body = await response.json()
    assert body["status"] == "error" and body["error"] == "RuntimeError"
    assert "secret" not in str(body)


async def test_healthz_in_polling_mode_shows_the_consolidation_backlog(tmp_path: Path) -> None:
    """The real app served by `serve()` in polling mode: the figures come from the database."""
    health_port = free_port()
    async with FakeServers() as fakes:
        tg, groq = fakes.tg, fakes.groq
        groq.set_default("*", Fault("hang"))  # consolidation never finishes: the job waits
        settings = fake_settings(
            fakes,
            HEALTH_PORT=health_port,
            ALLOWED_USER_IDS=str(OWNER),
            DATABASE_PATH=tmp_path / "bot.sqlite3",
            CONSOLIDATION_TIMEOUT=60,
            SHUTDOWN_GRACE_SECONDS=0.5,
        )
        stop = asyncio.Event()
        app = build_application(prepare(settings), workers=shared_workers())
        running = asyncio.create_task(serve(app, settings, stop=stop))
        url = f"http://127.0.0.1:{health_port}/healthz"
        try:
            tg.push(tg.make_text_update(OWNER, OWNER, "remember this"))
            await tg.wait_for(lambda: len(tg.bot_messages(OWNER)) == 1, timeout=30)
            tg.push(tg.make_text_update(OWNER, OWNER, "/new"))
            await tg.wait_for(lambda: bool(groq.requests), timeout=30)
            async with aiohttp.ClientSession() as http, http.get(url) as response:
                assert response.status == 200
                body = await response.json()
            assert body["mode"] == "polling"
            assert body["queue_depth"] == 1
            assert body["oldest_pending_s"] >= 0
            assert body["turns_in_flight"] == 0
            [worker] = body["provider_workers"]  # its one call: the hanging consolidation
            assert (worker["pid"], worker["state"], worker["in_flight"]) == (
                app.bot_data.services.transport.workers.pid,
                "ready",
                1,
            )
            assert worker["rss_mib"] > 10
        finally:
            stop.set()
            await within(running, timeout=30)
