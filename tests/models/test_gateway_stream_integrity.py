"""Streamed text arrives as whole characters, whatever the network and the provider cut.

Real data: CJK replies from OpenAssistant and every emoji sequence kind from Unicode's
emoji-test.txt (../shared/testdata). The fake writes each UTF-8 byte in its own network write and
each code point in its own SSE chunk, the worst cut there is.
"""

from __future__ import annotations

import json

import pytest

from models import streamtext
from models.calls import CallOptions
from models.streamtext import MAX_CLUSTER_CODEPOINTS, ZWJ, WholeCharacters, last_cluster_start
from models.types import StreamDone, TextDelta
from tests.fakes.providers import FakeProvider, Reply
from tests.support.paths import TESTDATA
from tests.support.testdata_texts import endless_cluster
from tests.support.transport import make_transport

HI = [{"role": "user", "content": "hi"}]
MODEL_ON = {"openai": "gpt-4.1", "groq": "qwen3-32b", "anthropic": "claude-haiku-4-5"}


def _emoji() -> dict[str, list[str]]:
    data = json.loads((TESTDATA / "unicode" / "emoji_sequences_derived.json").read_text("utf-8"))
    return {
        "zwj": [item["s"] for item in data["zwj_sequences"]],
        "skin": data["skin_tone_modified"],
        "flags": data["flags"],
        "keycaps": data["keycaps"],
    }


def _cjk_replies(limit: int = 2) -> list[str]:
    found: list[str] = []
    path = TESTDATA / "oasst2" / "oasst2_filtered.jsonl"
    for line in path.read_text("utf-8").splitlines():
        tree = json.loads(line)
        for reply in tree["prompt"].get("replies", []):
            if reply.get("lang") in ("zh", "ja") and reply["text"].strip():
                found.append(reply["text"].strip()[:80])
                break
        if len(found) >= limit:
            break
    return found


def _sample_text() -> tuple[str, list[str]]:
    emoji = _emoji()
    longest = max(emoji["zwj"], key=len)  # kiss with two skin tones: 10 code points
    sequences = [longest, *emoji["zwj"][::120], *emoji["skin"][::120], *emoji["flags"][::65],
                 *emoji["keycaps"][::4]]  # fmt: skip
    cjk = _cjk_replies()
    assert cjk, "no CJK reply found in the test data"
    text = "\n".join(cjk) + "\n" + " ".join(sequences) + " " + "".join(sequences[:6]) + " end"
    return text, sequences


def _boundaries(pieces: list[str]) -> set[int]:
    """Offsets (in code points) where one TextDelta ends and the next begins."""
    out, offset = set(), 0
    for piece in pieces[:-1]:
        offset += len(piece)
        out.add(offset)
    return out


def _assert_no_cut_inside(text: str, pieces: list[str], sequences: list[str]) -> None:
    cuts = _boundaries(pieces)
    for seq in sequences:
        start = text.find(seq)
        while start >= 0:
            inside = {c for c in cuts if start < c < start + len(seq)}
            assert not inside, f"{seq!r} cut at {sorted(inside)}"
            start = text.find(seq, start + 1)
    for piece in pieces:
        piece.encode("utf-8")  # no lone surrogate
        assert not piece.endswith(ZWJ)


@pytest.mark.parametrize("provider", ["openai", "groq", "anthropic"])
async def test_split_bytes_and_code_points_reach_the_caller_whole(provider: str) -> None:
    text, sequences = _sample_text()
    async with (
        FakeProvider("openai") as o,
        FakeProvider("groq") as g,
        FakeProvider("anthropic") as a,
    ):
        fp = {"openai": o, "groq": g, "anthropic": a}[provider]
        fp.script("*", Reply(text, chunk_chars=1, split_utf8=True))
        t = make_transport(o, g, a)
        events = [e async for e in t.stream(MODEL_ON[provider], HI, CallOptions(timeout=30))]
        await t.aclose()
    pieces = [e.text for e in events if isinstance(e, TextDelta)]
    assert isinstance(events[-1], StreamDone) and events[-1].result.text == text
    assert "".join(pieces) == text
    assert len(pieces) > 50  # it really streamed in small pieces
    _assert_no_cut_inside(text, pieces, sequences)


def test_every_emoji_sequence_survives_every_cut() -> None:
    emoji = _emoji()
    every = [s for kind in emoji.values() for s in kind]
    assert len(every) > 2000
    for seq in every:
        for k in range(1, len(seq)):
            w = WholeCharacters()
            pieces = [w.feed("a " + seq[:k]), w.feed(seq[k:] + " b"), w.flush()]
            pieces = [p for p in pieces if p]
            assert "".join(pieces) == "a " + seq + " b"
            assert any(seq in p for p in pieces), (seq, k, pieces)


def test_surrogate_halves_from_json_escapes_are_joined() -> None:
    # A provider that splits "\\ud83d\\ude00" across two JSON chunks yields two lone halves.
    first, second = json.loads('"ok \\ud83d"'), json.loads('"\\ude00!"')
    w = WholeCharacters()
    out = w.feed(first) + w.feed(second) + w.flush()
    assert out == "ok 😀!"
    out.encode("utf-8")


def test_a_half_that_never_finds_its_partner_becomes_a_replacement_character() -> None:
    w = WholeCharacters()
    out = w.feed(json.loads('"x \\ud83d"')) + w.flush()
    assert out == "x \ufffd"


def test_combining_marks_flags_and_plain_text() -> None:
    assert last_cluster_start("cafe\u0301") == 3
    assert last_cluster_start("🇩🇪🇫") == 2  # a half flag waits for its other half
    assert last_cluster_start("🇩🇪🇫🇷") == 2
    assert last_cluster_start("abc") == 2
    assert last_cluster_start("") == 0
    w = WholeCharacters()
    assert w.feed("hello") == "hell"  # the last character may still grow
    assert w.flush() == "o"


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(endless_cluster(5000), id="zalgo"),
        # The longest real ZWJ sequence chained to itself without end: one unbounded "cluster".
        pytest.param(ZWJ.join([max(_emoji()["zwj"], key=len)] * 500), id="zwj-chain"),
    ],
)
def test_an_endless_cluster_is_held_back_only_a_little(
    answer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fed one code point per chunk (as providers send tokens), a cluster without end is held
    back at most MAX_CLUSTER_CODEPOINTS: each feed looks back a bounded way. Holding it all
    back walked over all of it on every chunk, O(n²): 5 s of event-loop CPU for 5000 marks."""
    looks = 0
    real = streamtext._is_extender

    def counted(ch: str) -> bool:
        nonlocal looks
        looks += 1
        return real(ch)

    monkeypatch.setattr(streamtext, "_is_extender", counted)
    w = WholeCharacters()
    out: list[str] = []
    held = 0
    for ch in answer:
        out.append(w.feed(ch))
        held = max(held, len(w._pending))
    out.append(w.flush())
    assert "".join(out) == answer
    assert held <= MAX_CLUSTER_CODEPOINTS + 1
    assert looks <= (MAX_CLUSTER_CODEPOINTS + 2) * len(answer)
