"""Every token count we make ourselves, without importing litellm into the bot.

Two questions, two answers, one module:
- `count_text` / `count_messages`: what the provider will bill (usage we record when it
  reported none): gpt-4o's tokenizer, exactly as litellm counts.
- `estimate_tokens` / `estimate_messages` / `estimate_message`: the one estimate, an upper bound
  of that count that never loads the tokenizer and is cheap enough for every call on the chat
  loop. It fits text into a budget (the prompt, a document, a consolidation chunk) and paces a
  request against a provider's tokens-per-minute window: overcounting is safe in both,
  undercounting is not.

A chat message is framed for counting in one way only, `_framed_message` (OpenAI's framing):
the bill, the pacing and the prompt budget all count a message the same way.

litellm lives in the provider worker (models/worker/pool.py); importing it here as well would cost
the bot about 150 MB of memory for one function. `litellm.token_counter(model="gpt-4o", ...)`
is tiktoken's o200k_base plus OpenAI's per-message framing (3 tokens a message, 1 for a name,
3 to prime the reply, long texts encoded in pieces); we count the same way, exactly, with the
same encoding files, the ones litellm bundles
(found without importing it), so nothing is ever downloaded. tiktoken is pinned in
requirements.lock as litellm's own dependency. The encoding itself is loaded only once a
count is asked for (`count_text`).
"""

from __future__ import annotations

import importlib.util
import math
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

# An image part, as litellm counts one for gpt-4o: OpenAI's 1024×1024 picture in high detail
# (85 + 4 tiles × 170).
IMAGE_PART_TOKENS = 765
# What one photo costs a model at most, for the estimate: Anthropic resizes an image to at most
# ~1.15 megapixels, about (width x height) / 750 = 1,600 tokens; OpenAI's high detail is at most
# ~1,100 for the sizes Telegram sends. The larger of the two.
IMAGE_TOKENS_BOUND = 1600


_encoding: Any = None
_loading = threading.Lock()
_load_started = False


def _load() -> None:
    global _encoding
    spec = importlib.util.find_spec("litellm")
    if spec is not None and spec.submodule_search_locations:
        bundled = Path(next(iter(spec.submodule_search_locations))) / "litellm_core_utils"
        os.environ["TIKTOKEN_CACHE_DIR"] = str(bundled / "tokenizers")
    import tiktoken

    _encoding = tiktoken.get_encoding("o200k_base")


def load() -> None:
    """Load the encoding now, in this thread (tests; `count_text` loads it in the background)."""
    if _encoding is None:
        _load()


def _start_loading() -> None:
    global _load_started
    with _loading:
        if _load_started:
            return
        _load_started = True
    threading.Thread(target=_load, name="tokenizer-load", daemon=True).start()


def count_text(text: str) -> int:
    """o200k_base tokens of `text`. The encoding takes ~80 MB and ~0.25 s of CPU to load, for
    counts a bot may never need (providers report usage): it is loaded the first time one is
    asked for, in the background, and until then a text counts `estimate_tokens` (at least the
    real count: a bill estimated before the encoding is ready errs high, not low)."""
    if not text:
        return 0
    encoding = _encoding
    if encoding is None:
        _start_loading()
        return estimate_tokens(text)
    return len(encoding.encode(text, disallowed_special=()))


def count_messages(messages: list[dict[str, Any]]) -> int:
    """Prompt tokens of `messages` as OpenAI frames chat messages."""
    return _framed(messages, count_text, IMAGE_PART_TOKENS)


_REPLY_PRIMING = 3  # OpenAI's tokens that open the reply, once a request


def _framed(messages: list[dict[str, Any]], count: Callable[[str], int], image_tokens: int) -> int:
    """OpenAI's framing of a request's chat messages, each text counted by `count`."""
    return _REPLY_PRIMING + sum(_framed_message(m, count, image_tokens) for m in messages)


