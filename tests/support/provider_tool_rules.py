"""What each gateway refuses in a function tool, as checks: the tests run every offered MCP tool
through them (tests/mcp_client/test_mcp_offer.py), and the fake providers answer a request
that breaks them with the provider's 400 (tests/fakes/providers.py), as the real ones do.

- OpenAI and Groq (one API shape): the name matches `^[a-zA-Z0-9_-]{1,64}$`; `parameters` is an
  object schema at the root with no `anyOf`/`oneOf`/`allOf`/`enum`/`not` there; every array
  schema has `items` ("array schema missing items").
- Anthropic (after litellm's own conversion to `input_schema`): the same name rule;
  `input_schema.type` is "object" and the root has no `oneOf`/`anyOf`/`allOf`.
- Gemini-style gateways behind an OpenAI-compatible API: no `$ref`/`$defs`/`$schema`, no list
  of types, no `const`, no `null` alternative. The cleaned schema satisfies these too, so the
  same offer serves every gateway.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
ROOT_COMBINERS = ("anyOf", "oneOf", "allOf")


def _nodes(schema: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(schema, dict):
        yield path or "(root)", schema
        for key, value in schema.items():
            if key == "properties" and isinstance(value, dict):
                for name, sub in value.items():
                    yield from _nodes(sub, f"{path}.{name}")
            elif isinstance(value, dict | list):
                yield from _nodes(value, f"{path}/{key}")
    elif isinstance(schema, list):
        for index, item in enumerate(schema):
            yield from _nodes(item, f"{path}[{index}]")


def openai_problems(tool: dict[str, Any]) -> list[str]:
    """Why OpenAI (or Groq) would answer 400 to this tool, if it would."""
    function = tool.get("function") or {}
    problems = []
    if not NAME.match(str(function.get("name", ""))):
        problems.append(f"invalid name {function.get('name')!r}")
    parameters = function.get("parameters")
    if not isinstance(parameters, dict) or parameters.get("type") != "object":
        problems.append("parameters must be a JSON Schema of type 'object'")
        return problems
    problems.extend(f"root has {k}" for k in (*ROOT_COMBINERS, "enum", "not") if k in parameters)
    for where, node in _nodes(parameters):
        if node.get("type") == "array" and "items" not in node:
            problems.append(f"{where}: array schema missing items")
    return problems


def anthropic_problems(name: str, input_schema: dict[str, Any]) -> list[str]:
    """Why Anthropic would answer 400 to this tool (as litellm sends it), if it would."""
    problems = []
    if not NAME.match(name):
        problems.append(f"invalid name {name!r}")
    if input_schema.get("type") != "object":
        problems.append("input_schema.type must be 'object'")
    problems.extend(
        f"input_schema does not support {k} at the top level"
        for k in ROOT_COMBINERS
        if k in input_schema
    )
    return problems


def strict_problems(schema: dict[str, Any]) -> list[str]:
    """What a Gemini-style gateway refuses anywhere in a schema."""
    problems = []
    for where, node in _nodes(schema):
        for key in ("$ref", "$defs", "definitions", "$schema", "const"):
            if key in node:
                problems.append(f"{where}: {key}")
        if isinstance(node.get("type"), list):
            problems.append(f"{where}: a list of types")
        if node.get("type") == "null":
            problems.append(f"{where}: a null alternative")
    return problems
