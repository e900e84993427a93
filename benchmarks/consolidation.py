"""1,000 consolidations of real-sized sessions while every hidden model fails 15% of the time.

Runs the real stack — SQLite store and queue, ConsolidationWorker, Consolidator, the litellm
transport — against the fake providers on 127.0.0.1. Each request to each consolidation model
independently fails with probability 15%, with a kind drawn from the ways a provider fails
(HTTP faults with the providers' real bodies, a hang past the timeout, and task failures: a text
reply, invalid JSON, object-valued fields, a missing field).

Scaled down so the run takes well under a minute: fake latency 5 ms, CONSOLIDATION_TIMEOUT
0.5 s, CONSOLIDATION_RETRY_DELAYS 0.05,0.1,0.2 s, transport backoff 10/20/40 ms, Retry-After
capped at 0.1 s (the fakes' 429s say 0.05 s), quota cool-down 0.5 s, concurrency 8. /new is
issued for one chat every 10 ms while consolidations run; its acknowledgement latency is what
/new waits for: `store.start_new_session` (close + open + enqueue in one transaction, fsync'd)
plus the worker notification.

    python -m benchmarks.consolidation [--jobs 1000] [--seed 7]
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import structlog

import memory.consolidation.jobs as consolidation_jobs
from benchmarks.common import percentile
from memory.consolidation.consolidation import Consolidation, Consolidator
from memory.consolidation.transcript import Chunk
from memory.longterm import LongTermMemory
from memory.store import to_iso
from models.calls import CallOptions
from models.types import ChatResult, Outcome, SpendCallback, TransportError
from tests.fakes.providers import Fault, Reply, Step, ToolCallReply
from tests.support.consolidation_stack import WIRE, Stack, good_call, open_stack
from tests.support.memory_sessions import (
    SessionMessage,
    claude_code_session,
    oasst_multilingual,
    telegram_export,
)

FAILURE_RATE = 0.15
LATENCY_S = 0.005
ATTEMPT_TIMEOUT_S = 0.5
RETRY_DELAYS_S = (0.05, 0.1, 0.2)
NEW_EVERY_S = 0.01
CONCURRENCY = 8
RETRY_AFTER_S = 0.05  # the Retry-After the fakes send (real ones say 1-30 s)
RATE_LIMITS = {"rate_limit_429", "anthropic_rate_limit_429"}

# Transient faults only. Billing errors (insufficient_quota, Arrearage) are account states, not
# per-request dice: they rest the whole key for minutes and are covered by the failure-mode tests.
HTTP_FAULTS = [
    "rate_limit_429",
    "server_500",
    "bad_gateway_502",
    "cloudflare_524",
    "throttling_in_200",
    "empty_200",
    "disconnect",
    "hang",
]
GROQ_FAULTS = ["tool_use_failed_400"]
ANTHROPIC_FAULTS = ["overloaded_529", "anthropic_rate_limit_429"]
TASK_FAILURES: list[Step] = [
    Reply("Summary: the user talked about several things."),
    ToolCallReply(arguments='{"history_entry": "[2026-03-01 09:00] x", "memory_update": '),
    ToolCallReply(arguments={"history_entry": {"t": "x"}, "memory_update": {"n": "y"}}),
    ToolCallReply(arguments={"history_entry": "[2026-03-01 09:00] x"}),
]

# Which consolidate() call a transport request belongs to, to subtract the fakes' latency.
current_run: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar(
    "current_run", default=None
)


class CountingTransport:
    """Passes calls to the real transport and counts the HTTP requests each run made."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def complete(
        self, model_id: str, messages: list[Any], options: CallOptions
    ) -> ChatResult:
        counter = current_run.get()
        try:
            result = await self.inner.complete(model_id, messages, options)
        except TransportError as exc:
            if counter is not None:
                counter[0] += sum(1 for a in exc.attempts if a.outcome != Outcome.SKIPPED)
            raise
        except BaseException:
            if counter is not None:
                counter[0] += 1  # the request cut by the timeout
            raise
        if counter is not None:
            counter[0] += sum(1 for a in result.attempts if a.outcome != Outcome.SKIPPED) or 1
        return result


class TimedConsolidator(Consolidator):
    """Records, per job, wall time of its consolidation runs minus the fakes' own latency."""

    beyond_latency_s: dict[int, float]
    requests: dict[int, int]

    async def consolidate(
        self,
        memory: LongTermMemory,
        chunk: Chunk,
        *,
        chat_id: int | None = None,
        job_id: int | None = None,
        on_spend: SpendCallback | None = None,
    ) -> Consolidation:
        counter = [0]
        token = current_run.set(counter)
        started = time.perf_counter()
        try:
            return await super().consolidate(
                memory, chunk, chat_id=chat_id, job_id=job_id, on_spend=on_spend
            )
        finally:
            elapsed = time.perf_counter() - started
            current_run.reset(token)
            key = job_id or 0
            self.beyond_latency_s[key] = self.beyond_latency_s.get(key, 0.0) + max(
                0.0, elapsed - counter[0] * LATENCY_S
            )
            self.requests[key] = self.requests.get(key, 0) + counter[0]


