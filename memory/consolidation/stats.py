"""The consolidation queue's figures for /stats: jobs by state and what each model's attempts
came to. Read-only over the tables memory/consolidation/jobs.py writes."""

from __future__ import annotations

from dataclasses import dataclass

from memory.db import Database


@dataclass(frozen=True)
class ConsolidationStats:
    """Queue and per-model figures (the admin /stats command shows these)."""

    pending: int
    running: int
    done: int
    failed_awaiting_retry: int  # pending jobs whose last whole-chain run failed
    oldest_pending_at: str | None
    # model id -> outcome ("saved", "timeout", "no_tool_call", ...) -> count
    outcomes: dict[str, dict[str, int]]
    mean_attempts_per_saved: float  # models tried per successful consolidation, skips excluded
    max_attempts_per_saved: int


async def consolidation_stats(db: Database, since: str | None = None) -> ConsolidationStats:
    """Figures from the jobs and attempts tables; `since` limits the attempts counted."""
    row = await db.fetchone(
        "SELECT SUM(state = 'pending') AS pending, SUM(state = 'running') AS running, "
        "SUM(state = 'done') AS done, SUM(state = 'pending' AND attempts > 0) AS failing, "
        "MIN(CASE WHEN state != 'done' THEN created_at END) AS oldest FROM consolidation_jobs"
    )
    outcomes: dict[str, dict[str, int]] = {}
    for r in await db.fetchall(
        "SELECT model_id, outcome, COUNT(*) AS n FROM consolidation_attempts "
        "WHERE ? IS NULL OR created_at >= ? GROUP BY model_id, outcome",
        (since, since),
    ):
        outcomes.setdefault(r["model_id"], {})[r["outcome"]] = int(r["n"])
    per_job = [
        int(r["n"])
        for r in await db.fetchall(
            "SELECT a.job_id, COUNT(*) AS n FROM consolidation_attempts a "
            "JOIN consolidation_jobs j ON j.id = a.job_id AND j.state = 'done' "
            "WHERE a.outcome != 'skipped' AND (? IS NULL OR a.created_at >= ?) "
            "GROUP BY a.job_id",
            (since, since),
        )
    ]
    return ConsolidationStats(
        pending=int(row["pending"] or 0) if row else 0,
        running=int(row["running"] or 0) if row else 0,
        done=int(row["done"] or 0) if row else 0,
        failed_awaiting_retry=int(row["failing"] or 0) if row else 0,
        oldest_pending_at=row["oldest"] if row else None,
        outcomes=outcomes,
        mean_attempts_per_saved=sum(per_job) / len(per_job) if per_job else 0.0,
        max_attempts_per_saved=max(per_job, default=0),
    )
