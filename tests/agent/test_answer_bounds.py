"""One answer is bounded in tokens, in time and in size, and a gateway cannot lower what it is
billed.

A gateway that streams forever (or ignores `max_tokens`) keeps the silence guard happy with
every chunk: without a wall-clock cap it would hold the turn and keep spending past the caps.
Real litellm in the provider worker over HTTP against the fakes; the end-to-end test runs the
real bot.
"""

from __future__ import annotations

import asyncio
from contextlib import aclosing
from dataclasses import replace
from pathlib import Path

from agent.loop import MAX_KEPT_TOOL_CALLS, AgentLoop
from agent.prompt import reply_reserve
from models.calls import CallOptions
from models.catalog import Catalog, load_catalog
from models.types import SIZE_LIMIT, TIME_LIMIT, AnswerBounds, Spend, StreamDone, TextDelta
from tests.fakes.providers import Reply, ToolCallReply
from tests.support.e2e_bot import OWNER, bot_under_test, wait_until
from tests.support.transport import make_transport

HI = [{"role": "user", "content": "Tell me everything, and never stop."}]
# Every chunk different: litellm itself ends a stream that repeats one chunk 100 times.
ENDLESS_TEXT = "".join(f"part{i:03d} " for i in range(50))


async def test_a_stream_that_never_ends_is_cut_at_the_deadline_and_billed(
    fake_openai, fake_groq, fake_anthropic
) -> None:
    t = make_transport(fake_openai, fake_groq, fake_anthropic)
    await t.warm_up()  # the worker is up: the deadline is not spent starting it
    fake_openai.script("gpt-5", Reply(ENDLESS_TEXT, chunk_chars=8, chunk_delay=0.01, endless=True))
    spends: list[Spend] = []
    events: list[object] = []
    deadline = asyncio.get_running_loop().time() + 1.5
    # The silence timeout (5 s) is never reached: a chunk comes every 10 ms.
    stream = t.stream(
        "gpt-5", HI, CallOptions(timeout=5, on_spend=spends.append, deadline=deadline)
    )
    async with aclosing(stream):
        async for event in stream:
            events.append(event)
    done = events[-1]
    assert isinstance(done, StreamDone)
    shown = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert done.result.finish_reason == TIME_LIMIT
    assert (done.result.model_id, done.result.tool_calls) == ("gpt-5", [])
    assert done.result.text == shown and shown.startswith("part000 part001 ")
    # Billed once, for what came (the gateway sent no usage: our estimate of prompt and text).
    [spend] = spends
    assert (spend.model_id, spend.ended, spend.usage.estimated) == ("gpt-5", "cut", True)
    assert spend.usage == done.result.usage
    assert spend.usage.completion_tokens >= len(shown) // 8 and spend.usage.cost_usd > 0
    # The request was closed at the provider, and no other model was asked.
    await wait_until(lambda: fake_openai.streams_cut == 1, "the provider to see the hang-up", 30.0)
    assert [r.model for r in fake_openai.requests] == ["gpt-5"]
    await t.aclose()


async def test_negative_token_counts_from_a_gateway_are_estimated_not_billed_as_zero(
    fake_openai, fake_groq, fake_anthropic
) -> None:
    """A gateway that reports negative counts said nothing a bill can hold: the attempt is
    estimated (prompt as sent plus text received), as for a gateway that sent no usage, never
    $0 and never a credit."""
    t = make_transport(fake_openai, fake_groq, fake_anthropic)
    spends: list[Spend] = []
    lying = Reply("Hello there.", prompt_tokens=-50_000, completion_tokens=-1_000_000)
    fake_openai.script("gpt-4.1", lying, lying)
    result = await t.complete("gpt-4.1", HI, CallOptions(timeout=10, on_spend=spends.append))
    async with aclosing(
        t.stream("gpt-4.1", HI, CallOptions(timeout=10, on_spend=spends.append))
    ) as stream:
        events = [event async for event in stream]
    done = events[-1]
    assert isinstance(done, StreamDone) and done.result.text == "Hello there."
    for usage in (result.usage, done.result.usage):
        assert usage.estimated
        assert usage.prompt_tokens > 0 and usage.completion_tokens > 0 and usage.cost_usd > 0
    assert [(s.ended, s.usage) for s in spends] == [
        ("success", result.usage),
        ("success", done.result.usage),
    ]
    await t.aclose()


