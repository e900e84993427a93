"""Streamed tool calls assembled by the transport, for each protocol, over HTTP against the fakes.

litellm turns OpenAI, Groq and Anthropic streams into one delta shape; the pieces arrive split
(16 characters of JSON per chunk here, split inside multi-byte characters), several calls may
come in one answer, and text may precede them. The StreamDone result must hold every call whole.
"""

from __future__ import annotations

import json

import pytest

from models.calls import CallOptions
from models.types import StreamDone, TextDelta
from tests.fakes.providers import Reply, ToolCallReply

MODELS = {"openai": "gpt-5", "groq": "llama-3.3-70b-versatile", "anthropic": "claude-sonnet-4-5"}
WIRE = {"openai": "gpt-5", "groq": "llama-3.3-70b-versatile", "anthropic": "claude-sonnet-4-5"}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": "test tool",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}, "fact": {"type": "string"}},
            },
        },
    }
    for name in ("recall", "remember")
]


async def _stream(transport, model_id, messages, **kwargs):
    texts, done = [], None
    async for event in transport.stream(model_id, messages, CallOptions(timeout=5, **kwargs)):
        if isinstance(event, TextDelta):
            texts.append(event.text)
        elif isinstance(event, StreamDone):
            done = event.result
    assert done is not None
    return "".join(texts), done


@pytest.mark.parametrize("kind", ["openai", "groq", "anthropic"])
async def test_streamed_tool_calls_are_assembled_whole(
    kind, transport, fake_openai, fake_groq, fake_anthropic
):
    fake = {"openai": fake_openai, "groq": fake_groq, "anthropic": fake_anthropic}[kind]
    first = {"query": "東京の旅行 — 予算は ¥120,000 と決めた 🗾", "limit": 3}
    second = {"fact": "Tochter heißt Ana; mag Kürbissuppe"}
    fake.script(
        WIRE[kind],
        ToolCallReply("recall", first, text="Let me look. ", also=[("remember", second)]),
    )
    text, result = await _stream(
        transport, MODELS[kind], [{"role": "user", "content": "hi"}], tools=TOOLS
    )
    assert text == "Let me look. "
    assert [c.name for c in result.tool_calls] == ["recall", "remember"]
    assert json.loads(result.tool_calls[0].arguments) == first
    assert json.loads(result.tool_calls[1].arguments) == second
    ids = [c.id for c in result.tool_calls]
    assert all(ids) and len(set(ids)) == 2
    assert fake.requests[-1].stream is True
    assert fake.requests[-1].tool_names() == ["recall", "remember"]


@pytest.mark.parametrize("kind", ["openai", "groq", "anthropic"])
async def test_tool_call_alone_is_not_an_empty_stream(
    kind, transport, fake_openai, fake_groq, fake_anthropic
):
    """No text at all, only a call: a success, not the 'empty' outcome that is retried."""
    fake = {"openai": fake_openai, "groq": fake_groq, "anthropic": fake_anthropic}[kind]
    fake.script(WIRE[kind], ToolCallReply("recall", {"query": "trip"}))
    text, result = await _stream(
        transport, MODELS[kind], [{"role": "user", "content": "hi"}], tools=TOOLS
    )
    assert text == ""
    assert [(c.name, json.loads(c.arguments)) for c in result.tool_calls] == [
        ("recall", {"query": "trip"})
    ]
    assert len(fake.requests) == 1  # answered once, not retried as empty


@pytest.mark.parametrize("kind", ["openai", "groq", "anthropic"])
async def test_tool_results_reach_the_provider_in_its_format(
    kind, transport, fake_openai, fake_groq, fake_anthropic
):
    """The OpenAI-shaped exchange we send comes back out of the fake as the same calls and
    results, whatever wire format litellm translated it into."""
    fake = {"openai": fake_openai, "groq": fake_groq, "anthropic": fake_anthropic}[kind]
    fake.script(WIRE[kind], Reply("Your trip was in May."))
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "when was the trip?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_abc",
                    "type": "function",
                    "function": {"name": "recall", "arguments": '{"query": "trip"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_abc", "content": "[2026-05-02] trip to Porto"},
    ]
    text, result = await _stream(transport, MODELS[kind], messages, tools=TOOLS)
    assert text == "Your trip was in May." and result.tool_calls == []
    request = fake.requests[-1]
    assert request.tool_calls() == [
        {"id": "call_abc", "name": "recall", "arguments": {"query": "trip"}}
    ]
    assert request.tool_results() == [{"id": "call_abc", "content": "[2026-05-02] trip to Porto"}]
    assert request.system_text() == "sys"


async def test_tool_choice_none_gets_words_from_the_fake(transport, fake_openai):
    """The fake behaves as a real model: with tool_choice none it cannot call a tool."""
    fake_openai.script("gpt-5", ToolCallReply("recall", {"query": "x"}, text="Plain answer."))
    text, result = await _stream(
        transport, "gpt-5", [{"role": "user", "content": "hi"}], tools=TOOLS, tool_choice="none"
    )
    assert text == "Plain answer." and result.tool_calls == []
    assert fake_openai.requests[-1].tool_choice() == "none"


def test_assembler_handles_pieces_without_index_and_repeated_ids() -> None:
    """Shapes gateways send besides OpenAI's own: no index (calls keyed by id, or following
    the last call), the id repeated on every piece, the whole call in one delta."""
    from models.toolstream import ToolCallAssembler

    calls = ToolCallAssembler()
    calls.feed([{"id": "a", "function": {"name": "recall", "arguments": '{"qu'}}])
    calls.feed([{"id": "a", "function": {"arguments": 'ery": "x"}'}}])
    calls.feed([{"function": {"name": "remember", "arguments": ""}}])
    calls.feed([{"function": {"arguments": '{"fact": "y"}'}}])
    calls.feed([{"index": 5, "id": "c", "function": {"name": "forget_fact", "arguments": "{}"}}])
    assert [(c.id, c.name, c.arguments) for c in calls.calls()] == [
        ("a", "recall", '{"query": "x"}'),
        ("call_1", "remember", '{"fact": "y"}'),
        ("c", "forget_fact", "{}"),
    ]


def test_flatten_keeps_every_call_and_result_as_text() -> None:
    from models.toolstream import flatten_tool_messages

    function = {"name": "remember", "arguments": '{"fact": "x"}'}
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "remember x"},
        {
            "role": "assistant",
            "content": "ok",
            "tool_calls": [{"id": "c1", "type": "function", "function": function}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "saved"},
    ]
    flat = flatten_tool_messages(messages)
    assert [m["role"] for m in flat] == ["system", "user", "assistant", "user"]
    assert all("tool_calls" not in m and "tool_call_id" not in m for m in flat)
    assert flat[2]["content"] == 'ok\n[called tool remember (c1) with {"fact": "x"}]'
    assert flat[3]["content"] == "[tool result c1]\nsaved"
