"""Long-term memory, history search (FTS5 trigram, CJK, short-query fallback), /forget, export."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from memory.db import Database
from memory.export import export_chat
from memory.forget import forget_chat
from memory.longterm import MemoryRepository, fts_query, write_memory

REPO = Path(__file__).resolve().parents[1]
NOW = "2026-03-01T09:00:00.000Z"

ENTRIES = {
    1: [
        "[2026-02-01 10:00] Rina planned the PostgreSQL migration for the billing service.",
        "[2026-02-03 11:30] 東京タワーの近くで打ち合わせ。ユーザーは寿司が好き。",
        "[2026-02-05 08:15] 用户决定使用 Rust 重写解析器，性能提升三倍。",
        "[2026-02-07 19:45] Discussed Kubernetes ingress and the GCP load balancer timeout.",
        "[2026-02-09 12:00] Rina prefers Go over Java; PostgreSQL vacuum tuning for billing.",
    ],
    2: ["[2026-02-02 09:00] Another chat also talks about PostgreSQL and 東京タワー."],
}


@pytest.fixture
async def repo(tmp_path: Path) -> AsyncIterator[MemoryRepository]:
    db = await Database.open(tmp_path / "m.sqlite3")
    async with db.transaction() as conn:
        for chat_id, entries in ENTRIES.items():
            await conn.execute(
                "INSERT INTO chats(chat_id, created_at, updated_at) VALUES (?, ?, ?)",
                (chat_id, NOW, NOW),
            )
            for text in entries:
                await conn.execute(
                    "INSERT INTO history_entries(chat_id, entry, model_id, first_message_at, "
                    "created_at) VALUES (?, ?, 'qwen3-32b', ?, ?)",
                    (chat_id, text, f"{text[1:11]}T{text[12:17]}:00.000Z", NOW),
                )
            await write_memory(
                conn, chat_id, f"- memory of chat {chat_id}", over_budget=False, now=NOW
            )
    yield MemoryRepository(db)
    await db.close()


async def search(repo: MemoryRepository, query: str, chat_id: int = 1) -> list[str]:
    return [h.entry for h in await repo.search(chat_id, query)]


async def test_cjk_substring_search_uses_trigrams(repo: MemoryRepository) -> None:
    assert await search(repo, "東京タワー") == [ENTRIES[1][1]]
    assert await search(repo, "重写解析器") == [ENTRIES[1][2]]


async def test_queries_under_three_characters_fall_back_to_like(repo: MemoryRepository) -> None:
    assert fts_query("寿司") is None
    assert await search(repo, "寿司") == [ENTRIES[1][1]]
    assert await search(repo, "Go") == [ENTRIES[1][4]]


async def test_entries_matching_more_words_rank_first_and_other_chats_stay_out(
    repo: MemoryRepository,
) -> None:
    found = await search(repo, "postgresql billing vacuum")
    assert found[0] == ENTRIES[1][4]  # all three words
    assert set(found) == {ENTRIES[1][0], ENTRIES[1][4]}
    assert ENTRIES[2][0] not in await search(repo, "PostgreSQL 東京タワー")


@pytest.mark.parametrize("query", ['"', "NEAR(a b)", "postgresql AND", "*", "a OR", "'; DROP"])
async def test_fts_syntax_in_a_query_is_inert(repo: MemoryRepository, query: str) -> None:
    assert isinstance(await search(repo, query), list)


async def test_forget_clears_memory_and_history_and_bumps_the_version(
    repo: MemoryRepository,
) -> None:
    before = await repo.get(1)
    await forget_chat(repo.db, 1, NOW)
    after = await repo.get(1)
    assert after.content == "" and after.version == before.version + 1
    assert await repo.history(1) == []
    assert await search(repo, "東京タワー") == []
    assert len(await repo.history(2)) == 1  # other chats untouched


async def test_export_writes_memory_and_history_files(
    repo: MemoryRepository, tmp_path: Path
) -> None:
    result = await export_chat(repo, 1, tmp_path / "out")
    assert (tmp_path / "out" / "MEMORY.md").read_text("utf-8") == "- memory of chat 1\n"
    history = (tmp_path / "out" / "HISTORY.md").read_text("utf-8")
    assert history.split("\n\n")[:-1] == ENTRIES[1]
    assert result.history_entries == 5


async def test_export_command_line(repo: MemoryRepository, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TELEGRAM_")}
    env |= {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_OFFLINE_MODE": "true"}
    out = tmp_path / "cli"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "bot", "export", "2", "--out", str(out), "--db", str(repo.db.path)),
        cwd=REPO,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, stderr.decode()
    assert (out / "HISTORY.md").read_text("utf-8") == ENTRIES[2][0] + "\n\n"
    assert (out / "MEMORY.md").read_text("utf-8") == "- memory of chat 2\n"