def test_max_tokens_stays_within_the_reply_room_of_the_smallest_window() -> None:
    catalog = load_catalog()
    entries = {e.id: e for e in catalog.entries.values()}
    entries["gpt-4.1"] = replace(entries["gpt-4.1"], context_window=8192)  # gpt-5's last fallback
    small = Catalog.build(entries.values())

    def loop(catalog: Catalog, limit: int | None) -> AgentLoop:
        return AgentLoop(
            store=None,  # type: ignore[arg-type]  # only the limits are asked
            transport=None,  # type: ignore[arg-type]
            catalog=catalog,
            tools=None,  # type: ignore[arg-type]
            max_answer_tokens=limit,
        )

    assert loop(catalog, 1000).max_tokens("gpt-5") == 1000
    assert loop(catalog, 500_000).max_tokens("gpt-5") == 8192
    assert loop(small, 500_000).max_tokens("gpt-5") == reply_reserve(8192) == 2048
    assert loop(catalog, None).max_tokens("gpt-5") is None


async def test_a_reply_that_runs_out_of_time_keeps_its_text_says_so_and_is_billed(
    tmp_path: Path,
) -> None:
    async with bot_under_test(tmp_path, MAX_ANSWER_SECONDS="2", MAX_ANSWER_TOKENS="1000") as bot:
        bot.openai.set_default(
            "*", Reply(ENDLESS_TEXT, chunk_chars=8, chunk_delay=0.01, endless=True)
        )
        bot.say(OWNER, "tell me everything")
        note = "⏱ Cut off after 2 s, the time limit of one answer."
        await bot.wait(lambda: any(note in text for text in bot.texts(OWNER)))
        await bot.wait_idle(OWNER)
        [reply] = bot.messages(OWNER)
        shown, _, footer = reply.text.rpartition("\n")
        assert footer == note
        assert shown.startswith("part000 part001 ")
        # The request carried the answer's token limit and was closed at the provider.
        [request] = [r for r in bot.openai.requests if r.stream]
        assert request.body.get("max_completion_tokens", request.body.get("max_tokens")) == 1000
        await bot.wait(lambda: bot.openai.streams_cut == 1, timeout=30.0)
        # What was shown is the stored answer, and what came is billed (estimated: no usage).
        rows = await bot.rows("SELECT role, content FROM messages ORDER BY id")
        assert [r["role"] for r in rows] == ["user", "assistant"]
        assert rows[1]["content"].strip() == shown.strip()
        [usage] = await bot.rows("SELECT model_id, estimated, completion_tokens FROM usage")
        assert (usage["model_id"], usage["estimated"]) == ("gpt-5", 1)
        assert usage["completion_tokens"] >= len(shown) // 8


BOUNDS = AnswerBounds(text_chars=500, tool_calls=4, tool_argument_chars=1000)


async def stream_all(t, model: str, bounds: AnswerBounds, spends: list[Spend]) -> list[object]:
    """Every event of one bounded stream (no deadline: only the bounds can end it early)."""
    stream = t.stream(model, HI, CallOptions(timeout=5, on_spend=spends.append, bounds=bounds))
    async with aclosing(stream):
        return [event async for event in stream]


async def test_a_stream_that_never_ends_is_cut_at_its_size_bound_and_billed(
    fake_openai, fake_groq, fake_anthropic
) -> None:
    t = make_transport(fake_openai, fake_groq, fake_anthropic)
    fake_openai.script(
        "gpt-5", Reply(ENDLESS_TEXT, chunk_chars=64, chunk_delay=0.001, endless=True)
    )
    spends: list[Spend] = []
    events = await stream_all(t, "gpt-5", BOUNDS, spends)
    done = events[-1]
    assert isinstance(done, StreamDone)
    shown = "".join(e.text for e in events if isinstance(e, TextDelta))
    # Exactly the bound is shown and kept; nothing past it reached the caller.
    assert done.result.finish_reason == SIZE_LIMIT
    assert shown == done.result.text == (ENDLESS_TEXT * 2)[:500]
    # Billed once, as cut, for all that came (the chunk that crossed the bound included).
    [spend] = spends
    assert (spend.model_id, spend.ended, spend.usage.estimated) == ("gpt-5", "cut", True)
    assert spend.usage == done.result.usage and spend.usage.completion_tokens >= 500 // 8
    await wait_until(lambda: fake_openai.streams_cut == 1, "the provider to see the hang-up", 5.0)
    assert [r.model for r in fake_openai.requests] == ["gpt-5"]  # no fallback: not a failure
    await t.aclose()


