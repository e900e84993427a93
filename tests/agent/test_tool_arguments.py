"""A tool call's arguments are bounded: over 8 KB they are refused before
anything parses them, with a result the model can act on, and later prompts carry a call's
arguments trimmed, as they carry tool results. End to end: the real bot, real litellm, the
fake providers (OpenAI's and Anthropic's own tool formats).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.loop import MAX_TOOL_ARGUMENT_BYTES
from agent.prompt import MAX_TOOL_ARGUMENT_CHARS
from tests.fakes.providers import FakeProvider, Reply, ToolCallReply
from tests.support.e2e_bot import OWNER, bot_under_test

CHAT = OWNER
# 3,000 characters, 9,000 bytes of UTF-8: over the limit in bytes, not in characters.
HUGE_QUERY = "休暇の計画" * 600


@pytest.mark.parametrize(
    ("model_id", "gateway"), [("gpt-5", "openai"), ("claude-sonnet-4-5", "anthropic")]
)
async def test_oversized_arguments_are_refused_unread_and_trimmed_in_later_prompts(
    tmp_path: Path, model_id: str, gateway: str
) -> None:
    async with bot_under_test(tmp_path, DEFAULT_MODEL=model_id) as bot:
        provider: FakeProvider = getattr(bot, gateway)
        provider.script(
            model_id,
            ToolCallReply("recall", {"query": HUGE_QUERY}),
            Reply("That search was too long; tell me a few words."),
            Reply("Still here."),
        )
        [answer] = await bot.ask(CHAT, "what did we plan for the holiday?")
        assert answer.text == "That search was too long; tell me a few words."
        sent = json.dumps({"query": HUGE_QUERY}, ensure_ascii=False).encode("utf-8")
        assert len(sent) > MAX_TOOL_ARGUMENT_BYTES > len(sent.decode("utf-8"))
        refusal = (
            f"error: the arguments are {len(sent)} bytes, over the limit of "
            f"{MAX_TOOL_ARGUMENT_BYTES}; nothing was run. Call again with shorter arguments "
            "(one short fact, a few search words)."
        )
        second = provider.requests[1]
        [result] = second.tool_results()
        assert refusal in result["content"]
        # Stored whole: the call as the model made it, the refusal as its result.
        rows = await bot.rows("SELECT role, content, tool_calls FROM messages ORDER BY id")
        assert [r["role"] for r in rows] == ["user", "assistant", "tool", "assistant"]
        [stored] = json.loads(rows[1]["tool_calls"])
        assert json.loads(stored["arguments"]) == {"query": HUGE_QUERY}
        assert rows[2]["content"] == refusal
        # Every later prompt carries the call trimmed: still a JSON object, head and tail.
        await bot.ask(CHAT, "never mind")
        for request in provider.requests[1:]:
            [call] = request.tool_calls()
            assert call["name"] == "recall"
            trimmed = call["arguments"]["trimmed_arguments"]
            assert len(trimmed) < MAX_TOOL_ARGUMENT_CHARS + 60  # the "… omitted …" line
            assert trimmed.startswith('{"query": "休暇の計画休暇の計画')
            assert trimmed.endswith('休暇の計画"}')
            assert "characters omitted" in trimmed
