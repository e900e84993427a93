"""The health endpoint over real HTTP on 127.0.0.1."""

from __future__ import annotations

import aiohttp

from bot.health import HealthServer


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
