"""End to end: failures at the providers, fallback chains resolved per gateway, auth errors,
mid-stream restarts, total outages. Requests are checked on the wire: URL, key, model."""

from __future__ import annotations

import io
import json
from pathlib import Path

from bot.ui.i18n import t
from models.logging_setup import configure_logging
from tests.fakes.providers import Fault, Reply
from tests.support.e2e_bot import KEYS, OWNER, TOKEN, bot_under_test

CHAT = OWNER
ANTHROPIC_PATH = "/v1/messages"
OPENAI_PATH = "/v1/chat/completions"
GROQ_PATH = "/openai/v1/chat/completions"


def _wire(bot: object) -> list[tuple[str, str, str | None, str | None]]:
    """(gateway, path, key, wire model) of every streamed (chat) request, in order."""
    return [
        (gateway, r.path, r.api_key, r.model)
        for gateway, r in bot.chat_requests()  # type: ignore[attr-defined]
    ]


async def test_claude_falls_back_to_haiku_on_anthropic(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path, DEFAULT_MODEL="claude-sonnet-4-5") as bot:
        bot.anthropic.set_default("claude-sonnet-4-5", Fault("overloaded_529"))
        bot.anthropic.set_default("claude-haiku-4-5", Reply("Haiku here.", prompt_tokens=9))
        [answer] = await bot.ask(CHAT, "hello Claude")
        wire = _wire(bot)
        # Phase 1 retries Sonnet (529 is retryable), phase 2 walks to Haiku on the same gateway.
        assert wire[-1] == ("anthropic", ANTHROPIC_PATH, KEYS["anthropic"], "claude-haiku-4-5")
        assert {w[3] for w in wire[:-1]} == {"claude-sonnet-4-5"} and len(wire) >= 2
        assert all(w[:3] == ("anthropic", ANTHROPIC_PATH, KEYS["anthropic"]) for w in wire)
        assert not bot.openai.requests and not bot.groq.requests
        assert answer.text == "Haiku here.\n\n" + t(
            "answered_by", label="Claude Haiku 4.5", requested="Claude Sonnet 4.5"
        )
        stored = await bot.rows("SELECT model_id FROM messages WHERE role = 'assistant'")
        usage = await bot.rows("SELECT model_id, prompt_tokens FROM usage")
        assert stored == [{"model_id": "claude-haiku-4-5"}]
        assert usage == [{"model_id": "claude-haiku-4-5", "prompt_tokens": 9}]


