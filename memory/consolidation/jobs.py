"""The durable consolidation queue: jobs as rows, claimed, committed and retried.

Jobs are rows, not tasks in memory: /new inserts one inside its own transaction, so a crash at
any moment either has the job or has not closed the session. A job reads the chat's memory and
its messages when it runs (never at enqueue time) and commits memory + history + deletion of
exactly the consolidated messages (moved to the chat's archive, memory/recall/archive.py, where they
stay searchable) + its own state + usage in ONE transaction, after checking that it still owns the
job, that the memory version is the one it started from and that every message it summarised still
exists. A kill -9 before that COMMIT leaves everything as it was (the job is reset to pending at
start-up); after it, the job is done and cannot run again.

What the models cost is heard through the one mechanism every path that spends uses: a
`SpendRecorder` (memory/usage.py) is the consolidation's `on_spend`. A run's spends are written in
the transaction that settles the run (commit, conflict, failure), and whatever no transaction
wrote (a run cancelled while a provider held its request) is flushed as the run ends.

The worker that drains the queue is memory/consolidation/worker.py; the /stats figures of the
queue are memory/consolidation/stats.py.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

import structlog

from memory.consolidation.consolidation import (
    Consolidation,
    ConsolidationError,
    ModelAttempt,
    summarise_attempts,
)
from memory.consolidation.transcript import Chunk
from memory.db import Database
from memory.facts import Edit, replay
from memory.longterm import (
    LongTermMemory,
    add_unreported,
    changed_lines,
    memory_of,
    write_memory,
)
from memory.recall.archive import ArchivedRow, archive_in, index_pending, prepare_archive
from memory.store import Store, StoredMessage, to_iso
from memory.usage import SpendRecorder
from models.types import Spend
from primitives.backoff import Backoff

log = structlog.get_logger("memory.consolidation.jobs")

# The shortest CONSOLIDATION_RETRY_DELAYS entry the bot accepts (bot/config.py). A delay of 0
# made a job that fails every time run its whole paid model chain again the moment the last
# run ended, for as long as it kept failing.
MIN_RETRY_DELAY_S = 1.0


@dataclass(frozen=True)
class Job:
    id: int
    chat_id: int
    session_id: int
    kind: str
    upto_message_id: int | None
    state: str
    attempts: int
    chunks_done: int
    next_attempt_at: str
    last_error: str | None
    saved_by_model: str | None
    created_at: str
    started_at: str | None

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> Job:
        return cls(
            id=row["id"],
            chat_id=row["chat_id"],
            session_id=row["session_id"],
            kind=row["kind"],
            upto_message_id=row["upto_message_id"],
            state=row["state"],
            attempts=row["attempts"],
            chunks_done=row["chunks_done"],
            next_attempt_at=row["next_attempt_at"],
            last_error=row["last_error"],
            saved_by_model=row["saved_by_model"],
            created_at=row["created_at"],
            started_at=row["started_at"],
        )


# --- the queue ---------------------------------------------------------------------------------


class CommitResult(StrEnum):
    COMMITTED = "committed"
    CONFLICT = "conflict"  # memory version moved or messages vanished: run again from fresh
    NOT_OURS = "not_ours"  # the job is no longer running under our claim


class JobQueue:
    """SQL of the queue. Every state change is one transaction."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.db: Database = store.db

    async def get(self, job_id: int) -> Job | None:
        row = await self.db.fetchone("SELECT * FROM consolidation_jobs WHERE id = ?", (job_id,))
        return Job.from_row(row) if row else None

    async def reset_interrupted(self, now: str) -> int:
        """Jobs left `running` by a crash or an expired grace period go back to pending."""
        return await self.db.run_in_transaction(
            lambda conn: len(
                conn.execute(
                    "UPDATE consolidation_jobs SET state = 'pending', started_at = NULL, "
                    "next_attempt_at = ?, updated_at = ? WHERE state = 'running' RETURNING id",
                    (now, now),
                ).fetchall()
            )
        )

    async def claim_due(self, now: str, limit: int) -> list[Job]:
        """Mark up to `limit` due jobs running: per chat only its oldest open job, and only if
        that one is pending and due (a later job never overtakes an earlier one)."""
        if limit <= 0:
            return []

        def claim(conn: sqlite3.Connection) -> list[Job]:
            rows = conn.execute(
                "SELECT j.* FROM consolidation_jobs j "
                "WHERE j.id = (SELECT MIN(o.id) FROM consolidation_jobs o "
                "              WHERE o.chat_id = j.chat_id AND o.state != 'done') "
                "AND j.state = 'pending' AND j.next_attempt_at <= ? "
                "ORDER BY j.next_attempt_at, j.id LIMIT ?",
                (now, limit),
            ).fetchall()
            claimed = []
            for row in rows:
                updated = conn.execute(
                    "UPDATE consolidation_jobs SET state = 'running', started_at = ?, "
                    "updated_at = ? WHERE id = ? AND state = 'pending' RETURNING *",
                    (now, now, row["id"]),
                ).fetchone()
                if updated is not None:
                    claimed.append(Job.from_row(updated))
            return claimed

        return await self.db.run_in_transaction(claim)

    async def open_jobs(self, chat_id: int) -> int:
        """Jobs of a chat not yet done (shown by /memory)."""
        row = await self.db.fetchone(
            "SELECT COUNT(*) AS n FROM consolidation_jobs WHERE chat_id = ? AND state != 'done'",
            (chat_id,),
        )
        return int(row["n"]) if row else 0

    async def next_due_at(self) -> str | None:
        """When the next claimable job is due (a job behind its chat's running one is not)."""
        row = await self.db.fetchone(
            "SELECT MIN(j.next_attempt_at) AS at FROM consolidation_jobs j "
            "WHERE j.id = (SELECT MIN(o.id) FROM consolidation_jobs o "
            "              WHERE o.chat_id = j.chat_id AND o.state != 'done') "
            "AND j.state = 'pending'"
        )
        return row["at"] if row else None

    async def messages(self, job: Job) -> list[StoredMessage]:
        """The job's messages that still exist, oldest first."""
        messages = await self.store.session_messages(job.session_id)
        if job.upto_message_id is None:
            return messages
        return [m for m in messages if m.id <= job.upto_message_id]

    async def finish_empty(self, job: Job, now: str) -> None:
        """Nothing left to consolidate (e.g. an earlier job already took the messages)."""

        def finish(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE consolidation_jobs SET state = 'done', finished_at = ?, updated_at = ? "
                "WHERE id = ? AND state = 'running' AND started_at = ?",
                (now, now, job.id, job.started_at),
            )
            _drop_edits(conn, job.chat_id)

        await self.db.run_in_transaction(finish)

    async def commit(
        self,
        job: Job,
        memory: LongTermMemory,
        chunk: Chunk,
        result: Consolidation,
        spending: SpendRecorder,
        *,
        memory_max_chars: int,
        now: str,
    ) -> CommitResult:
        """The one transaction that applies a consolidation (see the module docstring), with
        the run's spends not written yet; they count as written once it committed."""
        archived = await prepare_archive(chunk.messages)
        spends = spending.pending()
        outcome = await self.db.run_in_transaction(
            lambda conn: self._commit_in(
                conn, job, memory, chunk, result, spends, archived, memory_max_chars, now
            ),
            background=True,
        )
        spending.written(len(spends))
        if outcome is CommitResult.COMMITTED:
            await index_pending(self.db)
        return outcome

    def _commit_in(
        self,
        conn: sqlite3.Connection,
        job: Job,
        memory: LongTermMemory,
        chunk: Chunk,
        result: Consolidation,
        spends: Sequence[Spend],
        archived: list[ArchivedRow],
        memory_max_chars: int,
        now: str,
    ) -> CommitResult:
        """The body of `commit`, on the writer's thread."""
        ids = chunk.message_ids
        marks = ",".join("?" * len(ids))
        claimed = conn.execute(
            "SELECT chat_id FROM consolidation_jobs WHERE id = ? AND state = 'running' "
            "AND started_at = ?",
            (job.id, job.started_at),
        ).fetchone()
        if claimed is None:
            # Forgotten (/forget deleted the job) or reclaimed: nothing is applied, but
            # the models were paid, so the spend is recorded.
            _insert_spent(conn, job, chunk, spends, self.store, now)
            return CommitResult.NOT_OURS
        # The chat may have moved to a new id while the models ran (memory/chat_move.py):
        # everything this commit writes follows it.
        job = replace(job, chat_id=int(claimed["chat_id"]))
        current = memory_of(conn, job.chat_id)
        row = conn.execute(
            f"SELECT COUNT(*) AS n FROM messages WHERE id IN ({marks})", ids
        ).fetchone()
        present = int(row["n"]) if row else 0
        memory_update = result.memory_update
        if current.version != memory.version and present == len(ids):
            # The chat model's remember/forget_fact since we read the memory are replayed
            # on our result; any other write (a /forget, another job) means run again.
            edits = _edits_since(conn, job.chat_id, memory.version)
            if len(edits) == current.version - memory.version:
                memory_update = replay(memory_update, edits)
                log.info("consolidation_replayed_edits", job_id=job.id, edits=len(edits))
                memory = current
        if current.version != memory.version or present != len(ids):
            _insert_attempts(conn, job, result.attempts, now)
            _insert_spent(conn, job, chunk, spends, self.store, now)
            return CommitResult.CONFLICT
        write_memory(
            conn,
            job.chat_id,
            memory_update,
            over_budget=len(memory_update) > memory_max_chars,
            now=now,
        )
        # The user's next reply says what changed (bot/turns/answer.py): no write is silent.
        add_unreported(conn, job.chat_id, changed_lines(current.content, memory_update))
        _drop_edits(conn, job.chat_id)
        first, last = chunk.messages[0], chunk.messages[-1]
        conn.execute(
            "INSERT INTO history_entries(chat_id, session_id, job_id, entry, model_id, "
            "first_message_id, last_message_id, first_message_at, last_message_at, "
            "message_count, created_at, untrusted) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                job.chat_id,
                job.session_id,
                job.id,
                result.history_entry,
                result.model_id,
                first.id,
                last.id,
                first.created_at,
                last.created_at,
                len(ids),
                now,
                # Written from a chunk holding untrusted parts: recall frames it as such.
                int(any(m.provenance is not None for m in chunk.messages)),
            ),
        )
        # Out of the session and every prompt, into the archive: still searchable.
        archive_in(conn, archived, now)
        conn.execute(f"DELETE FROM messages WHERE id IN ({marks})", ids)
        more_row = conn.execute(
            "SELECT EXISTS(SELECT 1 FROM messages WHERE session_id = ? "
            "AND (? IS NULL OR id <= ?)) AS more",
            (job.session_id, job.upto_message_id, job.upto_message_id),
        ).fetchone()
        more = bool(more_row["more"]) if more_row else False
        conn.execute(
            "UPDATE consolidation_jobs SET state = ?, attempts = 0, last_error = NULL, "
            "chunks_done = chunks_done + 1, saved_by_model = ?, finished_at = ?, "
            "updated_at = ? WHERE id = ?",
            (
                "running" if more else "done",
                result.model_id,
                None if more else now,
                now,
                job.id,
            ),
        )
        _insert_attempts(conn, job, result.attempts, now)
        _insert_spent(conn, job, chunk, spends, self.store, now)
        return CommitResult.COMMITTED

    async def record_failure(
        self,
        job: Job,
        failure: ConsolidationError,
        chunk: Chunk,
        spending: SpendRecorder,
        *,
        backoff: Backoff,
        now: datetime,
    ) -> tuple[int, float]:
        """Every model failed: keep the messages, schedule the next whole-chain run (and
        write the run's spends with it)."""
        stamp = to_iso(now)
        spends = spending.pending()

        def record(conn: sqlite3.Connection) -> tuple[int, float]:
            row = conn.execute(
                "SELECT attempts FROM consolidation_jobs WHERE id = ? AND state = 'running' "
                "AND started_at = ?",
                (job.id, job.started_at),
            ).fetchone()
            if row is None:  # forgotten or reclaimed meanwhile; the spend is still real
                _insert_spent(conn, job, chunk, spends, self.store, stamp)
                return job.attempts, 0.0
            failed_runs = int(row["attempts"]) + 1
            delay = backoff.after(failed_runs)
            conn.execute(
                "UPDATE consolidation_jobs SET state = 'pending', attempts = ?, "
                "next_attempt_at = ?, last_error = ?, started_at = NULL, updated_at = ? "
                "WHERE id = ?",
                (
                    failed_runs,
                    to_iso(now + timedelta(seconds=delay)),
                    summarise_attempts(failure.attempts),
                    stamp,
                    job.id,
                ),
            )
            _insert_attempts(conn, job, failure.attempts, stamp)
            _insert_spent(conn, job, chunk, spends, self.store, stamp)
            _drop_edits(conn, job.chat_id)
            return failed_runs, delay

        settled = await self.db.run_in_transaction(record)
        spending.written(len(spends))
        return settled

    async def release(self, job: Job, now: str, *, retry_at: str, reason: str) -> None:
        """Give a claimed job back without counting a failed chain run."""

        def give_back(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE consolidation_jobs SET state = 'pending', started_at = NULL, "
                "next_attempt_at = ?, last_error = ?, updated_at = ? "
                "WHERE id = ? AND state = 'running' AND started_at = ?",
                (retry_at, reason, now, job.id, job.started_at),
            )
            _drop_edits(conn, job.chat_id)

        await self.db.run_in_transaction(give_back)


