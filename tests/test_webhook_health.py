"""The health endpoint over real HTTP on 127.0.0.1, alone and in the running bot."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import aiohttp

from bot.app import build_application, prepare
from bot.config import load_settings
from bot.health import HealthServer
from bot.lifecycle import serve
from tests.e2e_bot import KEYS, OWNER, TOKEN
from tests.fakes.providers import FakeProvider, Fault
from tests.fakes.telegram import FakeTelegram


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
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        health_port = int(probe.getsockname()[1])
    async with (
        FakeTelegram(token=TOKEN) as tg,
        FakeProvider("openai") as openai,
        FakeProvider("anthropic") as anthropic,
        FakeProvider("groq") as groq,
    ):
        groq.set_default("*", Fault("hang"))  # consolidation never finishes: the job waits
        settings = load_settings(
            TELEGRAM_BOT_TOKEN=TOKEN,
            TELEGRAM_BASE_URL=tg.base_url,
            HEALTH_PORT=health_port,
            ALLOWED_USER_IDS=str(OWNER),
            DATABASE_PATH=tmp_path / "bot.sqlite3",
            OPENAI_API_KEY=KEYS["openai"],
            OPENAI_API_BASE=openai.base_url,
            ANTHROPIC_API_KEY=KEYS["anthropic"],
            ANTHROPIC_API_BASE=anthropic.base_url,
            GROQ_API_KEY=KEYS["groq"],
            GROQ_API_BASE=groq.base_url,
            DEFAULT_MODEL="gpt-5",
            CONSOLIDATION_TIMEOUT=60,
            SHUTDOWN_GRACE_SECONDS=0.5,
            LOG_FORMAT="json",
        )
        stop = asyncio.Event()
        app = build_application(prepare(settings))
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
        finally:
            stop.set()
            await asyncio.wait_for(running, timeout=30)
