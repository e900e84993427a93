"""End to end: /start, /help, /model (keyboard, callbacks, persistence), /new, /cancel."""

from __future__ import annotations

from pathlib import Path

from bot.ui.i18n import t
from bot.ui.keyboards import CURRENT_MARK, model_callback_data
from tests.fakes.providers import Reply
from tests.support.e2e_bot import OWNER, STRANGER, bot_under_test

CHAT = OWNER


def _buttons(message: object) -> list[tuple[str, str]]:
    markup = message.reply_markup  # type: ignore[attr-defined]
    return [(b["text"], b["callback_data"]) for row in markup["inline_keyboard"] for b in row]


async def test_start_help_and_registered_commands(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        [start] = await bot.ask(CHAT, "/start")
        assert start.text.startswith("Hi Ann!")
        [help_] = await bot.ask(CHAT, "/help")
        for command in ("/model", "/new", "/cancel"):
            assert command in start.text and command in help_.text
        registered = bot.tg.calls_of("setMyCommands")
        assert registered, "commands must be registered with set_my_commands"
        names = {c["command"] for c in registered[0].params["commands"]}
        assert {"start", "help", "model", "new", "cancel"} <= names
        assert not bot.model_requests(), "commands cost no model call"


async def test_model_keyboard_switch_and_persistence_across_restart(tmp_path: Path) -> None:
    # Only OpenAI and Anthropic keys: Groq-only or hidden models must never be offered.
    async with bot_under_test(tmp_path) as bot:
        [menu] = await bot.ask(CHAT, "/model")
        buttons = _buttons(menu)
        labels = [text for text, _ in buttons]
        assert any(text.startswith(CURRENT_MARK) and "GPT-5 ·" in text for text in labels)
        assert sum(text.startswith(CURRENT_MARK) for text in labels) == 1
        offered = {data for _, data in buttons}
        assert model_callback_data("claude-sonnet-4-5") in offered
        assert all(len(data.encode()) <= 64 for data in offered)
        for hidden in ("qwen3-32b", "gpt-4.1-mini", "claude-haiku-4-5"):
            assert model_callback_data(hidden) not in offered
        assert any("balanced" in text for text in labels)  # labelled by tier

        bot.tg.push(
            bot.tg.make_callback_update(
                CHAT, OWNER, model_callback_data("claude-sonnet-4-5"), message_id=menu.message_id
            )
        )
        await bot.wait(lambda: bool(bot.tg.calls_of("answerCallbackQuery")))
        await bot.wait(lambda: CURRENT_MARK + "Claude Sonnet 4.5" in str(bot.messages(CHAT)[0]))
        assert await bot.services.store.get_chat_model(CHAT) == "claude-sonnet-4-5"

        await bot.restart()
        await bot.ask(CHAT, "who answers after the restart?")
        gateway, request = bot.chat_requests()[-1]
        assert (gateway, request.model) == ("anthropic", "claude-sonnet-4-5")
        [menu_again] = await bot.ask(CHAT, "/model")
        current = [text for text, _ in _buttons(menu_again) if text.startswith(CURRENT_MARK)]
        assert current == [f"{CURRENT_MARK}Claude Sonnet 4.5 · balanced"]


async def test_model_by_id_and_refusals(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        [done] = await bot.ask(CHAT, "/model gpt-4.1")
        assert done.text == t("model_set", label="GPT-4.1")
        [hidden] = await bot.ask(CHAT, "/model qwen3-32b")
        [unknown] = await bot.ask(CHAT, "/model <b>gpt-9</b>")
        assert hidden.text.startswith("Unknown model 'qwen3-32b'")
        assert unknown.text.startswith("Unknown model '<b>gpt-9</b>'")
        assert await bot.services.store.get_chat_model(CHAT) == "gpt-4.1"


async def test_crafted_callbacks_naming_hidden_or_unknown_models_are_refused(
    tmp_path: Path,
) -> None:
    async with bot_under_test(tmp_path) as bot:
        [menu] = await bot.ask(CHAT, "/model")
        crafted = [
            model_callback_data("claude-haiku-4-5"),  # hidden
            model_callback_data("llama-3.3-70b-versatile"),  # hidden, Groq
            "m:gpt-9",  # unknown
            "mh:000000000000",  # a hash that matches nothing
            "m:" + "x" * 62,  # maximal length garbage
        ]
        for data in crafted:
            before = len(bot.tg.calls_of("answerCallbackQuery"))
            bot.tg.push(bot.tg.make_callback_update(CHAT, OWNER, data, message_id=menu.message_id))
            await bot.wait(lambda b=before: len(bot.tg.calls_of("answerCallbackQuery")) > b)
            answer = bot.tg.calls_of("answerCallbackQuery")[-1].params
            assert answer.get("text") == t("model_refused")
        # A stranger pressing a genuine button is refused too.
        bot.tg.push(
            bot.tg.make_callback_update(
                CHAT, STRANGER, model_callback_data("gpt-4.1"), message_id=menu.message_id
            )
        )
        await bot.wait(lambda: len(bot.tg.calls_of("answerCallbackQuery")) == len(crafted) + 1)
        assert str(STRANGER) in bot.tg.calls_of("answerCallbackQuery")[-1].params["text"]
        assert await bot.services.store.get_chat_model(CHAT) is None
        assert bot.messages(CHAT)[0].edits == 0


async def test_new_opens_a_session_and_keeps_old_messages(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        await bot.ask(CHAT, "remember: the cat is called Ápsis")
        [ack] = await bot.ask(CHAT, "/new")
        assert ack.text == t("new_session")
        await bot.ask(CHAT, "what is the cat called?")
        # The new session's request does not carry the old session's messages...
        last = bot.chat_requests()[-1][1].body["messages"]
        assert [m["role"] for m in last] == ["system", "user"]
        # ...and the old session's messages are still in the database.
        sessions = await bot.rows("SELECT id, closed_at FROM sessions WHERE chat_id = ?", (CHAT,))
        assert len(sessions) == 2 and sessions[0]["closed_at"] is not None
        old = await bot.rows(
            "SELECT role, content FROM messages WHERE session_id = ? ORDER BY id",
            (sessions[0]["id"],),
        )
        assert old[0] == {"role": "user", "content": "remember: the cat is called Ápsis"}
        assert old[1]["role"] == "assistant"


async def test_cancel_stops_a_running_reply_at_once(tmp_path: Path) -> None:
    # Every chunk different: litellm ends a stream that repeats one chunk 100 times by itself,
    # which would pass for a cut the cancel made.
    long_answer = "".join(f"word{i:03d} " for i in range(400))
    async with bot_under_test(tmp_path) as bot:
        bot.openai.set_default("*", Reply(long_answer, chunk_chars=8, chunk_delay=0.02))
        bot.say(CHAT, "talk for a long time")
        await bot.wait(lambda: any("word" in text for text in bot.showing(CHAT)))
        bot.say(CHAT, "/cancel")
        await bot.wait(lambda: t("cancelled") in bot.texts(CHAT))
        await bot.wait_idle(CHAT)
        # The request itself was stopped: the provider saw the client hang up before the end
        # (400 chunks 20 ms apart: a stream left running would end, uncut, after 8 s).
        await bot.wait(lambda: bot.openai.streams_cut == 1, timeout=30.0)
        reply = bot.messages(CHAT)[0]
        assert t("reply_cancelled") in reply.text
        assert reply.text.count("word") < 400  # stopped long before the end
        rows = await bot.rows("SELECT role, content FROM messages ORDER BY id")
        assert rows[0] == {"role": "user", "content": "talk for a long time"}
        # What the user saw is kept, so the next turn's context matches the screen.
        assert rows[1]["role"] == "assistant"
        assert 0 < rows[1]["content"].count("word") < 400
        # What the cut-off answer cost is recorded, estimated (no usage chunk came).
        [usage] = await bot.rows("SELECT model_id, estimated, cost_usd FROM usage")
        assert (usage["model_id"], usage["estimated"]) == ("gpt-5", 1) and usage["cost_usd"] > 0
        [nothing] = await bot.ask(CHAT, "/cancel")
        assert nothing.text == t("nothing_to_cancel")


async def test_new_during_a_running_reply_does_not_wait_for_it(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        bot.openai.set_default("*", Reply("slow " * 400, chunk_chars=5, chunk_delay=0.02))
        bot.say(CHAT, "a long answer please")
        await bot.wait(lambda: any("slow" in text for text in bot.showing(CHAT)))
        bot.say(CHAT, "/new")
        await bot.wait(lambda: t("new_session") in bot.texts(CHAT))
        await bot.wait_idle(CHAT)
        assert t("reply_cancelled") in bot.texts(CHAT)[0]
        assert bot.texts(CHAT)[0].count("slow") < 400  # /new did not wait for the whole reply
        sessions = await bot.rows("SELECT id FROM sessions WHERE chat_id = ? ORDER BY id", (CHAT,))
        old_session = sessions[0]["id"]
        rows = await bot.rows("SELECT session_id, role FROM messages ORDER BY id")
        # The interrupted reply landed in the old session, before it was closed.
        assert rows == [
            {"session_id": old_session, "role": "user"},
            {"session_id": old_session, "role": "assistant"},
        ]
        # The chat goes on in the new session: the interrupted writes left the database usable.
        bot.openai.set_default("*", Reply("fresh start"))
        [fresh] = await bot.ask(CHAT, "hello again")
        assert fresh.text == "fresh start"
        assert [m["role"] for m in bot.chat_requests()[-1][1].body["messages"]] == [
            "system",
            "user",
        ]


async def test_unknown_commands_are_answered_not_sent_to_the_model(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        [answer] = await bot.ask(CHAT, "/frobnicate now")
        assert answer.text == t("unknown_command")
        assert not bot.model_requests()


async def test_the_menu_is_read_from_the_registered_handlers(tmp_path: Path) -> None:
    """Everyone's menu lists each registered command but the admins' ones, in registration
    order, described by the locale; the admins' menu adds /stats and /mcp; /help lists
    everyone's."""
    from bot.ui.commands import registered_commands

    async with bot_under_test(tmp_path, ADMIN_USER_IDS=str(OWNER)) as bot:
        defaults = [c for c in bot.tg.calls_of("setMyCommands") if "scope" not in c.params]
        [english] = [c for c in defaults if "language_code" not in c.params]
        names = [c["command"] for c in english.params["commands"]]
        assert names == ["start", "help", "model", "new", "cancel", "memory", "forget",
                         "recall", "usage", "timezone", "reminders"]  # fmt: skip
        assert all(c["description"] == t(f"cmd_{c['command']}") for c in english.params["commands"])
        admin_only = {"stats", "mcp"}
        assert set(names) | admin_only == registered_commands(bot.application)
        [admins] = [c for c in bot.tg.calls_of("setMyCommands") if "scope" in c.params]
        listed = [c["command"] for c in admins.params["commands"]]
        assert [n for n in listed if n not in admin_only] == names
        assert set(listed) - set(names) == admin_only
        [help_] = await bot.ask(CHAT, "/help")
        assert all(f"/{name} — " in help_.text for name in names)
        assert "/stats" not in help_.text and "/mcp" not in help_.text
