"""/usage, spending caps, /stats and the remembered language, end to end: real PTB against the
fake Bot API, real litellm against the fake providers, consolidation by the real worker."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bot.ui.money import money
from tests.fakes.providers import Reply
from tests.support.consolidation_stack import good_call
from tests.support.e2e_bot import FRIEND, OWNER, BotUnderTest, bot_under_test


async def _consolidated(bot: BotUnderTest) -> None:
    """Until every consolidation job is done (the worker runs in the background)."""
    for _ in range(1500):
        rows = await bot.rows("SELECT state FROM consolidation_jobs")
        if rows and all(r["state"] == "done" for r in rows):
            return
        await asyncio.sleep(0.02)
    raise AssertionError("consolidation did not finish")


async def test_usage_includes_consolidation_and_admins_see_everyone(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path, ADMIN_USER_IDS=str(OWNER)) as bot:
        bot.groq.set_default("*", good_call())
        await bot.ask(OWNER, "My name is Rina and I move billing to PostgreSQL.")
        await bot.ask(OWNER, "Remind me tomorrow.")
        await bot.ask(FRIEND, "Hello from a friend", user_id=FRIEND)
        await bot.ask(OWNER, "/new")
        await _consolidated(bot)
        spent = await bot.rows(
            "SELECT purpose, model_id, SUM(cost_usd) AS cost, "
            "SUM(prompt_tokens + completion_tokens) AS tokens FROM usage "
            "WHERE user_id = ? GROUP BY purpose, model_id",
            (OWNER,),
        )
        by_purpose = {row["purpose"]: row for row in spent}
        assert set(by_purpose) == {"chat", "consolidation"}
        memory = by_purpose["consolidation"]
        assert memory["model_id"] == "llama-3.3-70b-versatile" and memory["cost"] > 0

        [reply] = await bot.ask(OWNER, "/usage")
        text = reply.text
        assert "gpt-5 (chat)" in text and "requests: 2" in text
        assert f"llama-3.3-70b-versatile (memory): {memory['tokens']:,} tokens" in text
        assert f"{memory['tokens']:,} tokens, {money(memory['cost'])} of background memory" in text
        # The admin part: everyone this month, the friend included.
        assert "Everyone this month (UTC):" in text
        assert f"• {FRIEND}: today" in text and f"• {OWNER}: today" in text

        [friend_view] = await bot.ask(FRIEND, "/usage", user_id=FRIEND)
        assert "gpt-5 (chat)" in friend_view.text and "requests: 1" in friend_view.text
        assert "(memory)" not in friend_view.text
        assert "Everyone" not in friend_view.text
        [refused] = await bot.ask(FRIEND, f"/usage {OWNER}", user_id=FRIEND)
        assert refused.text == "Only admins can see other users' usage."
        [one_user] = await bot.ask(OWNER, f"/usage {FRIEND}")
        assert one_user.text.startswith(f"Usage of user {FRIEND} (UTC):")


async def test_budget_cap_stops_model_calls_but_not_consolidation(tmp_path: Path) -> None:
    # Any real reply costs more than this: the first turn is allowed (nothing spent yet).
    async with bot_under_test(tmp_path, USER_DAILY_BUDGET_USD=0.000001) as bot:
        bot.groq.set_default("*", good_call())
        await bot.ask(OWNER, "First question, still within budget.")
        assert len(bot.openai.requests) == 1

        [refusal] = await bot.ask(OWNER, "Second question, over budget.")
        assert refusal.text.startswith("You have reached your daily budget of $0.0000")
        assert len(bot.openai.requests) == 1, "no model call past the cap"
        users = await bot.rows("SELECT content FROM messages WHERE role = 'user'")
        assert [u["content"] for u in users] == ["First question, still within budget."]

        # Another user's cap is their own.
        await bot.ask(FRIEND, "I have my own budget", user_id=FRIEND)
        assert len(bot.openai.requests) == 2

        # Memory is never what gets cut: /new still consolidates the capped user's session.
        await bot.ask(OWNER, "/new")
        await _consolidated(bot)
        assert bot.groq.requests, "consolidation called its model despite the cap"
        history = await bot.rows("SELECT chat_id FROM history_entries")
        assert history == [{"chat_id": OWNER}]
        memory_rows = await bot.rows(
            "SELECT COUNT(*) AS n FROM usage WHERE purpose = 'consolidation' AND user_id = ?",
            (OWNER,),
        )
        assert memory_rows[0]["n"] == 1


async def test_bot_wide_cap_covers_every_user_and_speaks_their_language(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path, BOT_DAILY_BUDGET_USD=0.000001) as bot:
        await bot.ask(OWNER, "Spend something")
        [refusal] = await bot.ask(FRIEND, "Anything left?", language_code="tr", user_id=FRIEND)
        assert refusal.text.startswith("Bu bot günlük $0.0000 bütçesine ulaştı")
        assert len(bot.openai.requests) == 1
        languages = await bot.rows("SELECT chat_id, language FROM chats ORDER BY chat_id")
        assert {"chat_id": FRIEND, "language": "tr"} in languages


async def test_stats_for_admins_only(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path, ADMIN_USER_IDS=str(OWNER)) as bot:
        bot.groq.set_default("*", good_call())
        await bot.ask(OWNER, "Hello")
        await bot.ask(OWNER, "/new")
        await _consolidated(bot)
        [stats] = await bot.ask(OWNER, "/stats", language_code="pt-br")
        assert stats.text.startswith("Estatísticas do mnemobot")
        assert "Fila da memória: 0 pendentes, 0 em execução, 1 concluídos" in stats.text
        assert "• llama-3.3-70b-versatile: saved 1" in stats.text
        assert "groq: disjuntor closed" in stats.text
        [refused] = await bot.ask(FRIEND, "/stats", user_id=FRIEND)
        assert refused.text == "This command is for the bot's admins."
        # Only admins get /stats in their command list.
        admin_lists = [c for c in bot.tg.calls if c.method == "setMyCommands"]
        scoped = [c for c in admin_lists if (c.params.get("scope") or {}).get("chat_id") == OWNER]
        assert scoped and "stats" in [cmd["command"] for cmd in scoped[-1].params["commands"]]
        default = [c for c in admin_lists if not c.params.get("scope")]
        assert "stats" not in [cmd["command"] for cmd in default[-1].params["commands"]]
        assert "usage" in [cmd["command"] for cmd in default[-1].params["commands"]]


async def test_a_message_sent_while_the_answer_streams_meets_the_cap_that_answer_reached(
    tmp_path: Path,
) -> None:
    # The second message passes the first budget check while the first answer still streams
    # (nothing is recorded yet); it waits for the chat, and by then the first answer's cost is
    # recorded: the cap holds, and no second model call is made.
    async with bot_under_test(tmp_path, USER_DAILY_BUDGET_USD=0.000001) as bot:
        bot.openai.set_default("*", Reply("a slow answer " * 8, chunk_chars=4, chunk_delay=0.05))
        bot.say(OWNER, "First question, still within budget.")
        await bot.wait(lambda: len(bot.openai.requests) == 1)
        bot.say(OWNER, "Second question, sent while the first answer streams.")
        await bot.wait_idle(OWNER)
        await bot.wait(lambda: any(t.startswith("You have reached") for t in bot.texts(OWNER)))

        assert len(bot.openai.requests) == 1, "no model call past the cap"
        users = await bot.rows("SELECT content FROM messages WHERE role = 'user'")
        assert [u["content"] for u in users] == ["First question, still within budget."]
        spent = await bot.rows("SELECT COUNT(*) AS n FROM usage WHERE user_id = ?", (OWNER,))
        assert spent[0]["n"] == 1
