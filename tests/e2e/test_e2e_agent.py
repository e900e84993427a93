"""End to end: the chat model's memory tools through the real bot, PTB and litellm over HTTP.

The chat model (GPT-5 on the fake OpenAI gateway, unless a test says otherwise) is scripted to
call `recall`, `remember` or `forget_fact`; what the bot sends back to it is read from the fake's
recorded requests, and what the user sees from the fake Telegram. Nothing of ours is mocked.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from memory.store import StoredMessage
from tests.fakes.providers import Fault, RecordedRequest, Reply, Respond, ToolCallReply
from tests.support.e2e_bot import OWNER, BotUnderTest, bot_under_test, memory_block
from tests.support.memory_sessions import (
    SessionMessage,
    SettableClock,
    oasst_conversations,
    store_session,
    summarising_call,
    telegram_export,
)

CHAT = OWNER


# The chat tools as offered, in order: memory tools, reminders and tasks, then web_read (on by
# default; web_search only with WEB_SEARCH_URL).
CHAT_TOOL_ORDER = [
    "recall", "remember", "forget_fact", "schedule_reminder", "schedule_task", "list_reminders",
    "cancel_reminder", "web_read",
]  # fmt: skip


def openai_chat(bot: BotUnderTest, model: str = "gpt-5") -> list[RecordedRequest]:
    return [r for r in bot.openai.requests if r.model == model]


def unframed(content: str) -> list[str]:
    """The lines of a tool result as the model received it, inside its nonce frame."""
    lines = content.split("\n")
    assert re.fullmatch(r"<tool_result_[0-9a-f]{16}>", lines[0]), lines[0]
    assert lines[-1] == "</" + lines[0][1:]
    return lines[1:-1]


def said_after_tools(reply: str) -> Respond:
    """A model that answers in words once it has tool results, quoting the last one."""

    def answer(request: RecordedRequest) -> Reply:
        results = request.tool_results()
        if not results:
            return Reply(reply)
        return Reply(f"{reply} {' '.join(unframed(results[-1]['content']))[:400]}")

    return Respond(answer)


async def store_closed_sessions(
    bot: BotUnderTest, sessions: list[list[SessionMessage]]
) -> list[list[StoredMessage]]:
    """Real conversations stored with their own timestamps, each closed by /new in the store
    (which queues its consolidation exactly as the command does)."""
    store = bot.services.store
    real_clock = store.clock
    clock = SettableClock()
    store.clock = clock
    stored = []
    try:
        for session in sessions:
            stored.append(await store_session(store, clock, CHAT, session))
            await store.start_new_session(CHAT)
    finally:
        store.clock = real_clock
    return stored


async def wait_consolidated(bot: BotUnderTest, entries: int) -> None:
    """Until the worker has written `entries` history entries (polled, with a deadline)."""
    for _ in range(1500):
        if len(await bot.rows("SELECT id FROM history_entries")) >= entries:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"fewer than {entries} history entries after 30 s")


def consolidating(bot: BotUnderTest) -> None:
    """The hidden consolidation chain's head reads the transcript and summarises it."""
    bot.groq.set_default("*", Respond(summarising_call))


def first_cjk_run(text: str, size: int = 4) -> str:
    match = re.search(r"[\u4e00-\u9fff\u30a0-\u30ff]{" + str(size) + ",}", text)
    assert match, f"no CJK run in {text[:80]!r}"
    return match.group(0)[:size]


# --- recall ------------------------------------------------------------------------------------


async def test_recall_finds_a_history_entry_of_an_earlier_session_in_cjk(tmp_path: Path) -> None:
    sessions = oasst_conversations(("ja", "zh", "en", "pt-BR"), limit=8)
    async with bot_under_test(tmp_path) as bot:
        consolidating(bot)
        await store_closed_sessions(bot, sessions)
        await wait_consolidated(bot, len(sessions))

        target = next(s for s in sessions if re.search(r"[\u4e00-\u9fff]{4}", s[0].content))
        query = first_cjk_run(target[0].content)
        bot.openai.script(
            "gpt-5",
            ToolCallReply("recall", {"query": query, "limit": 3}),
            said_after_tools("Found it:"),
        )
        [shown] = await bot.ask(CHAT, f"{query}について前に話したよね？", language_code="ja")

        requests = openai_chat(bot)
        assert len(requests) == 2
        assert requests[0].tool_names() == CHAT_TOOL_ORDER
        [result] = requests[1].tool_results()
        first = unframed(result["content"])[1]
        stamp = target[0].at.strftime("%Y-%m-%d %H:%M")
        # The best hit is the user's own words in that session (kept in the archive after its
        # consolidation), dated with their own time; the session's summary follows.
        assert first.startswith(f"1. [{stamp} UTC] (the user's own words, archived session)")
        assert query in first
        summary = next(line for line in unframed(result["content"]) if "(summary of" in line)
        assert f"[{stamp} UTC] (summary of an earlier session)" in summary
        assert query in shown.text and "Found it:" in shown.text
        # The tool result was framed as data, with the nonce the system prompt announces.
        tag = unframed(result["content"]) and result["content"].split("\n")[0]
        assert f"inside a pair of tags named {tag[1:-1]}:" in requests[1].system_text()


