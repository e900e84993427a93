"""How late the event loop runs, measured from inside it, and the systemd watchdog's pings.

The bot is one event loop: a pass of some loop of ours that never awaits freezes every chat,
/healthz and the consolidation worker at once (a scheduler pass that found every slot busy and
never awaited would). Such a
freeze must be noticed from outside, so both signals come from a task ON the loop: a frozen
loop stops the pings (systemd's WatchdogSec then kills and restarts the service) and can no
longer answer /healthz (a container's healthcheck fails). A loop that is only stalling — slow
passes, not a freeze — still answers, and /healthz reports the worst lag of the last minute and
fails past `limit_s`. A thread would keep pinging through a freeze, which is why none is used.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections import deque

import structlog

from primitives.tasks import stop_task

log = structlog.get_logger("bot.loop_watch")

TICK_S = 0.25  # how often the watch asks to be woken
WINDOW_S = 60.0  # /healthz reports the worst lag seen over this long
LIMIT_S = 10.0  # a lag past this is a loop in trouble: /healthz answers 503


class SystemdNotifier:
    """sd_notify(3) over $NOTIFY_SOCKET, in the few lines it takes: one datagram a message.

    Absent when the bot is not started by systemd (no NOTIFY_SOCKET): every call is then a
    no-op. The watchdog interval comes from $WATCHDOG_USEC (WatchdogSec= in the unit); pings
    are sent at a quarter of it, well inside systemd's deadline."""

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        path = env.get("NOTIFY_SOCKET", "")
        # '@' names a socket in the abstract namespace (a leading NUL byte).
        self._address = "\0" + path[1:] if path.startswith("@") else path
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        meant_for_us = not pid or pid == str(os.getpid())
        self.ping_every_s: float | None = (
            int(usec) / 1_000_000 / 4 if usec.isdigit() and int(usec) > 0 and meant_for_us else None
        )
        self._warned = False

    def notify(self, message: str) -> None:
        if not self._address:
            return
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                sock.setblocking(False)
                sock.sendto(message.encode(), self._address)
        except OSError as exc:  # the manager went away: nothing to tell, say so once
            if not self._warned:
                self._warned = True
                log.warning("sd_notify_failed", error=type(exc).__name__)

    def ready(self) -> None:
        self.notify("READY=1")

    def stopping(self) -> None:
        self.notify("STOPPING=1")


class LoopWatch:
    """A task on the event loop that sleeps `tick_s` and records how late it woke."""

    def __init__(
        self,
        notifier: SystemdNotifier | None = None,
        *,
        tick_s: float = TICK_S,
        window_s: float = WINDOW_S,
        limit_s: float = LIMIT_S,
    ) -> None:
        self.notifier = notifier
        self.tick_s = tick_s
        self.window_s = window_s
        self.limit_s = limit_s
        self._lags: deque[tuple[float, float]] = deque()  # (loop time, lag in s)
        self._last_wake: float | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="loop-watch")

    async def stop(self) -> None:
        await stop_task(self._task)
        self._task = None

    def lag_s(self) -> float:
        """The worst lag of the window, counting a wake-up that is overdue right now."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        self._forget_before(now - self.window_s)
        worst = max((lag for _, lag in self._lags), default=0.0)
        if self._last_wake is not None:
            worst = max(worst, now - self._last_wake - self.tick_s)
        return max(worst, 0.0)

    def _forget_before(self, moment: float) -> None:
        while self._lags and self._lags[0][0] < moment:
            self._lags.popleft()

    def over_limit(self) -> bool:
        return self.lag_s() > self.limit_s

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        notifier = self.notifier
        ping_every = notifier.ping_every_s if notifier is not None else None
        last_ping = -float("inf")
        self._last_wake = loop.time()
        while True:
            await asyncio.sleep(self.tick_s)
            now = loop.time()
            lag = now - self._last_wake - self.tick_s
            self._last_wake = now
            if lag > 0.001:
                self._lags.append((now, lag))
                self._forget_before(now - self.window_s)
            if notifier is not None and ping_every is not None and now - last_ping >= ping_every:
                last_ping = now
                notifier.notify("WATCHDOG=1")
