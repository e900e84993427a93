"""Frames for data inside a prompt, which the data itself cannot close: two mechanisms, one
rule (the boundary is drawn after the text exists, so the text cannot contain it).

Nonce frames (`Framing`). Every block a prompt holds as data — the long-term memory, tool
results, the consolidation's current memory and transcript, a document's text — sits between
tags whose names carry a random nonce drawn for that prompt (`<transcript_3f9c…>`). Text
written before the nonce existed cannot contain the closing tag, and any occurrence of the nonce
inside the data is removed before framing, so nothing inside a frame can close it, whatever its
case, nesting or spelling.

Marker lines (`marker_frame`). A quote or a forwarded message, as the prompt shows it, sits
between two lines carrying a token chosen after the texts exist and checked to occur in none of
them, like a MIME boundary: the framed text cannot end the frame early or fake another.
"""

from __future__ import annotations

import hashlib
import html
import itertools
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Framing:
    """Per-turn delimiters user text cannot forge (see the module docstring)."""

    nonce: str = field(default_factory=lambda: secrets.token_hex(8))

    def tag(self, name: str) -> str:
        return f"{name}_{self.nonce}"

    def defuse(self, text: str) -> str:
        """Remove every occurrence of the nonce (in any case), until none is left."""
        pattern = re.compile(re.escape(self.nonce), re.IGNORECASE)
        while pattern.search(text):
            text = pattern.sub("", text)
        return text

    def wrap(self, name: str, text: str) -> str:
        tag = self.tag(name)
        return f"<{tag}>\n{self.defuse(text)}\n</{tag}>"

    def marks(self, prefix: str, key: object) -> Callable[[], str]:
        """Marks for `marker_frame`, named like `mark_token`'s but drawn from this frame's nonce
        and `key` (a message's id): the same message framed again in a later round of the turn
        reads the same, and no one who has not seen the nonce can tell its marks in advance."""
        counter = itertools.count()

        def token() -> str:
            seed = f"{self.nonce}:{prefix}:{key}:{next(counter)}".encode()
            return f"{prefix}-{hashlib.sha256(seed).hexdigest()[:12]}"

        return token

    def attribute(self, value: str) -> str:
        """A value for a tag attribute (a file name): one line, the nonce removed, quotes and
        angle brackets escaped, so it can end neither the attribute nor the tag."""
        one_line = " ".join(self.defuse(value).split())
        return html.escape(one_line, quote=True)


def fresh_mark(token: Callable[[], str], *framed: str) -> str:
    """A marker from `token` that occurs in none of `framed`: the frame's closing line can then
    not be forged by the text inside it."""
    mark = token()
    while any(mark in text for text in framed):
        mark = token()
    return mark


def mark_token(prefix: str) -> Callable[[], str]:
    """Random marks named for what they frame (`quote-3f9c…`), so a reader of the stored text
    sees which frame a line closes."""
    return lambda: f"{prefix}-{secrets.token_hex(6)}"


def marker_frame(
    intro: Callable[[str], str],
    framed: str,
    *,
    token: Callable[[], str],
    also: tuple[str, ...] = (),
    after: str | None = None,
) -> str:
    """`intro(mark)`, then `framed` between two lines that read a fresh mark, then `after` (the
    user's own words that follow, if any). The mark occurs in none of `framed`, `after` and
    `also` (other text the intro shows, such as a name)."""
    mark = fresh_mark(token, framed, *also, *(() if after is None else (after,)))
    framed_part = f"{intro(mark)}\n{mark}\n{framed}\n{mark}"
    return framed_part if after is None else f"{framed_part}\n{after}"
