"""The worker that drains the consolidation queue (memory/consolidation/jobs.py) in the
background: due jobs of different chats at once (a small fixed number), one at a time within a
chat. A run reads the chat's memory and the job's messages when it starts, consolidates them
chunk by chunk, and commits each chunk through the queue; a run that finds its memory changed
under it too often steps back, and a failed run waits out its retry delay.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from datetime import datetime, timedelta

import structlog

from memory.consolidation.consolidation import ConsolidationError, Consolidator, summarise_attempts
from memory.consolidation.jobs import CommitResult, Job, JobQueue, chunk_owner
from memory.consolidation.transcript import DEFAULT_MAX_MESSAGE_CHARS, Chunk, chunk_messages
from memory.db import Database
from memory.longterm import LongTermMemory, memory_of
from memory.recall.archive import index_pending
from memory.store import Store, from_iso, to_iso
from memory.usage import SpendRecorder
from primitives.backoff import Backoff
from primitives.clock import Clock, utc_now
from primitives.tasks import stop_tasks
from primitives.waits import wait_or_timeout

log = structlog.get_logger("memory.consolidation.worker")


# How often one run may find its memory or messages changed under it before it steps back.
MAX_CONFLICTS_PER_RUN = 3


class ConsolidationWorker:
    """Runs due jobs in the background: bounded across chats, one at a time within a chat."""

    def __init__(
        self,
        store: Store,
        consolidator: Consolidator,
        *,
        retry_delays: Sequence[float],
        # Jobs of different chats at once. A constant, not a setting: a small team closes a
        # few sessions a minute at most, and more jobs at once would only queue for the same
        # providers' rate limits.
        concurrency: int = 2,
        memory_max_chars: int = 6000,
        max_message_chars: int = DEFAULT_MAX_MESSAGE_CHARS,
        clock: Clock[datetime] = utc_now,
        idle_poll_seconds: float = 30.0,
    ) -> None:
        if not retry_delays:
            raise ValueError("retry_delays must not be empty")
        if any(delay <= 0 for delay in retry_delays):
            raise ValueError("retry_delays must be more than 0: a failed job would re-run at once")
        self.store = store
        self.queue = JobQueue(store)
        self.consolidator = consolidator
        self.backoff = Backoff(retry_delays)
        self.concurrency = concurrency
        self.memory_max_chars = memory_max_chars
        self.max_message_chars = max_message_chars
        self.clock = clock
        self.idle_poll_seconds = idle_poll_seconds
        self._running: dict[int, asyncio.Task[None]] = {}  # job id -> task
        self._wake = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._stopping = False
        # Completed looks at the queue, and how long the last one decided to sleep: what
        # shows (to /healthz-style probes and tests) that the worker has looked, and rests.
        self.passes = 0
        self.last_idle_s: float | None = None

    def now(self) -> str:
        return to_iso(self.clock())

    def notify(self) -> None:
        """Something was enqueued (or finished): look at the queue now instead of at the poll."""
        self._wake.set()

    # lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        """Reset interrupted jobs, then drain the queue in the background."""
        reset = await self.queue.reset_interrupted(self.now())
        if reset:
            log.info("consolidation_jobs_resumed", count=reset)
        indexed = await index_pending(self.store.db)  # a crash came between commit and index
        if indexed:
            log.info("archive_rows_indexed_at_start", count=indexed)
        self._stopping = False
        self._loop_task = asyncio.create_task(self._loop(), name="consolidation-worker")

    async def stop(self, grace: float) -> None:
        """Let running jobs finish within `grace` seconds; cancel the rest (they resume at the
        next start, because their rows are still `running`)."""
        self._stopping = True
        self._wake.set()
        if self._loop_task is not None:
            await self._loop_task
            self._loop_task = None
        cut = await stop_tasks(self._running.values(), grace=grace)
        if cut:
            log.info("consolidation_jobs_left_to_resume", count=len(cut))

    @property
    def busy(self) -> int:
        return len(self._running)

    async def _loop(self) -> None:
        while not self._stopping:
            self._wake.clear()
            launched: list[asyncio.Task[None]] = []
            try:
                launched = await self._launch_due()
                idle = await self._idle_seconds()
            except Exception:
                log.exception("consolidation_worker_error")
                idle = self.idle_poll_seconds
            self.passes += 1
            self.last_idle_s = idle
            if self.passes == 1:
                log.info("consolidation_worker_ready", launched=len(launched))
            await wait_or_timeout(self._wake, timeout=idle)

    async def _idle_seconds(self) -> float:
        """Sleep until the next job is due; when every slot is busy, until a job finishes."""
        if len(self._running) >= self.concurrency:
            return self.idle_poll_seconds
        next_at = await self.queue.next_due_at()
        if next_at is None:
            return self.idle_poll_seconds
        seconds = (from_iso(next_at) - self.clock()).total_seconds()
        return min(self.idle_poll_seconds, max(0.01, seconds))

    async def _launch_due(self) -> list[asyncio.Task[None]]:
        free = self.concurrency - len(self._running)
        jobs = await self.queue.claim_due(self.now(), free)
        tasks = []
        for job in jobs:
            task = asyncio.create_task(self._run_job(job), name=f"consolidation-job-{job.id}")
            self._running[job.id] = task
            task.add_done_callback(functools.partial(self._finished, job.id))
            tasks.append(task)
        return tasks

    def _finished(self, job_id: int, _task: asyncio.Task[None]) -> None:
        self._running.pop(job_id, None)
        self._wake.set()

    async def run_due(self) -> int:
        """Run due jobs until none is due (tests and the benchmark drive the clock with this)."""
        runs = 0
        while True:
            tasks = await self._launch_due()
            if not tasks and not self._running:
                return runs
            runs += len(tasks)
            await asyncio.wait(list(self._running.values()), return_when=asyncio.FIRST_COMPLETED)

    # one job ----------------------------------------------------------------------------------

    async def _run_job(self, job: Job) -> None:
        """One job, in a task of its own: every log line of it (the model calls included)
        carries the job and its chat from the context bound here."""
        with structlog.contextvars.bound_contextvars(chat_id=job.chat_id, job_id=job.id):
            await self._run_chunks(job)

    async def _run_chunks(self, job: Job) -> None:
        log.info("consolidation_job_started", kind=job.kind)
        conflicts = 0
        try:
            while True:
                memory = await _read_memory(self.store.db, job.chat_id)
                messages = await self.queue.messages(job)
                if not messages:
                    await self.queue.finish_empty(job, self.now())
                    log.info("consolidation_job_done")
                    return
                budget = self.consolidator.transcript_budget(memory)
                chunk = chunk_messages(messages, budget, max_message_chars=self.max_message_chars)[
                    0
                ]
                spending = SpendRecorder(
                    self.store, job.chat_id, chunk_owner(chunk), "consolidation"
                )
                try:
                    outcome = await self._consolidate_chunk(job, memory, chunk, spending)
                finally:
                    await _flush_unwritten(spending)
                if outcome is None:
                    return
                if outcome is CommitResult.NOT_OURS:
                    # /forget deleted the job while it ran: its result is discarded, and the
                    # job cannot run again (its row is gone).
                    log.info("consolidation_job_discarded")
                    return
                if outcome is CommitResult.CONFLICT:
                    conflicts += 1
                    log.info("consolidation_commit_conflict", conflicts=conflicts)
                    if conflicts >= MAX_CONFLICTS_PER_RUN:
                        # Not at once: memory that keeps changing under the job would have it
                        # claimed and run (paid) again the moment it is released.
                        retry_at = to_iso(self.clock() + timedelta(seconds=self.backoff.first))
                        await self.queue.release(
                            job, self.now(), retry_at=retry_at, reason="memory kept changing"
                        )
                        return
                    continue
        except Exception:
            # A bug must not spin: step back for the first retry delay, messages untouched.
            log.exception("consolidation_job_crashed")
            retry_at = to_iso(self.clock() + timedelta(seconds=self.backoff.first))
            await self.queue.release(job, self.now(), retry_at=retry_at, reason="internal error")

    async def _consolidate_chunk(
        self, job: Job, memory: LongTermMemory, chunk: Chunk, spending: SpendRecorder
    ) -> CommitResult | None:
        """One run of the chain over `chunk`, settled in the database: the commit's outcome,
        or None when every model failed (the failure is recorded and the job waits)."""
        try:
            result = await self.consolidator.consolidate(
                memory, chunk, chat_id=job.chat_id, job_id=job.id, on_spend=spending.add
            )
        except ConsolidationError as failure:
            failed_runs, delay = await self.queue.record_failure(
                job, failure, chunk, spending, backoff=self.backoff, now=self.clock()
            )
            log.warning(
                "consolidation_job_failed",
                failed_runs=failed_runs,
                retry_in_s=delay,
                messages_kept=len(chunk.messages),
                error=summarise_attempts(failure.attempts),
            )
            return None
        outcome = await self.queue.commit(
            job,
            memory,
            chunk,
            result,
            spending,
            memory_max_chars=self.memory_max_chars,
            now=self.now(),
        )
        if outcome is CommitResult.COMMITTED:
            log.info(
                "consolidation_chunk_committed",
                model=result.model_id,
                messages=len(chunk.messages),
            )
        return outcome


async def _flush_unwritten(spending: SpendRecorder) -> None:
    """Write what no transaction of the run wrote: a request cut off in flight (the worker
    stopped, the job cancelled) was still billed by the provider. Never raises: a failing
    ledger must not hide the run's own outcome or its cancellation."""
    try:
        await spending.flush()
    except Exception:
        log.exception("consolidation_usage_not_recorded")


async def _read_memory(db: Database, chat_id: int) -> LongTermMemory:
    return await db.run_in_transaction(lambda conn: memory_of(conn, chat_id))
