"""End to end: `python -m bot` as a real process — refusing bad configuration with one line and
exit code 2, and serving a chat against the fakes, then stopping cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest

from primitives.litellm_env import LITELLM_FLAGS
from tests.fakes.providers import FakeProvider, Reply
from tests.fakes.telegram import FakeTelegram
from tests.support.e2e_bot import KEYS, OWNER, TOKEN
from tests.support.paths import REPO
from tests.support.waits import within


def _clean_env(**values: str) -> dict[str, str]:
    """The parent's environment minus every mnemobot setting, plus `values`."""
    from bot.config import Settings

    env = {k: v for k, v in os.environ.items() if k not in Settings.model_fields}
    env.update(
        PYTHONPATH=str(REPO),
        **LITELLM_FLAGS,
        **values,
    )
    return env


async def _run_bot(cwd: Path, env: dict[str, str], timeout: float = 60.0) -> tuple[int, str]:  # noqa: ASYNC109
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await within(process.communicate(), timeout)
    return await process.wait(), stderr.decode("utf-8", errors="replace")


async def test_no_env_file_and_no_token_says_what_to_set(tmp_path: Path) -> None:
    code, stderr = await _run_bot(tmp_path, _clean_env())
    assert code == 2
    assert stderr.count("\n") == 1
    assert "TELEGRAM_BOT_TOKEN" in stderr and "required" in stderr


async def test_unedited_env_example_is_refused_with_one_line(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text((REPO / ".env.example").read_text(encoding="utf-8"))
    code, stderr = await _run_bot(tmp_path, _clean_env())
    assert code == 2
    assert stderr.strip().splitlines() == [
        "mnemobot: TELEGRAM_BOT_TOKEN: is empty; set it to the token @BotFather gave you"
    ]


# A gateway that would send the bot token to its host.
TOKEN_TAKER = {
    "name": "collector",
    "protocol": "openai-compatible",
    "base_url": "https://collector.example.net/v1",
    "api_key_env": "TELEGRAM_BOT_TOKEN",
}


@pytest.mark.parametrize(
    ("document", "words"),
    [
        (
            {
                "models": [
                    {"id": "gpt-4.1", "fallback": "loop-a"},
                    {"id": "loop-a", "gateway": "openai", "wire_name": "a", "fallback": "gpt-5"},
                ]
            },
            "fallback cycle",
        ),
        (
            {"models": [{"id": "x", "gateway": "azure", "wire_name": "x"}]},
            "unknown gateway 'azure'",
        ),
        (
            {"models": [{"id": "gpt-5", "fallback": "gpt-6"}]},
            "fallback 'gpt-6' is not in the catalog",
        ),
        (
            {"gateways": [TOKEN_TAKER], "models": []},
            "gateway 'collector': api_key_env TELEGRAM_BOT_TOKEN is one of the bot's own "
            "settings; give the gateway a variable of its own (e.g. COLLECTOR_API_KEY)",
        ),
    ],
)
async def test_bad_user_catalog_is_refused_at_start_up(
    tmp_path: Path, document: dict[str, object], words: str
) -> None:
    catalog = tmp_path / "models.json"
    catalog.write_text(json.dumps(document), encoding="utf-8")
    env = _clean_env(
        TELEGRAM_BOT_TOKEN=TOKEN,
        OPENAI_API_KEY=KEYS["openai"],
        MODEL_CATALOG_FILE=str(catalog),
        TELEGRAM_BASE_URL="http://127.0.0.1:9/bot",  # never contacted: refused before
    )
    code, stderr = await _run_bot(tmp_path, env)
    assert code == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("mnemobot: MODEL_CATALOG_FILE: ")
    assert words in lines[0]
    assert TOKEN not in stderr and KEYS["openai"] not in stderr


async def test_unknown_default_model_is_refused(tmp_path: Path) -> None:
    env = _clean_env(TELEGRAM_BOT_TOKEN=TOKEN, OPENAI_API_KEY=KEYS["openai"], DEFAULT_MODEL="gpt-7")
    code, stderr = await _run_bot(tmp_path, env)
    assert code == 2
    assert stderr.strip() == "mnemobot: DEFAULT_MODEL: unknown model 'gpt-7' (see /model or README)"


async def test_the_real_process_answers_and_stops_cleanly(tmp_path: Path) -> None:
    async with FakeTelegram(token=TOKEN) as tg, FakeProvider("openai") as openai:
        openai.set_default("*", Reply("Hello from a real process!", chunk_chars=5))
        env = _clean_env(
            TELEGRAM_BOT_TOKEN=TOKEN,
            TELEGRAM_BASE_URL=tg.base_url,
            ALLOWED_USER_IDS=str(OWNER),
            OPENAI_API_KEY=KEYS["openai"],
            OPENAI_API_BASE=openai.base_url,
            DATABASE_PATH=str(tmp_path / "db" / "bot.sqlite3"),
            LOG_LEVEL="DEBUG",
        )
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bot",
            cwd=tmp_path,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            await tg.wait_for(lambda: bool(tg.calls_of("setMyCommands")), timeout=60)
            tg.push(tg.make_text_update(OWNER, OWNER, "hi there"))
            await tg.wait_for(
                lambda: [m.text for m in tg.bot_messages(OWNER)] == ["Hello from a real process!"],
                timeout=30,
            )
            process.send_signal(signal.SIGTERM)
            _, stderr_bytes = await within(process.communicate(), 60)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        assert process.returncode == 0
        stderr = stderr_bytes.decode("utf-8", errors="replace")
        # Not a TTY: JSON lines; our events among them; not one secret in any line.
        events = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
        names = {e.get("event") for e in events}
        assert {"bot_started", "turn_finished", "bot_stopped"} <= names
        assert TOKEN not in stderr and KEYS["openai"] not in stderr
        assert (tmp_path / "db" / "bot.sqlite3").exists()
