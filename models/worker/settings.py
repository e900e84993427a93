"""How the pool runs its workers: read by the pool (models/worker/pool.py) and by each worker
(models/worker/process.py), filled by bot/config.py from the settings."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WorkerSettings:
    """How the pool runs its workers (bot/config.py fills it from the settings)."""

    max_workers: int = 1  # PROVIDER_WORKERS
    at_rest: int = 1  # PROVIDER_WORKERS_AT_REST: started at warm-up, never retired for idling
    # Constants, not settings: they guard our own child process, whose needs no operator
    # knows better. 5 s of silence (pinged four times as often) is far past any GC pause or
    # busy loop of a healthy worker; 1024 MB is about five times what a worker holds (about
    # 200 MB, README), so only a leak reaches it.
    heartbeat_s: float = 5.0  # silence that makes a worker lost
    max_rss_mb: float = 1024.0  # above it a worker takes no new calls and is replaced
    start_timeout_s: float = 60.0  # spawn → ready (litellm's import) and warmed up
    scale_calls: int = 16  # calls in flight on every worker before another one starts
    scale_cpu: float = 0.7  # or this share of a core used by every worker
    idle_s: float = 120.0  # an extra worker without calls this long stops
