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
from pathlib import Path
from typing import Any

from bot.cli.export import run_export
from memory.db import Database
from memory.recall.archive import chat_token
from tests.fakes.providers import Reply, ToolCallReply
from tests.support.consolidation_stack import StepClock, good_call
from tests.support.e2e_bot import OWNER, TESTDATA, BotUnderTest, bot_under_test

CHAT = OWNER
MIGRATION = TESTDATA / "tg-updates" / "telegram-rs_update_assets"
NOTED = "Noted."


def locomo_turns(session: int, count: int = 6) -> list[str]:
    """The first `count` turns of session `session` of LoCoMo's conversation 26."""
    data = json.loads((TESTDATA / "locomo" / "conv-26.json").read_text("utf-8"))
    return [f"{t['speaker']}: {t['text']}" for t in data[f"session_{session}"][:count]]


def quiet_models(bot: BotUnderTest) -> None:
    bot.groq.set_default("*", good_call())  # the summary: Rina and PostgreSQL only
    bot.openai.set_default("*", Reply(NOTED))


async def session(bot: BotUnderTest, turns: list[str], chat: int = CHAT, **kwargs: Any) -> None:
    """The turns sent one by one, then /new, until its consolidation is committed."""
    mention = "@mnemo_test_bot " if chat < 0 else ""
    for turn in turns:
        await bot.ask(chat, mention + turn, **kwargs)
    await bot.ask(chat, "/new", **kwargs)
    await bot.consolidations_settled(chat)


async def recall(bot: BotUnderTest, query: str, chat: int = CHAT, **kwargs: Any) -> str:
    [reply] = await bot.ask(chat, f"/recall {query}", **kwargs)
    return reply.text


async def recall_tool(bot: BotUnderTest, query: str, chat: int = CHAT, **kwargs: Any) -> str:
    """What the chat model reads back from its `recall` tool in `chat`."""
    bot.openai.script("gpt-5", ToolCallReply("recall", {"query": query}), Reply("Yes."))
    mention = "@mnemo_test_bot " if chat < 0 else ""
    await bot.ask(chat, f"{mention}What did we say about {query}?", **kwargs)
    result = bot.openai.requests[-1].tool_results()[-1]  # earlier ones of the session before it
    return str(result["content"])


async def term_counts(bot: BotUnderTest) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """This chat's archive term counts as recall reads them, and as the FTS5 index counts its
    tokens (qualified by the chat: migrations/0018_archive_per_chat.sql)."""
    kept = await bot.rows(
        "SELECT term, docs AS n FROM archive_terms WHERE chat_id = ? AND term != '' ORDER BY term",
        (CHAT,),
    )
    indexed = await bot.rows(
        "SELECT substr(term, ?) AS term, doc AS n FROM archive_vocab "
        "WHERE term > ? AND term < ? AND doc > 0 ORDER BY term",
        (len(chat_token(CHAT, "")) + 1, chat_token(CHAT, ""), chat_token(CHAT, "\U0010ffff")),
    )
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

        # The day the turn was stored (not the day the assertion runs: across UTC midnight
        # those differ).
        [stored] = await bot.rows("SELECT created_at FROM archived_messages WHERE content = ?",
                                  (said,))  # fmt: skip
        today = stored["created_at"][:10]
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


async def test_two_chats_never_see_each_others_words_also_after_a_chat_move(
    tmp_path: Path,
) -> None:
    """Two chats' archives side by side, so dropping the chat condition from the archive's
    candidate query (`a.chat_id = ? OR 1`) fails here.
    A group said "transgender" (LoCoMo session 1), the owner's private chat "charity race"
    (session 2): neither finds the other's words, through /recall or the model's tool, also
    once the group became a supergroup (Telegram's real service messages) and its archive moved
    to the new id, where it is found again."""
    to_update = json.loads((MIGRATION / "migrate_to_chat_id.json").read_text("utf-8"))
    from_update = json.loads((MIGRATION / "migrate_from_chat_id.json").read_text("utf-8"))
    for update in (to_update, from_update):
        update.pop("update_id")
    group, supergroup = (
        to_update["message"]["chat"]["id"],
        to_update["message"]["migrate_to_chat_id"],
    )
    in_group, in_supergroup = {"chat_type": "group"}, {"chat_type": "supergroup"}
    # One user sends the 30-odd messages of both chats within a minute: no per-user limit.
    async with bot_under_test(tmp_path, USER_MESSAGES_PER_MINUTE=0) as bot:
        quiet_models(bot)
        await session(bot, locomo_turns(1), group, **in_group)
        await session(bot, locomo_turns(2))
        none = "Nothing in the history matches {!r}."
        nothing_found = "no earlier conversation matches"

        assert "💬" in await recall(bot, "transgender", group, **in_group)
        assert await recall(bot, "transgender") == none.format("transgender")
        assert await recall(bot, "charity race", group, **in_group) == none.format("charity race")
        assert "💬" in await recall(bot, "charity race")
        assert nothing_found in await recall_tool(bot, "transgender")
        assert nothing_found in await recall_tool(bot, "charity race", group, **in_group)
        assert "transgender" in await recall_tool(bot, "transgender", group, **in_group)

        for update in (to_update, from_update):
            await bot.wait_handled(bot.tg.push(update))
        assert await bot.rows("SELECT id FROM archived_messages WHERE chat_id = ?", (group,)) == []

        assert "💬" in await recall(bot, "transgender", supergroup, **in_supergroup)
        assert "transgender" in await recall_tool(bot, "transgender", supergroup, **in_supergroup)
        assert await recall(bot, "transgender") == none.format("transgender")
        assert nothing_found in await recall_tool(bot, "transgender")
        assert await recall(bot, "charity race", supergroup, **in_supergroup) == none.format(
            "charity race"
        )
        assert nothing_found in await recall_tool(bot, "charity race", supergroup, **in_supergroup)


