"""A tool's result as text for the model: text only, bounded, never base64.

Images, audio and binary resources become a one-line note (their bytes would cost tokens and
carry nothing a text model can read); structured content is used when a server sends no text.
The text is cut at MCP_MAX_RESULT_CHARS with a marker saying how much there was, and collecting
stops once the bound is reached, so a 5 MB result costs the loop one pass over its first parts,
not a copy of all of it. Reads the SDK's result by attribute (`content`, `is_error`,
`structured_content`; each part's `type`), so this module loads without the SDK.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

DEFAULT_MAX_RESULT_CHARS = 15_000


@dataclass(frozen=True)
class ResultText:
    """What the model reads of one result."""

    text: str
    is_error: bool
    chars: int  # the whole result's length, before any cut
    cut: bool


def result_text(result: Any, max_chars: int = DEFAULT_MAX_RESULT_CHARS) -> ResultText:
    """The text of an SDK `CallToolResult`, cut at `max_chars`."""
    parts: list[str] = []
    kept = 0
    total = 0
    for index, block in enumerate(getattr(result, "content", None) or []):
        piece = _block_text(block)
        total += len(piece) + (1 if index else 0)  # parts are joined by a newline
        if kept < max_chars:
            parts.append(piece[: max_chars - kept])
            kept += len(parts[-1]) + 1
    structured = getattr(result, "structured_content", None)
    if not parts and structured is not None:
        piece = _json(structured)
        total = len(piece)
        parts.append(piece[:max_chars])
    text = "\n".join(parts)[:max_chars]
    cut = total > max_chars
    if cut:
        text = (
            f"{text}\n[… cut: the result has {total:,} characters, the first {max_chars:,} "
            "are shown]"
        )
    if not text.strip():
        text = "(the tool returned nothing)"
    return ResultText(text=text, is_error=bool(getattr(result, "is_error", False)), chars=total,
                      cut=cut)  # fmt: skip


def _block_text(block: Any) -> str:
    kind = getattr(block, "type", None)
    if kind == "text":
        return str(getattr(block, "text", ""))
    if kind in ("image", "audio"):
        size = _decoded_size(getattr(block, "data", "") or "")
        mime = getattr(block, "mime_type", None) or kind
        return f"[{kind} ({mime}, about {size:,} bytes): not shown, text only]"
    if kind == "resource_link":
        name = getattr(block, "name", None) or ""
        return f"[resource link {name}: {getattr(block, 'uri', '')}]".replace("  ", " ")
    if kind == "resource":
        resource = getattr(block, "resource", None)
        uri = getattr(resource, "uri", "")
        text = getattr(resource, "text", None)
        if isinstance(text, str):
            return f"[resource {uri}]\n{text}"
        blob = getattr(resource, "blob", "") or ""
        mime = getattr(resource, "mime_type", None) or "binary"
        return f"[resource {uri} ({mime}, about {_decoded_size(blob):,} bytes): not shown]"
    return f"[{kind or 'unknown'} content: not shown]"


def _decoded_size(data: str) -> int:
    """Bytes of a base64 string, without decoding it."""
    return len(data) * 3 // 4


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)
