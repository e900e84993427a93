"""The MCP tools as the model is offered them (mcp_client/naming.py, schema.py, hub.py): names
valid for every gateway and unique, schemas every gateway accepts (checked by each provider's
rules, tests/support/provider_tool_rules.py, and through litellm's own Anthropic conversion),
descriptions bounded, a cap on how many, admins-only servers for admins only."""

from __future__ import annotations

import json
from typing import Any

import pytest
from litellm.litellm_core_utils.prompt_templates.common_utils import (
    sanitize_input_schema_for_anthropic,
)

from mcp_client.connection import Connection, ListedTool
from mcp_client.hub import MAX_DESCRIPTION_CHARS, MAX_OFFERED_TOOLS, McpHub
from mcp_client.naming import MAX_NAME_CHARS, model_names
from mcp_client.schema import clean_schema
from tests.support.mcp_stack import BOT_ENV, config, ours_entry
from tests.support.provider_tool_rules import anthropic_problems, openai_problems, strict_problems

# What frameworks emit and gateways refuse, one of each.
NASTY: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "Node": {
            "type": "object",
            "properties": {"label": {"type": "string"}, "child": {"$ref": "#/$defs/Node"}},
        },
        "Colour": {"const": "red"},
    },
    "anyOf": [
        {"type": "object", "properties": {"a": {"type": "string"}, "id": {"type": "string"}},
         "required": ["a", "id"]},
        {"type": "object", "properties": {"b": {"type": ["integer", "null"]},
                                          "id": {"type": "string"}}, "required": ["b", "id"]},
    ],
    "properties": {
        "tags": {"type": "array"},
        "tree": {"$ref": "#/$defs/Node"},
        "colour": {"$ref": "#/$defs/Colour"},
        "when": {"anyOf": [{"type": "string", "format": "date"}, {"type": "null"}],
                 "default": None},
        "either": {"type": ["string", "number"]},
        "gone": {"$ref": "#/definitions/Missing", "description": "unknown ref"},
    },
    "required": ["tree", "not-a-property"],
}  # fmt: skip


