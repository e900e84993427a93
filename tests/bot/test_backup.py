"""Online backup while the bot keeps writing: the copy is a committed state and intact."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from bot.cli.backup import BackupError, backup_database
from memory.db import Database
from memory.store import Store
from models.types import Usage
from tests.support.paths import REPO, TESTDATA


def _real_texts(limit: int) -> list[str]:
    """Real multilingual conversation texts, so pages hold realistic UTF-8 content."""
    texts: list[str] = []
    with (TESTDATA / "oasst2" / "oasst2_filtered.jsonl").open(encoding="utf-8") as lines:
        for line in lines:
            stack = [json.loads(line)["prompt"]]
            while stack:
                node = stack.pop()
                texts.append(node["text"])
                stack.extend(node.get("replies") or [])
            if len(texts) >= limit:
                break
    return texts[:limit]


async def _turn(store: Store, chat_id: int, user_text: str, reply: str) -> None:
    """One chat turn written like the bot does: two messages and a usage row, one transaction."""
    now = store.now()
    session_id = await store.active_session(chat_id)

    def write(conn: sqlite3.Connection) -> None:
        for role, content in (("user", user_text), ("assistant", reply)):
            conn.execute(
                "INSERT INTO messages(session_id, chat_id, role, content, created_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (session_id, chat_id, role, content, now),
            )
        usage = Usage(10, 5, 0.001)
        store.insert_usage(conn, chat_id, chat_id, "gpt-5", "chat", usage, now)

    await store.db.run_in_transaction(write)


def _check_copy(path: Path) -> tuple[int, int]:
    copy = sqlite3.connect(path)
    try:
        assert copy.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert copy.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        messages = copy.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
        usage = copy.execute("SELECT COUNT(*) FROM usage").fetchone()[0]
        # Never half a transaction: every turn has both its messages and its usage row.
        assert messages == 2 * usage
        assert copy.execute("PRAGMA user_version").fetchone()[0] >= 1
        return messages, usage
    finally:
        copy.close()


async def test_backup_while_writes_continue_is_consistent(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "live.sqlite3")
    store = Store(db)
    texts = _real_texts(400)
    for i in range(0, 400, 2):  # a database of some size, so the copy takes a while
        await _turn(store, 1 + i % 7, texts[i], texts[i + 1])

    committed = {"turns": 200}
    stop = asyncio.Event()

    async def writer() -> None:
        i = 0
        while not stop.is_set():
            await _turn(store, 100 + i % 5, texts[i % 400], texts[(i + 1) % 400])
            committed["turns"] += 1
            i += 1
            await asyncio.sleep(0)

    writing = asyncio.create_task(writer())
    overlapped = 0
    try:
        for attempt in range(20):
            before = committed["turns"]
            target = tmp_path / "backups" / f"copy-{attempt}.sqlite3"
            result = await asyncio.to_thread(backup_database, db.path, target)
            after = committed["turns"]
            messages, usage = _check_copy(result.path)
            assert before <= usage <= after
            assert result.messages == messages
            overlapped += after > before
            if overlapped >= 3:
                break
    finally:
        stop.set()
        await writing
        await db.close()
    assert overlapped >= 3, "the writer must have committed while backups ran"
    assert not list((tmp_path / "backups").glob("*.partial"))


def test_backup_of_a_missing_database_fails_cleanly_and_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(BackupError, match="does not exist"):
        backup_database(tmp_path / "nope.sqlite3", tmp_path / "out.sqlite3")
    assert not (tmp_path / "nope.sqlite3").exists()
    assert list(tmp_path.iterdir()) == []


async def _one_turn_database(path: Path) -> Path:
    db = await Database.open(path)
    await _turn(Store(db), 5, "hello", "hi there")
    await db.close()
    return db.path


def test_cli_writes_a_timestamped_copy_into_a_directory(tmp_path: Path) -> None:
    database = asyncio.run(_one_turn_database(tmp_path / "live.sqlite3"))
    out_dir = tmp_path / "backups"
    out_dir.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "bot", "backup", str(out_dir), "--database", str(database)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    (copy,) = out_dir.glob("mnemobot-*.sqlite3")
    assert _check_copy(copy) == (2, 1)
    assert "integrity ok" in proc.stdout

    missing = subprocess.run(
        [sys.executable, "-m", "bot.cli.backup", str(out_dir), "--database", str(tmp_path / "x")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert missing.returncode == 1
    assert "does not exist" in missing.stderr
