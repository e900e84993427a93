"""End to end: chat turns streamed from the fake providers into the fake Telegram."""

from __future__ import annotations

import json
from pathlib import Path

from tests.fakes.providers import Reply
from tests.fakes.telegram import utf16_units
from tests.support.e2e_bot import KEYS, OWNER, TESTDATA, bot_under_test

CHAT = OWNER  # private chat id = user id


def last_user_text(request: object) -> str:
    return request.body["messages"][-1]["content"]  # type: ignore[attr-defined]


async def test_streamed_reply_is_edited_in_then_formatted(tmp_path: Path) -> None:
    # Streaming by edits, as in groups and with drafts turned off (drafts: test_e2e_drafts.py).
    async with bot_under_test(tmp_path, TELEGRAM_DRAFT_STREAMING="false") as bot:
        bot.openai.set_default(
            "*",
            Reply(
                "Here is **bold** and `code`, streamed in small pieces " * 4,
                chunk_chars=6,
                chunk_delay=0.03,
                prompt_tokens=21,
                completion_tokens=48,
            ),
        )
        shown = await bot.ask(CHAT, "Tell me something")
        assert len(shown) == 1
        final = shown[0]
        # Streamed: the message was edited while text arrived, then set to the final HTML.
        assert final.edits >= 2
        assert final.parse_mode == "HTML"
        assert "<b>bold</b>" in final.raw_text and "<code>code</code>" in final.raw_text
        assert final.text.count("Here is bold and code") == 4
        assert bot.tg.calls_of("sendChatAction"), "typing action while waiting"

        # One provider request, to the chat's model on its own gateway, with its own key.
        [(gateway, request)] = bot.chat_requests()
        assert (gateway, request.model, request.api_key) == ("openai", "gpt-5", KEYS["openai"])
        assert request.body["messages"][-1] == {"role": "user", "content": "Tell me something"}
        assert request.body["messages"][0]["role"] == "system"

        messages = await bot.rows("SELECT role, content, model_id FROM messages ORDER BY id")
        assert messages[0] == {"role": "user", "content": "Tell me something", "model_id": None}
        assert messages[1]["role"] == "assistant" and messages[1]["model_id"] == "gpt-5"
        assert messages[1]["content"].startswith("Here is **bold**")
        usage = await bot.rows(
            "SELECT model_id, purpose, prompt_tokens, completion_tokens FROM usage"
        )
        assert usage == [
            {"model_id": "gpt-5", "purpose": "chat", "prompt_tokens": 21, "completion_tokens": 48}
        ]


async def test_short_answer_arrives_as_one_message(tmp_path: Path) -> None:
    """A short answer at the production edit interval: ONE sendMessage with the formatted
    text, no plain-text message first and no edit, so nothing waits an edit interval."""
    async with bot_under_test(tmp_path, edit_interval=1.0) as bot:
        bot.openai.set_default("*", Reply("Short and **sweet**.", chunk_chars=4))
        calls_before = len(bot.tg.calls)
        shown = await bot.ask(CHAT, "Quick question")
        assert [m.text for m in shown] == ["Short and sweet."]
        turn_calls = [c for c in bot.tg.calls[calls_before:] if c.params.get("chat_id") == CHAT]
        sends = [c for c in turn_calls if c.method == "sendMessage"]
        assert len(sends) == 1 and sends[0].params.get("parse_mode") == "HTML"
        assert not [c for c in turn_calls if c.method == "editMessageText"]
        assert [c.method for c in turn_calls] == ["sendChatAction", "sendMessage"]


