"""What the MCP tests share: configs for our test server (tests/fakes/mcp_servers/ours.py)
and the real mcp-server-time, a free loopback port, our HTTP server as a context manager, and
process checks."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from mcp_client.config import McpConfig, parse_config
from tests.support.paths import TESTS

OURS = TESTS / "fakes" / "mcp_servers" / "ours.py"
# What the bot's environment holds besides the basics: a secret no server may see.
BOT_ENV = {
    "PATH": os.environ.get("PATH", os.defpath),
    "HOME": os.environ.get("HOME", "/root"),
    "LANG": "C.UTF-8",
    "TELEGRAM_BOT_TOKEN": "123456:SECRET-BOT-TOKEN",
    "OPENAI_API_KEY": "sk-secret-openai",
    "NOTES_TOKEN": "notes-secret-token",
}


def ours_entry(notes: Path | None = None, **fields: Any) -> dict[str, Any]:
    env = {"NOTES_FILE": str(notes or "/dev/null")}
    env.update(fields.pop("env", {}))
    return {"command": sys.executable, "args": [str(OURS)], "env": env, **fields}


def time_entry(**fields: Any) -> dict[str, Any]:
    """The real mcp-server-time from PyPI, run from this venv (offline)."""
    return {
        "command": sys.executable,
        "args": ["-m", "mcp_server_time", "--local-timezone", "Europe/Lisbon"],
        **fields,
    }


def config(servers: dict[str, dict[str, Any]]) -> McpConfig:
    return parse_config({"mcpServers": servers}, "test.json", BOT_ENV)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.asynccontextmanager
async def ours_over_http(port: int) -> AsyncIterator[tuple[str, asyncio.subprocess.Process]]:
    """Our server on streamable HTTP at 127.0.0.1:port: (URL, its process)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(OURS),
        "http",
        str(port),
        env={**BOT_ENV, "NOTES_FILE": "/dev/null"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        await wait_for_port(port)
        yield f"http://127.0.0.1:{port}/mcp", process
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()


async def wait_for_port(port: int, timeout: float = 30.0) -> None:  # noqa: ASYNC109
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            if loop.time() > deadline:
                raise TimeoutError(f"nothing listens on {port}") from None
            await asyncio.sleep(0.05)
        else:
            writer.close()
            return


def alive(pid: int) -> bool:
    """Whether the process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


async def until(predicate: Any, timeout: float = 30.0, what: str = "condition") -> None:  # noqa: ASYNC109
    """Wait for `predicate()` to hold, checking every 20 ms."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def children_of(pid: int) -> Iterator[int]:
    """Every live process whose parent is `pid`."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if int(stat[1]) == pid and stat[0] != "Z":
                yield int(entry.name)


def kill_quietly(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
