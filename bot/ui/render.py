"""Model markdown → Telegram messages: HTML rendering, UTF-16 lengths, safe splitting.

Telegram counts a message's length in UTF-16 code units of the text *after* entity parsing,
and rejects HTML outside its small subset. Models write loose markdown. This module turns one
into the other with a maintained converter (chatgpt-md-converter) and splits long answers into
pieces that each fit, on the boundaries a reader would choose: paragraphs, then lines, then
(only for one over-long line) characters — never inside a grapheme, and never leaving a code
fence open: an over-long code block is closed and reopened with the same language tag.

Nothing here knows about `telegram` types; `bot/ui/streaming.py` does the sending.
"""

from __future__ import annotations

import html
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

from chatgpt_md_converter import telegram_format

from models.streamtext import MAX_CLUSTER_CODEPOINTS

TELEGRAM_TEXT_LIMIT = 4096

# Telegram does not limit the raw HTML of a message, only the parsed text; we still refuse
# pieces whose markup balloons (e.g. thousands of "<" escaped to "&lt;") past this factor, so a
# request never grows absurd.
HTML_SIZE_FACTOR = 3

_FENCE_RE = re.compile(r"^ {0,3}(?P<fence>`{3,})(?P<info>[^`\n]*)$")
_LINK_RE = re.compile(r'<a href="(?P<url>[^"]*)">(?P<label>.*?)</a>', re.DOTALL)
_TAG_RE = re.compile(r"<[^>]*>")


def utf16_len(text: str) -> int:
    """Length as Telegram counts it: characters outside the BMP (most emoji) count twice."""
    return len(text.encode("utf-16-le")) // 2


def render_html(markdown: str) -> str:
    """Telegram HTML for a model's markdown (bold, italics, code, links, quotes, spoilers)."""
    return telegram_format(markdown)


def html_to_plain(rendered: str) -> str:
    """The text a reader sees for `rendered`, keeping link targets as "label (url)"."""

    def _link(match: re.Match[str]) -> str:
        label, url = match.group("label"), match.group("url")
        return label if _TAG_RE.sub("", label) == url else f"{label} ({url})"

    text = _TAG_RE.sub("", _LINK_RE.sub(_link, rendered))
    return html.unescape(text).strip()


def plain_text(markdown: str) -> str:
    """Plain-text fallback for a piece whose HTML Telegram refused: formatting goes, words stay.

    Built from the rendered HTML so that it reads like the formatted version (no `**`, no
    fences); if the converter itself fails, the markdown is returned as is.
    """
    try:
        return html_to_plain(render_html(markdown))
    except Exception:
        return markdown.strip()


@dataclass(frozen=True)
class Measure:
    """How big a markdown piece is once rendered, in the units Telegram enforces."""

    visible: int  # UTF-16 units of the plain-text fallback (≥ the parsed HTML text)
    html: int  # UTF-16 units of the raw HTML

    def fits(self, limit: int) -> bool:
        return self.visible <= limit and self.html <= limit * HTML_SIZE_FACTOR


def measure(markdown: str) -> Measure:
    rendered = render_html(markdown)
    return Measure(visible=utf16_len(html_to_plain(rendered)), html=utf16_len(rendered))


def split_for_telegram(markdown: str, limit: int = TELEGRAM_TEXT_LIMIT) -> list[str]:
    """Markdown pieces that each render to at most `limit` UTF-16 units, in reading order.

    Whitespace at the cut points may be dropped (Telegram trims it anyway); every other
    character is kept, in order. Pieces never end inside a fenced code block.
    """
    if limit < 64:
        raise ValueError("limit too small to hold a code fence and some text")
    if not markdown.strip():
        return []

    def fits(piece: str) -> bool:
        return measure(piece).fits(limit)

    pieces: list[str] = []
    current = ""
    for block in _blocks(markdown):
        if fits(current + block.text):
            current += block.text
            continue
        if current.strip():
            pieces.append(current)
        current = ""
        if fits(block.text):
            current = block.text
            continue
        parts = _split_code(block, fits) if block.fence else _split_lines(block.text, fits)
        pieces.extend(parts[:-1])
        current = parts[-1]
    if current.strip():
        pieces.append(current)
    return [piece.strip("\n") for piece in pieces if piece.strip()]