async def test_second_turn_sees_the_first(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        await bot.ask(CHAT, "My name is Zoë 👩🏽‍💻")
        await bot.ask(CHAT, "What is my name?")
        last = bot.chat_requests()[-1][1].body["messages"]
        assert [m["role"] for m in last] == ["system", "user", "assistant", "user"]
        assert last[1]["content"] == "My name is Zoë 👩🏽‍💻"
        assert last[2]["content"] == "echo: My name is Zoë 👩🏽‍💻"


async def test_turns_in_one_chat_are_serialised_chats_run_concurrently(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        bot.openai.set_default("*", Reply("slow answer", chunk_chars=2, chunk_delay=0.05))
        for i in range(3):
            bot.say(CHAT, f"first chat message {i}")
        for chat in (2001, 2002):
            bot.say(chat, f"hello from {chat}", user_id=OWNER)
        await bot.wait(lambda: len(bot.chat_requests()) == 5, timeout=30)
        await bot.wait(lambda: all(bot.services.turns.waiting(c) == 0 for c in (CHAT, 2001, 2002)))

        # Within the chat: strictly in order, each request carrying the previous answers.
        own = [
            r
            for _, r in bot.chat_requests()
            if r.body["messages"][-1]["content"].startswith("first")
        ]
        assert [r.body["messages"][-1]["content"] for r in own] == [
            f"first chat message {i}" for i in range(3)
        ]
        assert [len(r.body["messages"]) for r in own] == [2, 4, 6]
        # Across chats: the other chats did not wait for chat 1's three turns.
        others = [
            r
            for _, r in bot.chat_requests()
            if r.body["messages"][-1]["content"].startswith("hello")
        ]
        assert max(r.at for r in others) < own[-1].at


async def test_reply_longer_than_one_message_arrives_complete(tmp_path: Path) -> None:
    # Astral characters count two UTF-16 units each: the limit is in units, not characters.
    paragraphs = [f"Paragraph {i} 👩🏽‍💻: " + "lorem 𝔦𝔭𝔰𝔲𝔪 dolor sit amet " * 12 for i in range(40)]
    code = "```python\n" + "\n".join(f"print({i})" for i in range(60)) + "\n```"
    answer = "\n\n".join([*paragraphs[:20], code, *paragraphs[20:]])
    assert utf16_units(answer) > 2 * 4096
    assert utf16_units(answer) - len(answer) > 2000
    async with bot_under_test(tmp_path) as bot:
        bot.openai.set_default("*", Reply(answer, chunk_chars=400))
        await bot.ask(CHAT, "write a lot")
        await bot.wait_idle(CHAT)
        shown = bot.messages(CHAT)
        assert len(shown) >= 3
        assert all(utf16_units(m.text) <= 4096 for m in shown)
        joined = "\n".join(m.text for m in shown)
        for paragraph in paragraphs:
            assert paragraph.strip() in joined
        # The code block is never cut: one message holds all of it, as a <pre> block.
        holders = [m for m in shown if "print(0)" in m.text]
        assert len(holders) == 1 and "print(59)" in holders[0].text
        assert "<pre>" in holders[0].raw_text or "<pre><code" in holders[0].raw_text


async def test_markdown_the_fake_rejects_arrives_as_plain_text(tmp_path: Path) -> None:
    """A model answer whose HTML rendering Telegram refuses still reaches the user, as text."""
    stress = (TESTDATA / "tg-markdown" / "telegramify-markdown" / "exp1.md").read_text(
        encoding="utf-8"
    )
    # Streamed by edits: the final HTML is an edit of the streamed message.
    async with bot_under_test(tmp_path, TELEGRAM_DRAFT_STREAMING="false") as bot:
        # One chunk: the streamed part is a single plain sendMessage, so the first edit is the
        # formatted final text. The fake's own parser (tdlib's rules) refuses it: exp1.md's
        # MarkdownV2 nesting becomes <u><i>…</u></i> (see tests/bot/test_render.py).
        bot.openai.set_default("*", Reply(stress, chunk_chars=len(stress)))
        await bot.ask(CHAT, "format stress")
        await bot.wait_idle(CHAT)
        edits = bot.tg.calls_of("editMessageText")
        assert edits[0].params.get("parse_mode") == "HTML"
        assert not edits[0].ok and "can't parse entities: Unmatched end tag" in str(edits[0].error)
        shown = bot.messages(CHAT)
        assert shown[0].parse_mode is None  # the same message, now as plain text
        joined = "".join(m.text for m in shown)
        words = [w for w in stress.split() if w.isalpha() and len(w) > 3]
        assert len(words) > 20 and all(w in joined for w in words)


async def test_telegram_retry_after_is_waited_out_without_duplicates(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        bot.openai.set_default("*", Reply("Penalty-proof answer, one message only.", chunk_chars=5))
        bot.tg.inject_error("sendMessage", count=1, retry_after=1)
        await bot.ask(CHAT, "hello under flood control")
        await bot.wait_idle(CHAT)
        shown = bot.messages(CHAT)
        assert [m.text for m in shown] == ["Penalty-proof answer, one message only."]
        sends = bot.tg.calls_of("sendMessage")
        # The refused send was retried only after the penalty (1 s), never during it.
        assert len(sends) == 2
        assert sends[1].at - sends[0].at >= 0.95


async def test_naughty_strings_survive_the_round_trip(tmp_path: Path) -> None:
    strings = json.loads((TESTDATA / "blns" / "blns.json").read_text(encoding="utf-8"))
    # Strings starting with "/" are commands to Telegram clients; see test_e2e_commands.
    usable = [s for s in strings if s.strip() and not s.startswith("/")]
    picked = usable[::50]
    async with bot_under_test(tmp_path) as bot:
        for text in picked:
            bot.openai.script("gpt-5", Reply(text, chunk_chars=3))
            await bot.ask(CHAT, text)
        await bot.wait_idle(CHAT)
        users = await bot.rows("SELECT content FROM messages WHERE role = 'user' ORDER BY id")
        assistants = await bot.rows(
            "SELECT content FROM messages WHERE role = 'assistant' ORDER BY id"
        )
        assert [r["content"] for r in users] == picked
        assert [r["content"] for r in assistants] == picked
        sent = [r.body["messages"][-1]["content"] for _, r in bot.chat_requests()]
        assert sent == picked
        assert len(bot.messages(CHAT)) == len(picked)


async def test_many_chats_at_once_each_get_their_own_answer(tmp_path: Path) -> None:
    # A request budget that 20 simultaneous chats do not exhaust (else gpt-5-mini answers some).
    async with bot_under_test(tmp_path, OPENAI_RPS=1000) as bot:
        chats = list(range(3001, 3021))
        for chat in chats:
            bot.say(chat, f"question from {chat}")
        await bot.wait(lambda: all(len(bot.messages(c)) == 1 for c in chats), timeout=30)
        for chat in chats:
            await bot.wait_idle(chat)  # the turn is over: no second message can follow
            assert bot.texts(chat) == [f"echo: question from {chat}"]


async def test_draft_streaming_in_private_chats_by_default(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        answer = "Drafts show the answer growing without editing a message. " * 3
        bot.openai.set_default("*", Reply(answer, chunk_chars=6, chunk_delay=0.03))
        [final] = await bot.ask(CHAT, "draft please")
        await bot.wait_idle(CHAT)
        drafts = bot.tg.drafts(CHAT)
        assert len(drafts) >= 2, "the answer streamed as drafts"
        assert final.edits == 0, "no edits: the message was sent once, complete"
        assert final.text == answer.strip()
        # Groups have no drafts: the same setting streams there by editing.
        group = -100777
        before = len(bot.tg.calls_of("sendMessageDraft"))
        await bot.ask(group, "@mnemo_test_bot draft?", chat_type="supergroup")
        await bot.wait_idle(group)
        assert len(bot.tg.calls_of("sendMessageDraft")) == before
        assert bot.messages(group)[0].edits >= 1
