"""Long-term memory, the history search (`recall`: syntax-hostile, short and CJK queries),
/forget, export."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
from pathlib import Path

import pytest

from memory.db import Database
from memory.export import export_chat
from memory.forget import forget_chat
from memory.longterm import MemoryRepository, write_memory
from memory.recall.search import MAX_LIMIT, Recall
from primitives.litellm_env import LITELLM_FLAGS
from tests.support.memory_sessions import SessionMessage, oasst_messages, telegram_message
from tests.support.paths import REPO
from tests.support.waits import within

NOW = "2026-03-01T09:00:00.000Z"


def _entry(message: SessionMessage, text: str | None = None) -> str:
    """A history entry as consolidation writes it: the date, then what was said."""
    return f"[{message.at:%Y-%m-%d %H:%M}] {text if text is not None else message.content}"


def _real_entries() -> dict[str, str]:
    """History entries made of real messages (../shared/testdata): CJK from OpenAssistant,
    Indonesian/English dev chat (with the punctuation FTS5 treats as syntax) from the
    Teknologi Umum Telegram export."""
    solidity = next(oasst_messages("en", contains="pragma solidity ^"))
    pragma = next(line for line in solidity.content.splitlines() if "^" in line)
    tg = {
        "commit": ("database-isolation-level", 235882),  # "... yang udah di-commit aja."
        "snapshot": ("database-isolation-level", 235884),  # "level snapshot ... repeatable read"
        "mysql": ("database-isolation-level", 235885),  # "postgres, mysql ada read uncommited"
        "collation": ("database-isolation-level", 235938),  # "konteks (collation) nya"
        "kabur": ("database-isolation-level", 235910),  # "SAMA AJA *kabur"
        "nginx": ("disable-service-gcp-ingress", 269081),  # "image nginx:stable"
        "caddy": ("praktik-load-balancer", 262581),  # "vm1:8000", "round_robin"
        "coverage": ("tdd-and-clean-architecture", 54912),  # "100% code coverage"
        "webp": ("tdd-and-clean-architecture", 54834),  # 'if (fileExtension == "webp"){'
        "jadul": ("membuat-linq-efisien", 249197),  # "saya orang jadul :("
    }
    entries = {
        "zh": _entry(next(oasst_messages("zh"))),  # 素食主菜的详细食谱
        "ja": _entry(next(oasst_messages("ja"))),  # 信頼のあるAIとして
        "ko": _entry(next(oasst_messages("ko"))),  # 식물은 사람을 기억하는가?
        "solidity": _entry(solidity, pragma),  # "pragma solidity ^0.8.0;"
    }
    entries |= {key: _entry(telegram_message(*where)) for key, where in tg.items()}
    return entries


ENTRIES = _real_entries()
# Another chat with overlapping words and characters: never found from chat 1.
OTHER_CHAT = [
    _entry(telegram_message("tdd-and-clean-architecture", 54911)),  # "code coverage ... 100%"
    _entry(list(oasst_messages("zh"))[1]),
    _entry(telegram_message("disable-service-gcp-ingress", 269081)),  # nginx:stable too
]


@pytest.fixture
async def repo(db: Database) -> MemoryRepository:

    def write(conn: sqlite3.Connection) -> None:
        for chat_id, entries in ((1, list(ENTRIES.values())), (2, OTHER_CHAT)):
            conn.execute(
                "INSERT INTO chats(chat_id, created_at, updated_at) VALUES (?, ?, ?)",
                (chat_id, NOW, NOW),
            )
            for text in entries:
                conn.execute(
                    "INSERT INTO history_entries(chat_id, entry, model_id, first_message_at, "
                    "created_at) VALUES (?, ?, 'qwen3-32b', ?, ?)",
                    (chat_id, text, f"{text[1:11]}T{text[12:17]}:00.000Z", NOW),
                )
            write_memory(conn, chat_id, f"- memory of chat {chat_id}", over_budget=False, now=NOW)

    await db.run_in_transaction(write)
    return MemoryRepository(db)


async def search(repo: MemoryRepository, query: str, chat_id: int = 1) -> list[str]:
    """The chat's history entries `recall` finds for the query, best first (whole entries: a
    hit carries a snippet, with white space folded)."""
    entries = {e.id: e.entry for e in await repo.history(chat_id)}
    hits = await Recall(repo.db).search(chat_id, query, limit=MAX_LIMIT)
    assert all(hit.source == "history" for hit in hits)  # these chats store no messages
    return [entries[hit.ref_id] for hit in hits]


def keys(found: list[str]) -> set[str]:
    by_text = {text: key for key, text in ENTRIES.items()}
    return {by_text[text] for text in found}


# CJK is written without spaces: the query's words are found inside the entry.
CJK_QUERIES: list[tuple[str, set[str]]] = [
    ("素食主菜", {"zh"}),
    ("信頼のある", {"ja"}),
    ("사람을", {"ko"}),
    ("詳細食譜", set()),
]
# Two characters, which FTS5's trigram index cannot match ("기억" is a question word of recall's,
# so the query is searched as the text it is).
SHORT_QUERIES: list[tuple[str, set[str]]] = [("食谱", {"zh"}), ("기억", {"ko"})]


async def test_entries_matching_more_words_rank_first_and_other_chats_stay_out(
    repo: MemoryRepository,
) -> None:
    found = await search(repo, "baca read commited")
    # All three words, then two ("uncommited", "commited"); the snapshot entry says only "read",
    # under a fifth of the best score, and is left out.
    assert [keys([entry]) for entry in found] == [{"commit"}, {"mysql"}]
    assert keys(await search(repo, "coverage")) == {"coverage"}
    assert await search(repo, "coverage", chat_id=2) == [OTHER_CHAT[0]]
    assert keys(await search(repo, "nginx:stable")) == {"nginx"}


# FTS5 syntax (operators, column filters, groups, prefixes, the initial-token caret) and LIKE
# wildcards in a query are matched as the words, or where it has none the characters, they are.
# Where the syntax would have worked as syntax, the expected hits differ from what it would have
# found.
SYNTAX_QUERIES: list[tuple[str, set[str]]] = [
    ('"', {"webp"}),
    ("NEAR(binary snapshot)", {"collation", "snapshot"}),  # as syntax: none has both words
    ("snapshot NOT repeatable", {"snapshot"}),  # as syntax: none (it says "repeatable read")
    ("*", {"kabur"}),
    ("*kabur", {"kabur"}),
    ("a OR", {"jadul"}),  # "saya orang"
    ("'; DROP", set()),
    ("-commit", {"commit", "mysql"}),  # the word: "di-commit", "uncommited"
    ("-c", {"commit"}),
    ("(", {"collation", "webp", "jadul"}),
    (")", {"collation", "webp"}),
    ("(collation)", {"collation"}),
    ("nginx:stable", {"nginx"}),  # as syntax: a filter on a column "nginx"
    ("vm1:8000", {"caddy"}),
    ("^", {"solidity"}),
    ("^0.8", {"solidity"}),
    ("%", {"coverage"}),  # as a LIKE wildcard: everything
    ("100%", {"coverage"}),
    ("_", {"caddy"}),  # "round_robin"; as a LIKE wildcard: everything
]


# Control characters and lone surrogates count as spaces: in a query with no word to search, the
# text that reached SQLite raised (a NUL ends an FTS5 phrase: "unterminated string"; SQLite
# cannot encode a surrogate).
HOSTILE_QUERIES: list[tuple[str, set[str]]] = [
    ("\x00\x00\x00", set()),
    ("\udc80", set()),
    ("\ud83d\ud83d\ud83d", set()),
    ("a OR\x00", {"jadul"}),  # "saya orang"
    ("\udc80^0.8", {"solidity"}),
    ("\x01\x02\x03-c", {"commit"}),  # "di-commit"
]


QUERIES = {
    "cjk": CJK_QUERIES,
    "short": SHORT_QUERIES,
    "syntax": SYNTAX_QUERIES,
    "hostile": HOSTILE_QUERIES,
}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        pytest.param(query, expected, id=f"{kind}-{query!r}")
        for kind, cases in QUERIES.items()
        for query, expected in cases
    ],
)
async def test_a_query_finds_the_entries_holding_its_words_or_characters(
    repo: MemoryRepository, query: str, expected: set[str]
) -> None:
    assert keys(await search(repo, query)) == expected


async def test_forget_clears_memory_and_history_and_bumps_the_version(
    repo: MemoryRepository,
) -> None:
    before = await repo.get(1)
    await forget_chat(repo.db, 1, NOW)
    after = await repo.get(1)
    assert after.content == "" and after.version == before.version + 1
    assert await repo.history(1) == []
    assert await search(repo, "素食主菜") == []
    assert len(await repo.history(2)) == len(OTHER_CHAT)  # other chats untouched


async def test_export_writes_memory_and_history_files(
    repo: MemoryRepository, tmp_path: Path
) -> None:
    result = await export_chat(repo, 1, tmp_path / "out")
    assert (tmp_path / "out" / "MEMORY.md").read_text("utf-8") == "- memory of chat 1\n"
    history = (tmp_path / "out" / "HISTORY.md").read_text("utf-8")
    assert history == "".join(f"{entry}\n\n" for entry in ENTRIES.values())
    assert result.history_entries == len(ENTRIES)


async def test_export_command_line(repo: MemoryRepository, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TELEGRAM_")}
    env |= LITELLM_FLAGS
    out = tmp_path / "cli"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "bot", "export", "2", "--out", str(out), "--db", str(repo.db.path)),
        cwd=REPO,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await within(proc.communicate(), 60)
    assert proc.returncode == 0, stderr.decode()
    assert (out / "HISTORY.md").read_text("utf-8") == "".join(f"{e}\n\n" for e in OTHER_CHAT)
    assert (out / "MEMORY.md").read_text("utf-8") == "- memory of chat 2\n"
