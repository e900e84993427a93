"""SQLite store: migrations, WAL, sessions, messages that survive, usage rows."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memory.db import Database, MigrationError, discover_migrations
from memory.store import Store
from models.types import ToolCall, Usage
from tests.support.paths import REPO, TESTDATA


async def test_migrations_run_once_and_record_the_version(tmp_path: Path) -> None:
    path = tmp_path / "bot.sqlite3"
    expected = len(discover_migrations())
    first = await Database.open(path)
    assert await first.schema_version() == expected
    tables = {r["name"] for r in await first.fetchall("SELECT name FROM sqlite_master")}
    assert {"chats", "sessions", "messages", "usage"} <= tables
    store = Store(first)
    await store.add_message(1, "user", "kept")
    await first.close()
    again = await Database.open(path)  # a second start must not re-apply anything
    assert await again.schema_version() == expected
    rows = await again.fetchall("SELECT content FROM messages")
    assert [r["content"] for r in rows] == ["kept"]
    await again.close()


async def test_wal_and_busy_timeout(db: Database) -> None:
    assert (await db.fetchone("PRAGMA journal_mode"))[0] == "wal"
    assert (await db.fetchone("PRAGMA busy_timeout"))[0] >= 1000


async def test_database_newer_than_code_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version=999")
    conn.close()
    with pytest.raises(MigrationError, match="newer"):
        await Database.open(path)


@pytest.mark.parametrize(
    ("names", "words"),
    [
        (["0001_a.sql", "0003_c.sql"], "without gaps"),
        (["0001_a.sql", "2_b.sql"], "NNNN_name"),
    ],
)
def test_bad_migration_folders_are_refused(tmp_path: Path, names: list[str], words: str) -> None:
    for name in names:
        (tmp_path / name).write_text("SELECT 1;", encoding="utf-8")
    with pytest.raises(MigrationError, match=words):
        discover_migrations(tmp_path)


async def test_failed_migration_leaves_the_version_untouched(tmp_path: Path) -> None:
    folder = tmp_path / "migrations"
    folder.mkdir()
    (folder / "0001_ok.sql").write_text("CREATE TABLE a(x);", encoding="utf-8")
    (folder / "0002_bad.sql").write_text("CREATE TABLE b(x);\nTHIS IS NOT SQL;", encoding="utf-8")
    with pytest.raises(sqlite3.OperationalError):
        await Database.open(tmp_path / "m.sqlite3", migrations=folder)
    conn = sqlite3.connect(tmp_path / "m.sqlite3")
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    conn.close()
    assert version == 1
    assert "a" in tables and "b" not in tables


async def test_messages_go_to_the_active_session_in_order(db: Database) -> None:
    store = Store(db)
    first = await store.add_message(7, "user", "hello", user_id=42)
    second = await store.add_message(7, "assistant", "hi!", model_id="gpt-5")
    assert first.session_id == second.session_id == await store.active_session(7)
    messages = await store.session_messages(first.session_id)
    assert [(m.role, m.content, m.user_id, m.model_id) for m in messages] == [
        ("user", "hello", 42, None),
        ("assistant", "hi!", None, "gpt-5"),
    ]


async def test_new_session_keeps_old_messages(db: Database) -> None:
    store = Store(db)
    old = await store.add_message(7, "user", "remember me")
    result = await store.start_new_session(7)
    assert result.closed_session_id == old.session_id
    assert result.new_session_id != old.session_id
    assert await store.active_session(7) == result.new_session_id
    assert [m.content for m in await store.session_messages(old.session_id)] == ["remember me"]
    assert await store.session_messages(result.new_session_id) == []
    closed = await db.fetchone("SELECT closed_at FROM sessions WHERE id = ?", (old.session_id,))
    assert closed["closed_at"] is not None
    sessions = await db.fetchall("SELECT id FROM sessions WHERE chat_id = 7 ORDER BY id")
    assert [r["id"] for r in sessions] == [old.session_id, result.new_session_id]


async def test_new_session_without_history_opens_one(db: Database) -> None:
    result = await Store(db).start_new_session(99)
    assert result.closed_session_id is None
    assert result.new_session_id > 0


async def test_chat_model_persists_across_reopen(tmp_path: Path) -> None:
    path = tmp_path / "bot.sqlite3"
    first = await Database.open(path)
    assert await Store(first).get_chat_model(5) is None
    await Store(first).set_chat_model(5, "claude-sonnet-4-5")
    await first.close()
    second = await Database.open(path)
    assert await Store(second).get_chat_model(5) == "claude-sonnet-4-5"
    assert await Store(second).get_chat_model(6) is None
    await second.close()


async def test_tool_calls_and_tokens_round_trip(db: Database) -> None:
    store = Store(db)
    call = ToolCall("call_1", "save_memory", json.dumps({"memory_update": "ünï ✓"}))
    stored = await store.add_message(
        3,
        "assistant",
        "",
        tool_calls=[call],
        usage=Usage(prompt_tokens=12, completion_tokens=5),
    )
    await store.add_message(3, "tool", "ok", tool_call_id="call_1")
    messages = await store.session_messages(stored.session_id)
    assert messages[0].tool_calls == [call]
    prompt = [m.as_prompt_message() for m in messages]
    assert prompt[0]["tool_calls"][0]["function"]["arguments"] == call.arguments
    assert prompt[1]["tool_call_id"] == "call_1"
    row = await db.fetchone("SELECT prompt_tokens, completion_tokens FROM messages LIMIT 1")
    assert (row["prompt_tokens"], row["completion_tokens"]) == (12, 5)


async def test_naughty_strings_are_stored_verbatim() -> None:
    strings = json.loads((TESTDATA / "blns" / "blns.json").read_text(encoding="utf-8"))
    # In memory: 515 fsynced commits on a shared disk would take a minute and prove nothing more.
    db = await Database.open(":memory:")
    store = Store(db)
    for text in strings:
        await store.add_message(11, "user", text)
    session = await store.active_session(11)
    assert [m.content for m in await store.session_messages(session)] == strings
    await db.close()


async def test_reads_do_not_wait_behind_an_open_write_transaction(db: Database) -> None:
    """WAL lets the read connections read while the writer holds a transaction: a read made
    while one is open completes (it would deadlock here if it queued behind the writer, which
    only commits after the read), and sees the last committed state, not the open one."""
    store = Store(db)
    await store.add_message(1, "user", "committed before")
    inside = threading.Event()
    release = threading.Event()

    def write(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO chats(chat_id, created_at, updated_at) VALUES (2, 'x', 'x')")
        inside.set()
        release.wait(30)  # on the writer's thread: the transaction stays open till then

    writer = asyncio.create_task(db.run_in_transaction(write))
    assert await asyncio.to_thread(inside.wait, 30)
    # A guard against hanging forever if reads did queue behind the writer (not a timing claim).
    async with asyncio.timeout(30):
        contents = [r["content"] for r in await db.fetchall("SELECT content FROM messages")]
        uncommitted = await db.fetchone("SELECT chat_id FROM chats WHERE chat_id = 2")
        memory_reads = await asyncio.gather(*(store.get_chat_model(1) for _ in range(10)))
    assert contents == ["committed before"]
    assert uncommitted is None
    assert memory_reads == [None] * 10
    assert not writer.done()
    release.set()
    await writer
    assert await db.fetchone("SELECT chat_id FROM chats WHERE chat_id = 2") is not None


async def test_read_connections_cannot_write(db: Database) -> None:
    """A write sent through a read (outside the writer's lock) is refused, not applied."""
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        await db.fetchall("INSERT INTO chats(chat_id, created_at, updated_at) VALUES (5, 'x', 'x')")
    assert await db.fetchall("SELECT * FROM chats") == []


async def test_answer_and_its_usage_are_one_transaction(db: Database) -> None:
    """add_answer writes the assistant message and the usage row together, or neither."""
    store = Store(db)
    await store.add_message(4, "user", "question", user_id=40)
    await db.fetchall("SELECT 1")  # a read between, on a read connection

    def add_trigger(conn: sqlite3.Connection) -> None:  # a trigger that makes the usage insert fail
        conn.execute(
            "CREATE TEMP TRIGGER refuse_usage BEFORE INSERT ON usage "
            "BEGIN SELECT RAISE(ABORT, 'usage refused'); END"
        )

    await db.run_in_transaction(add_trigger)
    spends = [("gpt-5", Usage(3, 0, 0.004)), ("gpt-5-mini", Usage(3, 4, 0.01))]
    with pytest.raises(sqlite3.IntegrityError, match="usage refused"):
        await store.add_answer(
            4, 40, "answer", model_id="gpt-5-mini", usage=Usage(3, 4, 0.01), spends=spends
        )
    rows = await db.fetchall("SELECT role FROM messages ORDER BY id")
    assert [r["role"] for r in rows] == ["user"]

    def drop_trigger(conn: sqlite3.Connection) -> None:
        conn.execute("DROP TRIGGER temp.refuse_usage")

    await db.run_in_transaction(drop_trigger)
    stored = await store.add_answer(
        4, 40, "answer", model_id="gpt-5-mini", usage=Usage(3, 4, 0.01), spends=spends
    )
    assert stored.role == "assistant" and stored.content == "answer"
    usage = await db.fetchall("SELECT user_id, model_id, purpose, cost_usd FROM usage ORDER BY id")
    assert [tuple(r) for r in usage] == [
        (40, "gpt-5", "chat", 0.004),
        (40, "gpt-5-mini", "chat", 0.01),
    ]


async def test_failed_transaction_writes_nothing(db: Database) -> None:
    store = Store(db)
    with pytest.raises(RuntimeError):

        def write(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO chats(chat_id, created_at, updated_at) VALUES (1, 'x', 'x')")
            raise RuntimeError("boom")

        await db.run_in_transaction(write)
    assert await store.get_chat_model(1) is None
    assert await db.fetchall("SELECT * FROM chats") == []


async def test_usage_rows_and_timestamps(db: Database) -> None:
    moment = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
    store = Store(db, clock=lambda: moment)
    await store.record_usage(8, 42, "gpt-5", "chat", Usage(100, 20, 0.0003))
    await store.record_usage(8, None, "qwen3-32b", "consolidation", Usage(50, 10, 0.00002))
    rows = await db.fetchall("SELECT * FROM usage ORDER BY id")
    assert [(r["model_id"], r["purpose"], r["prompt_tokens"]) for r in rows] == [
        ("gpt-5", "chat", 100),
        ("qwen3-32b", "consolidation", 50),
    ]
    assert rows[0]["created_at"] == "2026-03-01T12:00:00.123Z"
    with pytest.raises(ValueError, match="gossip"):  # purposes are checked in code
        await store.record_usage(8, 42, "gpt-5", "gossip", Usage())
    assert len(await db.fetchall("SELECT id FROM usage")) == 2
    later = Store(db, clock=lambda: moment + timedelta(seconds=1))
    await later.add_message(8, "user", "x")
    assert store.now() < later.now()


def test_a_failed_open_does_not_keep_the_process_alive(tmp_path: Path) -> None:
    """A start-up refused by a migration error must end the process, not hang in a thread."""
    path = tmp_path / "future.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version=999")
    conn.close()
    script = (
        "import asyncio, sys\n"
        "from memory.db import Database, MigrationError\n"
        "try:\n"
        f"    asyncio.run(Database.open({str(path)!r}))\n"
        "except MigrationError:\n"
        "    sys.exit(3)\n"
    )
    repo = REPO
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=repo, timeout=60, capture_output=True, check=False
    )
    assert done.returncode == 3, done.stderr


