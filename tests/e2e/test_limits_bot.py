"""Rate limit, input size and split-message joining, end to end through real PTB and litellm."""

from __future__ import annotations

from pathlib import Path

from bot.ui.render import TELEGRAM_TEXT_LIMIT
from tests.bot.test_joiner import _long_real_text, client_split
from tests.support.e2e_bot import OWNER, bot_under_test


async def test_rate_limit_refuses_once_then_stays_silent(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path, USER_MESSAGES_PER_MINUTE=2) as bot:
        await bot.ask(OWNER, "one")
        await bot.ask(OWNER, "two")
        [refusal] = await bot.ask(OWNER, "three")
        assert refusal.text.startswith("You are sending messages faster than this bot allows.")
        assert "Please wait " in refusal.text
        before = len(bot.messages(OWNER))
        fourth = bot.tg.push(bot.tg.make_text_update(OWNER, OWNER, "four"))
        await bot.wait_handled(fourth)
        assert len(bot.messages(OWNER)) == before, "only the first refusal of a burst is answered"
        assert len(bot.openai.requests) == 2
        stored = await bot.rows("SELECT content FROM messages WHERE role = 'user' ORDER BY id")
        assert [row["content"] for row in stored] == ["one", "two"]
        # Commands are not rate limited: /usage still answers.
        [usage] = await bot.ask(OWNER, "/usage")
        assert "requests: 2" in usage.text


async def test_input_over_the_size_limit_gets_a_clear_answer(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path, MAX_INPUT_CHARS=500) as bot:
        text = _long_real_text("en", 600)
        [answer] = await bot.ask(OWNER, text)
        assert answer.text.startswith(f"Your message is too long ({len(text)} characters;")
        assert "the limit is 500" in answer.text
        assert bot.openai.requests == []
        assert await bot.rows("SELECT id FROM messages") == []
        [ok] = await bot.ask(OWNER, "short one")
        assert ok.text == "echo: short one"


async def test_client_split_long_message_is_one_turn(tmp_path: Path) -> None:
    original = _long_real_text("en", 2 * TELEGRAM_TEXT_LIMIT + 500)
    parts = client_split(original, keep_space=True)
    assert len(parts) >= 3
    async with bot_under_test(tmp_path, SPLIT_MESSAGE_WINDOW=5, MAX_INPUT_CHARS=100_000) as bot:
        ids = [bot.tg.push(bot.tg.make_text_update(OWNER, OWNER, part)) for part in parts]
        await bot.wait(lambda: len(bot.openai.requests) >= 1)
        await bot.wait_handled(ids[-1])
        await bot.wait_idle(OWNER)

        [request] = bot.openai.requests
        assert request.body["messages"][-1] == {"role": "user", "content": original}
        stored = await bot.rows("SELECT role, content FROM messages ORDER BY id")
        assert stored[0] == {"role": "user", "content": original}
        assert [row["role"] for row in stored] == ["user", "assistant"]
        # One answer (the echo is long, so Telegram gets it in several messages, once).
        shown = "".join(m.text for m in bot.messages(OWNER))
        assert shown.count("echo: ") == 1
