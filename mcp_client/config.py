"""MCP_CONFIG: the operator's servers, in the `mcpServers` shape other MCP clients share.

Read and checked once at start, before anything is spawned: a bad file stops start-up with one
line naming the server and the field, so a typo is found by the operator, not by a user whose
tool silently never appears. Values are plain data (no SDK types), and `${VAR}` in `env` and
`headers` is filled from the bot's environment here — the only place a server's secrets are
read; they never reach a repr, a log line or the database.

A stdio server's environment is PATH, HOME, LANG and what its `env` names (mcp_client/launcher.py
drops the rest), and `env` may not set what would make the interpreter or the loader run code of
someone else's choosing (NODE_OPTIONS, PYTHONPATH, LD_PRELOAD, ...).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from mcp_client import McpClientError

DEFAULT_TIMEOUT_SECONDS = 30.0
MAX_TIMEOUT_SECONDS = 600.0
MAX_SERVERS = 32
MAX_CONFIG_BYTES = 1_000_000
# What a server's environment gets from the bot's own, always (its `env` adds the rest).
BASE_ENV_KEYS = ("PATH", "HOME", "LANG")
# Keys `env` may not set: each makes an interpreter or the dynamic loader run code named by
# its value, so a config could turn any server into an arbitrary program.
REFUSED_ENV_KEYS = frozenset(
    {
        "NODE_OPTIONS",
        "NODE_PATH",
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONSTARTUP",
        "PYTHONINSPECT",
        "PYTHONUSERBASE",
        "PERL5OPT",
        "PERL5LIB",
        "PERLLIB",
        "RUBYOPT",
        "RUBYLIB",
        "BASH_ENV",
        "ENV",
        "JAVA_TOOL_OPTIONS",
        "_JAVA_OPTIONS",
        "JDK_JAVA_OPTIONS",
        "GCONV_PATH",
    }
)
REFUSED_ENV_PREFIXES = ("LD_", "DYLD_")
# Tool names are built from it (`<server>_<tool>`) and the ledger keys calls by `<server>/<tool>`.
_SERVER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SERVER_FIELDS = frozenset(
    {
        "command",
        "args",
        "env",
        "cwd",
        "url",
        "headers",
        "timeout",
        "enabledTools",
        "disabledTools",
        "autoApprove",
        "adminsOnly",
        # Accepted so a file written for another client loads unchanged.
        "type",
        "transport",
        "disabled",
        "description",
    }
)
_TYPES = {"stdio": "stdio", "http": "http", "streamable-http": "http", "streamableHttp": "http"}


class McpConfigError(McpClientError):
    """MCP_CONFIG cannot be used; str(error) is one line naming the server and the field."""


@dataclass(frozen=True)
class ServerConfig:
    """One server as the operator wrote it, checked and with `${VAR}` filled in."""

    name: str
    transport: Literal["stdio", "http"]
    command: str | None = None
    args: tuple[str, ...] = ()
    # Secrets may be in here: kept out of repr (and so out of every log line).
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    timeout: float = DEFAULT_TIMEOUT_SECONDS
    enabled_tools: frozenset[str] | None = None  # None: every tool the server lists
    disabled_tools: frozenset[str] = frozenset()
    auto_approve: frozenset[str] = frozenset()
    admins_only: bool = False

    def offers(self, tool: str) -> bool:
        """Whether the operator lets the model see this tool of the server."""
        if tool in self.disabled_tools:
            return False
        return self.enabled_tools is None or tool in self.enabled_tools

    def server_env(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """The whole environment of a stdio server: PATH, HOME, LANG of the bot (or safe
        defaults) and what `env` names, nothing else."""
        source = os.environ if environ is None else environ
        base = {
            "PATH": source.get("PATH") or os.defpath,
            "HOME": source.get("HOME") or "/nonexistent",
            "LANG": source.get("LANG") or "C.UTF-8",
        }
        return {**base, **self.env}


@dataclass(frozen=True)
class McpConfig:
    """Every server of the file, in the file's order; `path` for messages."""

    path: str
    servers: tuple[ServerConfig, ...]


