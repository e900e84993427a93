"""`on_spend`: the transport reports what every attempt cost, however the attempt ends.

The contract callers (the chat turn, the agent loop) rely on to keep budgets honest: one
`Spend` per billable attempt — the answer; a model that broke after streaming text; a call
cut off by a cancellation or by a caller that stopped reading. Real litellm over HTTP against
the fake providers, on the test's loop (tests/fakes/workers.py), not in a worker process.
"""

from __future__ import annotations

import asyncio
from contextlib import aclosing

import pytest

from models import tokens
from models.calls import CallOptions
from models.types import Spend, StreamDone, TextDelta
from tests.fakes.providers import Fault, Reply
from tests.support.e2e_bot import wait_until
from tests.support.transport import make_transport

HI = [{"role": "user", "content": "Tell me a long story about a lighthouse, please."}]
LONG = "The keeper climbed the stairs and lit the lamp again. " * 80


async def test_complete_reports_the_answer_and_a_cancelled_request(
    fake_openai, fake_groq, fake_anthropic, in_process_workers
) -> None:
    t = make_transport(fake_openai, fake_groq, fake_anthropic, workers=in_process_workers)
    spends: list[Spend] = []
    fake_openai.script("gpt-4.1", Reply("short answer", prompt_tokens=11, completion_tokens=3))
    result = await t.complete("gpt-4.1", HI, CallOptions(timeout=5, on_spend=spends.append))
    assert [(s.model_id, s.ended, s.usage.prompt_tokens, s.usage.estimated) for s in spends] == [
        ("gpt-4.1", "success", 11, False)
    ]
    assert spends[0].usage == result.usage

    fake_openai.script("gpt-4.1", Fault("hang"))
    call = asyncio.create_task(
        t.complete("gpt-4.1", HI, CallOptions(timeout=30, on_spend=spends.append))
    )
    await wait_until(lambda: len(fake_openai.requests) == 2, "the request to reach the provider")
    call.cancel()  # the caller gives up: what is tested is the spend of a cut attempt
    with pytest.raises(asyncio.CancelledError):
        await call
    cancelled = spends[-1]
    assert (cancelled.model_id, cancelled.ended, cancelled.usage.estimated) == (
        "gpt-4.1",
        "cancelled",
        True,
    )
    assert cancelled.usage.prompt_tokens > 5 and cancelled.usage.cost_usd > 0
    await t.aclose()


async def test_stream_reports_a_broken_model_and_a_caller_that_stopped_reading(
    fake_openai, fake_groq, fake_anthropic, in_process_workers
) -> None:
    t = make_transport(fake_openai, fake_groq, fake_anthropic, workers=in_process_workers)
    spends: list[Spend] = []
    fake_openai.script("gpt-5", Fault("midstream_disconnect", after_chars=400))
    fake_openai.script("gpt-5-mini", Reply("fallback answer"))
    async for event in t.stream("gpt-5", HI, CallOptions(timeout=5, on_spend=spends.append)):
        if isinstance(event, StreamDone):
            done = event.result
    assert done.model_id == "gpt-5-mini"
    assert [(s.model_id, s.ended, s.usage.estimated) for s in spends] == [
        ("gpt-5", "failed", True),
        ("gpt-5-mini", "success", False),
    ]
    assert spends[0].usage.completion_tokens >= 50

    spends.clear()
    fake_openai.script("gpt-5", Reply(LONG, chunk_chars=16, chunk_delay=0.005))
    received = ""
    async with aclosing(
        t.stream("gpt-5", HI, CallOptions(timeout=5, on_spend=spends.append))
    ) as stream:
        async for event in stream:
            assert isinstance(event, TextDelta)
            received += event.text
            if len(received) > 800:
                break  # e.g. the caller's task was cancelled while it rendered this piece
    [spend] = spends
    assert (spend.model_id, spend.ended, spend.usage.estimated) == ("gpt-5", "cancelled", True)
    assert spend.usage.completion_tokens >= 150  # ~800 characters received
    assert spend.usage.completion_tokens < 1000  # far less than the whole answer
    await t.aclose()


async def test_a_stream_whose_usage_nobody_reported_is_billed_as_our_estimate(
    fake_openai, fake_groq, fake_anthropic, in_process_workers
) -> None:
    """The worker turns litellm's token counter off (115 MiB and a tokenizer pass per request):
    litellm then fills an unreported usage with zeros. Those must not be billed as a free
    answer: the bot counts the prompt and the text itself, flagged as an estimate."""
    tokens.load()  # the exact count, not the estimate used while it loads
    t = make_transport(fake_openai, fake_groq, fake_anthropic, workers=in_process_workers)
    spends: list[Spend] = []
    fake_openai.script("gpt-5", Reply(LONG, chunk_chars=40, send_usage=False))
    async for event in t.stream("gpt-5", HI, CallOptions(timeout=5, on_spend=spends.append)):
        if isinstance(event, StreamDone):
            done = event.result
    [spend] = spends
    assert (spend.model_id, spend.ended, spend.usage.estimated) == ("gpt-5", "success", True)
    assert spend.usage.completion_tokens == tokens.count_text(LONG)
    assert spend.usage.prompt_tokens == tokens.count_messages(HI)
    assert spend.usage.cost_usd > 0 and done.usage == spend.usage
    await t.aclose()


async def test_an_empty_completion_that_reported_usage_is_billed_like_an_empty_stream(
    fake_openai, fake_groq, fake_anthropic, in_process_workers
) -> None:
    """A 200 with no content still bills the prompt (OpenAI's body says so in `usage`): the
    retry that answers is not the only attempt on the ledger."""
    t = make_transport(fake_openai, fake_groq, fake_anthropic, workers=in_process_workers)
    spends: list[Spend] = []
    fake_openai.script(
        "gpt-4.1", Fault("empty_200"), Reply("second try", prompt_tokens=11, completion_tokens=3)
    )
    result = await t.complete("gpt-4.1", HI, CallOptions(timeout=5, on_spend=spends.append))
    assert result.text == "second try"
    assert [
        (s.model_id, s.ended, s.usage.prompt_tokens, s.usage.completion_tokens, s.usage.estimated)
        for s in spends
    ] == [("gpt-4.1", "failed", 1, 0, False), ("gpt-4.1", "success", 11, 3, False)]
    await t.aclose()