WORD = "transgender"  # LoCoMo conversation 26, session 1, turn 5 (and no other turn we send)


async def database_bytes(tmp_path: Path) -> bytes:
    """Every file of the bot's database (the file, its -wal and -shm), folded to lower case."""

    def read() -> bytes:
        files = sorted(tmp_path.glob("mnemobot.sqlite3*"))
        assert tmp_path / "mnemobot.sqlite3" in files
        return b"\n".join(path.read_bytes().lower() for path in files)

    return await asyncio.to_thread(read)


async def fresh_database_bytes(tmp_path: Path) -> bytes:
    """An empty database's bytes (the schema's own text), for what cannot be told apart."""
    db = await Database.open(tmp_path / "fresh" / "fresh.sqlite3")
    await db.close()
    return (tmp_path / "fresh" / "fresh.sqlite3").read_bytes().lower()


STEM = "transgend"


def needles(fresh: bytes) -> list[bytes]:
    """The word, its stem (the archive's terms and index), the stem's end (FTS5 writes a term
    after the part it shares with the term before it, so the end is there whatever precedes
    it) and those of the word's trigrams (the history's index) an empty database lacks."""
    trigrams = {WORD[i : i + 3].encode() for i in range(len(WORD) - 2)}
    return [WORD.encode(), STEM.encode(), b"sgend", *sorted(t for t in trigrams if t not in fresh)]


async def index_segments(bot: BotUnderTest) -> list[tuple[str, int]]:
    """The leaves of both FTS5 indexes (every row of their %_data tables but the averages,
    id 1, and the structure, id 10): where their terms are written."""
    rows = []
    for table in ("archive_fts_data", "history_fts_data"):
        found = await bot.rows(f"SELECT id FROM {table} WHERE id NOT IN (1, 10)")
        rows += [(table, int(r["id"])) for r in found]
    return rows


async def test_forget_leaves_no_forgotten_word_readable_in_the_database_files(
    tmp_path: Path,
) -> None:
    """/forget leaves none of the word's forms in any file: not in the file's free space, not
    in the FTS5 segments (a delete only adds a tombstone), not in the WAL."""
    history = f"[2026-03-01 09:00] Caroline found the {WORD} stories at her group inspiring."
    async with bot_under_test(tmp_path) as bot:
        bot.groq.set_default(
            "*", good_call(history_entry=history, memory_update=f"- Caroline: {WORD} stories")
        )
        bot.openai.set_default("*", Reply(NOTED))
        await session(bot, locomo_turns(1))
        forms = needles(await fresh_database_bytes(tmp_path))
        before = await database_bytes(tmp_path)
        assert len(forms) > 3 and all(form in before for form in forms)
        assert await index_segments(bot) != []

        await forget_confirmed(bot)
        after = await database_bytes(tmp_path)
        assert [form for form in forms if form in after] == []
        # The only chat forgot everything: no leaf of either index is left, so no stem and no
        # trigram of it either (a 3-byte trigram is too short to grep for reliably).
        assert await index_segments(bot) == []


async def test_archive_days_leaves_no_purged_word_readable_in_the_database_files(
    tmp_path: Path,
) -> None:
    """The same for turns ARCHIVE_DAYS deletes (their summary stays: it
    names none of the word's forms here)."""
    clock = StepClock()
    async with bot_under_test(tmp_path, clock=clock) as bot:
        quiet_models(bot)
        await session(bot, locomo_turns(1))
        clock.advance(10 * 24 * 3600)
        await session(bot, locomo_turns(2))
        forms = [WORD.encode(), STEM.encode(), b"sgend"]
        before = await database_bytes(tmp_path)
        assert all(form in before for form in forms)

    async with bot_under_test(tmp_path, clock=clock, ARCHIVE_DAYS="5") as bot:
        assert "charity race" in await recall(bot, "charity race")  # the newer turns stay
        after = await database_bytes(tmp_path)
        assert [form for form in forms if form in after] == []
