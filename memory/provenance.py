"""Where a stored message's words came from, when they are not the user's own.

What is untrusted is decided once, when the message is stored, and kept with it as data (the
`provenance` column of `messages` and `archived_messages`): a web page or search results, a
document, an audio file, a photo, a forwarded message, a quote of someone else, an MCP tool's
result, or a recall result that brought any of these back. No reader parses a label back out of
the text. NULL is the user's own words (a typed message, a voice note) or the bot's own.

From that one value come the three things that must agree: whether a turn holds its writes
(agent/untrusted.py), the one-line stub the memory writer sees instead of the text (`stub`), and
how recall names such a hit to the chat model (`label`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

WEB_SEARCH = "web_search"
WEB_READ = "web_read"
DOCUMENT = "document"
AUDIO = "audio"
PHOTO = "photo"
FORWARD = "forward"
QUOTE = "quote"
MCP = "mcp"
RECALL = "recall"
# The answer of a scheduled task's run that read any of the above (its pages are not kept).
TASK = "task"
KINDS = frozenset({WEB_SEARCH, WEB_READ, DOCUMENT, AUDIO, PHOTO, FORWARD, QUOTE, MCP, RECALL, TASK})

# A source is a name chosen by someone else (a file name, a forward's origin, a host): one line,
# bounded, so a stub stays one short line whatever it names.
MAX_SOURCE_CHARS = 80
_PUNCTUATION = str.maketrans({"[": "(", "]": ")", "<": "(", ">": ")", '"': "'"})


def one_line_source(text: str) -> str:
    """`text` as a stub may name it: one line, no brackets, angle brackets or double quotes
    (the stub's own punctuation, and no tag of any kind), at most MAX_SOURCE_CHARS."""
    line = " ".join(text.split()).translate(_PUNCTUATION)
    if len(line) > MAX_SOURCE_CHARS:
        line = line[: MAX_SOURCE_CHARS - 1] + "…"
    return line or "unknown"


@dataclass(frozen=True)
class Provenance:
    """One untrusted part: its `kind` (KINDS), its `source` (one line: a host, a file name, a
    forward's origin, a tool's name), how long its text is (`chars`, when that says something),
    and the user's own words that came with it (`own`: a caption, the reply to a quote), which
    the memory writer is shown, as the user's."""

    kind: str
    source: str
    chars: int | None = None
    own: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown provenance kind {self.kind!r}")

    def to_json(self) -> str:
        record: dict[str, object] = {"kind": self.kind, "source": self.source}
        if self.chars is not None:
            record["chars"] = self.chars
        if self.own:
            record["own"] = self.own
        return json.dumps(record, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str | None) -> Provenance | None:
        """The stored value; None for NULL. A value this code cannot read is still untrusted:
        it is never taken for the user's words."""
        if not text:
            return None
        try:
            record = json.loads(text)
        except json.JSONDecodeError:
            record = None
        if not isinstance(record, dict) or record.get("kind") not in KINDS:
            return cls(MCP, "unreadable provenance")
        chars = record.get("chars")
        own = record.get("own")
        return cls(
            str(record["kind"]),
            str(record.get("source") or "unknown"),
            chars if isinstance(chars, int) and not isinstance(chars, bool) else None,
            own if isinstance(own, str) and own.strip() else None,
        )


def stored(provenance: Provenance | None) -> str | None:
    """The column's value."""
    return provenance.to_json() if provenance is not None else None


# Per kind: the stub the memory writer reads instead of the text, and the words that name such
# a part to the chat model. Filled in with `source` (one line), `size` ("4,120 characters, " or
# nothing) and `named` (a photo's file name, quoted, when it has one).
_WORDS: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        WEB_READ: ("[web_read of {source}: {size}not shown]", "a web page ({source}) the bot read"),
        WEB_SEARCH: (
            "[web_search results from {source}: {size}not shown]",
            "web search results the bot read",
        ),
        DOCUMENT: (
            '[document "{source}" from the user: {size}not shown]',
            'a document the user sent ("{source}")',
        ),
        AUDIO: (
            '[audio file "{source}" from the user, transcribed: {size}not shown]',
            'an audio file the user sent ("{source}"), transcribed',
        ),
        PHOTO: ("[photo{named} from the user: not shown]", "a photo the user sent"),
        FORWARD: (
            "[forwarded message written by {source}: {size}not shown]",
            "a message by {source} that the user forwarded",
        ),
        QUOTE: (
            "[quoted message written by {source}: {size}not shown]",
            "a message by {source} that the user quoted",
        ),
        MCP: ("[result of {source} (MCP): {size}not shown]", "a result of the tool {source}"),
        TASK: (
            "[answer of the scheduled task '{source}', from untrusted content: {size}not shown]",
            "your answer to the scheduled task '{source}', from words not the user's",
        ),
        RECALL: (
            "[recall result holding {source}: {size}not shown]",
            "an earlier recall result holding {source}",
        ),
    }
)


def _words(provenance: Provenance, which: int) -> str:
    source = one_line_source(provenance.source)
    size = f"{provenance.chars:,} characters, " if provenance.chars is not None else ""
    named = f' "{source}"' if provenance.kind == PHOTO and source != PHOTO else ""
    return _WORDS[provenance.kind][which].format(source=source, size=size, named=named)


def stub(provenance: Provenance) -> str:
    """The one line the memory writer reads instead of the part's text, e.g.
    `[web_read of news.example.org: 4,120 characters, not shown]`. Names the kind and the
    source, never a word of the text."""
    return _words(provenance, 0)


def label(provenance: Provenance) -> str:
    """What such a part is, in words for the chat model (a recall hit is introduced by it)."""
    return _words(provenance, 1)


def tool_provenance(tool: str, content: str, source: str | None = None) -> Provenance:
    """A tool result's provenance: web tools by their own kind, any other tool that returned
    untrusted content as an MCP result named by the tool."""
    kind = tool if tool in (WEB_READ, WEB_SEARCH) else MCP
    return Provenance(kind, source or tool, chars=len(content))
