"""The names the model sees: `<server>_<tool>`, reduced to `[A-Za-z0-9_-]`, at most 64 characters,
unique across every server (the rule OpenAI, Groq and Anthropic all enforce on a tool's name).

A name depends only on its server and tool and on which others reduce to the same text, so it
stays the same across restarts: a name the model used two turns ago still finds its tool.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Iterable

MAX_NAME_CHARS = 64
_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_-]+")
_SUFFIX_CHARS = 7  # "_" and six hex digits


def reduce_name(server: str, tool: str) -> str:
    """`<server>_<tool>` with every run of other characters made one underscore."""
    joined = f"{_NOT_ALLOWED.sub('_', server).strip('_') or 'mcp'}_{_NOT_ALLOWED.sub('_', tool)}"
    return joined.strip("_") or "mcp_tool"


def _suffix(server: str, tool: str) -> str:
    digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()
    return f"_{digest[: _SUFFIX_CHARS - 1]}"


def model_names(
    pairs: Iterable[tuple[str, str]], reserved: Iterable[str] = ()
) -> dict[tuple[str, str], str]:
    """(server, tool) → the name offered. Names that would be cut, would collide with each
    other or would take a `reserved` name (the bot's own tools: `web_read` of a server named
    "web") get a short hash of their (server, tool) pair, so they differ and stay stable."""
    taken = {name.lower() for name in reserved}
    unique = list(dict.fromkeys(pairs))
    groups: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for pair in unique:
        groups[reduce_name(*pair).lower()].append(pair)
    names: dict[tuple[str, str], str] = {}
    for members in groups.values():
        for pair in members:
            base = reduce_name(*pair)
            if len(members) == 1 and len(base) <= MAX_NAME_CHARS and base.lower() not in taken:
                names[pair] = base
            else:
                names[pair] = base[: MAX_NAME_CHARS - _SUFFIX_CHARS] + _suffix(*pair)
    return names