async def test_too_many_tool_calls_or_too_long_arguments_cut_the_answer(
    fake_openai, fake_groq, fake_anthropic
) -> None:
    t = make_transport(fake_openai, fake_groq, fake_anthropic)
    many = ToolCallReply(
        "remember", {"fact": "one"}, also=[("remember", {"fact": f"n{i}"}) for i in range(9)]
    )
    huge = ToolCallReply("remember", '{"fact": "' + "x" * 20_000 + '"}', chunk_chars=500)
    fake_openai.script("gpt-5", many, huge)
    tools = [{"type": "function", "function": {"name": "remember", "parameters": {}}}]
    for _ in (many, huge):
        spends: list[Spend] = []
        stream = t.stream(
            "gpt-5", HI, CallOptions(timeout=5, on_spend=spends.append, bounds=BOUNDS, tools=tools)
        )
        async with aclosing(stream):
            events = [event async for event in stream]
        done = events[-1]
        assert isinstance(done, StreamDone)
        # No call is kept: a cut answer runs none, stores none, sends none back.
        assert (done.result.finish_reason, done.result.tool_calls) == (SIZE_LIMIT, [])
        [spend] = spends
        assert spend.ended == "cut" and spend.usage.completion_tokens > 0
    await t.aclose()


async def test_a_huge_answer_is_cut_marked_billed_and_sent_as_a_few_messages(
    tmp_path: Path,
) -> None:
    async with bot_under_test(tmp_path, MAX_ANSWER_CHARS="5000", MAX_ANSWER_SECONDS="60") as bot:
        bot.openai.set_default(
            "*", Reply(ENDLESS_TEXT, chunk_chars=256, chunk_delay=0.001, endless=True)
        )
        bot.say(OWNER, "tell me everything")
        note = "✂️ Cut off: one answer holds at most 5,000 characters and 32 tool calls."
        await bot.wait(lambda: any(note in text for text in bot.texts(OWNER)), timeout=60)
        await bot.wait_idle(OWNER)
        # 5,000 characters fit in two Telegram messages; the mark ends the last.
        sent = bot.messages(OWNER)
        assert len(sent) == 2 and len(bot.tg.calls_of("sendMessage")) == 2
        assert sent[-1].text.endswith(note)
        shown = "".join(m.text for m in sent).removesuffix(note)
        assert len(shown.replace("\n", "")) <= 5000
        await bot.wait(lambda: bot.openai.streams_cut == 1, timeout=5.0)
        # Stored as shown (the bound), and what came is billed.
        rows = await bot.rows("SELECT role, content FROM messages ORDER BY id")
        assert [r["role"] for r in rows] == ["user", "assistant"]
        assert len(rows[1]["content"]) == 5000
        [usage] = await bot.rows("SELECT model_id, purpose, completion_tokens FROM usage")
        assert (usage["model_id"], usage["purpose"]) == ("gpt-5", "chat")
        assert usage["completion_tokens"] >= 5000 // 8


async def test_an_answer_with_too_many_tool_calls_runs_and_keeps_none(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        calls = [("remember", {"fact": f"Likes colour number {i}"}) for i in range(40)]
        bot.openai.script(
            "gpt-5", ToolCallReply("remember", {"fact": "Likes tea"}, text="Noting.", also=calls)
        )
        bot.say(OWNER, "remember all of this")
        note = "✂️ Cut off: one answer holds at most 32,000 characters and 32 tool calls."
        await bot.wait(lambda: any(note in text for text in bot.texts(OWNER)), timeout=60)
        await bot.wait_idle(OWNER)
        # Nothing of the 41 calls ran, was stored, or was sent on: one request, no memory.
        assert len([r for r in bot.openai.requests if r.stream]) == 1
        assert await bot.rows("SELECT content FROM long_term_memory WHERE content != ''") == []
        rows = await bot.rows("SELECT role, content FROM messages ORDER BY id")
        assert [(r["role"], r["content"]) for r in rows] == [
            ("user", "remember all of this"),
            ("assistant", "Noting."),
        ]
        [usage] = await bot.rows("SELECT purpose FROM usage")
        assert usage["purpose"] == "chat"
        assert MAX_KEPT_TOOL_CALLS < 41
