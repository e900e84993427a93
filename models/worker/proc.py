"""Worker processes by pid: a forked copy (not our child), reaping without a child watcher
(which would tie a process to one loop), and what /proc says of a process's memory and CPU."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path


class ForkedProcess:
    """A worker forked from another (`ProviderWorker.fork`): not our child (its parent's kernel
    reaps it), so what the pool needs of a process is done by pid."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            text = _proc_read(self.pid, "stat")
            if text is None or text.rsplit(")", 1)[-1].split()[0] in ("Z", "X"):
                self.returncode = 0
        return self.returncode

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        deadline = time.monotonic() + (timeout if timeout is not None else float("inf"))
        while (code := self.poll()) is None:
            if time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
            time.sleep(0.02)
        return code


async def reap(process: subprocess.Popen[bytes] | ForkedProcess, grace: float) -> None:
    """Wait for `process` to exit (polling: no child watcher ties it to a loop); kill it after
    `grace` seconds."""
    deadline = time.monotonic() + grace
    while process.poll() is None:
        if time.monotonic() >= deadline:
            process.kill()
            deadline = float("inf")
        await asyncio.sleep(0.02)


def _proc_read(pid: int | None, name: str) -> str | None:
    if pid is None:
        return None
    try:
        return Path(f"/proc/{pid}/{name}").read_text()
    except OSError:
        return None


def rss_mib(pid: int | None) -> float | None:
    text = _proc_read(pid, "status")
    for line in (text or "").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return None


def cpu_seconds(pid: int | None) -> float | None:
    text = _proc_read(pid, "stat")
    if not text:
        return None
    fields = text.rsplit(")", 1)[-1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
