"""The archive's index follows the consolidation commit in transactions of its own
(migrations/0023_archive_index_later.sql): the words are kept by the commit, the index and the
per-chat term counts come right after, and a crash in between indexes each row once at the
next start. Real SQLite files, the real worker and search; the model is the scripted stand-in
of test_jobs.py.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from memory.chat_move import move_chat
from memory.db import Database
from memory.forget import forget_chat
from memory.recall.archive import (
    chat_token,
    index_pending,
    purge_older_than,
)
from memory.recall.search import Recall
from tests.memory.test_jobs import ScriptedTransport, chat_session, make_worker, remembering
from tests.support.archive_rows import archive_unindexed
from tests.support.memory_sessions import SettableClock

AT = "2026-03-01T09:00:00+00:00"


async def counts_and_index(db: Database, chat_id: int) -> tuple[list[tuple], list[tuple]]:
    """The chat's term counts as recall reads them, and as the FTS5 index counts its tokens."""
    kept = await db.fetchall(
        "SELECT term, docs FROM archive_terms WHERE chat_id = ? AND term != '' ORDER BY term",
        (chat_id,),
    )
    low, high = chat_token(chat_id, ""), chat_token(chat_id, "\U0010ffff")
    indexed = await db.fetchall(
        "SELECT substr(term, ?) AS term, doc FROM archive_vocab "
        "WHERE term > ? AND term < ? AND doc > 0 ORDER BY term",
        (len(low) + 1, low, high),
    )
    return [tuple(r) for r in kept], [tuple(r) for r in indexed]


def check_index(conn: sqlite3.Connection) -> None:
    """FTS5's own check that the index holds exactly what its content view says (it raises
    'database disk image is malformed' otherwise)."""
    conn.execute("INSERT INTO archive_fts(archive_fts, rank) VALUES ('integrity-check', 1)")


async def archived_by_a_commit_that_crashed_before_its_index(
    db: Database, chat_id: int, texts: list[str], at: str = AT
) -> None:
    """The database as a consolidation commit leaves it when the process dies before the
    index transaction: the rows archived, waiting (what `JobQueue.commit` writes first)."""
    await archive_unindexed(db, chat_id, texts, at, archived_at=AT)


async def test_a_consolidated_word_is_found_as_soon_as_the_job_is_done(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "bot.sqlite3")
    try:
        store, worker = make_worker(db, SettableClock(), ScriptedTransport(remembering()))
        await chat_session(store, 7, ["my cousin lives in Quillabamba", "noted"])
        await store.start_new_session(7)
        assert await worker.run_due() == 1

        hits = await Recall(db).search(7, "Quillabamba")
        assert [h.text for h in hits if h.source == "archive"] == ["my cousin lives in Quillabamba"]
        waiting = await db.fetchall("SELECT id FROM archived_messages WHERE indexed = 0")
        assert waiting == []
        kept, indexed = await counts_and_index(db, 7)
        assert kept == indexed and ("quillabamba", 1) in kept
    finally:
        await db.close()


async def test_rows_a_crash_left_unindexed_are_indexed_once_at_the_next_start(
    tmp_path: Path,
) -> None:
    path = tmp_path / "bot.sqlite3"
    db = await Database.open(path)
    texts = [f"turn {i} about the lighthouse keeper Oyelaran" for i in range(70)]
    try:
        await archived_by_a_commit_that_crashed_before_its_index(db, 5, texts)
        # Not searchable yet, and not counted: the index is all or nothing per row.
        assert await Recall(db).search(5, "Oyelaran") == []
        assert await counts_and_index(db, 5) == ([], [])
    finally:
        await db.close()

    db = await Database.open(path)  # the restart
    try:
        _, worker = make_worker(db, SettableClock(), ScriptedTransport(remembering()))
        await worker.start()
        await worker.stop(grace=1)
        kept, indexed = await counts_and_index(db, 5)
        assert kept == indexed and ("oyelaran", 70) in kept
        hits = await Recall(db).search(5, "Oyelaran lighthouse", limit=10)
        assert hits and all("Oyelaran" in h.text for h in hits)

        assert await index_pending(db) == 0  # a second pass finds nothing to do
        assert await counts_and_index(db, 5) == (kept, indexed)
        await db.run_in_transaction(check_index)
    finally:
        await db.close()


async def test_forget_and_a_chat_move_of_rows_waiting_for_the_index_keep_it_whole(
    tmp_path: Path,
) -> None:
    db = await Database.open(tmp_path / "bot.sqlite3")
    try:
        # Waiting rows leave without an index 'delete' (an FTS5 delete of a row it never held
        # would corrupt the index) and without taking counts they never added.
        await archived_by_a_commit_that_crashed_before_its_index(db, 1, ["kept word Zanzibar"])
        await index_pending(db)
        await archived_by_a_commit_that_crashed_before_its_index(db, 2, ["forgotten Mombasa"])
        await forget_chat(db, 2, AT)
        await db.run_in_transaction(check_index)
        assert await counts_and_index(db, 1) == ([("kept", 1), ("word", 1), ("zanzibar", 1)],) * 2
        assert await db.fetchall("SELECT * FROM archive_terms WHERE chat_id = 2") == []

        # The daily purge takes an old row still waiting: the counts of the indexed row that
        # shares its word stay.
        await archived_by_a_commit_that_crashed_before_its_index(db, 3, ["Mombasa harbour"])
        await index_pending(db)
        old = "2025-01-01T09:00:00+00:00"
        await archived_by_a_commit_that_crashed_before_its_index(db, 3, ["Mombasa market"], old)
        assert await purge_older_than(db, "2025-06-01T00:00:00+00:00") == 1
        await db.run_in_transaction(check_index)
        kept, indexed = await counts_and_index(db, 3)
        assert kept == indexed == [("harbour", 1), ("mombasa", 1)]

        # A waiting row that moves with its chat is indexed under the new id, once.
        await archived_by_a_commit_that_crashed_before_its_index(db, -100, ["group word Lamu"])
        await move_chat(db, -100, -1001, AT)
        assert await index_pending(db) == 1
        await db.run_in_transaction(check_index)
        kept, indexed = await counts_and_index(db, -1001)
        assert kept == indexed and ("lamu", 1) in kept
        assert [h.text for h in await Recall(db).search(-1001, "Lamu")] == ["group word Lamu"]
    finally:
        await db.close()