def split_plain(text: str, limit: int = TELEGRAM_TEXT_LIMIT) -> list[str]:
    """Plain-text pieces of at most `limit` UTF-16 units (what Telegram counts), for replies
    sent without formatting. The same line packing and grapheme-safe cuts as the markdown
    splitter, measured on the text itself (no markup to render away)."""
    if limit < 64:
        raise ValueError("limit too small")
    if not text.strip():
        return []
    parts = _split_lines(text, lambda piece: utf16_len(piece) <= limit)
    return [part.strip("\n") for part in parts if part.strip()]


# --------------------------------------------------------------------------------------------
# Blocks: paragraphs (with their trailing blank lines) and fenced code blocks
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Block:
    text: str
    fence: str | None = None  # the opening fence line (e.g. "```python\n") of a code block
    closed: bool = True


def _blocks(markdown: str) -> list[_Block]:
    """Cut markdown into paragraphs and code blocks; "".join(b.text for b in ...) == input."""
    blocks: list[_Block] = []
    lines = markdown.splitlines(keepends=True)
    paragraph: list[str] = []

    def flush_paragraph() -> None:
        if paragraph:
            blocks.append(_Block("".join(paragraph)))
            paragraph.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        opening = _FENCE_RE.match(line.rstrip("\r\n"))
        if opening is None:
            if not line.strip() and paragraph and paragraph[-1].strip():
                paragraph.append(line)
                # A paragraph keeps the blank lines that follow it.
                while i + 1 < len(lines) and not lines[i + 1].strip():
                    i += 1
                    paragraph.append(lines[i])
                flush_paragraph()
            else:
                paragraph.append(line)
            i += 1
            continue
        flush_paragraph()
        fence = opening.group("fence")
        code = [line]
        i += 1
        closed = False
        while i < len(lines):
            code.append(lines[i])
            i += 1
            stripped = lines[i - 1].strip()
            if stripped.startswith(fence) and not stripped.strip("`"):
                closed = True
                break
        while i < len(lines) and not lines[i].strip():
            code.append(lines[i])
            i += 1
        blocks.append(
            _Block("".join(code), fence=line if line.endswith("\n") else line + "\n", closed=closed)
        )
    flush_paragraph()
    return blocks


# --------------------------------------------------------------------------------------------
# Splitting one block that is too long on its own
# --------------------------------------------------------------------------------------------


def _split_lines(text: str, fits: Callable[[str], bool]) -> list[str]:
    """Greedy line packing; a single over-long line is cut at grapheme boundaries."""
    parts: list[str] = []
    current = ""
    for line in text.splitlines(keepends=True):
        if fits(current + line):
            current += line
            continue
        if current.strip():
            parts.append(current)
        current = ""
        if fits(line):
            current = line
            continue
        remainder = line
        cut = 64
        while remainder:
            cut = _longest_fitting_prefix(remainder, fits, start=cut)
            if cut >= len(remainder):
                break
            parts.append(remainder[:cut])
            remainder = remainder[cut:]
        current = remainder
    parts.append(current)
    return parts


def _split_code(block: _Block, fits: Callable[[str], bool]) -> list[str]:
    """Split a code block into several closed fences with the same opening line."""
    assert block.fence is not None
    fence_line = block.fence
    fence = _FENCE_RE.match(fence_line.rstrip("\r\n"))
    assert fence is not None
    closing = fence.group("fence")
    body_lines = block.text.splitlines(keepends=True)[1:]
    trailing = ""
    if block.closed:
        # Everything from the closing fence on (the fence line and blank lines after it).
        for index in range(len(body_lines) - 1, -1, -1):
            stripped = body_lines[index].strip()
            if stripped.startswith(closing) and not stripped.strip("`"):
                trailing = "".join(body_lines[index:])
                body_lines = body_lines[:index]
                break
    else:
        trailing = "\n" + closing + "\n"

    def wrap(body: str) -> str:
        if body and not body.endswith("\n"):
            body += "\n"
        return f"{fence_line}{body}{closing}\n"

    def body_fits(body: str) -> bool:
        return fits(wrap(body))

    chunks = _split_lines("".join(body_lines), body_fits)
    parts = [wrap(chunk) for chunk in chunks[:-1] if chunk]
    last = chunks[-1]
    if not last.strip():
        parts.append("")  # nothing left to show: the caller continues with an empty piece
        return parts
    if block.closed:
        tail = fence_line + last + trailing
        if last and not last.endswith("\n"):
            tail = fence_line + last + "\n" + trailing
    else:
        tail = wrap(last)
    parts.append(tail)
    return parts


