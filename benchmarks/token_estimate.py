"""Token estimate: how far `estimate_tokens` is above tiktoken's o200k_base count, and its cost.

For every text in ../shared/testdata (tests/support/testdata_texts.py: each file whole, each
line, each JSON string), per folder: the ratio estimate / real count, min / mean / max, and how
many texts it undercounts, for the estimate in models/tokens.py and, beside it for comparison, a
plain bound of 2.5 UTF-8 bytes a token. What the pacer charges a request against a
tokens-per-minute window, per real prompt token, with `estimate_messages` ("now") and with a
token per 4 characters of the messages' texts ("before", the simple rule it is compared with),
on windows of 6 real messages. Then what it costs: microseconds per 1,000
characters of English (LoCoMo) and of mixed scripts (oasst2). Last line:
`token_estimate: undercounted=N/M english_mean_ratio=R us_per_1k_chars=T`.

Run: .venv/bin/python -m benchmarks.token_estimate
"""

from __future__ import annotations

import timeit
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

from models import tokens  # noqa: E402
from tests.support.memory_sessions import (  # noqa: E402
    claude_code_session,
    locomo_conversations,
    oasst_multilingual,
)
from tests.support.testdata_texts import texts_by_folder  # noqa: E402

Messages = list[dict[str, Any]]


def old_estimate(text: str) -> int:
    """The plain bound compared with: 2.5 UTF-8 bytes a token."""
    return len(text.encode("utf-8")) * 2 // 5 + 1


def old_pacing_estimate(messages: Messages) -> float:
    """The simple pacing charge compared with: a token per 4 characters of the messages' texts."""
    chars = 0
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            chars += len(content)
    return chars / 4


def windows() -> dict[str, list[Messages]]:
    """Requests of 6 real messages each: multilingual, English, a tool-heavy agent session."""
    english = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": turn}
        for _, sessions, _ in locomo_conversations()
        for session in sessions
        for i, turn in enumerate(session.turns)
    ]
    sources = {
        "oasst2": [{"role": m.role, "content": m.content} for m in oasst_multilingual(120)],
        "locomo": english[:600],
        "claude-code": [{"role": m.role, "content": m.content} for m in claude_code_session(300)],
    }
    return {
        name: [messages[i : i + 6] for i in range(0, len(messages) - 5, 6)]
        for name, messages in sources.items()
    }


def ratios(estimate, texts: list[tuple[str, int]]) -> list[float]:
    return [estimate(text) / real for text, real in texts if real]


def describe(values: list[float]) -> str:
    under = sum(1 for v in values if v < 1)
    mean = sum(values) / len(values)
    return f"min {min(values):5.2f} mean {mean:5.2f} max {max(values):6.2f} under {under:5d}"


def micros_per_1k_chars(text: str) -> float:
    runs = timeit.repeat(lambda: tokens.estimate_tokens(text), number=3, repeat=5)
    return min(runs) / 3 * 1e6 / (len(text) / 1000)


def main() -> None:
    tokens.load()
    folders = texts_by_folder()
    total = undercounted = 0
    english: list[float] = []
    print(f"{'folder':24} {'texts':>6}  {'new estimate':44}  old (2.5 bytes a token)")
    for folder, texts in folders.items():
        counted = [(text, tokens.count_text(text)) for text in texts]
        new = ratios(tokens.estimate_tokens, counted)
        old = ratios(old_estimate, counted)
        total += len(new)
        undercounted += sum(1 for v in new if v < 1)
        if folder == "locomo":
            english = [v for (text, _), v in zip(counted, new, strict=True) if text.isascii()]
        print(f"{folder:24} {len(new):6d}  {describe(new):44}  {describe(old)}")
    for name, requests in windows().items():
        real = [tokens.count_messages(request) for request in requests]
        new = [tokens.estimate_messages(r) / n for r, n in zip(requests, real, strict=True)]
        old = [old_pacing_estimate(r) / n for r, n in zip(requests, real, strict=True)]
        print(
            f"pacing charge / real prompt tokens, {name:11} ({len(requests)} requests): "
            f"now min {min(new):.2f} mean {sum(new) / len(new):.2f}, "
            f"before min {min(old):.2f} mean {sum(old) / len(old):.2f}"
        )
    prose = "\n".join(t for t in folders["locomo"] if t.isascii())[:1_000_000]
    mixed = "\n".join(folders["oasst2"])[:1_000_000]
    english_us = micros_per_1k_chars(prose)
    print(f"cost: {english_us:.1f} us per 1,000 characters of English, ", end="")
    print(f"{micros_per_1k_chars(mixed):.1f} of mixed scripts")
    english_mean = sum(english) / len(english)
    print(
        f"token_estimate: undercounted={undercounted}/{total} "
        f"english_mean_ratio={english_mean:.2f} us_per_1k_chars={english_us:.1f}"
    )


if __name__ == "__main__":
    main()
