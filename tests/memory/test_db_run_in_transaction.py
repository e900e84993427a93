"""`Database.run_in_transaction`: a write as ONE call on the writer's thread — rolled back on an
error in the body or in the COMMIT, and a caller cancelled meanwhile (/cancel, /new, shutdown)
gets the result of a write that landed (the cancellation then lands at its next await) or the
cancellation if nothing was written.

The body is held on the writer's thread by a threading.Event, so the cancellation is known to
arrive while the write is running there, not before or after it.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable

import pytest

from memory.db import Database
from memory.store import Store

NOW = "2026-01-01T00:00:00Z"


def _add_chat(conn: sqlite3.Connection, chat_id: int) -> None:
    conn.execute(
        "INSERT INTO chats(chat_id, created_at, updated_at) VALUES (?, ?, ?)",
        (chat_id, NOW, NOW),
    )


async def _chats(db: Database) -> list[int]:
    return [int(r["chat_id"]) for r in await db.fetchall("SELECT chat_id FROM chats ORDER BY 1")]


async def _still_writes(db: Database) -> None:
    """The writer is not left inside a dead transaction: the next write goes through."""
    await Store(db).set_chat_model(99, "gpt-5")
    assert await Store(db).get_chat_model(99) == "gpt-5"


async def test_the_body_commits_and_its_result_is_returned(db: Database) -> None:
    def write(conn: sqlite3.Connection) -> int:
        _add_chat(conn, 1)
        _add_chat(conn, 2)
        return int(conn.execute("SELECT COUNT(*) FROM chats").fetchone()[0])

    assert await db.run_in_transaction(write) == 2
    assert await _chats(db) == [1, 2]


async def test_an_error_in_the_body_rolls_everything_back(db: Database) -> None:
    def write(conn: sqlite3.Connection) -> None:
        _add_chat(conn, 1)
        raise ValueError("the body failed after a write")

    with pytest.raises(ValueError, match="the body failed"):
        await db.run_in_transaction(write)
    assert await _chats(db) == []
    await _still_writes(db)


async def test_a_failed_commit_is_rolled_back(db: Database) -> None:
    # A real COMMIT failure (see test_db_commit.py): a deferred foreign key is only checked at
    # COMMIT, which SQLite refuses while keeping the transaction open.
    def write(conn: sqlite3.Connection) -> str:
        conn.execute("PRAGMA defer_foreign_keys = ON")
        _add_chat(conn, 1)
        conn.execute(
            "INSERT INTO messages(session_id, chat_id, role, content, created_at) "
            "VALUES (987654, 1, 'user', 'points at no session', ?)",
            (NOW,),
        )
        return "the body itself succeeded"

    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
        await db.run_in_transaction(write)
    assert await _chats(db) == []
    assert await db.fetchall("SELECT 1 FROM messages") == []
    await _still_writes(db)


def _held(
    body: Callable[[sqlite3.Connection], object],
) -> tuple[Callable[[sqlite3.Connection], object], threading.Event, threading.Event]:
    """`body`, run only once `release` is set; `started` is set when it is on the thread."""
    started, release = threading.Event(), threading.Event()

    def held(conn: sqlite3.Connection) -> object:
        started.set()
        assert release.wait(30), "the test never released the body"
        return body(conn)

    return held, started, release


async def _cancel_while_running(task: asyncio.Task[object], started: threading.Event) -> None:
    assert await asyncio.to_thread(started.wait, 30), "the body never started"
    task.cancel()  # cancelled while its body runs on the writer thread: the case tested
    for _ in range(5):  # let the cancellation reach the task, which waits for the thread
        await asyncio.sleep(0)
    assert not task.done()  # the write is still running: the caller waits for its outcome


async def test_a_write_that_landed_while_cancelled_returns_then_cancels(db: Database) -> None:
    def write(conn: sqlite3.Connection) -> str:
        _add_chat(conn, 1)
        return "stored"

    held, started, release = _held(write)
    returned: list[object] = []
    reached_next_await = asyncio.Event()

    async def caller() -> object:
        returned.append(await db.run_in_transaction(held))
        reached_next_await.set()
        await asyncio.sleep(3600)  # the cancellation lands here
        return "not cancelled"

    task = asyncio.create_task(caller())
    await _cancel_while_running(task, started)
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert returned == ["stored"]  # the caller learnt that its write happened
    assert reached_next_await.is_set()
    assert await _chats(db) == [1]
    await _still_writes(db)


async def test_a_write_rolled_back_while_cancelled_raises_the_cancellation(
    db: Database,
) -> None:
    def write(conn: sqlite3.Connection) -> None:
        _add_chat(conn, 1)
        raise ValueError("the body failed")

    held, started, release = _held(write)
    task = asyncio.create_task(db.run_in_transaction(held))
    await _cancel_while_running(task, started)
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await _chats(db) == []
    await _still_writes(db)


async def test_a_writer_cancelled_while_waiting_for_the_lock_writes_nothing(
    db: Database,
) -> None:
    first, started, release = _held(lambda conn: _add_chat(conn, 1))
    ran: list[int] = []

    def second(conn: sqlite3.Connection) -> None:
        ran.append(2)
        _add_chat(conn, 2)

    holder = asyncio.create_task(db.run_in_transaction(first))
    assert await asyncio.to_thread(started.wait, 30)
    waiter = asyncio.create_task(db.run_in_transaction(second))
    await asyncio.sleep(0)  # the waiter is now queued on the writer's lock
    waiter.cancel()  # cancelled while queued on the lock: the case tested
    with pytest.raises(asyncio.CancelledError):
        await waiter
    release.set()
    await holder
    assert ran == []
    assert await _chats(db) == [1]
    await _still_writes(db)


async def test_writes_queued_together_each_commit_or_roll_back_on_their_own(
    db: Database,
) -> None:
    # Writes that wait while another runs go to the thread together: one failing among them
    # rolls back only itself, in the order they were asked.
    first, started, release = _held(lambda conn: _add_chat(conn, 1))

    def failing(conn: sqlite3.Connection) -> None:
        _add_chat(conn, 2)
        raise ValueError("only this write fails")

    def counting(conn: sqlite3.Connection) -> int:
        _add_chat(conn, 3)
        return int(conn.execute("SELECT COUNT(*) FROM chats").fetchone()[0])

    holder = asyncio.create_task(db.run_in_transaction(first))
    assert await asyncio.to_thread(started.wait, 30)
    queued = [
        asyncio.create_task(db.run_in_transaction(failing)),
        asyncio.create_task(db.run_in_transaction(counting)),
    ]
    await asyncio.sleep(0)
    release.set()
    await holder
    outcomes = await asyncio.gather(*queued, return_exceptions=True)
    assert isinstance(outcomes[0], ValueError)
    assert outcomes[1] == 2  # chats 1 and 3: the failed write left nothing behind
    assert await _chats(db) == [1, 3]
    await _still_writes(db)


async def test_writes_queued_together_share_one_commit(db: Database) -> None:
    # Group commit: one COMMIT (one fsync of the WAL) for the writes that waited together.
    statements: list[str] = []
    # Traced on the writer's own sqlite3 connection, on its thread.
    await db._conn._execute(db._conn._conn.set_trace_callback, statements.append)
    first, started, release = _held(lambda conn: _add_chat(conn, 0))
    holder = asyncio.create_task(db.run_in_transaction(first))
    assert await asyncio.to_thread(started.wait, 30)
    queued = [
        asyncio.create_task(db.run_in_transaction(lambda conn, c=c: _add_chat(conn, c)))
        for c in range(1, 51)
    ]
    await asyncio.sleep(0)
    release.set()
    await holder
    await asyncio.gather(*queued)
    await db._conn._execute(db._conn._conn.set_trace_callback, None)

    assert await _chats(db) == list(range(51))
    assert statements.count("COMMIT") == 2  # the first write alone, then the fifty together


async def test_a_commit_refused_for_one_write_of_a_batch_fails_that_write_alone(
    db: Database,
) -> None:
    # A dangling reference, checked only at COMMIT (deferred): the batch's COMMIT fails, the
    # batch is rolled back, and each write runs again on its own; only the culprit fails.
    first, started, release = _held(lambda conn: _add_chat(conn, 1))

    def dangling(conn: sqlite3.Connection) -> None:
        conn.execute("PRAGMA defer_foreign_keys = ON")
        conn.execute(
            "INSERT INTO messages(session_id, chat_id, role, content, created_at) "
            "VALUES (987654, 1, 'user', 'points at no session', ?)",
            (NOW,),
        )

    holder = asyncio.create_task(db.run_in_transaction(first))
    assert await asyncio.to_thread(started.wait, 30)
    queued = [
        asyncio.create_task(db.run_in_transaction(lambda conn: _add_chat(conn, 2))),
        asyncio.create_task(db.run_in_transaction(dangling)),
        asyncio.create_task(db.run_in_transaction(lambda conn: _add_chat(conn, 3))),
    ]
    await asyncio.sleep(0)
    release.set()
    await holder
    outcomes = await asyncio.gather(*queued, return_exceptions=True)

    assert outcomes[0] is None and outcomes[2] is None
    assert isinstance(outcomes[1], sqlite3.IntegrityError)
    assert "FOREIGN KEY" in str(outcomes[1])
    assert await _chats(db) == [1, 2, 3]
    assert await db.fetchall("SELECT 1 FROM messages") == []
    await _still_writes(db)


async def test_a_users_write_goes_before_queued_background_writes_each_of_which_runs_alone(
    db: Database,
) -> None:
    # /new must not wait behind a queue of consolidation commits: with the writer busy, two
    # background writes and then two of a user's are asked for; the user's run next, together,
    # and each background write after them in its own transaction.
    order: list[int] = []
    statements: list[str] = []
    await db._conn._execute(db._conn._conn.set_trace_callback, statements.append)
    first, started, release = _held(lambda conn: _add_chat(conn, 0))
    holder = asyncio.create_task(db.run_in_transaction(first))
    assert await asyncio.to_thread(started.wait, 30)

    def write(chat_id: int) -> Callable[[sqlite3.Connection], None]:
        def body(conn: sqlite3.Connection) -> None:
            order.append(chat_id)
            _add_chat(conn, chat_id)

        return body

    queued = [
        asyncio.create_task(db.run_in_transaction(write(1), background=True)),
        asyncio.create_task(db.run_in_transaction(write(2), background=True)),
    ]
    await asyncio.sleep(0)
    queued += [
        asyncio.create_task(db.run_in_transaction(write(3))),
        asyncio.create_task(db.run_in_transaction(write(4))),
    ]
    await asyncio.sleep(0)
    release.set()
    await holder
    await asyncio.gather(*queued)
    await db._conn._execute(db._conn._conn.set_trace_callback, None)

    assert order == [3, 4, 1, 2]
    # The held write, the user's two together, then each background write alone.
    assert statements.count("COMMIT") == 4
    assert await _chats(db) == [0, 1, 2, 3, 4]
