"""Every path that spends money records it.

A /cancel just before the end, a model that broke after text (the fallback then answered), a
stop of the bot and a gateway without a usage chunk all cost real tokens; usage written only
after a complete answer would record nothing (or $0) for them, and a budget would never trip.
The transport reports each attempt's spend as it ends — the provider's usage when it came, else
litellm's offline token count of prompt and received text, flagged as estimated.

Real PTB against the fake Bot API, real litellm against the fake providers, a real SQLite file;
one test runs `python -m bot` and stops it with SIGTERM.
"""

from __future__ import annotations

import signal
from pathlib import Path

from bot.ui.i18n import t
from tests.fakes.providers import Fault, Reply
from tests.support.e2e_bot import (
    OWNER,
    BotUnderTest,
    FakeServers,
    bot_process,
    bot_under_test,
    query,
    subprocess_env,
    wait_until,
)
from tests.support.waits import within

# A long answer (≈ 2,000 tokens) streamed slowly enough to be cancelled in the middle.
STORY = " ".join(f"Chapter {i}: the lighthouse keeper counted ships again." for i in range(160))


def _streaming_text(bot: BotUnderTest, before: int) -> str:
    new = bot.texts(OWNER)[before:]
    return new[0] if new else ""


async def _ask_and_cancel(bot: BotUnderTest, question: str, *, shown_chars: int) -> str:
    """Ask; once `shown_chars` of the answer are on screen, /cancel. The first new message."""
    before = len(bot.texts(OWNER))
    bot.say(OWNER, question)
    budget = t("budget_user_daily", limit="$0.0100")
    await bot.wait(
        lambda: (
            len(_streaming_text(bot, before)) >= shown_chars
            or _streaming_text(bot, before) == budget
        )
    )
    first = _streaming_text(bot, before)
    if first == budget:
        return first
    bot.say(OWNER, "/cancel")
    await bot.wait(lambda: t("cancelled") in bot.texts(OWNER)[before:])
    await bot.wait_idle(OWNER)
    return first


async def test_daily_cap_trips_when_every_answer_is_cancelled_before_its_end(
    tmp_path: Path,
) -> None:
    async with bot_under_test(tmp_path, USER_DAILY_BUDGET_USD=0.01) as bot:
        bot.openai.set_default("*", Reply(STORY, chunk_chars=24, chunk_delay=0.01))
        replies = []
        for round_ in range(8):
            replies.append(
                await _ask_and_cancel(bot, f"A long story, please ({round_})", shown_chars=1500)
            )
            if replies[-1].startswith(t("budget_user_daily", limit="$0.0100")[:20]):
                break
        assert replies[-1] == t("budget_user_daily", limit="$0.0100"), replies
        cancelled_turns = len(replies) - 1
        assert 1 <= cancelled_turns <= 6
        assert len(bot.openai.requests) == cancelled_turns  # nothing past the cap
        rows = await bot.rows(
            "SELECT model_id, purpose, cost_usd, estimated, completion_tokens FROM usage"
        )
        assert len(rows) == cancelled_turns
        assert all(r["model_id"] == "gpt-5" and r["purpose"] == "chat" for r in rows)
        assert all(r["estimated"] == 1 and r["completion_tokens"] > 0 for r in rows)
        assert sum(r["cost_usd"] for r in rows) >= 0.01
        # /usage says which figures are our own estimate.
        [usage] = await bot.ask(OWNER, "/usage")
        assert "gpt-5 (chat)" in usage.text and usage.text.endswith(t("usage_estimated_note"))


async def test_a_model_that_broke_after_text_is_billed_with_its_fallback(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        bot.openai.script("gpt-5", Fault("midstream_disconnect", after_chars=600))
        bot.openai.script("gpt-5-mini", Reply("The fallback's whole answer."))
        await bot.ask(OWNER, "Explain tides")
        await bot.wait(lambda: bot.texts(OWNER)[-1].startswith("The fallback's whole answer."))
        await bot.wait_idle(OWNER)
        rows = await bot.rows(
            "SELECT model_id, estimated, prompt_tokens, completion_tokens, cost_usd "
            "FROM usage ORDER BY id"
        )
        assert [(r["model_id"], r["estimated"]) for r in rows] == [("gpt-5", 1), ("gpt-5-mini", 0)]
        broken = rows[0]
        assert broken["prompt_tokens"] > 0 and broken["completion_tokens"] >= 100
        assert broken["cost_usd"] > 0


async def test_a_gateway_without_usage_chunks_still_costs_money(tmp_path: Path) -> None:
    """The issue's "$0" did not reproduce: asked for `include_usage`, litellm 1.110.2 counts
    the tokens itself when the gateway sends no usage chunk (stream_chunk_builder). This
    guards that the turn is still billed, and on an offline tokenizer (no download)."""
    async with bot_under_test(tmp_path) as bot:
        bot.openai.script("gpt-5", Reply(STORY[:2000], send_usage=False))
        await bot.ask(OWNER, "Tell me about lighthouses")
        await bot.wait_idle(OWNER)
        [row] = await bot.rows("SELECT model_id, completion_tokens, cost_usd FROM usage")
        assert row["model_id"] == "gpt-5"
        assert row["completion_tokens"] >= 300 and row["cost_usd"] > 0.003


async def test_a_stop_of_the_bot_mid_answer_records_the_spend(tmp_path: Path) -> None:
    db_path = tmp_path / "bot.sqlite3"
    async with FakeServers() as fakes:
        tg = fakes.tg
        fakes.openai.set_default("*", Reply(STORY, chunk_chars=8, chunk_delay=0.05))
        env = subprocess_env(
            fakes, db_path, user=OWNER, DEFAULT_MODEL="gpt-5", SHUTDOWN_GRACE_SECONDS="0.5"
        )
        async with bot_process(env, cwd=tmp_path, log_path=tmp_path / "bot.log") as proc:
            tg.push(tg.make_text_update(OWNER, OWNER, "A long story, please"))
            await wait_until(
                lambda: any(len(d["parsed_text"]) > 300 for d in tg.drafts(OWNER)),
                "the answer to stream into its draft",
            )
            proc.send_signal(signal.SIGTERM)
            assert await within(proc.wait(), 60) == 0
    rows = query(db_path, "SELECT model_id, estimated, completion_tokens, cost_usd FROM usage")
    assert [(r["model_id"], r["estimated"]) for r in rows] == [("gpt-5", 1)]
    assert rows[0]["completion_tokens"] > 50 and rows[0]["cost_usd"] > 0
