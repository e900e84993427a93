"""Line-level edits of the long-term memory text: add a fact, find and remove the lines that
state one, and replay such edits on top of a consolidation's result.

The memory is markdown written by the consolidation model, one fact per line as a rule. The
chat tools work on lines because a line is what a user sees in /memory and what a receipt can
name exactly. Matching is forgiving about case, bullets, punctuation and word order (the model
rephrases what the user said), and works for scripts without spaces (CJK) through character
trigrams.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

MAX_FACT_CHARS = 500
# A line states the fact when this share of the fact's trigrams (or words) occurs in it.
MATCH_THRESHOLD = 0.7
_BULLET = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+")
_PUNCT = re.compile(r"[\s\W_]+", re.UNICODE)


def normalise(text: str) -> str:
    """Case-, width-, bullet- and punctuation-insensitive form used for comparisons."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = _BULLET.sub("", text)
    return _PUNCT.sub(" ", text).strip()


def clean_fact(fact: str) -> str:
    """One line of text: newlines and control characters become spaces."""
    text = "".join(" " if unicodedata.category(ch)[0] == "C" else ch for ch in fact)
    return re.sub(r"\s+", " ", text).strip()


def fact_line(fact: str) -> str:
    return f"- {clean_fact(fact)}"


def _grams(text: str) -> set[str]:
    compact = text.replace(" ", "")
    if len(compact) < 3:
        return {compact} if compact else set()
    return {compact[i : i + 3] for i in range(len(compact) - 2)}


def states(line: str, fact: str) -> bool:
    """Whether a memory line states `fact` (see MATCH_THRESHOLD)."""
    a, b = normalise(line), normalise(fact)
    if not a or not b:
        return False
    if b in a or (len(a) >= 8 and a in b):
        return True
    fact_grams = _grams(b)
    if not fact_grams:
        return False
    shared = len(fact_grams & _grams(a)) / len(fact_grams)
    return shared >= MATCH_THRESHOLD


def is_content_line(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def contains(content: str, fact: str) -> bool:
    """The memory already holds this fact as a line of its own (same words)."""
    wanted = normalise(fact)
    return any(normalise(line) == wanted for line in content.splitlines() if is_content_line(line))


def add_line(content: str, line: str) -> str:
    if contains(content, line):
        return content
    body = content.rstrip("\n")
    return f"{body}\n{line}" if body else line


def matching_lines(content: str, fact: str) -> list[str]:
    return [line for line in content.splitlines() if is_content_line(line) and states(line, fact)]


def remove_lines(content: str, lines: list[str]) -> str:
    gone = {normalise(line) for line in lines}
    kept = [line for line in content.splitlines() if normalise(line) not in gone or not line]
    return "\n".join(kept).strip("\n")


@dataclass(frozen=True)
class Edit:
    """One tool write, as stored in memory_edits."""

    kind: str  # "remember" | "forget"
    fact: str
    lines: tuple[str, ...]


def replay(content: str, edits: list[Edit]) -> str:
    """Apply tool edits made after a consolidation started to that consolidation's result.

    A remembered line is added unless already there; a forgotten fact loses both the exact
    lines removed then and any line of the new text that states it (the consolidation model
    may have reworded the line it copied from the old memory).
    """
    for edit in edits:
        if edit.kind == "remember":
            for line in edit.lines:
                content = add_line(content, line)
        else:
            doomed = list(edit.lines) + matching_lines(content, edit.fact)
            content = remove_lines(content, doomed)
    return content