def load_config(path: str | Path, environ: Mapping[str, str] | None = None) -> McpConfig:
    """Read and check MCP_CONFIG; raises McpConfigError with one line."""
    where = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise McpConfigError(f"MCP_CONFIG {where}: cannot be read ({exc.strerror})") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise McpConfigError(f"MCP_CONFIG {where}: larger than {MAX_CONFIG_BYTES} bytes")
    twice: list[str] = []

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [key for key, _ in pairs]
        twice.extend(key for i, key in enumerate(keys) if key in keys[:i])
        return dict(pairs)

    try:
        data = json.loads(raw.decode("utf-8"), object_pairs_hook=no_duplicates)
    except UnicodeDecodeError:
        raise McpConfigError(f"MCP_CONFIG {where}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise McpConfigError(
            f"MCP_CONFIG {where}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    if twice:
        raise McpConfigError(f"MCP_CONFIG {where}: the key {twice[0]!r} appears twice")
    return parse_config(data, where, os.environ if environ is None else environ)


def parse_config(data: object, where: str, environ: Mapping[str, str]) -> McpConfig:
    """The checks of `load_config` on parsed JSON."""
    if not isinstance(data, dict) or not isinstance(data.get("mcpServers"), dict):
        raise McpConfigError(f'MCP_CONFIG {where}: needs an object {{"mcpServers": {{...}}}}')
    entries = data["mcpServers"]
    if len(entries) > MAX_SERVERS:
        raise McpConfigError(f"MCP_CONFIG {where}: more than {MAX_SERVERS} servers")
    servers = []
    for name, entry in entries.items():
        server = _server(name, entry, _Where(where, name), environ)
        if server is not None:
            servers.append(server)
    return McpConfig(path=where, servers=tuple(servers))


@dataclass(frozen=True)
class _Where:
    path: str
    server: str

    def error(self, field_name: str | None, problem: str) -> McpConfigError:
        at = f"server {self.server!r}" + (f", field {field_name!r}" if field_name else "")
        return McpConfigError(f"MCP_CONFIG {self.path}: {at}: {problem}")


def _server(
    name: str, entry: object, where: _Where, environ: Mapping[str, str]
) -> ServerConfig | None:
    if not _SERVER_NAME.match(name):
        raise where.error(
            None,
            "a server's name is 1 to 64 letters, digits, '_', '-' or '.', starting with "
            "a letter or digit",
        )
    if not isinstance(entry, dict):
        raise where.error(None, "must be an object")
    unknown = sorted(set(entry) - _SERVER_FIELDS)
    if unknown:
        raise where.error(unknown[0], "is not a known field (a typo?)")
    if _bool(entry, "disabled", where, False):
        return None
    kind = entry.get("type", entry.get("transport"))
    if kind is not None and kind not in _TYPES:
        raise where.error("type", f"must be one of {', '.join(sorted(_TYPES))}")
    has_command, has_url = "command" in entry, "url" in entry
    if has_command == has_url:
        raise where.error(None, "needs either 'command' (stdio) or 'url' (streamable HTTP)")
    transport: Literal["stdio", "http"] = "stdio" if has_command else "http"
    if kind is not None and _TYPES[kind] != transport:
        raise where.error("type", f"says {kind!r} but the server has {transport} fields")
    common: dict[str, Any] = {
        "timeout": _timeout(entry, where),
        "enabled_tools": _names(entry, "enabledTools", where),
        "disabled_tools": _names(entry, "disabledTools", where) or frozenset(),
        "auto_approve": _names(entry, "autoApprove", where) or frozenset(),
        "admins_only": _bool(entry, "adminsOnly", where, False),
    }
    if transport == "stdio":
        for stray in ("headers",):
            if stray in entry:
                raise where.error(stray, "belongs to an HTTP server (one with 'url')")
        command = entry["command"]
        if not isinstance(command, str) or not command.strip() or "\0" in command:
            raise where.error("command", "must be a non-empty string")
        args = entry.get("args", [])
        if not isinstance(args, list) or not all(
            isinstance(a, str) and "\0" not in a for a in args
        ):
            raise where.error("args", "must be a list of strings")
        cwd = entry.get("cwd")
        if cwd is not None and (not isinstance(cwd, str) or not Path(cwd).is_dir()):
            raise where.error("cwd", "must name an existing directory")
        return ServerConfig(
            name=name,
            transport="stdio",
            command=command,
            args=tuple(args),
            env=_env(entry.get("env", {}), where, environ),
            cwd=cwd,
            **common,
        )
    for stray in ("args", "env", "cwd"):
        if stray in entry:
            raise where.error(stray, "belongs to a stdio server (one with 'command')")
    return ServerConfig(
        name=name,
        transport="http",
        url=_url(entry["url"], where),
        headers=_headers(entry.get("headers", {}), where, environ),
        **common,
    )


def _timeout(entry: dict[str, Any], where: _Where) -> float:
    value = entry.get("timeout", DEFAULT_TIMEOUT_SECONDS)
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 < value <= MAX_TIMEOUT_SECONDS
    ):
        raise where.error(
            "timeout", f"must be seconds per call, above 0, at most {MAX_TIMEOUT_SECONDS:g}"
        )
    return float(value)


