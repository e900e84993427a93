"""The main text of a web page: what a person reads, without menus, banners, asides, footers,
scripts and styles; `page_text` decodes the bytes first (media/page_charset.py).

Measured on the 91 pages of ../shared/testdata/web-extraction with the benchmark's own metric
(benchmarks/web_extraction.py): trafilatura 2.3.1 as the benchmark runs it F1 0.965,
readability-lxml 0.9 (its HTML made text by html-text, as the benchmark does) 0.963,
trafilatura with favor_precision 0.975, and the pair below 0.979. The pair: trafilatura
(precision mode) reads the page; readability-lxml gives a second opinion, taken instead when
trafilatura found (almost) nothing — the "readability returned only the title" failure
(openclaw #82685) seen from the other side — or when readability's text is a tighter version of
trafilatura's (at least half as long and 80 % of its word 4-grams inside trafilatura's: the
same article with less boilerplate around it).

CPU-bound (lxml parses, scoring): called in the reader child (media/document_child.py), never
on the chat loop.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from dataclasses import dataclass

from media.page_charset import decode_body

# Below this many characters trafilatura's text is taken as "found nothing".
MIN_TEXT_CHARS = 250
# Readability replaces trafilatura's text when at least this long relative to it …
TIGHTER_MIN_RATIO = 0.5
# … and at least this share of its word 4-grams are in trafilatura's text.
TIGHTER_MIN_COVERED = 0.8
_WORDS = re.compile(r"\w+")


@dataclass(frozen=True)
class PageText:
    """The title and main text of a page, and which extractor's text it is."""

    title: str
    text: str
    extractor: str  # "trafilatura", "readability", "none" or "plain" (text and JSON)


def page_text(body: bytes, *, content_type: str, kind: str) -> PageText:
    """The text of a fetched body: an HTML page's main text, a text or JSON body whole."""
    text = decode_body(body, content_type, kind)
    if kind == "html":
        return main_text(text)
    return PageText("", text.strip(), "plain")


def main_text(html: str) -> PageText:
    """The page's title and main text ("" when neither extractor finds any)."""
    logging.getLogger("trafilatura").setLevel(logging.CRITICAL)
    logging.getLogger("readability").setLevel(logging.CRITICAL)
    first = _trafilatura(html)
    title, second = _readability(html)
    if len(first) < MIN_TEXT_CHARS:
        if len(second) > len(first):
            return PageText(title, second, "readability")
    elif _tighter(second, first):
        return PageText(title, second, "readability")
    return PageText(title, first, "trafilatura" if first else "none")


def _trafilatura(html: str) -> str:
    import trafilatura

    try:
        text = trafilatura.extract(html, include_comments=False, favor_precision=True)
    except Exception:  # a parser failure on hostile markup is "found nothing", not a crash
        return ""
    return (text or "").strip()


def _readability(html: str) -> tuple[str, str]:
    """(title, text) by readability-lxml, its summary made text by html-text."""
    import html_text
    from readability import Document

    try:
        document = Document(html)
        title = document.short_title() or ""
        text = html_text.extract_text(document.summary(html_partial=True)) or ""
    except Exception:  # readability raises on empty or broken documents
        return "", ""
    return " ".join(title.split()), text.strip()


def _tighter(candidate: str, reference: str) -> bool:
    """Whether `candidate` is `reference` with less around it (see the module docstring)."""
    if not candidate or len(candidate) >= len(reference):
        return False
    if len(candidate) < TIGHTER_MIN_RATIO * len(reference):
        return False
    mine, theirs = _shingles(candidate), _shingles(reference)
    total = sum(mine.values())
    if not total:
        return False
    inside = sum(min(count, theirs.get(key, 0)) for key, count in mine.items())
    return inside / total >= TIGHTER_MIN_COVERED


def _shingles(text: str, size: int = 4) -> Counter[tuple[str, ...]]:
    words = _WORDS.findall(text)
    return Counter(tuple(words[i : i + size]) for i in range(max(1, len(words) - size + 1)))
