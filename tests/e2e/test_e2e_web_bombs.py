"""End to end: decompression bombs served to web_read through the real bot, PTB and litellm.

A `Content-Encoding: gzip, gzip` page (about 1 KiB that inflated to 128 MiB in one call) and a
64 KiB deflate bomb (64 MiB of zeros) on the fake site (tests/fakes/web.py); the chat model is
scripted on the fake OpenAI gateway. The bomb is held part-way by the site, so the test knows
its read is under way while another chat is answered. Memory is compared, never timed: this
process (the bot runs in it) has its peak resident size reset before the turn and read after.
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

from tests.fakes.providers import RecordedRequest, Reply, Respond, ToolCallReply
from tests.fakes.web import FakeSite
from tests.support.e2e_bot import FRIEND, OWNER, bot_under_test
from tests.support.process_memory import current_mib, peak_mib, peak_reset

MIB = 1024 * 1024
# Far below what either page cost before (the bomb: +64 MiB in one call; gzip, gzip: +128
# MiB), far above the noise of a turn (the page under the 5 MB cap, buffers, the fakes).
RISE_BOUND_MIB = 50
# The bomb's first bytes, sent before the site waits: they inflate to about 3 MiB, under the cap.
HELD_AT = 3 * 1024


def bombs() -> tuple[bytes, bytes]:
    """(128 MiB of zeros gzipped twice, 64 MiB of zeros deflated)."""
    zeros = bytes(128 * MIB)
    twice = gzip.compress(gzip.compress(zeros, 9), 9)
    bomb = zlib.compress(zeros[: 64 * MIB], 9)
    return twice, bomb


async def test_a_stacked_encoding_and_a_deflate_bomb_end_at_the_cap_and_the_bot_stays_small(
    tmp_path: Path,
) -> None:
    twice, bomb = bombs()
    assert len(twice) < 2048 and len(bomb) <= 66 * 1024
    async with FakeSite() as site, bot_under_test(tmp_path, WEB_ALLOW_PRIVATE="127.0.0.1") as bot:
        site.pages["twice"] = ("text/html", twice)
        site.headers["twice"] = {"Content-Encoding": "gzip, gzip"}
        site.pages["bomb"] = ("text/html", bomb)
        site.headers["bomb"] = {"Content-Encoding": "deflate"}
        held = site.hold("bomb", HELD_AT)
        stacked_url, bomb_url = site.url("/page/twice"), site.url("/page/bomb")

        def answer(request: RecordedRequest) -> Reply | ToolCallReply:
            if request.tool_results():
                results = [r["content"] for r in request.tool_results()]
                return Reply("Neither page could be read: " + " | ".join(results))
            if "two pages" in json.dumps(request.body["messages"]):
                return ToolCallReply(
                    "web_read", {"url": stacked_url}, also=[("web_read", {"url": bomb_url})]
                )
            return Reply("Hello!")

        bot.openai.set_default("gpt-5", Respond(answer))
        del twice, bomb
        peak_reset()
        before = current_mib()
        bot.say(OWNER, f"read these two pages: {stacked_url} {bomb_url}")
        await bot.wait(held.is_set)

        # While the bomb's read is open, another chat is answered.
        [hello] = await bot.ask(FRIEND, "hi", user_id=FRIEND)
        assert hello.text == "Hello!"
        assert bot.services.turns.waiting(OWNER) > 0
        assert not any("Neither page" in m.text for m in bot.messages(OWNER))

        site.release("bomb")
        await bot.wait(lambda: any("Neither page" in m.text for m in bot.messages(OWNER)))
        rise = peak_mib() - before
        print(f"peak memory rise: {rise} MiB")
        assert rise < RISE_BOUND_MIB, f"the bot's peak memory rose {rise} MiB"
        last = [r for r in bot.openai.requests if r.model == "gpt-5"][-1]
        stacked, bombed = (r["content"] for r in last.tool_results()[-2:])
        assert "error:" in stacked and "encoded several times (gzip, gzip)" in stacked
        assert "error:" in bombed and "larger than 5 MB" in bombed
