"""The memory feature end to end: real PTB against the fake Bot API, real litellm against the fake
providers. /new answers at once, the worker consolidates in the background, the next session's
prompt carries the memory, and /memory, /recall, /forget behave as a user expects."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.app import build_application, prepare, running
from bot.config import load_settings
from bot.services import MemoryFeature
from bot.ui.i18n import t
from bot.ui.render import split_plain, utf16_len
from tests.fakes.providers import FakeProvider, Reply
from tests.fakes.telegram import FakeTelegram
from tests.support.consolidation_stack import GOOD_ARGS, KEYS, good_call
from tests.support.memory_sessions import telegram_message
from tests.support.shared_workers import shared_workers

TOKEN = "123456:TEST-TOKEN"
USER = 5151
STRANGER = 999


class Bot:
    def __init__(self, tg: FakeTelegram, app: Any, providers: dict[str, FakeProvider]) -> None:
        self.tg = tg
        self.app = app
        self.providers = providers
        self.chat_provider = providers["openai"]

    @property
    def memory(self) -> MemoryFeature:
        return self.app.bot_data.services.memory

    def texts(self, chat_id: int = USER) -> list[str]:
        return [m.text for m in self.tg.bot_messages(chat_id)]

    async def say(self, text: str, *, user: int = USER) -> str:
        """Send `text`, return the bot's next new message in that chat."""
        before = len(self.tg.bot_messages(user))
        self.tg.push(self.tg.make_text_update(user, user, text))
        await self.tg.wait_for(lambda: len(self.tg.bot_messages(user)) > before, timeout=20)
        return self.tg.bot_messages(user)[before].text

    async def chat(self, text: str) -> str:
        """A chat turn: wait until the streamed answer is complete and the turn is over (its
        answer is stored just after it is shown); the answer as shown, with its footer."""
        await self.say(text)
        await self.tg.wait_for(
            lambda: self.texts()[-1].split("\n\n")[0] == "Nice to meet you.", timeout=20
        )
        turns = self.app.bot_data.services.turns
        await self.tg.wait_for(lambda: turns.waiting(USER) == 0, timeout=20)
        return self.texts()[-1]


@pytest.fixture
def overrides() -> dict[str, Any]:
    return {}


@pytest.fixture
async def bot(tmp_path: Path, overrides: dict[str, Any]) -> AsyncIterator[Bot]:
    tg = FakeTelegram(token=TOKEN, bot_username="mnemo_test_bot")
    providers = {kind: FakeProvider(kind) for kind in ("groq", "openai", "anthropic")}
    await tg.start()
    for provider in providers.values():
        await provider.start()
    providers["groq"].set_default("*", good_call())  # the consolidation chain's head
    providers["openai"].set_default("*", Reply("Nice to meet you."))  # the chat model
    settings = load_settings(
        TELEGRAM_BOT_TOKEN=TOKEN,
        TELEGRAM_BASE_URL=tg.base_url,
        ALLOWED_USER_IDS=str(USER),
        DATABASE_PATH=tmp_path / "bot.sqlite3",
        DEFAULT_MODEL="gpt-4.1",
        OPENAI_API_KEY=KEYS["openai"],
        OPENAI_API_BASE=providers["openai"].base_url,
        GROQ_API_KEY=KEYS["groq"],
        GROQ_API_BASE=providers["groq"].base_url,
        CONSOLIDATION_RETRY_DELAYS="1",
        **({"MEMORY_WINDOW": 50} | overrides),
    )
    app = build_application(prepare(settings), edit_interval=0.05, workers=shared_workers())
    try:
        async with running(app, poll_timeout=1):
            yield Bot(tg, app, providers)
    finally:
        for provider in providers.values():
            await provider.stop()
        await tg.stop()


async def consolidated(bot: Bot) -> None:
    """Wait for the worker to finish every queued job."""
    queue = bot.memory.worker.queue
    for _ in range(1000):
        if await queue.open_jobs(USER) == 0:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("consolidation did not finish")


