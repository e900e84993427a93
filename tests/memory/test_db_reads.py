"""`Database.fetchall` and `Database.read` under load: reads asked for together reach the read
connections' threads in a few batches (one round trip through the event loop each, not two per
read), and each caller still gets exactly its own rows, or its own error."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import memory.db
from memory.db import DEFAULT_READERS, Database

NOW = "2026-01-01T00:00:00Z"
CHATS = 100


@pytest.fixture
async def db(db: Database) -> Database:
    """The shared database fixture with CHATS chats in it."""

    def add_chats(conn: sqlite3.Connection) -> None:
        conn.executemany(
            "INSERT INTO chats(chat_id, model_id, created_at, updated_at) VALUES (?, ?, ?, ?)",
            [(chat, f"model-{chat}", NOW, NOW) for chat in range(CHATS)],
        )

    await db.run_in_transaction(add_chats)
    return db


@pytest.fixture
def batches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of every batch sent to a reader's thread (the real function still runs)."""
    sizes: list[int] = []
    run_reads = memory.db._run_reads

    def counted(conn: sqlite3.Connection, queries: list[Any]) -> list[tuple[bool, Any]]:
        sizes.append(len(queries))
        return run_reads(conn, queries)

    monkeypatch.setattr(memory.db, "_run_reads", counted)
    return sizes


async def _model_of(db: Database, chat: int) -> str:
    row = await db.fetchone("SELECT model_id FROM chats WHERE chat_id = ?", (chat,))
    assert row is not None
    return str(row["model_id"])


async def test_a_hundred_reads_at_once_go_in_a_few_batches_each_with_its_own_rows(
    db: Database, batches: list[int]
) -> None:
    models = await asyncio.gather(*(_model_of(db, chat) for chat in range(CHATS)))

    assert models == [f"model-{chat}" for chat in range(CHATS)]
    assert sum(batches) == CHATS
    # Each free connection takes its share of what waits: 50, 25, 13, 6, ... not 100 trips.
    assert len(batches) <= 4 * DEFAULT_READERS
    assert max(batches) == CHATS // DEFAULT_READERS


async def test_a_read_alone_is_one_batch_of_one(db: Database, batches: list[int]) -> None:
    assert await _model_of(db, 7) == "model-7"
    assert batches == [1]


async def test_a_bad_query_fails_only_its_own_caller(db: Database) -> None:
    good = [_model_of(db, chat) for chat in range(10)]
    bad = db.fetchall("SELECT no_such_column FROM chats")

    *models, error = await asyncio.gather(*good, bad, return_exceptions=True)

    assert models == [f"model-{chat}" for chat in range(10)]
    assert isinstance(error, sqlite3.OperationalError)
    assert "no_such_column" in str(error)
    assert await _model_of(db, 99) == "model-99"  # the connections still serve


async def test_a_cancelled_reader_leaves_the_others_their_rows(db: Database) -> None:
    tasks = [asyncio.create_task(_model_of(db, chat)) for chat in range(20)]
    await asyncio.sleep(0)  # every task has asked for its read
    tasks[5].cancel()  # one reader cancelled mid-batch: the case tested

    results = await asyncio.gather(*tasks, return_exceptions=True)

    assert isinstance(results[5], asyncio.CancelledError)
    assert [r for i, r in enumerate(results) if i != 5] == [
        f"model-{chat}" for chat in range(20) if chat != 5
    ]
    assert await _model_of(db, 42) == "model-42"


async def test_reads_see_what_was_committed_before_they_were_asked(db: Database) -> None:
    async def rename(chat: int) -> str:
        await db.run_in_transaction(
            lambda conn: conn.execute(
                "UPDATE chats SET model_id = ? WHERE chat_id = ?", (f"renamed-{chat}", chat)
            )
        )
        return await _model_of(db, chat)

    assert await asyncio.gather(*(rename(c) for c in range(30))) == [
        f"renamed-{c}" for c in range(30)
    ]


async def test_close_answers_the_reads_already_asked_for(tmp_path: Path) -> None:
    database = await Database.open(tmp_path / "closing.sqlite3")
    reads = [asyncio.create_task(database.fetchall("SELECT ? AS n", (n,))) for n in range(50)]
    await asyncio.sleep(0)

    await database.close()

    assert [int((await read)[0]["n"]) for read in reads] == list(range(50))


async def test_a_read_body_runs_its_dependent_queries_in_one_trip_and_never_writes(
    db: Database, batches: list[int]
) -> None:
    def model_of_the_highest_chat(conn: sqlite3.Connection) -> str:
        highest = conn.execute("SELECT MAX(chat_id) FROM chats").fetchone()[0]
        row = conn.execute("SELECT model_id FROM chats WHERE chat_id = ?", (highest,)).fetchone()
        return str(row["model_id"])

    def rename(conn: sqlite3.Connection) -> None:
        conn.execute("UPDATE chats SET model_id = 'written' WHERE chat_id = 1")

    assert await db.read(model_of_the_highest_chat) == f"model-{CHATS - 1}"
    assert batches == [1]  # both queries in one round trip to the reader's thread
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        await db.read(rename)
    assert await _model_of(db, 1) == "model-1"
