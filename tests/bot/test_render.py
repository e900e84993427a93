"""Rendering and splitting model markdown for Telegram, checked on real inputs.

The judge is the fake Bot API's validator (a port of tdlib's HTML rules): a piece is good if
Telegram would accept its HTML within the limit, or else its plain-text fallback fits.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable

import pytest

from bot.ui import render
from bot.ui.render import (
    TELEGRAM_TEXT_LIMIT,
    html_to_plain,
    plain_text,
    render_html,
    split_for_telegram,
    split_plain,
    utf16_len,
)
from models.streamtext import MAX_CLUSTER_CODEPOINTS
from tests.fakes.telegram import EntityParseError, parse_html
from tests.support.call_count import count_calls
from tests.support.paths import TESTDATA
from tests.support.testdata_texts import endless_cluster

MARKDOWN_DIR = TESTDATA / "tg-markdown" / "telegramify-markdown"
FENCE_LINE = re.compile(r"^ {0,3}`{3,}[^`\n]*$")
# MarkdownV2's underline-italic closed by "___" ("__underline italic bold___", in exp1.md and
# t_text.md): chatgpt-md-converter nests it as <u><i>…</u></i>, which Telegram refuses. The only
# input of the data that does not render; test_plain_text_fallback_… covers its fallback.
CONVERTER_GARBLES = re.compile(r"__[^_\n]+___")


def _stress_files() -> dict[str, str]:
    return {path.name: path.read_text() for path in sorted(MARKDOWN_DIR.glob("*.md"))}


def _converter_inputs() -> list[str]:
    """The `input_text` strings from formatter-chatgpt-telegram's own test suite."""
    source = (
        TESTDATA / "tg-markdown" / "formatter-chatgpt-telegram" / "test_parser.py"
    ).read_text()
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            target = node.targets[0]
            if isinstance(target, ast.Name) and target.id.startswith("input"):
                found.append(node.value.value)
    return [text for text in found if isinstance(text, str)]


def _naughty_strings() -> list[str]:
    return [s for s in json.loads((TESTDATA / "blns" / "blns.json").read_text()) if s.strip()]


def _emoji() -> dict[str, list[str]]:
    data = json.loads((TESTDATA / "unicode" / "emoji_sequences_derived.json").read_text())
    return {
        "zwj": [e["s"] for e in data["zwj_sequences"]],
        "skin": [e["s"] if isinstance(e, dict) else e for e in data["skin_tone_modified"]],
        "flags": [e["s"] if isinstance(e, dict) else e for e in data["flags"]],
        "keycaps": [e["s"] if isinstance(e, dict) else e for e in data["keycaps"]],
    }


def _content(markdown: str) -> str:
    """Non-whitespace characters outside fence lines: what splitting must preserve in order."""
    kept = [line for line in markdown.splitlines() if not FENCE_LINE.match(line)]
    return re.sub(r"\s+", "", "".join(kept))


def _assert_good_pieces(markdown: str, pieces: list[str], limit: int) -> None:
    assert pieces, "non-empty input must give at least one piece"
    assert _content("\n".join(pieces)) == _content(markdown)
    for piece in pieces:
        assert piece.strip()
        fences = [line for line in piece.splitlines() if FENCE_LINE.match(line)]
        if FENCE_LINE.match(piece.splitlines()[0]) or fences:
            assert len(fences) % 2 == 0, f"unbalanced fence in piece: {piece[:80]!r}"
        rendered = render_html(piece)
        try:
            text, _ = parse_html(rendered)
        except EntityParseError as exc:
            # Telegram refuses the HTML only for the one construct the converter garbles; the
            # plain-text fallback must then fit. Anything else must render.
            assert CONVERTER_GARBLES.search(piece), f"refused: {exc} in {piece[:120]!r}"
            assert utf16_len(plain_text(piece)) <= limit
        else:
            assert utf16_len(text.strip()) <= limit


def test_utf16_len_counts_astral_characters_twice() -> None:
    assert utf16_len("abc") == 3
    assert utf16_len("é") == 1
    assert utf16_len("😀") == 2
    kiss = max(_emoji()["zwj"], key=utf16_len)
    assert utf16_len(kiss) == 15  # the longest sequence in the data: 10 code points


