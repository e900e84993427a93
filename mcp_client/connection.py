"""One MCP server: a long-lived session, supervised, and its calls bounded.

The only module that imports the SDK. One task per server owns the session (`async with
mcp.Client(...)` must be entered and left by the same task) and keeps it until the bot stops or
the session breaks; calls from chat turns go through it concurrently. Never a process per call.

Supervision:
- every call carries the server's `timeout` (the SDK's default is none), and a hard bound a
  little past it in case the server stops reading its input;
- a stdio server's end of output (a crash, an exit) is seen at once by a relay on its read
  stream; an HTTP server is asked for its tool list every HEALTH_SECONDS; a call that finds the
  connection closed marks it broken. Each ends the session: the calls waiting on it get a tool
  error, and the task starts a new one after a back-off (1 s, 2 s, 4 s, ... up to 5 minutes;
  a session that stayed up a minute starts the count again);
- a server that cannot start is reported (state `failed` with its reason) and retried the same
  way; it never stops the bot or the other servers;
- stop: the SDK closes the server's input, waits, then signals its process group; the launcher
  (mcp_client/launcher.py) makes the kernel kill the server if the bot dies without stopping.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp
import structlog
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

from mcp_client.config import BASE_ENV_KEYS, ServerConfig
from mcp_client.errors import McpCallError
from primitives.backoff import Backoff
from primitives.tasks import stop_task
from primitives.waits import wait_or_timeout

log = structlog.get_logger("mcp_client.connection")

LAUNCHER = Path(__file__).with_name("launcher.py")
HEALTH_SECONDS = 30.0
# Past the call's own timeout: the SDK's timer starts only once the request is written, and a
# server that stopped reading its input would hold the write forever.
HARD_BOUND_EXTRA_SECONDS = 5.0
STOP_SECONDS = 8.0  # the SDK's own stop takes at most ~6 s (stdin, TERM, KILL)
MAX_LISTED_TOOLS = 500
MAX_LIST_PAGES = 20


class ServerState(StrEnum):
    STARTING = "starting"
    UP = "up"
    RESTARTING = "restarting"
    FAILED = "failed"  # never came up, or failed again right after a restart; retried
    STOPPED = "stopped"


@dataclass(frozen=True)
class ListedTool:
    """A tool as the server lists it, as plain data."""

    name: str
    description: str
    input_schema: dict[str, Any]
    read_only: bool


# Seconds before the n-th restart in a row: 1, 2, 4 … capped at 300.
RESTART_BACKOFF = Backoff.doubling(1.0, 300.0)
# A session up this long counts as healthy: the next failure starts the back-off again.
HEALTHY_AFTER_S = 60.0


@dataclass
class _Live:
    client: mcp.Client
    broken: asyncio.Event = field(default_factory=asyncio.Event)


class Connection:
    """The supervised session of one server."""

    def __init__(
        self,
        config: ServerConfig,
        *,
        backoff: Backoff | None = None,
        on_tools: Callable[[Connection], None] | None = None,
        environ: dict[str, str] | None = None,
    ) -> None:
        self.config = config
        self.backoff = backoff or RESTART_BACKOFF
        self.on_tools = on_tools  # told when the tool list changes
        self.environ = environ
        self.state = ServerState.STARTING
        self.tools: tuple[ListedTool, ...] = ()  # the last list (kept while restarting)
        self.last_error: str | None = None
        self.restarts = 0
        self.next_try_at: float | None = None  # monotonic time of the next start, if waiting
        self._live: _Live | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._first_outcome = asyncio.Event()  # up, or failed once

    # lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._supervise(), name=f"mcp:{self.config.name}")

    async def settled(self) -> None:
        """Until the first start has come up or failed."""
        await self._first_outcome.wait()

    async def stop(self) -> None:
        """End the session and the server's process; waits for both, within STOP_SECONDS."""
        self._stopping.set()
        task = self._task
        if task is None:
            return
        if not await wait_or_timeout(task, timeout=STOP_SECONDS):
            log.warning("mcp_server_stop_slow", server=self.config.name)
        await stop_task(task)
        self.state = ServerState.STOPPED

    async def _supervise(self) -> None:
        failures = 0  # in a row
        while not self._stopping.is_set():
            started = time.monotonic()
            try:
                await self._session()
            except asyncio.CancelledError:
                raise
            except McpCallError as exc:
                self.last_error = str(exc)
                log.warning("mcp_server_lost", server=self.config.name, error=self.last_error)
            except Exception as exc:  # one server's failure is its own, never the bot's
                self.last_error = _reason(exc)
                log.warning("mcp_server_failed", server=self.config.name, error=self.last_error)
            finally:
                self._live = None
            if self._stopping.is_set():
                break
            if time.monotonic() - started >= HEALTHY_AFTER_S:
                failures = 0
            came_up = self.state is ServerState.UP
            self.state = ServerState.RESTARTING if came_up else ServerState.FAILED
            self._first_outcome.set()
            failures += 1
            delay = self.backoff.after(failures)
            self.restarts += 1
            self.next_try_at = time.monotonic() + delay
            log.info("mcp_server_restart_scheduled", server=self.config.name, seconds=delay)
            await wait_or_timeout(self._stopping, timeout=delay)
            self.next_try_at = None
        self.state = ServerState.STOPPED

    async def _session(self) -> None:
        """One session from start to its end (broken, or the bot stopping)."""
        broken = asyncio.Event()
        transport = self._transport(broken)
        client = mcp.Client(transport, read_timeout_seconds=self.config.timeout,
                            mode="auto")  # fmt: skip
        async with client:
            tools = await self._list(client)
            live = _Live(client, broken)
            self._live = live
            changed = tools != self.tools
            self.tools = tools
            self.state = ServerState.UP
            self.last_error = None
            self._first_outcome.set()
            log.info("mcp_server_up", server=self.config.name, tools=len(tools))
            if changed and self.on_tools is not None:
                self.on_tools(self)
            await self._until_broken_or_stopped(live)

    async def _until_broken_or_stopped(self, live: _Live) -> None:
        timeout = HEALTH_SECONDS if self.config.transport == "http" else None
        while True:
            await wait_or_timeout(self._stopping, live.broken, timeout=timeout)
            if self._stopping.is_set():
                return
            if live.broken.is_set():
                raise McpCallError("closed", self.last_error or "the connection closed")
            await self._health(live)

    async def _health(self, live: _Live) -> None:
        """An HTTP server has no pipe to watch: its tool list, asked now and then, says it is
        alive (and picks up tools it added)."""
        try:
            tools = await self._list(live.client)
        except Exception as exc:
            self.last_error = _reason(exc)
            live.broken.set()
            return
        if tools != self.tools:
            self.tools = tools
            if self.on_tools is not None:
                self.on_tools(self)

    async def _list(self, client: mcp.Client) -> tuple[ListedTool, ...]:
        listed: list[ListedTool] = []
        cursor: str | None = None
        for _ in range(MAX_LIST_PAGES):
            page = await client.list_tools(cursor=cursor, cache_mode="refresh")
            for tool in page.tools:
                hints = tool.annotations
                listed.append(
                    ListedTool(
                        name=tool.name,
                        description=(tool.description or tool.title or "").strip(),
                        input_schema=dict(tool.input_schema or {}),
                        read_only=bool(hints is not None and hints.read_only_hint is True),
                    )
                )
            cursor = page.next_cursor
            if cursor is None or len(listed) >= MAX_LISTED_TOOLS:
                break
        return tuple(listed[:MAX_LISTED_TOOLS])

    # transports ----------------------------------------------------------------------------

    def _transport(self, broken: asyncio.Event) -> Any:
        config = self.config
        if config.transport == "http":
            assert config.url is not None
            http = httpx2.AsyncClient(
                headers=dict(config.headers),
                timeout=httpx2.Timeout(min(10.0, config.timeout), read=config.timeout + 5.0),
            )
            return _owning(http, streamable_http_client(config.url, http_client=http))
        return _relayed(mcp.stdio_client(self._stdio_parameters()), broken)

    def _stdio_parameters(self) -> mcp.StdioServerParameters:
        config = self.config
        assert config.command is not None
        env = config.server_env(self.environ)
        command = shutil.which(config.command, path=env["PATH"])
        if command is None:
            raise FileNotFoundError(f"command {config.command!r} is not on the server's PATH")
        keys = ",".join(dict.fromkeys([*BASE_ENV_KEYS, *config.env]))
        return mcp.StdioServerParameters(
            command=sys.executable,
            args=["-I", "-S", str(LAUNCHER), str(os.getpid()), keys, command, *config.args],
            env=env,
            cwd=config.cwd,
        )

    # calls ---------------------------------------------------------------------------------

    async def call(self, tool: str, arguments: dict[str, Any]) -> Any:
        """The SDK's CallToolResult; McpCallError when there is none."""
        live = self._live
        if live is None or live.broken.is_set():
            raise McpCallError("down", self._down_text())
        timeout = self.config.timeout
        try:
            async with asyncio.timeout(timeout + HARD_BOUND_EXTRA_SECONDS):
                return await live.client.call_tool(tool, arguments, read_timeout_seconds=timeout)
        except mcp.MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                raise McpCallError("timeout", f"no answer within {timeout:g} s") from None
            if exc.code == CONNECTION_CLOSED:
                self._broke(live, "the connection closed during a call")
                raise McpCallError("closed", "the server's connection closed") from None
            raise McpCallError("protocol", f"the server refused the call: {exc}") from None
        except TimeoutError:
            self._broke(live, "a call could not be sent within its timeout")
            raise McpCallError("timeout", f"no answer within {timeout:g} s") from None
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, httpx2.HTTPError) as exc:
            self._broke(live, _reason(exc))
            raise McpCallError("closed", "the server's connection broke") from None
        except ValueError as exc:  # pydantic's ValidationError: a result of the wrong shape
            raise McpCallError("protocol", f"the server's answer was malformed ({exc})") from None

    def _broke(self, live: _Live, reason: str) -> None:
        self.last_error = reason
        live.broken.set()

    def _down_text(self) -> str:
        state = "restarting" if self.state is ServerState.RESTARTING else str(self.state)
        reason = f" ({self.last_error})" if self.last_error else ""
        return f"the server is not available: {state}{reason}"


@contextlib.asynccontextmanager
async def _relayed(transport: Any, broken: asyncio.Event) -> AsyncIterator[Any]:
    """The stdio transport, with its read stream passed through a relay that marks the session
    broken the moment the server's output ends."""
    async with transport as (read, write):
        send, receive = anyio.create_memory_object_stream[Any](0)

        async def relay() -> None:
            try:
                async with send:
                    async for item in read:
                        await send.send(item)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
                pass
            finally:
                broken.set()

        async with anyio.create_task_group() as group:
            group.start_soon(relay)
            try:
                yield receive, write
            finally:
                group.cancel_scope.cancel()  # anyio's scope: ends the relay with the stream
                receive.close()


@contextlib.asynccontextmanager
async def _owning(http: httpx2.AsyncClient, transport: Any) -> AsyncIterator[Any]:
    """The HTTP transport, and the httpx client it was given closed with it."""
    async with http, transport as streams:
        yield streams


def _reason(exc: BaseException) -> str:
    """One line for /mcp and the log; exception groups (anyio's) are looked into."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__