async def test_recall_reads_a_closed_session_not_consolidated_yet(tmp_path: Path) -> None:
    export = telegram_export("database-isolation-level", limit=40)
    async with bot_under_test(tmp_path) as bot:
        # Every consolidation model fails: the closed session keeps its messages.
        for fake in (bot.groq, bot.openai, bot.anthropic):
            fake.set_default("*", Fault("server_500"))
        bot.openai.set_default("gpt-5", Reply("unused"))
        await store_closed_sessions(bot, [export])
        word = next(
            w
            for m in export
            for w in re.findall(r"[A-Za-z]{9,}", m.content)
            if w.lower() not in {"isolation", "transaction"}
        )
        bot.openai.script(
            "gpt-5", ToolCallReply("recall", {"query": word}), said_after_tools("Earlier:")
        )
        await bot.ask(CHAT, f"what did the group say about {word}?")

        assert await bot.rows("SELECT id FROM history_entries") == []
        [result] = openai_chat(bot)[-1].tool_results()
        lines = unframed(result["content"])
        assert "not summarised yet" in lines[1] and word.lower() in lines[1].lower()
        source = next(m for m in export if word in m.content)
        assert f"[{source.at.strftime('%Y-%m-%d')}" in result["content"]


# --- remember / forget_fact / receipts ----------------------------------------------------------


async def test_remember_shows_a_receipt_and_the_fact_is_in_the_next_request(
    tmp_path: Path,
) -> None:
    async with bot_under_test(tmp_path) as bot:
        fact = "Daughter's name is Ana"
        bot.openai.script(
            "gpt-5",
            ToolCallReply("remember", {"fact": fact}, text="Sure. "),
            Reply("I will keep that in mind."),
            Reply("Her name is Ana."),
        )
        await bot.ask(CHAT, "Remember that my daughter's name is Ana")
        await bot.wait_idle(CHAT)
        # Streamed as drafts: the round's text became a message before the tool ran, the
        # answer and its receipt follow it.
        sure, shown = bot.messages(CHAT)
        assert sure.text == "Sure."
        assert shown.text.splitlines()[0] == "I will keep that in mind."
        assert shown.text.splitlines()[-1] == f"🧠 Remembered: {fact}"

        first, second = openai_chat(bot)
        assert fact not in first.system_text()
        assert memory_block(second.system_text()) == f"- {fact}"
        [result] = second.tool_results()
        assert unframed(result["content"]) == [f"saved to long-term memory: - {fact}"]

        # The same session goes on: its next turn sees the fact and the exact tool exchange.
        await bot.ask(CHAT, "What is my daughter's name?")
        third = openai_chat(bot)[-1]
        assert f"- {fact}" in third.system_text()
        assert [c["name"] for c in third.tool_calls()] == ["remember"]
        assert len(third.tool_results()) == 1
        rows = await bot.rows("SELECT role, content, tool_call_id FROM messages ORDER BY id")
        assert [r["role"] for r in rows] == [
            "user", "assistant", "tool", "assistant", "user", "assistant"
        ]  # fmt: skip
        sessions = await bot.rows("SELECT DISTINCT session_id FROM messages")
        assert len(sessions) == 1


async def test_forget_fact_removes_the_line_with_a_receipt_in_the_users_language(
    tmp_path: Path,
) -> None:
    async with bot_under_test(tmp_path) as bot:
        bot.openai.script(
            "gpt-5",
            ToolCallReply("remember", {"fact": "The user smokes"}),
            Reply("Noted."),
            ToolCallReply("forget_fact", {"fact": "user smokes"}),
            Reply("わかりました。"),
        )
        await bot.ask(CHAT, "Remember that I smoke")
        [shown] = await bot.ask(CHAT, "タバコのことは忘れて", language_code="ja")
        assert shown.text.splitlines()[-1] == "🗑 忘れました: The user smokes"
        last = openai_chat(bot)[-1]
        assert memory_block(last.system_text()) is None  # the only line is gone
        [memory] = await bot.rows("SELECT content FROM long_term_memory")
        assert memory["content"] == ""