def _names(entry: dict[str, Any], key: str, where: _Where) -> frozenset[str] | None:
    if key not in entry:
        return None
    value = entry[key]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise where.error(key, "must be a list of tool names")
    return frozenset(value)


def _bool(entry: dict[str, Any], key: str, where: _Where, default: bool) -> bool:
    value = entry.get(key, default)
    if not isinstance(value, bool):
        raise where.error(key, "must be true or false")
    return value


def _env(value: object, where: _Where, environ: Mapping[str, str]) -> dict[str, str]:
    if not isinstance(value, dict):
        raise where.error("env", "must be an object of strings")
    env: dict[str, str] = {}
    for key, raw in value.items():
        if not _ENV_KEY.match(key):
            raise where.error(f"env.{key}", "is not a valid variable name")
        if key in REFUSED_ENV_KEYS or key.startswith(REFUSED_ENV_PREFIXES):
            raise where.error(
                f"env.{key}", "is refused: it would make the server run code named by its value"
            )
        if not isinstance(raw, str) or "\0" in raw:
            raise where.error(f"env.{key}", "must be a string")
        env[key] = _expand(raw, f"env.{key}", where, environ)
    return env


def _headers(value: object, where: _Where, environ: Mapping[str, str]) -> dict[str, str]:
    if not isinstance(value, dict):
        raise where.error("headers", "must be an object of strings")
    headers: dict[str, str] = {}
    for key, raw in value.items():
        if not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", key):
            raise where.error(f"headers.{key}", "is not a valid header name")
        if not isinstance(raw, str):
            raise where.error(f"headers.{key}", "must be a string")
        expanded = _expand(raw, f"headers.{key}", where, environ)
        if any(c in expanded for c in "\r\n\0"):
            raise where.error(f"headers.{key}", "may not hold a line break")
        headers[key] = expanded
    return headers


def _expand(raw: str, field_name: str, where: _Where, environ: Mapping[str, str]) -> str:
    """`${VAR}` from the bot's environment; a missing one is an error (an empty token would
    fail later, at every call, far from its cause). The value is never put in the message."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in environ:
            raise where.error(field_name, f"${{{name}}} is not set in the bot's environment")
        return environ[name]

    return _VARIABLE.sub(value, raw)


def _url(value: object, where: _Where) -> str:
    if not isinstance(value, str):
        raise where.error("url", "must be a string")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise where.error("url", "must be an http(s) URL with a host")
    if parts.username or parts.password:
        raise where.error("url", "may not hold a user or password (use 'headers')")
    if parts.scheme == "http" and not _near(parts.hostname):
        raise where.error("url", "must be https unless the host is loopback, private or local")
    return value


def _near(host: str) -> bool:
    """Plain http is allowed where the traffic stays on the machine or its network: loopback,
    private addresses, `localhost` and single-label names (a compose service)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host == "localhost" or "." not in host
    return address.is_loopback or address.is_private