def offered(tool_name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": tool_name, "parameters": schema}}


def all_problems(tool: dict[str, Any]) -> list[str]:
    function = tool["function"]
    anthropic = sanitize_input_schema_for_anthropic(function["parameters"])
    return [
        *openai_problems(tool),
        *anthropic_problems(function["name"], dict(anthropic)),
        *strict_problems(function["parameters"]),
    ]


def test_the_rules_see_what_the_gateways_refuse() -> None:
    raw = all_problems(offered("srv.tool", NASTY))
    assert "invalid name 'srv.tool'" in raw
    assert "root has anyOf" in raw
    assert ".tags: array schema missing items" in raw
    assert any("$ref" in p for p in raw) and any("$schema" in p for p in raw)
    assert any("a list of types" in p for p in raw) and any("null" in p for p in raw)


def test_a_cleaned_schema_passes_every_gateway_and_keeps_its_meaning() -> None:
    cleaned = clean_schema(NASTY)
    assert all_problems(offered("srv_tool", cleaned)) == []
    properties = cleaned["properties"]
    assert set(properties) == {"a", "b", "id", "tags", "tree", "colour", "when", "either", "gone"}
    assert properties["tags"] == {"type": "array", "items": {}}
    assert properties["when"] == {"type": "string", "format": "date"}
    assert properties["b"] == {"type": "integer"}
    assert properties["colour"] == {"enum": ["red"]}
    assert properties["either"] == {"anyOf": [{"type": "string"}, {"type": "number"}]}
    assert properties["gone"] == {"type": "object", "description": "unknown ref"}
    # The recursive reference is inlined to a bounded depth, then left open.
    depth, node = 0, properties["tree"]
    while "child" in node.get("properties", {}):
        depth, node = depth + 1, node["properties"]["child"]
    assert 1 <= depth <= 8 and node == {"type": "object"}
    # Only what every root alternative requires (and that exists) stays required.
    assert cleaned["required"] == ["tree", "id"]
    assert NASTY["properties"]["tags"] == {"type": "array"}  # the original is untouched


def test_a_schema_that_is_not_an_object_becomes_an_empty_object() -> None:
    for schema in (None, [], "x", {"type": "string"}):
        cleaned = clean_schema(schema)
        assert cleaned["type"] == "object" and cleaned["properties"] == {}
        assert all_problems(offered("t", cleaned)) == []


def test_names_are_valid_unique_and_stable() -> None:
    pairs = [
        ("time", "get.time"),
        ("time", "get_time"),
        ("Time", "GET_TIME"),
        ("my server", "look up!"),
        ("a" * 50, "b" * 50),
        ("a" * 50, "b" * 49 + "c"),
        ("cal", "événement"),
        ("", ""),
    ]
    names = model_names(pairs)
    assert len(set(names.values())) == len(pairs)
    assert all(all_problems(offered(n, {"type": "object", "properties": {}})) == []
               for n in names.values())  # fmt: skip
    assert names[("my server", "look up!")] == "my_server_look_up"
    assert all(len(n) <= MAX_NAME_CHARS for n in names.values())
    # The same pair gets the same name whatever the order or the company it keeps.
    assert model_names(reversed(pairs)) == names
    assert model_names([("my server", "look up!")]) == {("my server", "look up!"):
                                                       "my_server_look_up"}  # fmt: skip


def hub_with(tools: dict[str, list[ListedTool]], servers: dict[str, dict[str, Any]]) -> McpHub:
    """A hub whose connections hold these listings (not started: no process needed)."""
    cfg = config(servers)
    hub = McpHub(cfg, calls=None, environ=dict(BOT_ENV))  # type: ignore[arg-type]
    for server in cfg.servers:
        connection = Connection(server)
        connection.tools = tuple(tools.get(server.name, ()))
        hub.connections[server.name] = connection
    hub._rebuild()
    return hub


def listed(name: str, *, read_only: bool = False, description: str = "does a thing",
           schema: dict[str, Any] | None = None) -> ListedTool:  # fmt: skip
    return ListedTool(name, description, schema or {"type": "object"}, read_only)


def test_descriptions_are_bounded_and_say_when_a_tool_waits_for_the_user() -> None:
    hub = hub_with(
        {"notes": [listed("search", description="word " * 2000), listed("append")]},
        {"notes": {"command": "x", "autoApprove": ["search"]}},
    )
    search, append = hub.tools(admin=False)
    assert search.runs_at_once and not append.runs_at_once  # autoApprove; no read-only hint
    own = search.description.removeprefix("[MCP server notes] ")
    assert len(own) == MAX_DESCRIPTION_CHARS and own.endswith("…")
    assert append.description == (
        "[MCP server notes] does a thing Runs only after the user confirms it with a tap."
    )


def test_the_offer_is_capped_with_a_warning_and_filters_apply() -> None:
    many = [listed(f"t{i:02d}", read_only=True) for i in range(MAX_OFFERED_TOOLS + 5)]
    hub = hub_with(
        {"big": many, "admin": [listed("reboot")]},
        {"admin": {"command": "x", "adminsOnly": True}, "big": {"command": "x",
                                                                "disabledTools": ["t00"]}},
    )  # fmt: skip
    everyone = hub.tools(admin=False)
    admins = hub.tools(admin=True)
    assert [t.name for t in admins][:2] == ["admin_reboot", "big_t01"]
    assert len(admins) == MAX_OFFERED_TOOLS
    assert "admin_reboot" not in [t.name for t in everyone]
    assert "big_t00" not in [t.name for t in admins]  # disabledTools
    [warning] = hub.warnings
    assert warning.startswith(f"{MAX_OFFERED_TOOLS + 4 + 1} MCP tools listed, "
                              f"{MAX_OFFERED_TOOLS} offered; left out: ")  # fmt: skip


def test_a_schema_too_large_even_without_descriptions_is_left_out() -> None:
    wide = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(400)}}
    hub = hub_with({"s": [listed("wide", schema=wide), listed("ok")]}, {"s": {"command": "x"}})
    assert [t.name for t in hub.tools(admin=True)] == ["s_ok"]
    assert hub.warnings == ["s/wide: input schema over 4,000 characters, not offered"]


@pytest.mark.parametrize("server", ["ours"])
async def test_every_tool_a_real_server_lists_is_offered_clean(server: str) -> None:
    """Our MCPServer's own schemas (pydantic's `$defs`, `$ref`, `anyOf` with null) as listed
    over MCP, cleaned and checked by every gateway's rules."""
    connection = Connection(config({server: ours_entry()}).servers[0], environ=dict(BOT_ENV))
    connection.start()
    try:
        await connection.settled()
        raw = {t.name: t.input_schema for t in connection.tools}
    finally:
        await connection.stop()
    assert strict_problems(raw["plan_trip"])  # the server sends what gateways refuse
    hub = hub_with({server: list(connection.tools)}, {server: ours_entry()})
    tools = hub.tools(admin=True)
    assert len(tools) == len(raw) == 10
    for tool in tools:
        assert all_problems(tool.schema()) == [], tool.name
    trip = json.dumps(hub.tool("ours_plan_trip").parameters)  # type: ignore[union-attr]
    assert '"stops": {"items": {' in trip and '"city"' in trip


def test_no_mcp_tool_takes_the_name_of_one_of_the_bots_own() -> None:
    names = model_names([("web", "read"), ("web", "fetch")], reserved=["web_read", "recall"])
    assert names[("web", "fetch")] == "web_fetch"
    assert names[("web", "read")].startswith("web_read_") and names[("web", "read")] != "web_read"
