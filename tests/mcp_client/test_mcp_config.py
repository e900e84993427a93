"""MCP_CONFIG (mcp_client/config.py): a good file in the shape other clients use loads; every bad
one stops with one line naming the server and the field; secrets never reach a repr."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mcp_client.config import McpConfigError, load_config, parse_config
from tests.support.paths import REPO

ENV = {"NOTES_TOKEN": "tok-123", "PATH": "/usr/bin", "HOME": "/home/bot"}


def load(tmp_path: Path, servers: dict[str, Any], text: str | None = None) -> Any:
    path = tmp_path / "mcp.json"
    path.write_text(text if text is not None else json.dumps({"mcpServers": servers}))
    return load_config(path, ENV)


def refused(tmp_path: Path, servers: dict[str, Any], text: str | None = None) -> str:
    with pytest.raises(McpConfigError) as caught:
        load(tmp_path, servers, text)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_the_design_example_loads_with_its_variables_filled(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        {
            "time": {
                "command": "uvx",
                "args": ["mcp-server-time"],
                "env": {"TZ": "Europe/Lisbon"},
                "timeout": 20,
            },
            "notes": {
                "url": "https://notes.example.org/mcp",
                "headers": {"Authorization": "Bearer ${NOTES_TOKEN}"},
                "enabledTools": ["search", "append"],
                "autoApprove": ["search"],
            },
        },
    )
    time, notes = config.servers
    assert (time.name, time.transport, time.command, time.args) == (
        "time", "stdio", "uvx", ("mcp-server-time",),
    )  # fmt: skip
    assert time.timeout == 20.0 and dict(time.env) == {"TZ": "Europe/Lisbon"}
    assert time.server_env({"PATH": "/p", "HOME": "/h", "SECRET": "x"}) == {
        "PATH": "/p", "HOME": "/h", "LANG": "C.UTF-8", "TZ": "Europe/Lisbon",
    }  # fmt: skip
    assert notes.transport == "http" and notes.timeout == 30.0
    assert dict(notes.headers) == {"Authorization": "Bearer tok-123"}
    assert notes.offers("search") and notes.offers("append") and not notes.offers("delete")
    assert notes.auto_approve == {"search"} and not notes.admins_only
    assert "tok-123" not in repr(config)


@pytest.mark.parametrize(
    ("servers", "expected"),
    [
        ({"a": {"command": "x", "url": "https://h/mcp"}}, "server 'a': needs either"),
        ({"a": {}}, "server 'a': needs either 'command'"),
        ({"a": {"command": "x", "timeout": 0}}, "server 'a', field 'timeout': must be seconds"),
        ({"a": {"command": "x", "timeout": "5"}}, "server 'a', field 'timeout'"),
        ({"a": {"command": "x", "autoaprove": ["t"]}}, "field 'autoaprove': is not a known"),
        ({"a": {"command": "x", "args": "--flag"}}, "field 'args': must be a list of strings"),
        ({"a": {"command": ""}}, "field 'command': must be a non-empty string"),
        ({"a": {"command": "x", "adminsOnly": "yes"}}, "field 'adminsOnly': must be true or"),
        ({"a": {"command": "x", "autoApprove": "t"}}, "field 'autoApprove': must be a list"),
        ({"a": {"command": "x", "headers": {}}}, "field 'headers': belongs to an HTTP server"),
        ({"a": {"url": "https://h/mcp", "env": {}}}, "field 'env': belongs to a stdio server"),
        ({"a": {"url": "ftp://h/mcp"}}, "field 'url': must be an http(s) URL"),
        ({"a": {"url": "http://notes.example.org/mcp"}}, "field 'url': must be https unless"),
        ({"a": {"url": "https://u:p@h.example/mcp"}}, "field 'url': may not hold a user"),
        ({"a": {"command": "x", "cwd": "/no/such/dir"}}, "field 'cwd': must name an existing"),
        ({"a": {"command": "x", "type": "sse"}}, "field 'type': must be one of"),
        ({"a": {"command": "x", "type": "http"}}, "field 'type': says 'http' but"),
        (
            {"notes": {"url": "https://h.example/mcp", "headers": {"X": "${MISSING_TOKEN}"}}},
            "server 'notes', field 'headers.X': ${MISSING_TOKEN} is not set",
        ),
        ({"a": {"command": "x", "env": {"TZ": 5}}}, "field 'env.TZ': must be a string"),
        ({"a/b": {"command": "x"}}, "server 'a/b': a server's name is 1 to 64 letters"),
    ],
)
def test_a_bad_server_stops_start_up_with_one_line_naming_it(
    tmp_path: Path, servers: dict[str, Any], expected: str
) -> None:
    message = refused(tmp_path, servers)
    assert message.startswith(f"MCP_CONFIG {tmp_path / 'mcp.json'}: ")
    assert expected in message


@pytest.mark.parametrize(
    "key", ["NODE_OPTIONS", "PYTHONPATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "DYLD_INSERT_LIBRARIES",
            "PYTHONSTARTUP", "BASH_ENV", "PERL5OPT", "JAVA_TOOL_OPTIONS"],
)  # fmt: skip
def test_env_may_not_name_what_runs_code(tmp_path: Path, key: str) -> None:
    message = refused(tmp_path, {"a": {"command": "x", "env": {key: "/tmp/evil"}}})
    assert f"server 'a', field 'env.{key}': is refused" in message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{not json", "not valid JSON (line 1, column 2"),
        ('{"servers": {}}', 'needs an object {"mcpServers": {...}}'),
        ('{"mcpServers": {"a": {"command": "x"}, "a": {"command": "y"}}}', "'a' appears twice"),
        ('{"mcpServers": {"a": []}}', "server 'a': must be an object"),
    ],
)
def test_a_bad_file_stops_start_up_with_one_line(tmp_path: Path, text: str, expected: str) -> None:
    assert expected in refused(tmp_path, {}, text)


def test_an_unreadable_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(McpConfigError, match=r"cannot be read \(No such file or directory\)$"):
        load_config(tmp_path / "missing.json", ENV)


def test_loopback_private_and_service_names_may_use_plain_http() -> None:
    urls = ["http://127.0.0.1:8000/mcp", "http://10.1.2.3/mcp", "http://localhost:9/mcp",
            "http://notes:8000/mcp"]  # fmt: skip
    servers = {f"s{i}": {"url": url} for i, url in enumerate(urls)}
    config = parse_config({"mcpServers": servers}, "x", ENV)
    assert [s.url for s in config.servers] == urls


def test_a_disabled_server_is_left_out_and_filters_apply() -> None:
    config = parse_config(
        {"mcpServers": {
            "off": {"command": "x", "disabled": True},
            "on": {"command": "x", "disabledTools": ["rm"], "adminsOnly": True},
        }},
        "x",
        ENV,
    )  # fmt: skip
    [server] = config.servers
    assert server.name == "on" and server.admins_only
    assert server.offers("ls") and not server.offers("rm")


def test_the_readme_example_loads_and_its_time_server_is_the_real_one() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Your own tools (MCP)", 1)[1]
    example = section.split("```json\n", 1)[1].split("```", 1)[0]
    config = parse_config(json.loads(example), "README", ENV)
    time, notes = config.servers
    assert time.args[:2] == ("-m", "mcp_server_time") and time.timeout == 20
    assert dict(notes.headers) == {"Authorization": "Bearer tok-123"} and notes.admins_only