def _framed_message(message: dict[str, Any], count: Callable[[str], int], image_tokens: int) -> int:
    """OpenAI's framing of one chat message around its texts' tokens, each counted by `count`:
    3 tokens a message, 1 for a name, an image part at `image_tokens`."""
    total = 3 + count(str(message.get("role") or ""))
    if message.get("name"):
        total += 1 + count(str(message["name"]))
    content = message.get("content")
    if isinstance(content, str):
        total += count(content)
    elif isinstance(content, list):
        for part in content:
            if not isinstance(part, dict):
                continue
            if part.get("type") in ("image_url", "image"):
                total += image_tokens
            else:
                total += count(str(part.get("text") or ""))
    for call in message.get("tool_calls") or []:
        function = (call.get("function") or {}) if isinstance(call, dict) else {}
        total += count(str(function.get("name") or ""))
        total += count(str(function.get("arguments") or ""))
    return total


# --- the estimate ------------------------------------------------------------------------------
#
# A weighted count of what tokenizers split on: each code point is classed by its UTF-8 byte
# (ASCII lowercase, uppercase, digit, space, newline, other ASCII; a non-ASCII character by the
# block its lead byte names), and o200k's pre-tokenizer starts a piece at every letter run,
# every lowercase→uppercase step and every 1–3 digits. The weights came from a linear program:
# the least (then rounded up) under which the estimate is at least tiktoken's o200k_base count
# on every text in ../shared/testdata (and on each again with its non-ASCII characters
# shuffled: real characters in orders no word has), on random hex, base64, letters, digits,
# punctuation and whitespace, and on lists of letters, digits, words and scripts joined by the
# usual separators, while overcounting English as little as possible (benchmarks/token_estimate.py
# prints the ratios; tests/models/test_tokens.py holds the bound). Where a character's cost
# cannot be told from its lead byte (combining marks, format and control characters, rare scripts,
# 4-byte characters), it counts a token per UTF-8 byte, the most any character can cost.
# Every step is a bytes.translate or bytes.count: linear, no regex, no tokenizer; about 20 µs
# per 1,000 characters (a plain 2.5-bytes bound undercounts zalgo by more than half).


def _byte_table(classes: list[tuple[bytes, bytes]], default: bytes) -> bytes:
    table = bytearray(default * 256)
    for members, symbol in classes:
        for byte in members:
            table[byte] = symbol[0]
    return bytes(table)


def _span(first: int, last: int) -> bytes:
    return bytes(range(first, last + 1))


# Non-ASCII characters, by lead byte: (lead bytes, symbol, tokens each).
_SCRIPTS: list[tuple[bytes, bytes, float]] = [
    (_span(0xC2, 0xC2), b"1", 2.0),  # U+0080–00BF: C1 controls, soft hyphen, signs
    (_span(0xC3, 0xC5), b"2", 1.0),  # Latin-1 letters, Latin Extended-A
    (_span(0xC6, 0xCB), b"3", 2.0),  # Latin Extended-B, IPA, modifier letters
    (_span(0xCC, 0xCD), b"4", 2.0),  # combining diacritical marks (zalgo)
    (_span(0xCE, 0xCF), b"5", 0.7),  # Greek
    (_span(0xD0, 0xD1), b"6", 1.06),  # Cyrillic
    (_span(0xD2, 0xD7), b"7", 0.81),  # Cyrillic supplement, Armenian, Hebrew
    (_span(0xD8, 0xDF), b"8", 0.77),  # Arabic, Syriac, Thaana, N'Ko
    (_span(0xE0, 0xE0), b"9", 1.16),  # Indic scripts, Thai, Lao, Tibetan
    (_span(0xE1, 0xE1), b"B", 3.0),  # Georgian, Hangul Jamo, Ogham, Latin/Greek Extended...
    (_span(0xE2, 0xE2), b"C", 2.0),  # punctuation, symbols, format characters (ZWJ, RLO)
    (_span(0xE3, 0xE3), b"D", 1.57),  # CJK punctuation, kana
    (_span(0xE4, 0xE9), b"E", 1.0),  # CJK ideographs
    (_span(0xEA, 0xED), b"F", 0.99),  # Hangul syllables, Yi
    (_span(0xEE, 0xEF), b"G", 3.0),  # private use, compatibility and fullwidth forms, BOM
    (_span(0xF0, 0xFF), b"H", 4.0),  # 4 bytes: emoji, historic scripts, tag characters
]
_SHAPE = _byte_table(
    [
        (b"abcdefghijklmnopqrstuvwxyz", b"a"),
        (b"ABCDEFGHIJKLMNOPQRSTUVWXYZ", b"A"),
        (b"0123456789", b"d"),
        (b" ", b" "),
        (b"\r\n", b"n"),
        *((lead, symbol) for lead, symbol, _ in _SCRIPTS),
    ],
    b"p",  # punctuation, tab, control characters
)
_CONTINUATION = _span(0x80, 0xBF)  # deleted: one symbol per code point
_LETTERS = _byte_table([(b"aA", b"x")], b".")
_DIGITS = _byte_table([(b"d", b"d")], b".")

