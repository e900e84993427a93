"""Native drafts with Telegram's Stop button, end to end: the real PTB polling the fake Bot API
(which keeps each chat's current draft, hides it when a message is sent, refuses drafts in
groups and delivers `stopped_message_generation` updates), the real litellm streaming from the
fake provider, a real SQLite file.

Whatever happens — a Stop mid-answer, during a tool call, racing the end, a refused or
rate-limited draft, a restart — the chat gets its answer once, as real messages.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from bot.ui.i18n import t
from bot.ui.render import plain_text, split_for_telegram, utf16_len
from models.tokens import count_text
from tests.bot.test_shutdown_replay import Served
from tests.fakes.providers import Reply, ToolCallReply
from tests.fakes.web import FakeSite
from tests.support.e2e_bot import (
    FRIEND,
    OWNER,
    TESTDATA,
    BotUnderTest,
    FakeServers,
    bot_under_test,
    confirmed,
    fake_settings,
)
from tests.support.streamed_text import content

CHAT = OWNER  # a private chat's id is its user's
MARKDOWN = TESTDATA / "tg-markdown" / "telegramify-markdown"
# Every chunk different: litellm ends a stream that repeats one chunk 100 times by itself.
LONG_ANSWER = "".join(f"word{i:03d} " for i in range(400))  # 400 chunks 20 ms apart: 8 s
STOPPED = t("reply_cancelled")


def _sends(bot: BotUnderTest, chat_id: int, since: int = 0) -> list[str]:
    return [
        c.params["text"]
        for c in bot.tg.calls[since:]
        if c.method == "sendMessage" and c.ok and c.params.get("chat_id") == chat_id
    ]


async def _first_draft(bot: BotUnderTest, chat_id: int) -> int:
    """Until the chat shows a draft of the answer; its draft_id."""
    await bot.wait(lambda: bool(bot.tg.current_drafts(chat_id)))
    [draft_id] = bot.tg.current_drafts(chat_id)
    return draft_id


async def test_a_long_answer_streams_as_drafts_then_arrives_in_one_message(
    tmp_path: Path,
) -> None:
    markdown = (MARKDOWN / "exp1.md").read_text(encoding="utf-8")
    async with bot_under_test(tmp_path) as bot:
        bot.openai.set_default("*", Reply(markdown, chunk_chars=40, chunk_delay=0.02))
        await bot.ask(CHAT, "format stress, please")
        await bot.wait_idle(CHAT)
        drafts = bot.tg.drafts(CHAT)
        assert len(drafts) >= 3, "the answer grew as a draft"
        assert all(d["can_stop"] is True and d["keep_on_stop"] is True for d in drafts)
        assert len({d["draft_id"] for d in drafts}) == 1
        assert not bot.tg.calls_of("editMessageText")
        [sent] = _sends(bot, CHAT)  # one real message: the formatted answer
        [message] = bot.messages(CHAT)
        assert message.raw_text == sent
        assert bot.tg.current_drafts(CHAT) == {}  # the message replaced the draft
        words = [w for w in markdown.split() if w.isalpha() and len(w) > 3]
        assert len(words) > 20 and all(w in message.text for w in words)


async def test_stop_mid_answer_ends_the_model_call_and_sends_the_partial_text_once(
    tmp_path: Path,
) -> None:
    async with bot_under_test(tmp_path) as bot:
        bot.openai.set_default("*", Reply(LONG_ANSWER, chunk_chars=8, chunk_delay=0.02))
        bot.say(CHAT, "talk for a long time")
        await _first_draft(bot, CHAT)
        pressed = bot.tg.press_stop(CHAT)
        await bot.wait(lambda: any(STOPPED in text for text in bot.texts(CHAT)))
        await bot.wait_idle(CHAT)
        # The request itself was stopped: the provider saw the client hang up before the end.
        await bot.wait(lambda: bot.openai.streams_cut == 1, timeout=30.0)
        [reply] = bot.messages(CHAT)
        assert reply.text.startswith("word000") and reply.text.endswith(STOPPED)
        shown = reply.text.removesuffix(STOPPED).strip()
        assert LONG_ANSWER.startswith(shown) and shown.count("word") < 400
        assert len(_sends(bot, CHAT)) == 1 and not bot.tg.calls_of("editMessageText")
        assert bot.tg.current_drafts(CHAT) == {}  # kept on Stop, then replaced by the message
        # What the user saw is stored, and only what was generated until the stop is billed.
        rows = await bot.rows("SELECT role, content FROM messages ORDER BY id")
        assert [r["role"] for r in rows] == ["user", "assistant"]
        assert LONG_ANSWER.startswith(rows[1]["content"].strip())
        [usage] = await bot.rows("SELECT model_id, completion_tokens, cost_usd FROM usage")
        assert usage["model_id"] == "gpt-5" and usage["cost_usd"] > 0
        assert 0 < usage["completion_tokens"] < count_text(LONG_ANSWER) / 2
        # A second press on the same draft, after the reply ended, changes nothing.
        calls = len(bot.tg.calls)
        late = bot.tg.push_stop(CHAT, pressed)
        [nothing] = await bot.ask(CHAT, "/cancel")
        await bot.wait(lambda: confirmed(bot.tg, late))
        assert nothing.text == t("nothing_to_cancel")
        assert _sends(bot, CHAT, since=calls) == [t("nothing_to_cancel")]


async def test_stop_with_another_draft_id_or_from_another_chat_is_ignored(
    tmp_path: Path,
) -> None:
    answer = "".join(f"piece{i:03d} " for i in range(120))
    async with bot_under_test(tmp_path) as bot:
        bot.openai.set_default("*", Reply(answer, chunk_chars=8, chunk_delay=0.02))
        bot.say(CHAT, "a medium answer")
        draft_id = await _first_draft(bot, CHAT)
        foreign = bot.tg.push_stop(CHAT, draft_id + 1)
        elsewhere = bot.tg.push_stop(FRIEND, draft_id)
        in_topic = bot.tg.push_stop(CHAT, draft_id, thread_id=5)
        await bot.wait(lambda: confirmed(bot.tg, in_topic))
        # The presses were fetched while the answer still streamed: drafts go on after them.
        seen = len(bot.tg.drafts(CHAT))
        await bot.wait(lambda: len(bot.tg.drafts(CHAT)) >= seen + 2)
        assert confirmed(bot.tg, foreign) and confirmed(bot.tg, elsewhere)
        await bot.wait(lambda: bool(bot.messages(CHAT)))
        await bot.wait_idle(CHAT)
        assert bot.texts(CHAT) == [answer.strip()]
        assert bot.openai.streams_cut == 0
        assert bot.texts(FRIEND) == []


async def test_stop_after_the_end_does_nothing(tmp_path: Path) -> None:
    answer = "".join(f"item{i:03d} " for i in range(60))
    async with bot_under_test(tmp_path) as bot:
        bot.openai.set_default("*", Reply(answer, chunk_chars=8, chunk_delay=0.02))
        bot.say(CHAT, "a short list")
        draft_id = await _first_draft(bot, CHAT)
        # The final message meets a flood wait: a Stop pressed while it waits races the end.
        bot.tg.inject_error("sendMessage", retry_after=1)
        await bot.wait(lambda: bool(bot.tg.calls_of("sendMessage")))
        raced = bot.tg.push_stop(CHAT, draft_id)
        await bot.wait(lambda: bool(bot.messages(CHAT)))
        await bot.wait_idle(CHAT)
        await bot.wait(lambda: confirmed(bot.tg, raced))
        after = bot.tg.push_stop(CHAT, draft_id)
        [ack] = await bot.ask(CHAT, "/cancel")  # handled after the Stop: the bot is idle
        await bot.wait(lambda: confirmed(bot.tg, after))
        assert ack.text == t("nothing_to_cancel")
        assert bot.texts(CHAT) == [answer.strip(), t("nothing_to_cancel")]
        assert bot.openai.streams_cut == 0


async def test_a_tool_round_inside_a_drafted_answer_flushes_its_text(tmp_path: Path) -> None:
    second = "".join(f"found{i:02d} " for i in range(40))
    async with bot_under_test(tmp_path) as bot:
        bot.openai.script(
            "gpt-5",
            ToolCallReply(
                "recall",
                {"query": "library hours"},
                text="Let me look at my notes about the library first.",
                chunk_chars=4,
                chunk_delay=0.05,
            ),
            Reply(second, chunk_chars=6, chunk_delay=0.03),
        )
        await bot.ask(CHAT, "when does the library open?")
        await bot.wait(lambda: len(bot.messages(CHAT)) == 2)
        await bot.wait_idle(CHAT)
        first, last = bot.messages(CHAT)
        assert first.text == "Let me look at my notes about the library first."
        assert last.text == second.strip()
        # The first round's text was a real message before the tools ran and the model was
        # asked again: nothing vanished with its draft.
        requests = [r for _, r in bot.chat_requests()]
        assert len(requests) == 2 and first.sent_at < requests[1].at
        assert first.edits == 0
        drafted = [d for d in bot.tg.drafts(CHAT)]
        before = {d["draft_id"] for d in drafted if d["at"] < first.sent_at}
        after = {d["draft_id"] for d in drafted if d["at"] > first.sent_at}
        assert before and after and not before & after  # a new draft for the second round
        assert bot.tg.current_drafts(CHAT) == {}
        rows = await bot.rows("SELECT role, content FROM messages ORDER BY id")
        assert [r["role"] for r in rows] == ["user", "assistant", "tool", "assistant"]


async def test_stop_during_a_tool_call_stops_after_it_and_applies_no_write(
    tmp_path: Path,
) -> None:
    page = b"<html><body><article><p>The library opens at nine.</p></article></body></html>"
    async with (
        FakeSite() as site,
        bot_under_test(tmp_path, WEB_ALLOW_PRIVATE="127.0.0.1") as bot,
    ):
        site.pages["hours"] = ("text/html; charset=utf-8", page)
        site.gates["hours"] = gate = asyncio.Event()
        bot.openai.script(
            "gpt-5",
            ToolCallReply(
                "web_read",
                {"url": site.url("/page/hours")},
                text="Reading the library's page now.",
                also=[("remember", {"fact": "The library opens at nine"})],
                chunk_chars=4,
                chunk_delay=0.05,
            ),
            Reply("never asked: the answer was stopped"),
        )
        bot.say(CHAT, "when does the library open? remember it")
        await bot.wait(lambda: bool(bot.tg.drafts(CHAT)))
        await bot.wait(lambda: any(path == "/page/hours" for _, path in site.paths))
        # The user pressed Stop on the draft just as the round's text was sealed: the press
        # arrives while the page is being read.
        bot.tg.push_stop(CHAT, bot.tg.drafts(CHAT)[-1]["draft_id"])
        await bot.wait(lambda: bot.services.turns.stopping(CHAT))
        gate.set()  # the tool call ends normally
        await bot.wait(lambda: any(STOPPED in text for text in bot.texts(CHAT)))
        await bot.wait_idle(CHAT)
        assert bot.texts(CHAT) == [f"Reading the library's page now.\n\n{STOPPED}"]
        assert len(bot.chat_requests()) == 1, "the model was not asked again"
        # The read finished (its result is stored); the write after it was neither run nor held.
        tool_rows = await bot.rows("SELECT content FROM messages WHERE role = 'tool' ORDER BY id")
        assert len(tool_rows) == 2
        assert "The library opens at nine" in tool_rows[0]["content"]
        assert "not run: the user stopped" in tool_rows[1]["content"]
        assert await bot.rows("SELECT id FROM pending_writes") == []
        [memory] = await bot.ask(CHAT, "/memory")
        assert "library" not in memory.text.lower()
        [usage] = await bot.rows("SELECT model_id FROM usage WHERE purpose = 'chat'")
        assert usage["model_id"] == "gpt-5"


async def test_an_answer_past_4096_characters_continues_in_real_messages(tmp_path: Path) -> None:
    markdown = (MARKDOWN / "t_longtext.md").read_text(encoding="utf-8")
    assert utf16_len(markdown) > 2 * 4096
    async with bot_under_test(tmp_path) as bot:
        bot.openai.set_default("*", Reply(markdown, chunk_chars=120, chunk_delay=0.02))
        bot.say(CHAT, "a very long answer")
        # While it streams, the text past one message is a real message already.
        await bot.wait(lambda: bool(bot.messages(CHAT)) and bool(bot.tg.current_drafts(CHAT)))
        await bot.wait_idle(CHAT)
        messages = bot.messages(CHAT)
        assert len(messages) >= 3
        assert all(utf16_len(m.text) <= 4096 for m in messages)
        assert all(utf16_len(d["parsed_text"]) <= 4096 for d in bot.tg.drafts(CHAT))
        expected = "".join(plain_text(piece) for piece in split_for_telegram(markdown))
        assert content("".join(m.text for m in messages)) == content(expected)
        assert bot.tg.current_drafts(CHAT) == {}


async def test_a_refused_draft_or_a_429_on_it_sends_the_answer_once(tmp_path: Path) -> None:
    answer = "".join(f"line{i:03d} " for i in range(80))
    async with bot_under_test(tmp_path) as bot:
        bot.openai.set_default("*", Reply(answer, chunk_chars=8, chunk_delay=0.02))
        # A draft refused (the client is too old for drafts, say): edits for that reply.
        bot.tg.inject_error("sendMessageDraft", description="Bad Request: TEXTDRAFT_PEER_INVALID")
        [first] = await bot.ask(CHAT, "first")
        await bot.wait_idle(CHAT)
        assert first.text == answer.strip() and first.edits >= 1
        assert len(bot.tg.calls_of("sendMessageDraft")) == 1
        # A flood wait on a draft: waited out, then drafts go on; still one message.
        bot.tg.inject_error("sendMessageDraft", retry_after=1)
        calls = len(bot.tg.calls)
        [second] = await bot.ask(CHAT, "second")
        await bot.wait_idle(CHAT)
        assert second.text == answer.strip() and second.edits == 0
        assert _sends(bot, CHAT, since=calls) == [second.raw_text]
        drafts = [c for c in bot.tg.calls[calls:] if c.method == "sendMessageDraft"]
        assert not drafts[0].ok and any(c.ok for c in drafts[1:])
        assert len(bot.messages(CHAT)) == 2


async def test_a_group_streams_by_edits_and_never_drafts(tmp_path: Path) -> None:
    answer = "".join(f"member{i:03d} " for i in range(60))
    group = -100777
    async with bot_under_test(tmp_path) as bot:
        bot.openai.set_default("*", Reply(answer, chunk_chars=8, chunk_delay=0.02))
        await bot.ask(group, "@mnemo_test_bot tell us", chat_type="supergroup")
        await bot.wait_idle(group)
        assert not bot.tg.calls_of("sendMessageDraft")
        [message] = bot.messages(group)
        assert message.text == answer.strip() and message.edits >= 1


async def test_a_restart_mid_answer_leaves_one_message_and_the_old_draft_stopless(
    tmp_path: Path,
) -> None:
    """The bot served as in production (its allowed updates, its graceful stop) is stopped
    while an answer streams as a draft, and started again."""
    async with FakeServers() as fakes:
        tg = fakes.tg
        settings = fake_settings(
            fakes, DATABASE_PATH=tmp_path / "bot.sqlite3", SHUTDOWN_GRACE_SECONDS=0.2
        )
        fakes.openai.set_default("*", Reply(LONG_ANSWER, chunk_chars=8, chunk_delay=0.02))
        served = Served(settings)
        tg.push(tg.make_text_update(CHAT, OWNER, "talk for a long time"))
        await tg.wait_for(lambda: bool(tg.current_drafts(CHAT)))
        [draft_id] = tg.current_drafts(CHAT)
        await served.stop()
        [interrupted] = tg.bot_messages(CHAT)
        assert interrupted.text.startswith("word000")
        assert interrupted.text.endswith(t("reply_interrupted"))
        assert tg.current_drafts(CHAT) == {}
        assert "stopped_message_generation" in (tg.allowed_updates or [])

        # A Stop on the old draft reaches the restarted bot: nothing runs, nothing is sent.
        fakes.openai.set_default("*", Reply("Fresh answer."))
        served = Served(settings)
        stale = tg.push_stop(CHAT, draft_id)
        tg.push(tg.make_text_update(CHAT, OWNER, "hello again"))
        await tg.wait_for(lambda: len(tg.bot_messages(CHAT)) == 2)
        await served.stop()
        assert confirmed(tg, stale)
        assert [m.text for m in tg.bot_messages(CHAT)][1] == "Fresh answer."
        assert len(fakes.openai.requests) == 2
