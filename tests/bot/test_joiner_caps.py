"""The joiner's caps: a split message stops at MAX_SPLIT_PARTS parts or past
the input size limit, instead of holding a group open, unthrottled, while full parts keep
coming. Real long texts from the OpenAssistant data; the joiner without Telegram."""

from __future__ import annotations

import asyncio

from bot.turns.joiner import MAX_SPLIT_PARTS, MessageJoiner
from bot.ui.render import TELEGRAM_TEXT_LIMIT
from tests.bot.test_joiner import _long_real_text, client_split
from tests.support.waits import within

KEY = (1, 1)


def _full_parts(count: int) -> list[str]:
    text = _long_real_text("en", (count + 1) * TELEGRAM_TEXT_LIMIT)
    parts = client_split(text, keep_space=True)[:count]
    assert len(parts) == count
    return parts


async def test_a_message_of_too_many_parts_is_closed_at_the_cap_and_the_rest_dropped() -> None:
    joiner: MessageJoiner[int] = MessageJoiner(window=30.0)  # long: only the cap can close it
    parts = _full_parts(MAX_SPLIT_PARTS + 4)
    leader = asyncio.create_task(joiner.submit(KEY, parts[0], 0))
    await asyncio.sleep(0)
    for index, part in enumerate(parts[1 : MAX_SPLIT_PARTS + 1], start=1):
        assert await joiner.submit(KEY, part, index) is None
    turn = await within(leader, 5)  # closed by the cap, not by the 30 s window
    assert turn is not None and turn.overflowed
    assert len(turn.parts) == MAX_SPLIT_PARTS + 1
    # The same message's remaining full parts are dropped, not turned into turns of their own.
    for index, part in enumerate(parts[MAX_SPLIT_PARTS + 1 :], start=MAX_SPLIT_PARTS + 1):
        assert await within(joiner.submit(KEY, part, index), 1) is None
    assert joiner.dropped == 3
    # Its short last part ends the dropping; the user's next message is an ordinary turn.
    assert await joiner.submit(KEY, "the end.", 99) is None
    fresh = await joiner.submit(KEY, "hello again", 100)
    assert fresh is not None and fresh.parts == ["hello again"] and not fresh.overflowed


async def test_a_message_past_the_size_limit_is_closed_early() -> None:
    joiner: MessageJoiner[int] = MessageJoiner(window=30.0, max_chars=10_000)
    parts = _full_parts(5)
    leader = asyncio.create_task(joiner.submit(KEY, parts[0], 0))
    await asyncio.sleep(0)
    index = 1
    while not leader.done() and index < len(parts):
        assert await joiner.submit(KEY, parts[index], index) is None
        index += 1
        await asyncio.sleep(0)
    turn = await within(leader, 5)
    assert turn is not None and turn.overflowed
    assert sum(len(p) for p in turn.parts) > 10_000
    assert sum(len(p) for p in turn.parts[:-1]) <= 10_000  # closed by the part that crossed it


async def test_an_ordinary_long_message_is_not_capped() -> None:
    joiner: MessageJoiner[int] = MessageJoiner(window=5.0, max_chars=100_000)
    text = _long_real_text("en", 3 * TELEGRAM_TEXT_LIMIT)
    parts = client_split(text, keep_space=True)
    leader = asyncio.create_task(joiner.submit(KEY, parts[0], 0))
    await asyncio.sleep(0)
    for index, part in enumerate(parts[1:], start=1):
        assert await joiner.submit(KEY, part, index) is None
    turn = await within(leader, 5)
    assert turn is not None and not turn.overflowed and turn.text == text