_BASE = 1.38
_LETTER_PIECE = 0.87  # a run of letters, or an uppercase letter after a lowercase one
_LETTER = 0.14
_UPPERCASE = 0.25
_RUN_4, _RUN_8, _RUN_12 = 0.17, 0.39, 7.09  # per 4, 8, 12 letters of one run
_DIGIT_GROUP = 1.23  # a run of digits, and every third digit of it
_PUNCTUATION = 1.0
_SPACE = 0.77  # a space not before a letter or punctuation (those merge into its piece)
_NEWLINE = 1.0


def estimate_tokens(text: str) -> int:
    """At least as many tokens as o200k_base (gpt-4o) makes of `text`, without the tokenizer.

    For fitting text into a budget (the prompt, a document, a consolidation chunk) and pacing
    a request against a tokens-per-minute window: overcounting is safe there, undercounting
    is not. English comes out at about 1.8 times the real count; linear in the text's length.
    """
    if not text:
        return 0
    shape = text.encode("utf-8", "surrogatepass").translate(_SHAPE, _CONTINUATION)
    letters = shape.translate(_LETTERS)
    digits = shape.translate(_DIGITS)
    letter_pieces = letters.count(b".x") + letters.startswith(b"x") + shape.count(b"aA")
    digit_groups = digits.count(b"d.") + digits.endswith(b"d") + digits.count(b"ddd")  # run ends
    lone_spaces = shape.count(b" ") - shape.count(b" a") - shape.count(b" A") - shape.count(b" p")
    total = (
        _BASE
        + _LETTER_PIECE * letter_pieces
        + _LETTER * letters.count(b"x")
        + _UPPERCASE * shape.count(b"A")
        + _RUN_4 * letters.count(b"xxxx")
        + _RUN_8 * letters.count(b"x" * 8)
        + _RUN_12 * letters.count(b"x" * 12)
        + _DIGIT_GROUP * digit_groups
        + _PUNCTUATION * shape.count(b"p")
        + _SPACE * lone_spaces
        + _NEWLINE * shape.count(b"n")
    )
    if not text.isascii():
        others = shape.translate(None, b"aAd np")  # the non-ASCII characters' symbols
        total += sum(weight * others.count(symbol) for _, symbol, weight in _SCRIPTS)
    return math.ceil(total)


def estimate_messages(messages: list[dict[str, Any]]) -> int:
    """`estimate_tokens` of a request's messages, framed as `count_messages` counts them, an
    image at what the costliest provider counts for one."""
    return _framed(messages, estimate_tokens, IMAGE_TOKENS_BOUND)


def estimate_message(message: dict[str, Any]) -> int:
    """One message's share of `estimate_messages` (the request's reply priming aside): what
    keeping it in a prompt costs, for fitting a prompt into its budget."""
    return _framed_message(message, estimate_tokens, IMAGE_TOKENS_BOUND)