def _drop_edits(conn: sqlite3.Connection, chat_id: int) -> None:
    """The job stops running: its next run (or the chat's next job) reads the memory afresh,
    so the tool edits kept for its replay are of no use any more — and hold the very words
    a user asked to forget."""
    conn.execute("DELETE FROM memory_edits WHERE chat_id = ?", (chat_id,))


def _edits_since(conn: sqlite3.Connection, chat_id: int, version: int) -> list[Edit]:
    """Tool edits (remember / forget_fact) that produced the versions after `version`."""
    rows = conn.execute(
        "SELECT kind, fact, lines FROM memory_edits WHERE chat_id = ? AND version > ? "
        "ORDER BY version",
        (chat_id, version),
    ).fetchall()
    return [Edit(row["kind"], row["fact"], tuple(json.loads(row["lines"]))) for row in rows]


def _insert_attempts(
    conn: sqlite3.Connection, job: Job, attempts: Sequence[ModelAttempt], now: str
) -> None:
    conn.executemany(
        "INSERT INTO consolidation_attempts(job_id, chat_id, model_id, outcome, detail, "
        "latency_ms, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            (
                job.id,
                job.chat_id,
                attempt.model_id,
                attempt.outcome,
                attempt.detail,
                int(attempt.latency_s * 1000),
                now,
            )
            for attempt in attempts
        ],
    )


def chunk_owner(chunk: Chunk) -> int | None:
    """Whom a chunk's consolidation is billed to: the chat's last user who wrote in it."""
    return next((m.user_id for m in reversed(chunk.messages) if m.user_id is not None), None)


def _insert_spent(
    conn: sqlite3.Connection,
    job: Job,
    chunk: Chunk,
    spends: Sequence[Spend],
    store: Store,
    now: str,
) -> None:
    """Usage rows (purpose 'consolidation'), attributed to the chat's user."""
    user_id = chunk_owner(chunk)
    for spend in spends:
        store.insert_usage(
            conn, job.chat_id, user_id, spend.model_id, "consolidation", spend.usage, now
        )