@pytest.mark.parametrize("name", sorted(_stress_files()))
@pytest.mark.parametrize("limit", [TELEGRAM_TEXT_LIMIT, 700, 160])
def test_stress_files_split_into_valid_pieces(name: str, limit: int) -> None:
    markdown = _stress_files()[name]
    pieces = split_for_telegram(markdown, limit)
    _assert_good_pieces(markdown, pieces, limit)
    if utf16_len(markdown) <= limit:
        assert len(pieces) == 1


def test_long_answer_from_stress_files_needs_several_messages() -> None:
    markdown = "\n\n".join(_stress_files().values())
    assert utf16_len(markdown) > 3 * TELEGRAM_TEXT_LIMIT
    pieces = split_for_telegram(markdown)
    _assert_good_pieces(markdown, pieces, TELEGRAM_TEXT_LIMIT)
    assert len(pieces) >= 4
    # Pieces are well filled: no piece but the last is under half the limit.
    assert all(utf16_len(plain_text(p)) > TELEGRAM_TEXT_LIMIT // 2 for p in pieces[:-1])


def test_converter_cases_render_to_html_telegram_accepts() -> None:
    inputs = _converter_inputs()
    assert len(inputs) > 40
    refused = []
    for markdown in inputs:
        try:
            parse_html(render_html(markdown))
        except EntityParseError:
            refused.append(markdown)
    # The converter's own cases are all valid Telegram HTML once converted.
    assert refused == []


def test_split_prefers_paragraph_boundaries() -> None:
    paragraphs = [f"Paragraph {i}: " + "word " * 40 for i in range(12)]
    markdown = "\n\n".join(paragraphs)
    pieces = split_for_telegram(markdown, 700)
    assert len(pieces) > 1
    for piece in pieces:
        assert piece.startswith("Paragraph ")
        assert piece.rstrip().endswith("word")
    _assert_good_pieces(markdown, pieces, 700)


def test_over_long_paragraph_splits_on_lines() -> None:
    lines = [f"line {i} " + "x" * 50 for i in range(40)]
    markdown = "\n".join(lines)
    pieces = split_for_telegram(markdown, 500)
    assert len(pieces) > 1
    assert all(p.split("\n")[0].startswith("line ") for p in pieces)
    assert [line for p in pieces for line in p.split("\n")] == lines


def test_code_block_is_closed_and_reopened_with_its_language() -> None:
    code = (MARKDOWN_DIR / "test_entity.py").read_text()  # real code, no fences inside
    limit = 2000
    assert utf16_len(code) > 2 * limit
    markdown = f"Here is the file:\n\n```python\n{code}```\n\nThat is all."
    pieces = split_for_telegram(markdown, limit)
    _assert_good_pieces(markdown, pieces, limit)
    assert pieces[0] == "Here is the file:" or pieces[0].startswith("Here is the file:\n\n```")
    code_pieces = [p for p in pieces if "```python" in p]
    assert len(code_pieces) >= 3
    shown = []
    for piece in code_pieces:
        rendered = render_html(piece)
        assert rendered.count('<pre><code class="language-python">') == 1
        text, entities = parse_html(rendered)  # valid HTML: no fallback needed for code
        pre = [e for e in entities if e["type"] == "pre"]
        assert [e.get("language") for e in pre] == ["python"]
        shown.append(text.removeprefix("Here is the file:").removesuffix("That is all."))
    # The code survives, in order, across the pieces.
    assert _content("".join(shown)) == _content(code)


def test_unclosed_code_block_is_closed_in_every_piece() -> None:
    body = "\n".join(f"print({i})  # {'z' * 30}" for i in range(300))
    markdown = "Streaming cut off:\n```js\n" + body
    pieces = split_for_telegram(markdown, 1000)
    _assert_good_pieces(markdown, pieces, 1000)
    assert all(p.rstrip().endswith("```") for p in pieces[1:])


def test_single_over_long_line_never_splits_emoji_sequences() -> None:
    emoji = _emoji()
    sequences = emoji["zwj"] + emoji["skin"] + emoji["flags"] + emoji["keycaps"]
    line = "".join(sequences)  # one line, no spaces: only character cuts are possible
    boundaries = set()
    offset = 0
    for sequence in sequences:
        offset += len(sequence)
        boundaries.add(offset)
    pieces = split_for_telegram(line, 300)
    assert len(pieces) > 10
    assert "".join(pieces) == line
    position = 0
    for piece in pieces[:-1]:
        position += len(piece)
        assert position in boundaries, (
            f"cut inside a sequence near {line[position - 3 : position + 3]!r}"
        )
        assert utf16_len(piece) <= 300


def test_flags_are_cut_between_pairs() -> None:
    flags = "".join(_emoji()["flags"])  # regional-indicator pairs back to back
    pieces = split_for_telegram(flags, 98 + 1)  # 49 code points fit: an odd cut point
    assert "".join(pieces) == flags
    assert all(len(p) % 2 == 0 for p in pieces)


def test_long_word_line_prefers_spaces() -> None:
    line = " ".join(["Donaudampfschifffahrt"] * 400)
    pieces = split_for_telegram(line, 500)
    assert all(p.strip().split(" ")[-1] == "Donaudampfschifffahrt" for p in pieces)
    assert " ".join(p.strip() for p in pieces) == line


def test_naughty_strings_survive_render_and_split() -> None:
    """Each naughty string alone renders to HTML Telegram accepts or to a fitting fallback,
    and one long document of all of them splits without losing a character."""
    strings = _naughty_strings()
    for text in strings:
        pieces = split_for_telegram(text, 200)
        _assert_good_pieces(text, pieces, 200)
    document = "\n\n".join(strings)
    _assert_good_pieces(document, split_for_telegram(document), TELEGRAM_TEXT_LIMIT)


def test_plain_text_keeps_words_and_link_targets() -> None:
    markdown = "**Bold** and _it_ with [docs](https://example.com/a?b=1&c=2) and `x < y`"
    assert plain_text(markdown) == "Bold and it with docs (https://example.com/a?b=1&c=2) and x < y"
    assert html_to_plain('<a href="https://x.y">https://x.y</a>') == "https://x.y"


def test_only_the_garbled_construct_is_refused_and_ordinary_markdown_renders() -> None:
    # The guard in _assert_good_pieces must not excuse a refusal of everything.
    garbled = next(line for line in _stress_files()["exp1.md"].splitlines() if "___" in line)
    assert CONVERTER_GARBLES.search(garbled)
    with pytest.raises(EntityParseError):
        parse_html(render_html(garbled))
    for markdown in ("**bold** and _it_", "# Title\n\n- item `code`", "a < b && c > d"):
        assert not CONVERTER_GARBLES.search(markdown)
        parse_html(render_html(markdown))


def test_plain_text_fallback_for_markdown_the_converter_garbles() -> None:
    """exp1.md mixes MarkdownV2 nesting the converter turns into invalid HTML: the fallback
    keeps every word (and Telegram accepts it: it is plain text)."""
    markdown = _stress_files()["exp1.md"]
    with pytest.raises(EntityParseError):
        parse_html(render_html(markdown))
    fallback = plain_text(markdown)
    for word in ("strikethrough", "spoiler", "underline", "italic"):
        assert word in fallback
    # No markup of the converter leaks into the fallback: every "<" was the author's.
    assert fallback.count("<") <= markdown.count("<")
    assert fallback.count("**") < markdown.count("**")


def test_empty_and_whitespace_input_give_no_pieces() -> None:
    assert split_for_telegram("") == []
    assert split_for_telegram(" \n\n \t") == []


def test_limit_below_a_fence_is_refused() -> None:
    with pytest.raises(ValueError):
        split_for_telegram("abc", 10)


@pytest.mark.parametrize("split", [split_for_telegram, split_plain])
def test_an_endless_grapheme_cluster_is_cut_where_the_piece_is_full(
    split: Callable[[str, int], list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A zalgo answer ("a" + 6000 marks, one cluster) gives 2 full pieces after a bounded look
    back for a boundary. Walking back to the line's start made ~1900 one-character pieces, each
    after its own renders: 22 s of CPU holding the GIL, then ~1900 Telegram messages."""
    looks = count_calls(monkeypatch, render, "is_grapheme_boundary")
    text = endless_cluster(6000)
    pieces = split(text, TELEGRAM_TEXT_LIMIT)
    assert len(pieces) == 2
    assert "".join(pieces) == text
    assert all(utf16_len(p) <= TELEGRAM_TEXT_LIMIT for p in pieces)
    assert looks() <= 2 * (MAX_CLUSTER_CODEPOINTS + 2)
