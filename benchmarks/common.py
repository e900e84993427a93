"""Pieces every benchmark needs the same way: percentiles and peak rates, a fake served from a
child process (so the fake's CPU is not the bot's or the load generator's), the bot run as a
process of its own against the fakes, and the lag of this process's event loop."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from primitives.tasks import stop_task
from tests.fakes.telegram import FakeTelegram


def percentile(values: list[float], q: float) -> float:
    """The `q`-th percentile (0–100) by the nearest rank of the sorted values; 0.0 if none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def most_in_window(times: Iterable[float], window_s: float) -> int:
    """Most of `times` (seconds) inside any one window of `window_s` seconds: the peak rate."""
    ordered = sorted(times)
    most, lo = 0, 0
    for hi, moment in enumerate(ordered):
        while ordered[lo] <= moment - window_s:
            lo += 1
        most = max(most, hi - lo + 1)
    return most


# --- a fake in a child process ------------------------------------------------------------------


async def serve_forever(app: web.Application) -> None:
    """Serve `app` on a free loopback port, print the port (the parent reads it), never return."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(site._server.sockets[0].getsockname()[1], flush=True)  # type: ignore[union-attr]
    await asyncio.Event().wait()


class ChildServer:
    """The parent's side of `serve_forever`: runs a benchmark script again as a child with the
    arguments that make it serve its fakes and a small control API, and talks to that API."""

    def __init__(self) -> None:
        self.control = ""
        self._proc: asyncio.subprocess.Process | None = None

    async def start(self, script: str, *args: str) -> None:
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable, script, *args, stdout=asyncio.subprocess.PIPE
        )
        assert self._proc.stdout is not None
        port = int((await self._proc.stdout.readline()).decode().strip())
        self.control = f"http://127.0.0.1:{port}"

    async def get_json(self, path: str) -> Any:
        async with aiohttp.ClientSession() as http, http.get(f"{self.control}{path}") as resp:
            return await resp.json()

    async def post(self, path: str) -> None:
        async with aiohttp.ClientSession() as http, http.post(f"{self.control}{path}") as resp:
            resp.raise_for_status()

    async def stop(self) -> None:
        if self._proc is not None and self._proc.returncode is None:
            self._proc.terminate()
            await self._proc.wait()


# --- the bot as a process -----------------------------------------------------------------------


def bot_settings(
    *,
    repo: Path,
    token: str,
    telegram: FakeTelegram,
    users: Iterable[int],
    openai_key: str,
    openai_base_url: str,
    database: Path,
) -> dict[str, str]:
    """The settings a benchmark's bot runs with: the fakes' addresses, its users, one OpenAI
    gateway, gpt-5 by default and no per-user message limit (the load is the benchmark's)."""
    return {
        "PYTHONPATH": str(repo),
        "TELEGRAM_BOT_TOKEN": token,
        "TELEGRAM_BASE_URL": telegram.base_url,
        "ALLOWED_USER_IDS": ",".join(str(user) for user in users),
        "OPENAI_API_KEY": openai_key,
        "OPENAI_API_BASE": openai_base_url,
        "USER_MESSAGES_PER_MINUTE": "0",
        "DEFAULT_MODEL": "gpt-5",
        "DATABASE_PATH": str(database),
    }


def bot_environment(**settings: Any) -> dict[str, str]:
    """The environment of a benchmark's `python -m bot`: this process's, without any key or
    token of the machine's own, plus `bot_settings(**settings)`."""
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_TOKEN"))}
    return env | bot_settings(**settings)


async def until_polling(telegram: FakeTelegram, within_s: float = 90) -> None:
    """Until the bot has registered its commands and polls for updates: it is ready."""
    await telegram.wait_for(
        lambda: bool(telegram.calls_of("setMyCommands")) and bool(telegram.calls_of("getUpdates")),
        timeout=within_s,
    )


async def terminate(process: asyncio.subprocess.Process, grace_s: float = 60) -> bytes:
    """SIGTERM, then SIGKILL if it is not gone after `grace_s`; its stderr when piped."""
    process.send_signal(signal.SIGTERM)
    try:
        _, stderr = await asyncio.wait_for(process.communicate(), grace_s)  # bounded: then killed
    except TimeoutError:
        process.kill()
        _, stderr = await process.communicate()
    return stderr or b""


# --- this process's event loop ------------------------------------------------------------------


class LoopLag:
    """How late this process's event loop wakes up: a task sleeps `tick_s` over and over and
    records by how much each wake-up came late. Anything holding the loop shows up here."""

    def __init__(self, tick_s: float) -> None:
        self.tick_s = tick_s
        self.samples: list[tuple[float, float]] = []  # (time.monotonic() at wake-up, s late)
        # CPU seconds the loop's thread used during each sample: a late wake-up with little
        # of it is the machine not running us (other processes), not our loop holding on.
        self.cpu_s: list[float] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._watch())

    async def stop(self) -> None:
        await stop_task(self._task)
        self._task = None

    def max_s(self) -> float:
        return max([0.0, *(late for _, late in self.samples)])

    def between(self, start: float, end: float) -> list[float]:
        """Seconds late of the wake-ups from `start` to `end` (time.monotonic())."""
        return [late for at, late in self.samples if start <= at <= end]

    async def _watch(self) -> None:
        while True:
            asked, cpu = time.monotonic(), time.thread_time()
            await asyncio.sleep(self.tick_s)
            now = time.monotonic()
            self.samples.append((now, now - asked - self.tick_s))
            self.cpu_s.append(time.thread_time() - cpu)
