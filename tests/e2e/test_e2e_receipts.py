"""Receipts: every memory write is shown, in a message Telegram can carry, however the turn ends.

Real data: long utterances of a LoCoMo conversation as the facts the model saves."""

from __future__ import annotations

import json
from pathlib import Path

from bot.ui.i18n import t
from bot.ui.render import TELEGRAM_TEXT_LIMIT, utf16_len
from memory.facts import MAX_FACT_CHARS, clean_fact
from tests.e2e.test_e2e_agent import openai_chat
from tests.e2e.test_e2e_web import INJECTION, memory_of, question, web_bot
from tests.fakes.providers import Fault, Reply, ToolCallReply
from tests.support.e2e_bot import OWNER, bot_under_test
from tests.support.paths import TESTDATA

CHAT = OWNER
LOCOMO = TESTDATA / "locomo" / "conv-26.json"


def long_facts(count: int, low: int, high: int) -> list[str]:
    """Utterances of a real conversation between `low` and `high` characters, in order."""
    conversation = json.loads(LOCOMO.read_text())
    found: list[str] = []
    for key in sorted(k for k in conversation if k.startswith("session_") and k[8:].isdigit()):
        for turn in conversation[key]:
            text = clean_fact(turn["text"])
            if low <= len(text) <= high and text not in found:
                found.append(text)
    assert len(found) >= count, f"only {len(found)} utterances of {low}-{high} characters"
    return found[:count]


def remember_all(facts: list[str]) -> ToolCallReply:
    first, *rest = facts
    return ToolCallReply(
        "remember", {"fact": first}, also=[("remember", {"fact": f}) for f in rest]
    )


async def test_fourteen_long_facts_get_receipts_that_fit_a_message(tmp_path: Path) -> None:
    """14 receipts of ~300 characters never leave the answer a negative budget (render would
    raise ValueError, and the user get "internal error" and no answer)."""
    facts = long_facts(14, 260, 340)
    async with bot_under_test(tmp_path, MEMORY_MAX_CHARS=50_000) as bot:
        bot.openai.script(
            "gpt-5", remember_all(facts[:7]), remember_all(facts[7:]), Reply("All saved.")
        )
        shown = await bot.ask(CHAT, "Remember all of this about me")
        texts = [m.text for m in shown]
        assert all(utf16_len(text) <= TELEGRAM_TEXT_LIMIT for text in texts)
        assert texts[0].startswith("All saved.")
        lines = "\n".join(texts).splitlines()
        receipts = [line for line in lines if line.startswith("🧠 Remembered: ")]
        # Each receipt shown is a whole fact, in order; the rest are counted, never dropped.
        assert receipts == [f"🧠 Remembered: {fact}" for fact in facts[: len(receipts)]]
        assert 0 < len(receipts) < 14
        assert lines[-1] == t("receipts_more", count=14 - len(receipts))
        [memory] = await bot.rows("SELECT content FROM long_term_memory")
        assert memory["content"].splitlines() == [f"- {fact}" for fact in facts]


async def test_a_receipt_shows_the_whole_fact_that_was_saved(tmp_path: Path) -> None:
    """A receipt shows the whole saved fact, up to MAX_FACT_CHARS."""
    [fact] = long_facts(1, 400, MAX_FACT_CHARS)
    async with bot_under_test(tmp_path) as bot:
        bot.openai.script("gpt-5", remember_all([fact]), Reply("Saved."))
        [shown] = await bot.ask(CHAT, "Remember this")
        assert shown.text.splitlines()[-1] == f"🧠 Remembered: {fact}"
        [memory] = await bot.rows("SELECT content FROM long_term_memory")
        assert memory["content"] == f"- {fact}"


async def test_a_failure_in_a_later_round_still_shows_the_receipts(tmp_path: Path) -> None:
    """The fact saved in round 1 is kept, and the failure note names it."""
    facts = long_facts(2, 60, 120)
    async with bot_under_test(tmp_path) as bot:
        bot.openai.script("gpt-5", remember_all(facts))
        bot.openai.set_default("*", Fault("server_500"))
        [shown] = await bot.ask(CHAT, "Remember these two")
        lines = shown.text.splitlines()
        assert lines[0].startswith("Sorry, no model could answer right now")
        assert lines[1:] == [f"🧠 Remembered: {fact}" for fact in facts]


