"""A tool's input schema made acceptable to every gateway we send it through.

Servers write what their framework emits (pydantic's `$defs` and `anyOf: [X, null]`, a
`$schema` line, a bare `{"type": "array"}`), and each provider refuses some of it: OpenAI and
Groq want an object at the root and `items` on every array, Anthropic refuses a root `anyOf`,
Gemini-style gateways refuse `$ref`, type lists and `const`. One schema that satisfies all of
them is offered everywhere: references inlined (a recursive one becomes an open object at a
bounded depth), `$schema`/`$id`/`$comment` dropped, `null` alternatives collapsed (an optional
argument is simply not required), `const` made a one-value `enum`, the root an object.

Descriptions inside are bounded, and a schema still too large after that is refused by the
caller (mcp_client/tools.py): every offered byte is sent with every round of every turn.
"""

from __future__ import annotations

import json
from typing import Any

MAX_INLINE_DEPTH = 8
MAX_PROPERTY_DESCRIPTION_CHARS = 200
_DROPPED = frozenset({"$schema", "$id", "$comment", "$defs", "definitions", "$anchor"})
_COMBINERS = ("anyOf", "oneOf")


def clean_schema(schema: object) -> dict[str, Any]:
    """The cleaned copy of `schema` (the original is left as it is)."""
    if not isinstance(schema, dict):
        return {"type": "object", "properties": {}}
    definitions: dict[str, Any] = {}
    for key in ("$defs", "definitions"):
        if isinstance(schema.get(key), dict):
            definitions.update({f"#/{key}/{k}": v for k, v in schema[key].items()})
    cleaned = _clean(schema, definitions, ())
    return _object_root(cleaned)


def schema_chars(schema: dict[str, Any]) -> int:
    """How large the schema is as sent (compact JSON)."""
    return len(json.dumps(schema, separators=(",", ":"), ensure_ascii=False))


def without_descriptions(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with the descriptions of its parts removed (the tool's own stays): the
    fallback for a schema past the size bound."""

    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items() if k not in ("description", "examples")}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    return strip(schema)


def _clean(node: Any, definitions: dict[str, Any], trail: tuple[str, ...]) -> Any:
    if isinstance(node, list):
        return [_clean(item, definitions, trail) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        target = definitions.get(ref)
        if target is None or ref in trail or len(trail) >= MAX_INLINE_DEPTH:
            # Unknown, recursive or too deep: an open object the model may fill as it likes.
            open_node: dict[str, Any] = {"type": "object"}
            if isinstance(node.get("description"), str):
                open_node["description"] = _bounded(node["description"])
            return open_node
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        merged = {**target, **siblings}
        return _clean(merged, definitions, (*trail, ref))
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED:
            continue
        if key == "properties" and isinstance(value, dict):
            out[key] = {name: _clean(sub, definitions, trail) for name, sub in value.items()}
        elif key == "description" and isinstance(value, str):
            out[key] = _bounded(value)
        elif key == "const":
            out["enum"] = [value]
        else:
            out[key] = _clean(value, definitions, trail)
    out = _collapse_null(out)
    if out.get("type") == "array" and "items" not in out:
        out["items"] = {}
    if isinstance(out.get("required"), list) and isinstance(out.get("properties"), dict):
        out["required"] = [r for r in out["required"] if r in out["properties"]]
        if not out["required"]:
            del out["required"]
    return out


def _collapse_null(node: dict[str, Any]) -> dict[str, Any]:
    """`anyOf: [X, {"type": "null"}]` → X; `type: ["string", "null"]` → "string"."""
    kind = node.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        if len(kinds) == 1:
            node = {**node, "type": kinds[0]}
        elif not kinds:
            node = {k: v for k, v in node.items() if k != "type"}
        else:
            # Several real types: one of them each, which every gateway reads.
            rest = {k: v for k, v in node.items() if k != "type"}
            node = {"anyOf": [{"type": k} for k in kinds], **rest}
    for combiner in _COMBINERS:
        options = node.get(combiner)
        if not isinstance(options, list):
            continue
        real = [o for o in options if not (isinstance(o, dict) and o.get("type") == "null")]
        if len(real) == len(options):
            continue
        rest = {k: v for k, v in node.items() if k != combiner}
        if len(real) == 1 and isinstance(real[0], dict):
            node = {**real[0], **rest}
        elif real:
            node = {**rest, combiner: real}
        else:
            node = rest
    if node.get("default", ...) is None:
        node = {k: v for k, v in node.items() if k != "default"}
    return node


def _object_root(schema: dict[str, Any]) -> dict[str, Any]:
    """The root as every gateway wants it: `type: object` with `properties`, no combiner."""
    root = dict(schema)
    alternatives = [
        option
        for key in ("anyOf", "oneOf", "allOf")
        for option in (root.pop(key, None) or [])
        if isinstance(option, dict)
    ]
    if alternatives:
        # A root union (or intersection) of objects becomes one object with every property;
        # only what every alternative requires stays required.
        properties = dict(root.get("properties") or {})
        required_sets = []
        for option in alternatives:
            properties.update(option.get("properties") or {})
            required_sets.append(set(option.get("required") or []))
        root["properties"] = properties
        common = set.intersection(*required_sets) if required_sets else set()
        required = [*(root.get("required") or []), *sorted(common)]
        if required:
            root["required"] = list(dict.fromkeys(required))
    for key in ("not", "if", "then", "else", "enum"):
        root.pop(key, None)
    root["type"] = "object"
    if not isinstance(root.get("properties"), dict):
        root["properties"] = {}
    return root


def _bounded(text: str) -> str:
    text = " ".join(text.split())
    if len(text) <= MAX_PROPERTY_DESCRIPTION_CHARS:
        return text
    return text[: MAX_PROPERTY_DESCRIPTION_CHARS - 1].rstrip() + "…"
