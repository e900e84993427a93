"""End to end, real PTB and real litellm against the fakes: bursts are waited out fairly, more
gateways come from the catalog file, and a Groq key alone is enough to chat.

The fake OpenAI gateway enforces a request rate the way OpenAI does and says so in its real
`x-ratelimit-*` headers; no *_RPS ceiling is set, so the pace is what the bot learned.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from models.logging_setup import redactor
from primitives.litellm_env import LITELLM_FLAGS
from tests.fakes.providers import FakeProvider, Fault, Reply
from tests.support.e2e_bot import (
    FRIEND,
    KEYS,
    OWNER,
    REPO,
    TOKEN,
    FakeServers,
    bot_process,
    bot_under_test,
    wait_until,
)

USERS = [3000 + n for n in range(50)]
GROUPS = [-4000 - n for n in range(10)]


@pytest.mark.slow
async def test_fifty_users_at_once_are_all_answered_in_fair_turns(tmp_path: Path) -> None:
    """50 users write at the same moment while one more user writes in 10 groups at once; the
    provider allows 5 requests/s. Everyone is answered by the model they use, the provider
    refuses nothing, and the one user's ten chats do not push the fifty back."""
    allowed = ",".join(str(u) for u in [OWNER, *USERS])
    async with bot_under_test(
        tmp_path, ALLOWED_USER_IDS=allowed, USER_MESSAGES_PER_MINUTE=0, CHAT_TIMEOUT=60
    ) as bot:
        # Burst 2: room for one request that arrives early next to an on-time one. With the
        # suite under `nice -n 19` beside busy cores, a worker sending on its turn can be held
        # back just long enough for the next to arrive with it (the pace is 0.9 of the limit:
        # 22 ms to spare at 5/s); a bot that ignores the pace still meets 429s and fallbacks.
        bot.openai.enforce_rate_limit(5.0, burst=2.0)
        for n, group in enumerate(GROUPS):
            bot.say(group, f"@{bot.tg.bot_username} group {n}", chat_type="group")
        for user in USERS:
            bot.say(user, f"hello from {user}", user_id=user)

        def answered(chat: int, words: str) -> bool:
            return any(words in text for text in bot.texts(chat))

        await bot.wait(
            lambda: (
                all(answered(u, f"echo: hello from {u}") for u in USERS)
                and all(answered(g, f"group {n}") for n, g in enumerate(GROUPS))
            ),
            timeout=120,
        )
        for user in USERS:
            assert bot.texts(user) == [f"echo: hello from {user}"]  # no failure, no fallback
        assert bot.openai.rate_limited == 0
        requests = [r for r in bot.openai.requests if r.stream]
        assert len(requests) == 60 and {r.model for r in requests} == {"gpt-5"}
        # Typing was shown in every chat while it waited for its turn.
        typing = {c.params.get("chat_id") for c in bot.tg.calls_of("sendChatAction")}
        assert {*USERS, *GROUPS} <= {int(chat) for chat in typing}
        # Fair turns: first come, first served would have sent the ten group requests (pushed
        # first) before anyone else's; round robin over users serves the others in between.
        heavy = [i for i, r in enumerate(requests) if "group" in r.body["messages"][-1]["content"]]
        others_before_last_heavy = heavy[-1] - (len(heavy) - 1)
        assert others_before_last_heavy >= 25
        queue = bot.services.transport.status()["gateways"]["openai"]["queue"]
        assert queue["queued"] >= 40 and queue["refused"] == queue["gave_up"] == 0
        assert queue["models"]["gpt-5"]["pace_per_s"] == pytest.approx(4.5)  # 0.9 x 300/min


