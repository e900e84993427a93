"""End to end: the operator's MCP servers through the real bot, PTB and litellm against the fakes.
The servers are real MCP over stdio: ours (tests/fakes/mcp_servers/ours.py, MCPServer) and the real
mcp-server-time. The chat model is scripted on the fake OpenAI (and Anthropic) gateway; what the
user sees is read from the fake Telegram. Nothing of ours is mocked.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from bot.ui.i18n import t
from tests.e2e.test_e2e_web import press, question
from tests.fakes.providers import RecordedRequest, Reply, Respond, ToolCallReply
from tests.support.consolidation_stack import good_call
from tests.support.e2e_bot import (
    FRIEND,
    OWNER,
    BotUnderTest,
    FakeServers,
    bot_under_test,
    restartable_bot,
    wait_until,
)
from tests.support.mcp_stack import OURS, alive, children_of, kill_quietly, ours_entry, time_entry
from tests.support.provider_tool_rules import NAME, anthropic_problems, openai_problems
from tests.support.waits import within

CHAT = OWNER
SECRET_IN_BOT_ENV = "bot-env-secret-0042"


def write_config(tmp_path: Path, **servers: dict[str, Any]) -> Path:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    return path


@asynccontextmanager
async def mcp_bot(
    tmp_path: Path, notes: Path, *, call_timeout: float = 10, **settings: Any
) -> AsyncIterator[BotUnderTest]:
    config = write_config(
        tmp_path,
        ours=ours_entry(notes, timeout=call_timeout),
        time=time_entry(),
    )
    async with bot_under_test(
        tmp_path, MCP_CONFIG=str(config), ADMIN_USER_IDS=str(OWNER), **settings
    ) as bot:
        yield bot


def chat_requests(bot: BotUnderTest, model: str = "gpt-5") -> list[RecordedRequest]:
    providers = (bot.openai, bot.anthropic)
    return [r for p in providers for r in p.requests if r.model == model]


def last_result() -> Respond:
    """A model that answers once it has tool results, quoting the last one."""

    def answer(request: RecordedRequest) -> Reply:
        results = request.tool_results()
        return Reply("Here: " + (results[-1]["content"] if results else "nothing"))

    return Respond(answer)


async def test_offered_names_are_valid_and_unique_and_a_read_only_call_is_answered(
    tmp_path: Path,
) -> None:
    async with mcp_bot(tmp_path, tmp_path / "notes.txt") as bot:
        bot.openai.script(
            "gpt-5", ToolCallReply("ours_lookup", {"query": "Ana Lima"}), last_result()
        )
        [answer] = await bot.ask(CHAT, "is Ana Lima a member?")
        assert "found: Ana Lima (member since 2019)" in answer.text
        first = chat_requests(bot)[0]
        names = first.tool_names()
        assert len(names) == len(set(names)) and all(NAME.match(n) for n in names)
        assert {"ours_lookup", "ours_append_note", "time_get_current_time"} <= set(names)
        assert {"recall", "remember"} <= set(names)  # the bot's own are still there
        for tool in first.body["tools"]:
            assert openai_problems(tool) == [], tool["function"]["name"]
        # The result reached the model framed as untrusted content.
        result = chat_requests(bot)[1].tool_results()[-1]["content"]
        assert "Untrusted result of the tool 'lookup'" in result
        rows = await bot.rows("SELECT model_id, purpose, outcome FROM usage WHERE purpose = 'mcp'")
        assert rows == [{"model_id": "ours/lookup", "purpose": "mcp", "outcome": "ok"}]


async def test_anthropic_gets_schemas_it_accepts_and_the_real_time_server_answers(
    tmp_path: Path,
) -> None:
    async with mcp_bot(tmp_path, tmp_path / "notes.txt", DEFAULT_MODEL="claude-sonnet-4-5") as bot:
        bot.anthropic.script(
            "claude-sonnet-4-5",
            ToolCallReply("time_get_current_time", {"timezone": "Asia/Tokyo"}),
            last_result(),
        )
        [answer] = await bot.ask(CHAT, "what time is it in Tokyo?")
        assert '"timezone": "Asia/Tokyo"' in answer.text and "+09:00" in answer.text
        first = chat_requests(bot, "claude-sonnet-4-5")[0]
        tools = first.body["tools"]
        assert {"ours_plan_trip", "time_convert_time"} <= {tool["name"] for tool in tools}
        for tool in tools:
            assert anthropic_problems(tool["name"], tool["input_schema"]) == [], tool["name"]


async def test_a_side_effect_call_waits_for_the_keep_runs_once_and_never_after_a_drop(
    tmp_path: Path,
) -> None:
    notes = tmp_path / "notes.txt"
    async with mcp_bot(tmp_path, notes) as bot:
        bot.openai.script(
            "gpt-5",
            ToolCallReply("ours_append_note", {"text": "Dentist moved to Friday"}),
            Reply("I asked you to confirm the note."),
        )
        await bot.ask(CHAT, "note that the dentist moved to Friday")
        await bot.wait(lambda: any(m.button_data() for m in bot.messages(CHAT)))
        assert not notes.exists()  # nothing ran
        told = chat_requests(bot)[1].tool_results()[-1]["content"]
        assert "not done yet: this tool of the operator's MCP server" in told and "✅" in told
        asking = question(bot, CHAT)
        assert t("held_mcp_question") in asking.text
        assert t("held_mcp_call", server="ours", tool="append_note",
                 arguments='{"text": "Dentist moved to Friday"}') in asking.text  # fmt: skip
        keep, _drop = asking.button_data()

        await press(bot, CHAT, OWNER, keep, asking.message_id)
        await bot.wait(lambda: not any(m.button_data() for m in bot.messages(CHAT)))
        assert notes.read_text() == "Dentist moved to Friday\n"
        done = next(m for m in bot.messages(CHAT) if m.message_id == asking.message_id)
        assert "appended: Dentist moved to Friday" in done.text  # the result is shown
        # A second press does nothing: it ran exactly once.
        await press(bot, CHAT, OWNER, keep, asking.message_id)
        assert notes.read_text() == "Dentist moved to Friday\n"

        # The result is in the session: the next turn's model reads it.
        bot.openai.script("gpt-5", Reply("Noted earlier."))
        await bot.ask(CHAT, "did it work?")
        later = chat_requests(bot)[-1]
        assert any("appended: Dentist moved to Friday" in r["content"]
                   for r in later.tool_results())  # fmt: skip

        # Another call, dropped: never run.
        bot.openai.script(
            "gpt-5",
            ToolCallReply("ours_append_note", {"text": "Cancel everything"}),
            Reply("Waiting for you."),
        )
        await bot.ask(CHAT, "note: cancel everything")
        await bot.wait(lambda: any(m.button_data() for m in bot.messages(CHAT)))
        asking = question(bot, CHAT)
        _keep, drop = asking.button_data()
        await press(bot, CHAT, OWNER, drop, asking.message_id)
        await bot.wait(lambda: not any(m.button_data() for m in bot.messages(CHAT)))
        await press(bot, CHAT, OWNER, _keep, asking.message_id)  # a late ✅ after the ❌
        assert notes.read_text() == "Dentist moved to Friday\n"


async def test_a_hang_is_bounded_by_the_timeout_while_another_chat_is_answered(
    tmp_path: Path,
) -> None:
    async with mcp_bot(tmp_path, tmp_path / "notes.txt", call_timeout=3) as bot:
        # In the order the requests come: the hanging call, the other chat, the hung answer.
        bot.openai.script(
            "gpt-5", ToolCallReply("ours_hang", {}), Reply("Hello, friend."), last_result()
        )
        hung = asyncio.create_task(bot.ask(CHAT, "wait for the records"))
        await bot.wait(lambda: len(chat_requests(bot)) >= 1)
        [other] = await bot.ask(FRIEND, "hello", user_id=FRIEND)
        assert other.text == "Hello, friend."
        assert not hung.done()  # the hung call still waits while the other chat was answered
        [answer] = await hung
        assert "failed: no answer within 3 s" in answer.text


async def test_a_crash_is_a_tool_error_and_a_later_call_is_served(tmp_path: Path) -> None:
    async with mcp_bot(tmp_path, tmp_path / "notes.txt") as bot:
        bot.openai.script("gpt-5", ToolCallReply("ours_crash", {}), last_result())
        [crashed] = await bot.ask(CHAT, "crash it")
        assert "connection closed" in crashed.text
        connection = bot.services.mcp.connections["ours"]  # type: ignore[union-attr]
        await bot.wait(lambda: connection.restarts == 1 and str(connection.state) == "up")
        bot.openai.script("gpt-5", ToolCallReply("ours_lookup", {"query": "Rui"}), last_result())
        [answer] = await bot.ask(CHAT, "and Rui?")
        assert "found: Rui" in answer.text


async def test_no_secret_of_the_bot_reaches_a_server_and_a_huge_result_is_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MNEMOBOT_TEST_SECRET", SECRET_IN_BOT_ENV)
    async with mcp_bot(tmp_path, tmp_path / "notes.txt") as bot:
        bot.openai.script(
            "gpt-5",
            ToolCallReply("ours_env_list", {}, also=[("ours_huge", {"chars": 5_000_000})]),
            Reply("Done."),
        )
        await bot.ask(CHAT, "show me your environment and a lot of text")
        env_result, huge_result = (r["content"] for r in chat_requests(bot)[1].tool_results())
        [line] = [line for line in env_result.splitlines() if line.startswith("{")]
        env = json.loads(line)
        assert sorted(env) == ["HOME", "LANG", "NOTES_FILE", "PATH"]
        for secret in (SECRET_IN_BOT_ENV, bot.settings.TELEGRAM_BOT_TOKEN.get_secret_value(),
                       *(k.get_secret_value() for k in bot.settings.OPENAI_API_KEY)):  # fmt: skip
            assert secret not in env_result
        assert "[… cut: the result has 5,000,000 characters, the first 15,000" in huge_result
        assert len(huge_result) < 15_500


async def test_mcp_is_for_admins_and_shows_each_server(tmp_path: Path) -> None:
    broken = write_config(
        tmp_path, ours=ours_entry(tmp_path / "n.txt"), gone={"command": "no-such-server"}
    )
    async with bot_under_test(tmp_path, MCP_CONFIG=str(broken), ADMIN_USER_IDS=str(OWNER)) as bot:
        [refused] = await bot.ask(FRIEND, "/mcp", user_id=FRIEND)
        assert refused.text == t("admin_only")
        [status] = await bot.ask(OWNER, "/mcp")
        lines = status.text.splitlines()
        assert lines[0] == t("mcp_title")
        assert lines[1].startswith("• ours: up, tools 10 (10 offered), calls today 0")
        assert lines[2].startswith("• gone: failed, tools 0 (0 offered)")
        assert any("'no-such-server' is not on the server's PATH" in line for line in lines)


def our_server_children(pid: int) -> list[int]:
    return [
        child
        for child in children_of(pid)
        if str(OURS) in Path(f"/proc/{child}/cmdline").read_bytes().decode(errors="replace")
    ]


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGKILL"])
async def test_no_server_outlives_the_bot_process(tmp_path: Path, stop: str) -> None:
    """`python -m bot` with a server that ignores the end of its input: after SIGTERM the
    bot's stop ends it, after kill -9 the kernel does (the launcher's parent-death signal)."""
    config = write_config(tmp_path, ours=ours_entry(env={"OURS_IGNORE_EOF": "1"}))
    async with FakeServers() as fakes:
        db = tmp_path / "bot.sqlite3"
        async with restartable_bot(fakes, db, user=OWNER, MCP_CONFIG=str(config)) as proc:
            await wait_until(lambda: bool(our_server_children(proc.pid)), "the MCP server")
            [server] = our_server_children(proc.pid)
            try:
                proc.send_signal(getattr(signal, stop))
                await within(proc.wait(), timeout=60)
                await wait_until(lambda: not alive(server), "the server's end", limit_s=15)
            finally:
                kill_quietly(server)


async def test_an_mcp_result_holds_later_writes_and_the_memory_writer_sees_a_stub(
    tmp_path: Path,
) -> None:
    async with mcp_bot(tmp_path, tmp_path / "notes.txt") as bot:
        bot.openai.script(
            "gpt-5",
            ToolCallReply("ours_lookup", {"query": "Ana Lima"}),
            Reply("Yes, she is a member."),
            # The next turn, with the result in view: a write the model asks for waits.
            ToolCallReply("remember", {"fact": "Ana Lima joined in 2019"}),
            Reply("Shall I keep that?"),
        )
        await bot.ask(CHAT, "is Ana Lima a member?")
        [row] = await bot.rows(
            "SELECT json_extract(provenance, '$.kind') AS kind,"
            " json_extract(provenance, '$.source') AS source FROM messages WHERE role = 'tool'"
        )
        assert row == {"kind": "mcp", "source": "ours_lookup"}
        await bot.ask(CHAT, "remember when she joined")
        await bot.wait(lambda: any(m.button_data() for m in bot.messages(CHAT)))
        assert await bot.rows("SELECT content FROM long_term_memory") == []

        bot.groq.script("llama-3.3-70b-versatile", good_call())
        await bot.ask(CHAT, "/new")
        await bot.consolidations_settled(CHAT)
        [request] = [r for r in bot.groq.requests if not r.stream and not r.is_transcription]
        whole = json.dumps(request.body, ensure_ascii=False)
        assert "[result of ours_lookup (MCP):" in whole and "not shown]" in whole
        assert "member since 2019" not in whole  # the server's words never reach it
