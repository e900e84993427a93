"""End to end: the words of a consolidated session stay searchable (the archive), through the
real bot, PTB and litellm over HTTP against the fakes; nothing of ours is mocked.

The conversations are LoCoMo's (../shared/testdata/locomo), each turn sent as one user message
`Name: text`. The chat model answers "Noted." and the consolidation model writes a summary that
names none of their words (GOOD_ARGS), so a word found afterwards can only come from the
archive.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

from bot.cli.export import run_export
from tests.consolidation_stack import StepClock, good_call
from tests.e2e_bot import OWNER, TESTDATA, BotUnderTest, bot_under_test
from tests.fakes.providers import Reply, ToolCallReply

CHAT = OWNER
NOTED = "Noted."


def locomo_turns(session: int, count: int = 6) -> list[str]:
    """The first `count` turns of session `session` of LoCoMo's conversation 26."""
    data = json.loads((TESTDATA / "locomo" / "conv-26.json").read_text("utf-8"))
    return [f"{t['speaker']}: {t['text']}" for t in data[f"session_{session}"][:count]]


def quiet_models(bot: BotUnderTest) -> None:
    bot.groq.set_default("*", good_call())  # the summary: Rina and PostgreSQL only
    bot.openai.set_default("*", Reply(NOTED))


async def session(bot: BotUnderTest, turns: list[str]) -> None:
    """The turns sent one by one, then /new, until its consolidation is committed."""
    for turn in turns:
        await bot.ask(CHAT, turn)
    await bot.ask(CHAT, "/new")
    await bot.consolidations_settled(CHAT)


async def recall(bot: BotUnderTest, query: str) -> str:
    [reply] = await bot.ask(CHAT, f"/recall {query}")
    return reply.text


async def term_counts(bot: BotUnderTest) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """The archive's term counts as recall reads them, and as the FTS5 index counts them."""
    kept = await bot.rows("SELECT term, docs AS n FROM archive_terms ORDER BY term")
    indexed = await bot.rows("SELECT term, doc AS n FROM archive_vocab ORDER BY term")
    return [(r["term"], r["n"]) for r in kept], [(r["term"], r["n"]) for r in indexed]


async def forget_confirmed(bot: BotUnderTest) -> None:
    [prompt] = await bot.ask(CHAT, "/forget")
    yes = prompt.button_data()[0]  # carries the asker's id: only they may confirm
    bot.tg.push(bot.tg.make_callback_update(CHAT, OWNER, yes, message_id=prompt.message_id))
    await bot.wait(lambda: bot.texts(CHAT)[-1].startswith("Done"))


async def test_a_word_only_the_user_said_is_found_after_consolidation(tmp_path: Path) -> None:
    turns = locomo_turns(1)
    said = turns[4]  # "Caroline: The transgender stories were so inspiring! ..."
    async with bot_under_test(tmp_path) as bot:
        quiet_models(bot)
        await session(bot, turns)
        # Out of the session (and every prompt), into the archive.
        assert await bot.rows("SELECT id FROM messages WHERE content = ?", (said,)) == []
        assert "transgender" not in (await bot.memory.repo.history(CHAT))[0].entry

        today = datetime.now(UTC).strftime("%Y-%m-%d")
        found = (await recall(bot, "transgender")).split("\n")
        assert found[0] == "Best matches for 'transgender':"
        assert found[2].startswith(f"💬 {today} ")
        assert found[2].endswith(f" — you: {said}")
        assert found[3:] == [f"   ↑ bot: {NOTED}", f"   ↓ bot: {NOTED}"]

        bot.openai.script("gpt-5", ToolCallReply("recall", {"query": "transgender"}), Reply("Yes."))
        await bot.ask(CHAT, "What did I say about those stories?")
        [result] = bot.openai.requests[-1].tool_results()
        lines = result["content"].split("\n")[1:-1]  # inside the tool result's frame
        assert lines[0] == "1 result(s) for 'transgender', most relevant first:"
        assert lines[1].endswith(f"(the user's own words, archived session) {said}")
        assert lines[1].startswith(f"1. [{today} ")
        assert lines[2:] == [
            f"   before: (your own words) {NOTED}",
            f"   after: (your own words) {NOTED}",
        ]