async def test_a_gateway_declared_in_the_catalog_file_chats_and_falls_back(
    tmp_path: Path,
) -> None:
    key = "sk-deepsea-e2e-key-0123456789"
    async with FakeProvider("openai", name="deepsea") as deepsea:
        catalog = tmp_path / "models.toml"
        catalog.write_text(
            f"""
[[gateways]]
name = "deepsea"
protocol = "openai-compatible"
base_url = "{deepsea.base_url}"
api_key_env = "DEEPSEA_API_KEY"

[[models]]
id = "deep-chat"
label = "DeepSea Chat"
gateway = "deepsea"
wire_name = "deepsea-chat"
fallback = "deep-lite"

[[models]]
id = "deep-lite"
label = "DeepSea Lite"
gateway = "deepsea"
wire_name = "deepsea-lite"
fallback = "gpt-4.1"
""",
            encoding="utf-8",
        )
        async with bot_under_test(
            tmp_path,
            MODEL_CATALOG_FILE=str(catalog),
            DEEPSEA_API_KEY=key,
            DEFAULT_MODEL="deep-chat",
        ) as bot:
            [answer] = await bot.ask(OWNER, "hello deep sea")
            assert answer.text == "echo: hello deep sea"
            assert [(r.model, r.api_key) for r in deepsea.requests] == [("deepsea-chat", key)]

            # The model fails: the chain walks inside the gateway, then on to a built-in one.
            deepsea.set_default("deepsea-chat", Fault("server_500"))
            [answer] = await bot.ask(OWNER, "again please")
            assert answer.text.startswith("echo: again please")
            assert "DeepSea Lite" in answer.text  # the footer names who answered
            deepsea.set_default("deepsea-lite", Fault("unauthorized_401"))
            [answer] = await bot.ask(FRIEND, "and once more", user_id=FRIEND)
            assert answer.text.startswith("echo: and once more") and "GPT-4.1" in answer.text
            assert bot.openai.requests[-1].model == "gpt-4.1"
            status = bot.services.transport.status()["gateways"]["deepsea"]
            assert status["configured"] and status["queue"]["served"] >= 3
            # Its key is a secret like the others: scrubbed from every log line.
            assert redactor().scrub(f"key={key}") == "key=[REDACTED]"


async def test_a_dotenv_with_only_a_groq_key_starts_and_chats(tmp_path: Path) -> None:
    async with FakeServers() as fakes:
        fakes.groq.set_default("*", Reply("Hello from Groq!"))
        workdir = tmp_path / "run"
        workdir.mkdir()
        (workdir / ".env").write_text(
            "\n".join(
                [
                    f"TELEGRAM_BOT_TOKEN={TOKEN}",
                    f"TELEGRAM_BASE_URL={fakes.tg.base_url}",
                    f"ALLOWED_USER_IDS={OWNER}",
                    f"GROQ_API_KEY={KEYS['groq']}",
                    f"GROQ_API_BASE={fakes.groq.base_url}",
                    f"DATABASE_PATH={tmp_path / 'bot.sqlite3'}",
                ]
            )
            + "\n",
            encoding="utf-8",
        )
        keep = ("PATH", "HOME", "LANG", "TMPDIR")
        env = {k: v for k, v in os.environ.items() if k in keep}
        env |= {
            "PYTHONPATH": str(REPO),
            **LITELLM_FLAGS,
            "LOG_FORMAT": "json",
        }
        log_path = tmp_path / "bot.log"
        async with bot_process(env, cwd=workdir, log_path=log_path):
            await fakes.tg.wait_for(lambda: bool(fakes.tg.calls_of("setMyCommands")), timeout=60)
            fakes.tg.push(fakes.tg.make_text_update(OWNER, OWNER, "hi groq"))
            await wait_until(
                lambda: "Hello from Groq!" in [m.text for m in fakes.tg.bot_messages(OWNER)],
                "the Groq model's answer",
            )
        started = [
            json.loads(line)
            for line in log_path.read_text(encoding="utf-8").splitlines()
            if line.startswith("{") and '"bot_started"' in line
        ]
        assert started and started[0]["default_model"] == "llama-4-scout"
        assert set(started[0]["models"]) == {"llama-4-scout", "llama-3.3-70b", "llama-3.1-8b"}
        chat = [r.model for r in fakes.groq.requests if r.stream]
        assert chat == ["meta-llama/llama-4-scout-17b-16e-instruct"]
        assert fakes.openai.requests == [] and fakes.anthropic.requests == []
        assert KEYS["groq"] not in log_path.read_text(encoding="utf-8")