async def test_new_then_memory_reaches_the_next_session_and_the_commands(bot: Bot) -> None:
    await bot.chat("Hi, I am Rina and I move billing to PostgreSQL")
    assert await bot.say("/new") == "New session started."
    await consolidated(bot)

    shown = await bot.chat("What do you remember about me?")
    assert shown == "Nice to meet you.\n\n" + t("memory_updated", added=2, removed=0)
    system = str(bot.chat_provider.requests[-1].body["messages"][0]["content"])
    assert "<long_term_memory_" in system and GOOD_ARGS["memory_update"] in system

    shown = await bot.say("/memory")
    assert shown.startswith("What I remember") and GOOD_ARGS["memory_update"] in shown

    found = await bot.say("/recall postgres")
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    assert found.startswith("Best matches for 'postgres'")
    assert f"• {today}" in found and "moves the billing service to PostgreSQL" in found

    assert await bot.say("/recall 東京タワー") == "Nothing in the history matches '東京タワー'."
    assert await bot.say("/recall") == "Write what to look for, e.g. /recall postgres migration"
    assert "too long" in await bot.say("/recall " + "x" * 300)


async def test_recall_finds_a_closed_session_not_consolidated_yet_but_not_the_open_one(
    bot: Bot,
) -> None:
    # The worker is stopped, so the closed session stays as stored messages: /recall must find
    # them as the model's recall tool does, and leave out the open session already on screen.
    await bot.memory.worker.stop(1.0)
    await bot.chat("My cat is called Mochi and she turned 12 in March")
    assert await bot.say("/new") == "New session started."
    await bot.chat("Mochi again: what did I tell you about her age?")

    found = await bot.say("/recall Mochi")
    assert found.startswith("Best matches for 'Mochi'")
    assert "💬" in found and "My cat is called Mochi and she turned 12 in March" in found
    assert "what did I tell you" not in found


async def test_recall_matches_fts_syntax_and_like_wildcards_literally(bot: Bot) -> None:
    # A real message as the saved history entry: "... image nginx:stable ada maslaah ...".
    real = telegram_message("disable-service-gcp-ingress", 269081)
    entry = f"[{real.at:%Y-%m-%d %H:%M}] {real.content}"
    bot.providers["groq"].set_default("*", good_call(history_entry=entry))
    await bot.chat("Hi")
    await bot.say("/new")
    await consolidated(bot)

    # FTS5 would read "nginx:" as a column filter and fail; it is text to find.
    found = await bot.say("/recall nginx:stable")
    assert found.startswith("Best matches for 'nginx:stable'") and "nginx:stable" in found
    # As LIKE wildcards, "%" and "_" would match every entry.
    assert await bot.say("/recall %") == "Nothing in the history matches '%'."
    assert await bot.say("/recall _") == "Nothing in the history matches '_'."
    assert "nginx:stable" in await bot.say("/recall ver 5 >")


@pytest.mark.parametrize("overrides", [{"USER_MESSAGES_PER_MINUTE": 3}])
async def test_recall_counts_against_the_per_user_limit_the_chat_uses(bot: Bot) -> None:
    """Three messages a minute: a chat message and two searches use them up; the next search
    is refused with the wait instead of searched."""
    await bot.chat("Hi, I am Rina")
    searched = "Nothing in the history matches 'Rina'."  # the open session is on screen
    assert await bot.say("/recall Rina") == searched
    assert await bot.say("/recall Rina") == searched
    refused = await bot.say("/recall Rina")
    assert refused.startswith("You are sending messages faster than this bot allows")


async def test_forget_needs_the_button_and_then_clears(bot: Bot) -> None:
    await bot.chat("Hi, I am Rina")
    await bot.say("/new")
    await consolidated(bot)
    assert (await bot.memory.repo.get(USER)).content

    question = await bot.say("/forget")
    assert question.startswith("Clear the long-term memory")
    prompt = bot.tg.bot_messages(USER)[-1]
    assert (await bot.memory.repo.get(USER)).content  # asking is not doing

    # A stranger pressing the button changes nothing: wait for the refusal of that very press.
    yes, _ = prompt.button_data()
    press = bot.tg.make_callback_update(USER, STRANGER, yes, message_id=prompt.message_id)
    bot.tg.push(press)
    press_id = press["callback_query"]["id"]
    await bot.tg.wait_for(
        lambda: any(
            c.method == "answerCallbackQuery" and c.params.get("callback_query_id") == press_id
            for c in bot.tg.calls
        )
    )
    [answer] = bot.tg.calls_of("answerCallbackQuery")
    assert str(STRANGER) in answer.params["text"]  # the refusal, not a confirmation
    assert (await bot.memory.repo.get(USER)).content

    bot.tg.push(bot.tg.make_callback_update(USER, USER, yes, message_id=prompt.message_id))
    await bot.tg.wait_for(lambda: bot.tg.bot_messages(USER)[-1].text.startswith("Done"))
    memory = await bot.memory.repo.get(USER)
    assert memory.content == "" and await bot.memory.repo.history(USER) == []
    assert "I have no long-term memory" in await bot.say("/memory")