async def test_gpt5_falls_back_to_gpt5_mini_on_openai(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        bot.openai.set_default("gpt-5", Fault("server_500"))
        bot.openai.set_default("gpt-5-mini", Reply("mini answers"))
        [answer] = await bot.ask(CHAT, "hi")
        wire = _wire(bot)
        # Retried on gpt-5 first (a 500 is retryable), then the next model of its chain.
        assert wire[-1] == ("openai", OPENAI_PATH, KEYS["openai"], "gpt-5-mini")
        assert wire[:-1] == [("openai", OPENAI_PATH, KEYS["openai"], "gpt-5")] * (len(wire) - 1)
        assert len(wire) >= 3
        assert answer.text.startswith("mini answers\n\n")
        assert "GPT-5 mini" in answer.text


async def test_fallback_on_another_gateway_from_a_user_catalog(tmp_path: Path) -> None:
    catalog = tmp_path / "models.json"
    catalog.write_text(
        json.dumps(
            {
                "models": [
                    {
                        "id": "house-llama",
                        "label": "House Llama",
                        "tier": "fast",
                        "gateway": "groq",
                        "wire_name": "llama-3.1-8b-instant",
                        "fallback": "claude-sonnet-4-5",
                    }
                ]
            }
        ),
        encoding="utf-8",
    )
    async with bot_under_test(
        tmp_path, MODEL_CATALOG_FILE=catalog, DEFAULT_MODEL="house-llama"
    ) as bot:
        bot.groq.set_default("*", Fault("bad_request_400"))  # not retried on the same model
        bot.anthropic.set_default("claude-sonnet-4-5", Reply("Sonnet took over."))
        [answer] = await bot.ask(CHAT, "hello house model")
        assert _wire(bot) == [
            ("groq", GROQ_PATH, KEYS["groq"], "llama-3.1-8b-instant"),
            ("anthropic", ANTHROPIC_PATH, KEYS["anthropic"], "claude-sonnet-4-5"),
        ]
        assert answer.text.startswith("Sonnet took over.")
        assert "fallback for House Llama" in answer.text
        # The Anthropic request was really in Anthropic's format, not OpenAI's.
        body = bot.anthropic.requests[-1].body
        assert body["messages"][-1]["role"] == "user" and "system" in body


async def test_auth_failure_on_one_gateway_moves_on_without_retrying_the_key(
    tmp_path: Path,
) -> None:
    catalog = tmp_path / "models.toml"
    catalog.write_text(
        '[[models]]\nid = "claude-sonnet-4-5"\nfallback = "gpt-4.1"\n', encoding="utf-8"
    )
    logs = io.StringIO()
    configure_logging(level="DEBUG", fmt="json", stream=logs)
    async with bot_under_test(
        tmp_path, MODEL_CATALOG_FILE=catalog, DEFAULT_MODEL="claude-sonnet-4-5"
    ) as bot:
        bot.anthropic.set_default("*", Fault("unauthorized_401"))
        bot.openai.set_default("gpt-4.1", Reply("GPT-4.1 answering."))
        [answer] = await bot.ask(CHAT, "is anyone there?")
        assert _wire(bot) == [
            ("anthropic", ANTHROPIC_PATH, KEYS["anthropic"], "claude-sonnet-4-5"),
            ("openai", OPENAI_PATH, KEYS["openai"], "gpt-4.1"),
        ]
        assert answer.text.startswith("GPT-4.1 answering.")
        # A second turn does not try the rejected key again.
        await bot.ask(CHAT, "still there?")
        assert len(bot.anthropic.requests) == 1
    text = logs.getvalue()
    events = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    turns = [e for e in events if e.get("event") == "turn_finished"]
    assert len(turns) == 2
    assert turns[0]["model_requested"] == "claude-sonnet-4-5"
    assert turns[0]["model_answered"] == "gpt-4.1"
    assert {"chat_id", "attempts", "latency_ms", "prompt_tokens"} <= set(turns[0])
    assert "anthropic" in text  # the gateway is named...
    for secret in (*KEYS.values(), TOKEN):  # ...but no key and not the bot token, anywhere
        assert secret not in text


async def test_midstream_failure_restarts_on_the_next_model_visibly(tmp_path: Path) -> None:
    logs = io.StringIO()
    configure_logging(level="INFO", fmt="json", stream=logs)
    async with bot_under_test(tmp_path) as bot:
        bot.openai.script("gpt-5", Fault("midstream_disconnect", after_chars=40))
        bot.openai.set_default(
            "gpt-5-mini", Reply("A complete answer from the fallback.", chunk_chars=4)
        )
        [answer] = await bot.ask(CHAT, "stream please")
        # The text of the failed stream is replaced, and the final message says who answered
        # (while streaming, a restart note is shown above the new text if the old was shown).
        assert answer.text == "A complete answer from the fallback.\n\n" + t(
            "answered_by", label="GPT-5 mini", requested="GPT-5"
        )
        assert [w[3] for w in _wire(bot)] == ["gpt-5", "gpt-5-mini"]
        stored = await bot.rows("SELECT content, model_id FROM messages WHERE role = 'assistant'")
        assert stored == [
            {"content": "A complete answer from the fallback.", "model_id": "gpt-5-mini"}
        ]
    turns = [json.loads(x) for x in logs.getvalue().splitlines() if "turn_finished" in x]
    assert [(e["restarts"], e["model_answered"]) for e in turns] == [(1, "gpt-5-mini")]


async def test_total_outage_keeps_the_message_and_says_so(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        bot.openai.set_default("*", Fault("server_500"))
        [answer] = await bot.ask(CHAT, "are you down?")
        assert answer.text.startswith("Sorry, no model could answer right now")
        assert t("reason_unavailable") in answer.text
        rows = await bot.rows("SELECT role, content FROM messages")
        assert rows == [{"role": "user", "content": "are you down?"}]
        assert await bot.rows("SELECT * FROM usage") == []
        # Every model of the gpt-5 chain was tried, each on OpenAI.
        assert {w[3] for w in _wire(bot)} == {"gpt-5", "gpt-5-mini", "gpt-4.1"}
        # Once the provider is back, the conversation continues with the stored message.
        bot.openai.set_default("*", Reply("back again"))
        await bot.ask(CHAT, "hello?")
        last = bot.chat_requests()[-1][1].body["messages"]
        assert [m["content"] for m in last[1:]] == ["are you down?", "hello?"]