async def test_a_claimed_save_without_a_call_gets_no_receipt(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        bot.openai.script("gpt-5", Reply("Saved! I will remember that your dog is Rex."))
        [shown] = await bot.ask(CHAT, "Remember my dog is Rex")
        assert shown.text == "Saved! I will remember that your dog is Rex."
        assert "🧠" not in shown.text
        assert await bot.rows("SELECT content FROM long_term_memory") == []


async def test_a_refused_write_gets_no_receipt(tmp_path: Path) -> None:
    """Over MEMORY_MAX_CHARS: the model is told why (and can say so), the user sees no receipt."""
    async with bot_under_test(tmp_path, MEMORY_MAX_CHARS=500) as bot:
        bot.openai.script(
            "gpt-5",
            ToolCallReply("remember", {"fact": "x" * 480}),
            ToolCallReply("remember", {"fact": "y" * 100}),
            said_after_tools("Could not save:"),
        )
        [shown] = await bot.ask(CHAT, "Remember these two long things")
        assert shown.text.count("🧠") == 1
        assert "over its limit of 500" in shown.text
        [memory] = await bot.rows("SELECT content FROM long_term_memory")
        assert memory["content"] == "- " + "x" * 480


# --- the loop's limits and failures --------------------------------------------------------------


async def test_agent_max_steps_stops_a_model_that_calls_tools_forever(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path, AGENT_MAX_STEPS=2) as bot:

        def forever(request: RecordedRequest) -> ToolCallReply | Reply:
            if request.allows_tool_call():
                return ToolCallReply("recall", {"query": "anything at all"})
            return Reply("Here is my answer without more searching.")

        bot.openai.set_default("gpt-5", Respond(forever))
        [shown] = await bot.ask(CHAT, "Search forever please")
        assert shown.text == "Here is my answer without more searching."
        requests = openai_chat(bot)
        assert len(requests) == 3
        assert [r.tool_choice() for r in requests] == [None, None, "none"]
        assert len(requests[-1].tool_results()) == 2
        rows = await bot.rows("SELECT role FROM messages ORDER BY id")
        assert [r["role"] for r in rows] == [
            "user", "assistant", "tool", "assistant", "tool", "assistant"
        ]  # fmt: skip


async def test_fallback_continues_the_tool_loop_from_the_same_results(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        bot.openai.script(
            "gpt-5",
            ToolCallReply("remember", {"fact": "Prefers window seats"}),
            *[Fault("server_500")] * 4,
        )
        bot.openai.script("gpt-5-mini", said_after_tools("Fallback read:"))
        [shown] = await bot.ask(CHAT, "Remember I prefer window seats")

        primary = openai_chat(bot)
        [fallback] = openai_chat(bot, "gpt-5-mini")
        assert len(primary) == 5  # one tool round, then the failing request and its 3 retries
        first_call = [c["id"] for c in primary[1].tool_calls()]
        assert [c["id"] for c in fallback.tool_calls()] == first_call
        assert fallback.tool_results() == primary[1].tool_results()
        assert "- Prefers window seats" in fallback.system_text()
        assert fallback.tool_names() == CHAT_TOOL_ORDER
        lines = shown.text.splitlines()
        assert lines[0].startswith("Fallback read: saved to long-term memory")
        assert "🧠 Remembered: Prefers window seats" in lines
        assert lines[-1] == "Answered by GPT-5 mini (fallback for GPT-5)."
        usage = await bot.rows("SELECT model_id FROM usage WHERE purpose = 'chat' ORDER BY id")
        assert [u["model_id"] for u in usage] == ["gpt-5", "gpt-5-mini"]


async def test_a_model_without_tools_is_offered_none(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog.json"
    catalog.write_text(json.dumps({"models": [{"id": "gpt-5", "tools": False}]}))
    async with bot_under_test(tmp_path, MODEL_CATALOG_FILE=catalog) as bot:
        bot.openai.script("gpt-5", ToolCallReply("remember", {"fact": "x"}, text="Plain words."))
        [shown] = await bot.ask(CHAT, "Remember x")
        assert shown.text == "Plain words."
        [request] = openai_chat(bot)
        assert "tools" not in request.body and "recall" not in request.system_text()


# --- the context budget --------------------------------------------------------------------------


async def test_a_session_over_the_context_budget_is_still_answered(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog.json"
    catalog.write_text(json.dumps({"models": [{"id": "gpt-5", "context_window": 6000}]}))
    history = telegram_export("software-testing", limit=160)
    async with bot_under_test(
        tmp_path, MODEL_CATALOG_FILE=catalog, MEMORY_WINDOW=1000, MEMORY_KEEP_RECENT=10
    ) as bot:
        store = bot.services.store
        for message in history:
            await store.add_message(CHAT, message.role, message.content, user_id=CHAT)
        bot.openai.script("gpt-5", Reply("Still here."))
        [shown] = await bot.ask(CHAT, "And now?")
        assert shown.text == "Still here."

        [request] = openai_chat(bot)
        sent = request.body["messages"]
        note = re.search(r"Note: (\d+) earlier message\(s\)", request.system_text())
        assert note is not None and "call `recall`" in request.system_text()
        omitted = int(note.group(1))
        assert omitted > 0 and len(sent) - 1 + omitted == len(history) + 1
        # The newest messages are the ones kept, in order, ending with the question.
        assert sent[-1]["content"] == "And now?"
        assert [m["content"] for m in sent[1:-1]] == [m.content for m in history[omitted:]]
        # What was sent fits the window minus the reply reserve, by a pessimistic count.
        size = len(json.dumps(sent, ensure_ascii=False).encode()) * 2 // 5
        assert size < 6000 - 1500
        # Nothing was deleted.
        rows = await bot.rows("SELECT COUNT(*) AS n FROM messages")
        assert rows[0]["n"] == len(history) + 2


async def test_a_fallback_without_tools_reads_the_tool_round_as_text(tmp_path: Path) -> None:
    """GPT-5 saves a fact, then breaks; its fallback takes no tools (catalog `tools: false`):
    it is sent neither tools nor tool-shaped messages, yet what the round did reaches it."""
    catalog = tmp_path / "catalog.json"
    catalog.write_text(json.dumps({"models": [{"id": "gpt-5-mini", "tools": False}]}))
    async with bot_under_test(tmp_path, MODEL_CATALOG_FILE=catalog) as bot:
        bot.openai.script(
            "gpt-5",
            ToolCallReply("remember", {"fact": "Allergic to peanuts"}),
            *[Fault("server_500")] * 4,
        )
        bot.openai.script("gpt-5-mini", Reply("Noted, no peanuts."))
        [shown] = await bot.ask(CHAT, "Remember I am allergic to peanuts")
        [request] = openai_chat(bot, "gpt-5-mini")
        assert "tools" not in request.body and "tool_choice" not in request.body
        roles = [m["role"] for m in request.body["messages"]]
        assert "tool" not in roles
        assert not any(m.get("tool_calls") for m in request.body["messages"])
        as_text = json.dumps(request.body["messages"], ensure_ascii=False)
        assert "[called tool remember" in as_text and "saved to long-term memory" in as_text
        assert "- Allergic to peanuts" in request.system_text()
        assert "🧠 Remembered: Allergic to peanuts" in shown.text


LONG_ANSWER = "".join(f"word{i:03d} " for i in range(400))


async def test_cancel_in_the_middle_of_the_loop_keeps_the_round_and_what_was_shown(
    tmp_path: Path,
) -> None:
    async with bot_under_test(tmp_path) as bot:
        bot.openai.script(
            "gpt-5",
            ToolCallReply("recall", {"query": "holiday"}, prompt_tokens=1234, completion_tokens=21),
            # Every chunk different (litellm ends a stream repeating one chunk by itself).
            Reply(LONG_ANSWER, chunk_chars=8, chunk_delay=0.02),
        )
        bot.say(CHAT, "tell me everything about the holiday")
        await bot.wait(lambda: any("word" in text for text in bot.showing(CHAT)))
        bot.say(CHAT, "/cancel")
        await bot.wait_idle(CHAT)
        await bot.wait(lambda: len(openai_chat(bot)) == 2)
        # The second round's request was stopped at the provider, not left streaming.
        await bot.wait(lambda: bot.openai.streams_cut == 1, timeout=30.0)
        rows = await bot.rows("SELECT role, content, tool_calls FROM messages ORDER BY id")
        assert [r["role"] for r in rows] == ["user", "assistant", "tool", "assistant"]
        assert json.loads(rows[1]["tool_calls"])[0]["name"] == "recall"
        assert 0 < rows[3]["content"].count("word") < 400
        # Both rounds are billed: the finished tool round with the provider's usage, and the
        # cancelled answer estimated from its prompt and the words received before the cut.
        usage = await bot.rows(
            "SELECT model_id, prompt_tokens, completion_tokens, cost_usd, estimated FROM usage "
            "WHERE purpose = 'chat' ORDER BY id"
        )
        [tool_round, cancelled] = usage
        gpt5 = bot.services.catalog.get("gpt-5")
        assert tool_round == {
            "model_id": "gpt-5",
            "prompt_tokens": 1234,
            "completion_tokens": 21,
            "cost_usd": pytest.approx(gpt5.cost_usd(1234, 21)),
            "estimated": 0,
        }
        assert (cancelled["model_id"], cancelled["estimated"]) == ("gpt-5", 1)
        assert cancelled["prompt_tokens"] > 0
        assert 0 < cancelled["completion_tokens"] < len(LONG_ANSWER) // 4
        assert cancelled["cost_usd"] > 0
