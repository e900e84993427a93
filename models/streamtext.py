"""Whole characters out of a stream of text pieces.

Providers cut streamed text wherever their tokenizer likes: between a high and a low surrogate
(JSON `\\ud83d` then `\\ude00`), between an emoji and its skin tone, or in the middle of a ZWJ
family. A piece that ends there and is shown on its own (a Telegram edit) renders as garbage or
is refused. `WholeCharacters` therefore always holds back the last grapheme cluster of what it
has seen, because the next piece may still extend it, and releases it at the end.

The cluster rules are a deliberately small subset of UAX #29 that covers what models emit:
combining marks, variation selectors, emoji modifiers, tags, keycaps, ZWJ sequences and
regional-indicator pairs (flags).
"""

from __future__ import annotations

import unicodedata

ZWJ = "\u200d"
_REPLACEMENT = "\ufffd"

# The longest "grapheme cluster" any cut of ours keeps whole, in code points. Real ones are far
# shorter (the longest emoji ZWJ sequence in Unicode's emoji-test.txt has 10); past this a
# "cluster" is zalgo or a built ZWJ chain ("a" + 6000 U+0301), and keeping it whole made every
# cut walk back over all of it: O(n²) CPU on the event loop for a text the user can ask a model
# to repeat. Splitting such a run is harmless (Telegram accepts any cut between code points).
# Shared by the stream's hold-back here and the message splitters in bot/ui.
MAX_CLUSTER_CODEPOINTS = 32


def _is_extender(ch: str) -> bool:
    """Code points that attach to the character before them."""
    cp = ord(ch)
    if ch == ZWJ or 0xFE00 <= cp <= 0xFE0F or 0xE0100 <= cp <= 0xE01EF:
        return True
    if 0x1F3FB <= cp <= 0x1F3FF or 0xE0020 <= cp <= 0xE007F or cp == 0x20E3:
        return True
    return unicodedata.category(ch) in ("Mn", "Me", "Mc")


def _is_regional_indicator(ch: str) -> bool:
    return 0x1F1E6 <= ord(ch) <= 0x1F1FF


def _is_high_surrogate(ch: str) -> bool:
    return 0xD800 <= ord(ch) <= 0xDBFF


def _join_surrogates(text: str) -> str:
    """Merge surrogate pairs that arrived in separate pieces into one code point."""
    if not any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def _scrub_lone_surrogates(text: str) -> str:
    """A surrogate that never found its partner cannot be sent anywhere as UTF-8."""
    if not any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        return text
    return "".join(_REPLACEMENT if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)


def last_cluster_start(text: str) -> int:
    """Index where the last (possibly still growing) grapheme cluster of `text` begins.

    A cluster longer than MAX_CLUSTER_CODEPOINTS is not held back whole: all but its last code
    point is released, so the hold-back (and the walk back to find it) stays bounded.
    """
    end = len(text)
    if end and _is_high_surrogate(text[end - 1]):
        end -= 1  # the low half is still on its way: it belongs with what precedes
    i = end - 1
    if i < 0:
        return 0
    floor = end - MAX_CLUSTER_CODEPOINTS  # a cluster starting before this is overlong
    while True:
        while i > 0 and _is_extender(text[i]):
            i -= 1
            if i < floor:
                return end - 1
        if _is_regional_indicator(text[i]):
            run = 0
            j = i
            while j >= 0 and _is_regional_indicator(text[j]):
                run += 1
                j -= 1
            # Flags pair up from the left; an odd run ends with a half flag.
            if run % 2 == 0 and i > 0:
                i -= 1
        if i > 0 and text[i - 1] == ZWJ:
            i -= 1  # the character before continues into this one: keep walking back
            if i < floor:
                return end - 1
            continue
        return i


class WholeCharacters:
    """Feed pieces in, get back only text that cannot be extended by a later piece."""

    def __init__(self) -> None:
        self._pending = ""

    def feed(self, piece: str) -> str:
        if not piece:
            return ""
        text = _join_surrogates(self._pending + piece)
        cut = last_cluster_start(text)
        self._pending = text[cut:]
        return _scrub_lone_surrogates(text[:cut])

    def flush(self) -> str:
        rest, self._pending = self._pending, ""
        return _scrub_lone_surrogates(rest)