async def test_forget_removes_the_archived_words_also_after_a_restart(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        quiet_models(bot)
        await session(bot, locomo_turns(1))
        assert "💬" in await recall(bot, "transgender")
        kept, indexed = await term_counts(bot)
        assert ("transgend", 1) in kept and kept == indexed

        await forget_confirmed(bot)
        assert await bot.rows("SELECT id FROM archived_messages") == []
        assert await term_counts(bot) == ([], [])  # the words' counts went with them
        assert await recall(bot, "transgender") == "Nothing in the history matches 'transgender'."
        await bot.restart()
        assert await bot.rows("SELECT id FROM archived_messages") == []
        assert await recall(bot, "transgender") == "Nothing in the history matches 'transgender'."


async def test_archive_days_removes_only_the_older_turns(tmp_path: Path) -> None:
    clock = StepClock()
    old, recent = locomo_turns(1), locomo_turns(2)
    async with bot_under_test(tmp_path, clock=clock) as bot:
        quiet_models(bot)
        await session(bot, old)
        clock.advance(10 * 24 * 3600)
        await session(bot, recent)
    archived = [r["content"] for r in await rows_of(tmp_path)]
    assert set(old) <= set(archived) and set(recent) <= set(archived)

    # Restarted with ARCHIVE_DAYS=5: the session of ten days ago goes, today's stays.
    async with bot_under_test(tmp_path, clock=clock, ARCHIVE_DAYS="5") as bot:
        quiet_models(bot)
        archived = [r["content"] for r in await bot.rows("SELECT content FROM archived_messages")]
        assert archived == [m for turn in recent for m in (turn, NOTED)]
        assert len(await bot.memory.repo.history(CHAT)) == 2  # summaries are not archive
        kept, indexed = await term_counts(bot)  # counted again: only the turns left
        assert "transgend" not in dict(kept) and kept == indexed
        assert await recall(bot, "transgender") == "Nothing in the history matches 'transgender'."
        assert "charity race" in await recall(bot, "charity race")


async def rows_of(tmp_path: Path) -> list[dict[str, object]]:
    def read() -> list[dict[str, object]]:
        import sqlite3

        with sqlite3.connect(tmp_path / "mnemobot.sqlite3") as conn:
            conn.row_factory = sqlite3.Row
            return [dict(r) for r in conn.execute("SELECT * FROM archived_messages ORDER BY id")]

    return await asyncio.to_thread(read)


async def test_at_most_two_hits_come_from_one_session(tmp_path: Path) -> None:
    first, second = locomo_turns(1, 8), locomo_turns(2, 8)
    async with bot_under_test(tmp_path) as bot:
        quiet_models(bot)
        await session(bot, first)
        await session(bot, second)
        # "Caroline" is in most turns of both sessions: two blocks from each, no more.
        blocks = (await recall(bot, "Caroline")).split("\n\n")[1:]
        heads = [block.split("\n")[0].split(" — you: ", 1)[1] for block in blocks]
        assert len(heads) == 4
        assert sum(head in first for head in heads) == 2
        assert sum(head in second for head in heads) == 2


async def test_export_writes_the_archive(tmp_path: Path) -> None:
    turns = locomo_turns(1, 4)
    async with bot_under_test(tmp_path) as bot:
        quiet_models(bot)
        await session(bot, turns)
        stamps = [r["created_at"][:16].replace("T", " ") for r in await bot.rows(
            "SELECT created_at FROM archived_messages ORDER BY id"
        )]  # fmt: skip
        args = argparse.Namespace(
            chat_id=CHAT, out=tmp_path / "export", db=tmp_path / "mnemobot.sqlite3"
        )
        assert await asyncio.to_thread(run_export, args) == 0
    transcript = (tmp_path / "export" / "TRANSCRIPT.md").read_text("utf-8").split("\n")
    said = [m for turn in turns for m in (f"user: {turn}", f"assistant: {NOTED}")]
    assert transcript[0].startswith("## Session ")
    assert transcript[2:-1] == [f"[{at}] {text}" for at, text in zip(stamps, said, strict=True)]
