"""Joining the parts of a long message a Telegram client split, using real long texts."""

from __future__ import annotations

import asyncio
import json

from bot.turns.joiner import MessageJoiner, join_parts
from bot.ui.render import TELEGRAM_TEXT_LIMIT, utf16_len
from tests.support.paths import TESTDATA
from tests.support.waits import within


def _long_real_text(lang: str, min_units: int) -> str:
    """Real human-written OpenAssistant replies in `lang`, concatenated past `min_units`."""
    pieces: list[str] = []
    with (TESTDATA / "oasst2" / "oasst2_filtered.jsonl").open(encoding="utf-8") as lines:
        for line in lines:
            stack = [json.loads(line)["prompt"]]
            while stack:
                node = stack.pop()
                if node.get("lang") == lang:
                    pieces.append(node["text"])
                stack.extend(node.get("replies") or [])
            if utf16_len("\n\n".join(pieces)) > min_units:
                return "\n\n".join(pieces)
    raise AssertionError(f"not enough {lang} text in the test data")


def client_split(text: str, *, keep_space: bool) -> list[str]:
    """Split like a client: parts of at most 4096 UTF-16 units, cut at the last whitespace."""
    parts = []
    while utf16_len(text) > TELEGRAM_TEXT_LIMIT:
        cut = TELEGRAM_TEXT_LIMIT
        while utf16_len(text[:cut]) > TELEGRAM_TEXT_LIMIT:
            cut -= 1
        space = max(text.rfind(" ", 0, cut), text.rfind("\n", 0, cut))
        if space > 0:
            cut = space + 1 if keep_space else space
        parts.append(text[:cut])
        text = text[cut:] if keep_space else text[cut + 1 :]
    parts.append(text)
    return parts


async def _deliver(joiner: MessageJoiner[int], key: object, parts: list[str], gap: float):
    """Each part arrives as its own update handled concurrently, like PTB with concurrency on."""
    tasks = []
    for index, part in enumerate(parts):
        tasks.append(asyncio.create_task(joiner.submit(key, part, index)))
        await asyncio.sleep(gap)
    return await asyncio.gather(*tasks)


async def test_split_long_message_becomes_one_turn() -> None:
    original = _long_real_text("en", 3 * TELEGRAM_TEXT_LIMIT)
    parts = client_split(original, keep_space=True)
    assert len(parts) >= 4 and utf16_len(parts[-1]) < TELEGRAM_TEXT_LIMIT
    joiner: MessageJoiner[int] = MessageJoiner(window=5.0)

    results = await _deliver(joiner, ("chat", 1), parts, gap=0.01)

    turns = [r for r in results if r is not None]
    assert len(turns) == 1, "exactly one update (the first part) carries the whole turn"
    assert results[0] is turns[0]
    assert turns[0].text == original
    assert turns[0].refs == list(range(len(parts)))
    assert joiner.pending == 0


async def test_parts_cut_without_their_space_keep_words_apart() -> None:
    original = _long_real_text("pt-BR", 2 * TELEGRAM_TEXT_LIMIT)
    parts = client_split(original, keep_space=False)
    assert len(parts) >= 3
    joiner: MessageJoiner[int] = MessageJoiner(window=5.0)

    turns = [r for r in await _deliver(joiner, "k", parts, gap=0.01) if r is not None]

    assert len(turns) == 1
    assert turns[0].text.split() == original.split()


async def test_short_message_is_never_delayed_even_with_a_long_window() -> None:
    joiner: MessageJoiner[int] = MessageJoiner(window=3600.0)
    turn = await within(joiner.submit("k", "hello", 7), timeout=5)
    assert turn is not None and turn.text == "hello" and turn.refs == [7]


async def test_full_part_without_a_follower_closes_after_the_window() -> None:
    joiner: MessageJoiner[int] = MessageJoiner(window=0.05)
    full = "x " * 2000
    turn = await within(joiner.submit("k", full, 1), timeout=5)
    assert turn is not None and turn.parts == [full]
    # A later short message is its own turn, not glued to the closed group.
    second = await joiner.submit("k", "and another thing", 2)
    assert second is not None and second.text == "and another thing"


async def test_keys_do_not_mix_and_flush_releases_waiting_leaders() -> None:
    joiner: MessageJoiner[str] = MessageJoiner(window=3600.0)
    full = "word " * 900
    ann = asyncio.create_task(joiner.submit(("chat", "ann"), full, "a1"))
    bob = asyncio.create_task(joiner.submit(("chat", "bob"), full, "b1"))
    await asyncio.sleep(0)
    assert await joiner.submit(("chat", "ann"), full, "a2") is None
    assert joiner.pending == 2

    joiner.flush()  # shutdown: nobody waits out a one-hour window
    ann_turn, bob_turn = await within(asyncio.gather(ann, bob), timeout=5)
    assert ann_turn is not None and ann_turn.refs == ["a1", "a2"]
    assert bob_turn is not None and bob_turn.refs == ["b1"]


def test_join_parts_inserts_a_newline_only_where_the_cut_lost_whitespace() -> None:
    assert join_parts(["one ", "two"]) == "one two"
    assert join_parts(["one", "\ntwo"]) == "one\ntwo"
    assert join_parts(["one", "two"]) == "one\ntwo"
    assert join_parts([]) == ""
