"""Webhook mode through the real PTB webhook server on 127.0.0.1: the secret token is enforced,
the fake Bot API delivers like Telegram does, and the health endpoint works in this mode."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp

from bot.app import build_application, prepare
from bot.runner import serve
from tests.support.e2e_bot import OWNER, FakeServers, fake_settings, free_port
from tests.support.shared_workers import shared_workers
from tests.support.waits import within

SECRET = "whsec-3b7e0c2f9a41d8e6b5c4a3f2e1d0c9b8"
PUBLIC_URL = "https://bot.example.org/tg/hook-7f3a"


async def test_webhook_refuses_missing_or_wrong_secret_and_handles_the_right_one(
    tmp_path: Path,
) -> None:
    port, health_port = free_port(), free_port()
    async with FakeServers() as fakes:
        tg, openai = fakes.tg, fakes.openai
        settings = fake_settings(
            fakes,
            TELEGRAM_MODE="webhook",
            WEBHOOK_URL=PUBLIC_URL,
            WEBHOOK_SECRET=SECRET,
            WEBHOOK_LISTEN="127.0.0.1",
            WEBHOOK_PORT=port,
            HEALTH_PORT=health_port,
            ALLOWED_USER_IDS=str(OWNER),
            DATABASE_PATH=tmp_path / "bot.sqlite3",
            SHUTDOWN_GRACE_SECONDS=2,
        )
        local_url = f"http://127.0.0.1:{port}/tg/hook-7f3a"
        stop = asyncio.Event()
        running = asyncio.create_task(
            serve(
                build_application(prepare(settings), workers=shared_workers()), settings, stop=stop
            )
        )
        try:
            # The bot registers its public URL and the secret with Telegram on start.
            await tg.wait_for(lambda: tg.webhook_url == PUBLIC_URL, timeout=30)
            assert tg.webhook_secret == SECRET
            await _accepting(port)  # PTB registers the URL first, then starts listening
            assert not any(call.method == "getUpdates" for call in tg.calls)

            update = tg.make_text_update(OWNER, OWNER, "hello over the webhook")
            update["update_id"] = 9001
            body = json.dumps(update)
            async with aiohttp.ClientSession() as http:
                for headers in (
                    {"Content-Type": "application/json"},  # no secret
                    {
                        "Content-Type": "application/json",
                        "X-Telegram-Bot-Api-Secret-Token": "whsec-wrong",
                    },
                    {  # right secret but not JSON
                        "Content-Type": "text/plain",
                        "X-Telegram-Bot-Api-Secret-Token": SECRET,
                    },
                ):
                    async with http.post(local_url, data=body, headers=headers) as response:
                        assert response.status == 403

                # The right secret, posted by the fake exactly as Telegram would.
                tg.webhook_delivery_url = local_url
                tg.push(tg.make_text_update(OWNER, OWNER, "hello over the webhook"))
                await tg.wait_for(
                    lambda: any(
                        m.text == "echo: hello over the webhook" for m in tg.bot_messages(OWNER)
                    ),
                    timeout=30,
                )
                assert [status for _, status in tg.webhook_deliveries] == [200]
                # The refused posts (same chat, same text, sent first) reached no handler: had
                # one been queued, its turn would have been answered before this one.
                assert [m.text for m in tg.bot_messages(OWNER)] == ["echo: hello over the webhook"]
                assert len(openai.requests) == 1

                health_url = f"http://127.0.0.1:{health_port}/healthz"
                async with http.get(health_url) as response:
                    assert response.status == 200
                    figures = await response.json()
            assert figures["status"] == "ok"
            assert figures["mode"] == "webhook"
            assert figures["queue_depth"] == 0
        finally:
            stop.set()
            await within(running, timeout=30)
        # Stopped: the webhook server no longer listens.
        async with aiohttp.ClientSession() as http:
            try:
                async with http.post(local_url, data="{}") as response:
                    status = response.status
            except aiohttp.ClientConnectionError:
                status = None
        assert status is None


async def _accepting(port: int) -> None:
    """Until the bot's webhook server accepts connections (Telegram would retry meanwhile)."""
    async with asyncio.timeout(30):
        while True:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.01)
                continue
            writer.close()
            await writer.wait_closed()
            return
