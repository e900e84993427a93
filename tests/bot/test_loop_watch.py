"""A stalled event loop is noticed: /healthz reports the lag and fails past the limit, and the
systemd watchdog's pings come from the loop itself, so a frozen loop stops them (systemd then
restarts the service). The loop is stalled the honest way: a synchronous sleep on it, which is
what a loop that never awaits amounts to."""

from __future__ import annotations

import asyncio
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from bot.health import HealthServer
from bot.loop_watch import LoopWatch, SystemdNotifier
from tests.support.e2e_bot import OWNER, FakeServers, restartable_bot, wait_until
from tests.support.waits import within


class NotifyListener:
    """systemd's side of sd_notify: a datagram socket, read by a thread that records what
    arrives (a thread, so it keeps reading while the loop under test is stalled)."""

    def __init__(self, address: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(address)
        self.sock.settimeout(0.05)
        self.messages: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                self.messages.append(self.sock.recv(4096).decode())
            except TimeoutError:
                continue

    def count(self, message: str) -> int:
        return sum(1 for m in list(self.messages) if m == message)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[NotifyListener]:
    heard = NotifyListener(str(tmp_path / "notify.sock"))
    yield heard
    heard.close()


async def test_healthz_fails_while_the_loop_lags_and_recovers_after() -> None:
    watch = LoopWatch(tick_s=0.02, window_s=1.0, limit_s=0.3)
    watch.start()

    async def figures() -> dict[str, int]:
        return {}

    try:
        async with (
            HealthServer(figures, loop_watch=watch) as server,
            aiohttp.ClientSession() as http,
        ):
            url = f"http://127.0.0.1:{server.port}/healthz"

            async def health() -> tuple[int, dict[str, object]]:
                async with http.get(url) as response:
                    return response.status, await response.json()

            await asyncio.sleep(0.1)  # a few ticks: the watch has a last wake-up
            status, body = await health()
            assert "loop_lag_ms" in body

            time.sleep(0.8)  # noqa: ASYNC251 — the stall under test: nothing else runs
            status, body = await health()
            assert (status, body["status"]) == (503, "loop_lagging")
            assert isinstance(body["loop_lag_ms"], int) and body["loop_lag_ms"] >= 500

            for _ in range(500):  # the stall leaves the one-second window: healthy again
                status, body = await health()
                if status == 200:
                    break
                await asyncio.sleep(0.02)
            assert (status, body["status"]) == (200, "ok")
    finally:
        await watch.stop()


async def test_the_watchdog_pings_come_from_the_loop_and_stop_while_it_is_stalled(
    listener: NotifyListener,
) -> None:
    notifier = SystemdNotifier(
        {"NOTIFY_SOCKET": listener.sock.getsockname(), "WATCHDOG_USEC": "40000"}
    )
    assert notifier.ping_every_s == 0.01
    watch = LoopWatch(notifier, tick_s=0.005)
    watch.start()
    try:
        await wait_until(lambda: listener.count("WATCHDOG=1") >= 3, "the first pings", 10)
        before = listener.count("WATCHDOG=1")
        time.sleep(0.5)  # noqa: ASYNC251 — a frozen loop: ~50 pings would be due meanwhile
        during = listener.count("WATCHDOG=1") - before
        assert during <= 1  # at most one sent just before the stall and read during it
        await wait_until(lambda: listener.count("WATCHDOG=1") > before + 3, "pings again", 10)
    finally:
        await watch.stop()


def test_the_notifier_reaches_an_abstract_socket_and_is_silent_without_one() -> None:
    name = f"mnemobot-test-{time.monotonic_ns()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(5)
        SystemdNotifier({"NOTIFY_SOCKET": "@" + name}).ready()
        assert sock.recv(100) == b"READY=1"
    quiet = SystemdNotifier({})
    assert quiet.ping_every_s is None
    quiet.ready()  # no socket: nothing to do, no error
    # A watchdog meant for another process (WATCHDOG_PID) is not ours to ping.
    assert SystemdNotifier({"WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "1"}).ping_every_s is None


@pytest.mark.slow
async def test_the_running_bot_tells_systemd_it_is_ready_alive_and_stopping(
    tmp_path: Path, listener: NotifyListener
) -> None:
    """`python -m bot` as the unit starts it (Type=notify, WatchdogSec=): READY=1 once it
    polls, WATCHDOG=1 while it runs, STOPPING=1 on SIGTERM."""
    async with FakeServers() as fakes:
        env_extra = {"NOTIFY_SOCKET": listener.sock.getsockname(), "WATCHDOG_USEC": "2000000"}
        async with restartable_bot(fakes, tmp_path / "bot.sqlite3", user=OWNER, **env_extra) as bot:
            await wait_until(lambda: listener.count("READY=1") == 1, "READY=1", 60)
            await wait_until(lambda: bool(fakes.tg.calls_of("getUpdates")), "polling", 30)
            await wait_until(lambda: listener.count("WATCHDOG=1") >= 2, "two pings", 30)
            bot.send_signal(signal.SIGTERM)
            assert await within(bot.wait(), 60) == 0
        assert listener.count("STOPPING=1") == 1
        assert listener.messages.index("READY=1") < listener.messages.index("STOPPING=1")