def failure_steps(kinds: list[str], rng: random.Random, count: int) -> list[Step]:
    """`count` scripted answers for one model: 15% failures drawn from the mix."""
    mix: list[Step] = [
        Fault(kind, retry_after=RETRY_AFTER_S if kind in RATE_LIMITS else None) for kind in kinds
    ]
    mix += TASK_FAILURES
    return [rng.choice(mix) if rng.random() < FAILURE_RATE else good_call() for _ in range(count)]


def session_pool() -> list[list[SessionMessage]]:
    """Real-sized sessions: 60-150 messages of real chats, multilingual talk and agent work."""
    pool = [telegram_export(slug, 150) for slug in ("coorporate-speak", "oop")]
    pool.append(oasst_multilingual(60))
    pool.append(oasst_multilingual(120))
    pool.append(claude_code_session(150))
    return [s for s in pool if len(s) >= 60]


async def seed(stack: Stack, jobs: int, pool: list[list[SessionMessage]]) -> dict[int, int]:
    """One active session per chat, written in bulk (seeding is not what is measured)."""
    seeded: dict[int, int] = {}

    def write(conn: sqlite3.Connection) -> None:
        for index in range(jobs):
            chat_id = 10_000 + index
            session = pool[index % len(pool)]
            now = to_iso(session[0].at)
            conn.execute(
                "INSERT INTO chats(chat_id, created_at, updated_at) VALUES (?, ?, ?)",
                (chat_id, now, now),
            )
            cursor = conn.execute(
                "INSERT INTO sessions(chat_id, opened_at) VALUES (?, ?)", (chat_id, now)
            )
            session_id = cursor.lastrowid
            conn.executemany(
                "INSERT INTO messages(session_id, chat_id, role, content, tool_calls, "
                "tool_call_id, user_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        session_id,
                        chat_id,
                        m.role,
                        m.content,
                        None,
                        m.tool_call_id,
                        chat_id if m.role == "user" else None,
                        to_iso(m.at),
                    )
                    for m in session
                ],
            )
            seeded[chat_id] = len(session)

    await stack.db.run_in_transaction(write)
    return seeded


def timing_the_archive_index(lag_ms: list[float]) -> None:
    """Time each commit's index pass (memory/recall/archive.py `index_pending`): how long a
    consolidated word waits after the commit before recall can find it."""
    index = consolidation_jobs.index_pending

    async def timed(db: Any) -> int:
        t0 = time.perf_counter()
        try:
            return await index(db)
        finally:
            lag_ms.append((time.perf_counter() - t0) * 1000)

    consolidation_jobs.index_pending = timed  # type: ignore[assignment]