def _longest_fitting_prefix(line: str, fits: Callable[[str], bool], start: int = 64) -> int:
    """Index at which to cut `line`: the longest prefix that fits, moved back to a grapheme
    boundary, and back to a space when one is near (so words survive whole)."""
    # Start from the hint (the previous cut), halve until it fits, gallop up until it does
    # not, then bisect: each render stays near the limit's size even for a huge line.
    low = max(1, min(len(line), start))
    while low > 1 and not fits(line[:low]):
        low //= 2
    if low == len(line):
        return low
    high = min(len(line), low * 2)
    while fits(line[:high]):
        low = high
        if high == len(line):
            return high
        high = min(len(line), high * 2)
    high -= 1  # line[:high + 1] does not fit
    while low < high:
        middle = (low + high + 1) // 2
        if fits(line[:middle]):
            low = middle
        else:
            high = middle - 1
    # Back to a grapheme boundary, looking at most MAX_CLUSTER_CODEPOINTS back: past that the
    # "cluster" is zalgo, cut where it fills the piece (a walk back to 1 made ~1900 one-character
    # pieces, 22 s of rendering, for "a" + 6000 U+0301).
    lowest = max(1, low - MAX_CLUSTER_CODEPOINTS)
    cut = low
    while cut > lowest and not is_grapheme_boundary(line, cut):
        cut -= 1
    if not is_grapheme_boundary(line, cut):
        cut = low
    space = line.rfind(" ", 0, cut)
    if space > cut * 3 // 4:
        cut = space + 1
    return max(cut, 1)


_ZWJ = "\u200d"


def is_grapheme_boundary(text: str, index: int) -> bool:
    """Whether a cut between text[index-1] and text[index] keeps grapheme clusters whole.

    An approximation of UAX #29 that covers what models produce: combining marks, ZWJ emoji
    sequences, skin-tone modifiers, variation selectors, keycaps, tag sequences (flags of
    regions), regional-indicator pairs (country flags), Hangul syllable parts and CR LF.
    """
    if index <= 0 or index >= len(text):
        return True
    before, after = text[index - 1], text[index]
    if before == "\r" and after == "\n":
        return False
    if before == _ZWJ or after == _ZWJ:
        return False
    code = ord(after)
    if (
        unicodedata.category(after) in ("Mn", "Me", "Mc")
        or 0xFE00 <= code <= 0xFE0F  # variation selectors
        or 0x1F3FB <= code <= 0x1F3FF  # skin tones
        or 0xE0020 <= code <= 0xE007F  # tag characters
        or 0xE0100 <= code <= 0xE01EF  # variation selectors supplement
        or code == 0x20E3  # combining enclosing keycap
    ):
        return False
    if _is_hangul_continuation(before, after):
        return False
    if _is_regional_indicator(before) and _is_regional_indicator(after):
        # Flags pair regional indicators from the start of the run: cut only between pairs.
        run = 0
        j = index - 1
        while j >= 0 and _is_regional_indicator(text[j]):
            run += 1
            j -= 1
        return run % 2 == 0
    return True


def _is_regional_indicator(char: str) -> bool:
    return 0x1F1E6 <= ord(char) <= 0x1F1FF


def _is_hangul_continuation(before: str, after: str) -> bool:
    b, a = ord(before), ord(after)
    leading = 0x1100 <= b <= 0x115F or 0xA960 <= b <= 0xA97C
    syllable = 0xAC00 <= b <= 0xD7A3
    vowel_or_trailing = 0x1160 <= a <= 0x11FF or 0xD7B0 <= a <= 0xD7FF
    return (leading and (0x1100 <= a <= 0x11FF or 0xAC00 <= a <= 0xD7A3)) or (
        (syllable or 0x1160 <= b <= 0x11FF) and vowel_or_trailing
    )
