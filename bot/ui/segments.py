"""Plain text cut into pieces that fit one Telegram message, the same way as the text grows.

The streamed reply (bot/ui/streaming.py) shows its text in these pieces while the model writes:
a piece that is full never changes, so a message (or a draft) that has been filled stays as it
is while later text goes to the next one.
"""

from __future__ import annotations

from bot.ui.render import is_grapheme_boundary, utf16_len
from models.streamtext import MAX_CLUSTER_CODEPOINTS


def plain_segments(text: str, limit: int) -> list[str]:
    """Cut plain text into consecutive pieces of at most `limit` UTF-16 units.

    Cuts at the last newline in the window, else the last space, else a grapheme boundary.
    Greedy and deterministic, so a segment that is full stays the same as the text grows: a
    message that has been filled never changes its first part.
    """
    segments: list[str] = []
    start = 0
    while start < len(text):
        end = _window_end(text, start, limit)
        if end >= len(text):
            segments.append(text[start:])
            break
        cut = text.rfind("\n", start, end)
        if cut <= start + (end - start) // 2:
            space = text.rfind(" ", start, end)
            cut = space if space > start + (end - start) // 2 else -1
        if cut > start:
            cut += 1  # keep the newline or space with the first segment
        else:
            cut = _grapheme_cut(text, end, floor=start + 1)
        segments.append(text[start:cut])
        start = cut
    return segments


def _grapheme_cut(text: str, end: int, *, floor: int) -> int:
    """The last grapheme boundary at or before `end`, looked for at most
    MAX_CLUSTER_CODEPOINTS back (and not below `floor`); `end` itself when there is none that
    near: an overlong "cluster" (zalgo) is cut, so each window costs O(1), not O(limit), and an
    answer of "a" + 6000 U+0301 makes 2 messages instead of ~1900 one-character ones."""
    lowest = max(floor, end - MAX_CLUSTER_CODEPOINTS)
    cut = end
    while cut > lowest and not is_grapheme_boundary(text, cut):
        cut -= 1
    return cut if is_grapheme_boundary(text, cut) else end


def _window_end(text: str, start: int, limit: int) -> int:
    """The largest index such that text[start:index] is at most `limit` UTF-16 units."""
    chunk = text[start : start + limit]
    if utf16_len(chunk) <= limit:  # no astral characters to count twice: the common case
        return start + len(chunk)
    units = 0
    index = start
    while index < len(text):
        units += 2 if ord(text[index]) > 0xFFFF else 1
        if units > limit:
            return index
        index += 1
    return index