async def test_media_migration_keeps_usage_rows_and_adds_transcription(tmp_path: Path) -> None:
    """The media migration rebuilds `usage` (a CHECK cannot be altered in place): rows written
    before it stay, with their ids, and the new purpose and audio seconds are accepted after."""
    folder = tmp_path / "migrations"
    folder.mkdir()
    numbered = discover_migrations()
    media_number = next(n for n, p in numbered if p.name.endswith("_media.sql"))
    for number, path in numbered:
        if number < media_number:
            (folder / path.name).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    path = tmp_path / "old.sqlite3"
    old = await Database.open(path, migrations=folder)
    try:

        def write(conn: sqlite3.Connection) -> None:  # a row as the code before it wrote it
            conn.execute(
                "INSERT INTO usage(chat_id, user_id, model_id, purpose, prompt_tokens, "
                "completion_tokens, cost_usd, created_at) "
                "VALUES (8, 42, 'gpt-5', 'chat', 100, 20, 0.0003, '2026-11-30T10:00:00.000Z')"
            )

        await old.run_in_transaction(write)
    finally:
        await old.close()

    db = await Database.open(path)  # every migration, the media one included
    try:
        await _check_media_schema(db)
    finally:
        await db.close()


async def _check_media_schema(db: Database) -> None:
    store = Store(db)
    await store.record_usage(8, 42, "whisper-1", "transcription", Usage(0, 0, 0.0002, 2.0))
    await store.add_message(8, "user", "[photo: cat]", media={"kind": "photo", "file_id": "Ag"})
    rows = await db.fetchall("SELECT id, model_id, purpose, audio_seconds FROM usage ORDER BY id")
    assert [tuple(r) for r in rows] == [
        (1, "gpt-5", "chat", 0.0),
        (2, "whisper-1", "transcription", 2.0),
    ]
    [message] = await store.session_messages(await store.active_session(8))
    assert message.media == {"kind": "photo", "file_id": "Ag"}
    indexes = {r["name"] for r in await db.fetchall("SELECT name FROM sqlite_master")}
    assert {"usage_spend_by_time", "usage_spend_by_user", "usage_by_chat"} <= indexes
