"""Every text in ../shared/testdata, read from there (never copied), grouped by folder.

A "text" is each file whole, each line of a plain-text file, and each string inside a JSON or
JSON-lines file (blns.base64.json decoded: it holds the naughty strings that plain text cannot,
control characters among them). Used where a property must hold for all the real text we have:
the token estimate's bound (tests/models/test_tokens.py, benchmarks/token_estimate.py).
"""

from __future__ import annotations

import base64
import json
import unicodedata
from collections.abc import Iterator
from itertools import cycle, islice
from pathlib import Path
from typing import Any

from tests.support.paths import TESTDATA


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _base64_strings(values: list[str]) -> Iterator[str]:
    for value in values:
        try:
            yield base64.b64decode(value).decode("utf-8", "replace")
        except ValueError:  # binascii.Error is one
            continue


def _file_texts(path: Path) -> Iterator[str]:
    text = path.read_text(encoding="utf-8", errors="replace")
    yield text
    if path.suffix == ".json":
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            return
        yield from _strings(value)
        if path.name.endswith(".base64.json") and isinstance(value, list):
            yield from _base64_strings([v for v in value if isinstance(v, str)])
    elif path.suffix == ".jsonl":
        for line in text.splitlines():
            try:
                yield from _strings(json.loads(line))
            except json.JSONDecodeError:
                yield line
    else:
        yield from text.splitlines()


def texts_by_folder() -> dict[str, list[str]]:
    """{folder name: its texts}, non-empty texts only, each distinct text once per folder."""
    out: dict[str, list[str]] = {}
    for folder in sorted(p for p in TESTDATA.iterdir() if p.is_dir()):
        seen: dict[str, None] = {}
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                for text in _file_texts(path):
                    if text:
                        seen.setdefault(text)
        out[folder.name] = list(seen)
    return out


def endless_cluster(marks: int) -> str:
    """One "grapheme cluster" `marks` combining marks long: "a", then the combining marks of
    the naughty strings (blns's zalgo and Thai lines), cycled. It is what a model writes when
    asked to repeat zalgo text, or to write "a" followed by 6000 U+0301: no cut inside it is a
    grapheme boundary."""
    strings = json.loads((TESTDATA / "blns" / "blns.json").read_text(encoding="utf-8"))
    found = [ch for text in strings for ch in text if unicodedata.category(ch) == "Mn"]
    return "a" + "".join(islice(cycle(found), marks))