async def test_a_failure_in_a_later_round_still_asks_about_the_held_write(tmp_path: Path) -> None:
    """A write held for the asker's tap (a page was in view) is asked about although the next
    round failed and the turn ended with no answer: the loop hands each held write over to the
    caller as it is held, not with the answer."""
    [fact] = long_facts(1, 60, 120)
    async with web_bot(tmp_path) as (bot, site, _):
        site.pages["bread"] = ("text/html; charset=utf-8", INJECTION.encode())
        url = site.url("/page/bread")
        bot.openai.script(
            "gpt-5",
            ToolCallReply("web_read", {"url": url}),
            ToolCallReply("remember", {"fact": fact}),
        )
        bot.openai.set_default("*", Fault("server_500"))
        [shown, *_] = await bot.ask(CHAT, f"what does this page say? {url}")
        assert shown.text.startswith("Sorry, no model could answer right now")
        await bot.wait(lambda: any(m.button_data() for m in bot.messages(CHAT)))
        asking = question(bot, CHAT)
        assert asking.text == f"{t('pending_question')}\n{t('pending_remember', fact=fact)}"
        assert await memory_of(bot, CHAT) == ""  # held: nothing written before the tap


async def test_a_cancel_after_a_write_still_shows_its_receipt(tmp_path: Path) -> None:
    """/cancel in the round after a write still shows the write's receipt under the note."""
    [fact] = long_facts(1, 60, 120)
    async with bot_under_test(tmp_path) as bot:
        bot.openai.script(
            "gpt-5",
            remember_all([fact]),
            Reply("word " * 400, chunk_chars=5, chunk_delay=0.02),
        )
        bot.say(CHAT, "Remember this and then tell me a long story")
        await bot.wait(lambda: any("word" in text for text in bot.showing(CHAT)))
        bot.say(CHAT, "/cancel")
        await bot.wait_idle(CHAT)
        [answer] = [text for text in bot.texts(CHAT) if "word" in text]
        assert answer.splitlines()[-2:] == [t("reply_cancelled"), f"🧠 Remembered: {fact}"]


async def test_tool_calls_are_capped_per_round(tmp_path: Path) -> None:
    """A model asking for 12 writes at once gets 8 run; the other 4 are told they were not."""
    facts = long_facts(12, 40, 120)
    async with bot_under_test(tmp_path, MEMORY_MAX_CHARS=50_000) as bot:
        bot.openai.script("gpt-5", remember_all(facts), Reply("Done."))
        [shown] = await bot.ask(CHAT, "Remember twelve things")
        assert shown.text.count("🧠 Remembered: ") == 8
        [memory] = await bot.rows("SELECT content FROM long_term_memory")
        assert memory["content"].splitlines() == [f"- {fact}" for fact in facts[:8]]
        results = openai_chat(bot)[-1].tool_results()
        assert len(results) == 12  # every call has its result
        assert sum("not run: at most 8 tool calls per round" in r["content"] for r in results) == 4


async def test_tool_calls_are_capped_per_turn(tmp_path: Path) -> None:
    """Two full rounds spend the turn's 16 calls: the next request allows no tool call."""
    facts = long_facts(16, 20, 60)
    async with bot_under_test(tmp_path, MEMORY_MAX_CHARS=50_000) as bot:
        bot.openai.script(
            "gpt-5", remember_all(facts[:8]), remember_all(facts[8:]), Reply("Sixteen kept.")
        )
        [shown] = await bot.ask(CHAT, "Remember sixteen things")
        assert shown.text.startswith("Sixteen kept.")
        first, second, third = openai_chat(bot)
        assert first.tool_choice() is None and second.tool_choice() is None
        assert third.tool_choice() == "none"
        [memory] = await bot.rows("SELECT content FROM long_term_memory")
        assert memory["content"].splitlines() == [f"- {fact}" for fact in facts]