async def run(jobs: int, seed_value: int) -> int:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))  # errors only
    rng = random.Random(seed_value)
    workdir = Path(tempfile.mkdtemp(prefix="mnemobot-bench-"))
    stack = await open_stack(
        workdir / "bench.sqlite3",
        attempt_timeout=ATTEMPT_TIMEOUT_S,
        retry_delays=RETRY_DELAYS_S,
        concurrency=CONCURRENCY,
        latency=LATENCY_S,
        transport_options={
            "retry_after_cap": 0.1,
            "rate_limit_cooldown": 0.05,
            "quota_cooldown": 0.5,
            "breaker_threshold": 5,
            "breaker_cooldown": 0.5,
            "gateway_breaker_threshold": 10,
            "timeout_grace": 0.1,
        },
    )
    real_transport = stack.transport
    consolidator = TimedConsolidator(
        CountingTransport(real_transport),  # type: ignore[arg-type]
        stack.consolidator.catalog,
        head_model=stack.consolidator.head_model,
        timeout=ATTEMPT_TIMEOUT_S,
        memory_max_chars=6000,
    )
    consolidator.beyond_latency_s = {}
    consolidator.requests = {}
    stack.worker.consolidator = consolidator
    stack.consolidator = consolidator

    per_model_requests = jobs * 4
    for model_id, wire in WIRE.items():
        gateway = consolidator.catalog.get(model_id).gateway
        provider = {"groq": stack.groq, "openai": stack.openai, "anthropic": stack.anthropic}[
            gateway
        ]
        kinds = HTTP_FAULTS + (GROQ_FAULTS if gateway == "groq" else [])
        kinds += ANTHROPIC_FAULTS if gateway == "anthropic" else []
        provider.script(wire, *failure_steps(kinds, rng, per_model_requests))

    pool = session_pool()
    seeded = await seed(stack, jobs, pool)
    print(
        f"seeded {jobs} sessions of {min(map(len, pool))}-{max(map(len, pool))} real messages "
        f"({sum(seeded.values())} messages) in {workdir}"
    )

    index_lag_ms: list[float] = []
    timing_the_archive_index(index_lag_ms)
    await stack.worker.start()
    started = time.perf_counter()
    ack_ms: list[float] = []
    for chat_id in seeded:
        t0 = time.perf_counter()
        await stack.store.start_new_session(chat_id)  # what /new waits for (notify included)
        ack_ms.append((time.perf_counter() - t0) * 1000)
        await asyncio.sleep(NEW_EVERY_S)
    while True:
        row = await stack.db.fetchone(
            "SELECT COUNT(*) AS n FROM consolidation_jobs WHERE state != 'done'"
        )
        if row is not None and row["n"] == 0:
            break
        if time.perf_counter() - started > 280:
            print("stopped waiting after 280 s")
            break
        await asyncio.sleep(0.1)
    elapsed = time.perf_counter() - started
    await stack.worker.stop(grace=5)

    # Accounting: every seeded message is either still stored or inside a history entry.
    remaining = {
        r["chat_id"]: r["n"]
        for r in await stack.db.fetchall(
            "SELECT chat_id, COUNT(*) AS n FROM messages GROUP BY chat_id"
        )
    }
    covered = {
        r["chat_id"]: r["n"]
        for r in await stack.db.fetchall(
            "SELECT chat_id, SUM(message_count) AS n FROM history_entries GROUP BY chat_id"
        )
    }
    lost = sum(1 for c, n in seeded.items() if remaining.get(c, 0) + covered.get(c, 0) < n)
    doubled = sum(1 for c, n in seeded.items() if remaining.get(c, 0) + covered.get(c, 0) > n)
    done = await stack.db.fetchall(
        "SELECT id, saved_by_model FROM consolidation_jobs WHERE state = 'done'"
    )
    saved = len(done)
    attempts_rows = await stack.db.fetchall(
        "SELECT job_id, COUNT(*) AS n FROM consolidation_attempts "
        "WHERE outcome != 'skipped' GROUP BY job_id"
    )
    attempts = [r["n"] for r in attempts_rows]
    runs = await stack.db.fetchall(
        "SELECT job_id, COUNT(DISTINCT created_at) AS n FROM consolidation_attempts GROUP BY job_id"
    )
    outcomes = Counter(
        {
            (r["model_id"], r["outcome"]): r["n"]
            for r in await stack.db.fetchall(
                "SELECT model_id, outcome, COUNT(*) AS n FROM consolidation_attempts "
                "GROUP BY model_id, outcome"
            )
        }
    )
    share = Counter(r["saved_by_model"] for r in done)
    beyond_ms = [v * 1000 for v in consolidator.beyond_latency_s.values()]
    requests_total = sum(len(p.requests) for p in stack.providers)
    await stack.close()

    print(f"\nconsolidations: {jobs} queued, {saved} saved, {elapsed:.1f} s wall")
    print(f"HTTP requests to the fakes: {requests_total}")
    print(f"memories lost: {lost}   applied twice: {doubled}")
    print("share saved by each model:")
    for model_id in WIRE:
        count = share.get(model_id, 0)
        print(f"  {model_id:34s} {count:5d}  {100 * count / max(1, saved):5.1f}%")
    print(
        f"model attempts per job (business layer, skips excluded): "
        f"mean {statistics.mean(attempts):.2f}, max {max(attempts)}"
    )
    whole_runs = [r["n"] for r in runs]
    print(
        f"whole-chain runs per job: mean {statistics.mean(whole_runs):.3f}, max {max(whole_runs)}"
    )
    print(
        f"consolidation time beyond the fakes' latency: p50 {percentile(beyond_ms, 50):.1f} ms, "
        f"p99 {percentile(beyond_ms, 99):.1f} ms"
    )
    print(
        f"/new acknowledgement while consolidating: p50 {percentile(ack_ms, 50):.2f} ms, "
        f"p99 {percentile(ack_ms, 99):.2f} ms, max {max(ack_ms):.2f} ms"
    )
    print(
        f"archive index after the commit (words not yet found by recall): "
        f"p50 {percentile(index_lag_ms, 50):.1f} ms, p99 {percentile(index_lag_ms, 99):.1f} ms, "
        f"max {max(index_lag_ms):.1f} ms"
    )
    print("failed model attempts by outcome:")
    failed = Counter()
    for (_, outcome), n in outcomes.items():
        if outcome != "saved":
            failed[outcome] += n
    for outcome, n in failed.most_common():
        print(f"  {outcome:18s} {n}")
    print(f"lost={lost} saved={saved} ack_p99_ms={percentile(ack_ms, 99):.2f}")
    return 0 if lost == 0 and doubled == 0 and saved == jobs else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    return asyncio.run(run(args.jobs, args.seed))


if __name__ == "__main__":
    sys.exit(main())