async def test_forget_says_how_many_reminders_stay_pending_and_how_to_cancel_them(
    bot: Bot,
) -> None:
    """/forget clears memory, not reminders: both its question and its receipt say how many
    reminders will still be sent and where to cancel them."""
    book = bot.app.bot_data.services.reminders.book
    tomorrow = datetime.now(UTC).replace(microsecond=0) + timedelta(days=1)
    for text in ("pills", "call mum"):
        await book.schedule(USER, when=tomorrow.isoformat(), text=text)
    stays = "2 pending reminder(s) of this chat will still be sent. Cancel them with /reminders"

    question = await bot.say("/forget")
    assert question.startswith("Clear the long-term memory") and stays in question
    prompt = bot.tg.bot_messages(USER)[-1]
    yes, _ = prompt.button_data()
    bot.tg.push(bot.tg.make_callback_update(USER, USER, yes, message_id=prompt.message_id))
    await bot.tg.wait_for(lambda: bot.tg.bot_messages(USER)[-1].text.startswith("Done"))
    assert stays in bot.tg.bot_messages(USER)[-1].text
    assert [r.text for r in await book.pending(USER)] == ["pills", "call mum"]

    # No reminders: nothing is said about them.
    for reminder in await book.pending(USER):
        await book.cancel(USER, reminder.id)
    assert "reminder" not in await bot.say("/forget")


async def test_keep_it_button_clears_nothing(bot: Bot) -> None:
    await bot.chat("Hi")
    await bot.say("/new")
    await consolidated(bot)
    await bot.say("/forget")
    prompt = bot.tg.bot_messages(USER)[-1]
    _, no = prompt.button_data()
    bot.tg.push(bot.tg.make_callback_update(USER, USER, no, message_id=prompt.message_id))
    await bot.tg.wait_for(lambda: bot.tg.bot_messages(USER)[-1].text == "Nothing was cleared.")
    assert (await bot.memory.repo.get(USER)).content == GOOD_ARGS["memory_update"]


async def test_strangers_get_no_memory(bot: Bot) -> None:
    reply = await bot.say("/memory", user=STRANGER)
    assert "private bot" in reply and str(STRANGER) in reply


def test_long_memory_is_split_on_lines_under_the_limit() -> None:
    text = "\n".join(f"- fact {i} " + "ü" * 50 for i in range(300))
    parts = split_plain(text)
    assert len(parts) > 1 and all(utf16_len(p) <= 4096 for p in parts)
    assert "\n".join(parts) == text  # cut at line ends only


@pytest.mark.parametrize("overrides", [{"MEMORY_WINDOW": 4, "MEMORY_KEEP_RECENT": 2}])
async def test_a_long_session_is_consolidated_automatically_keeping_the_tail(bot: Bot) -> None:
    for turn in range(4):
        await bot.chat(f"turn {turn}: I am Rina")
        await consolidated(bot)
    store = bot.memory.worker.store
    session = await store.active_session(USER)
    kept = await store.session_messages(session)
    assert 2 <= len(kept) <= 4  # never more than the window, at least the recent tail
    assert kept[-1].content == "Nice to meet you." and kept[-2].content == "turn 3: I am Rina"
    history = await bot.memory.repo.history(USER)
    assert len(history) >= 2 and sum(h.message_count for h in history) + len(kept) == 8
    jobs = await bot.memory.worker.store.db.fetchall("SELECT kind FROM consolidation_jobs")
    assert {j["kind"] for j in jobs} == {"window"}
    system = str(bot.chat_provider.requests[-1].body["messages"][0]["content"])
    assert GOOD_ARGS["memory_update"] in system
