"""How many consolidations the Groq chain saves when Groq answers with
its real per-minute 429 (the body with the ".../settings/billing" upgrade link).

40 real sessions (Telegram exports, multilingual OpenAssistant talk, an agent transcript) are
consolidated by the real stack — SQLite store and queue, ConsolidationWorker, Consolidator,
the litellm transport — against the fake providers on 127.0.0.1, in two scenarios:

- mix: every request to every consolidation model fails with probability 15%, drawn from the
  transient faults of benchmarks/consolidation.py, where Groq's rate limit is its real TPM 429
  (Retry-After 2 s) and the other gateways' is their own;
- first 429: no random faults, but the very first request to llama-3.3-70b-versatile gets
  Groq's TPM 429 (Retry-After 2 s).

The transport keeps production's rate-limit settings (Retry-After up to 20 s is waited for,
a quota rests the key for 600 s); only backoff and the fakes' latency are scaled down.
Run it on two trees to compare them:

    python -m benchmarks.groq_rate_limits [--sessions 40] [--seed 7]

The last line is the summary: the share saved by the Groq chain in each scenario.
Measured (seeds 7, 1, 2): the structured classification (models/errors.py) saves 40/40 in
every run. An error table that reads the TPM 429 as an unpaid bill (the whole Groq key resting
600 s) saves mix 22/40, 5/40, 19/40 and first 429 0/40, 1/40, 2/40, the rest going to
gpt-4.1-mini.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import structlog

from benchmarks.consolidation import (  # the same sessions and fault mix
    ANTHROPIC_FAULTS,
    GROQ_FAULTS,
    HTTP_FAULTS,
    TASK_FAILURES,
    seed,
    session_pool,
)
from tests.fakes.providers import Fault, Step
from tests.support.consolidation_stack import CHAIN, WIRE, good_call, open_stack

FAILURE_RATE = 0.15
GROQ_RETRY_AFTER_S = 2.0  # what Groq's TPM 429 asks for ("try again in 1.5s", header 2)
OTHER_RETRY_AFTER_S = 0.05
GROQ_CHAIN = CHAIN[:3]  # llama-3.3-70b-versatile, qwen3-32b, llama-4-scout-17b-16e-instruct


def _mix(gateway: str) -> list[Step]:
    kinds = [k for k in HTTP_FAULTS if k != "hang"]  # hangs only cost wall time here
    if gateway == "groq":
        kinds = ["groq_tpm_429" if k == "rate_limit_429" else k for k in kinds] + GROQ_FAULTS
    if gateway == "anthropic":
        kinds += ANTHROPIC_FAULTS
    steps: list[Step] = []
    for kind in kinds:
        if kind == "groq_tpm_429":
            steps.append(Fault(kind))  # the fake sends Groq's retry-after: 2
        elif kind in ("rate_limit_429", "anthropic_rate_limit_429"):
            steps.append(Fault(kind, retry_after=OTHER_RETRY_AFTER_S))
        else:
            steps.append(Fault(kind))
    return steps + list(TASK_FAILURES)


async def scenario(name: str, sessions: int, seed_value: int) -> tuple[int, int, Counter[str]]:
    rng = random.Random(seed_value)
    workdir = Path(tempfile.mkdtemp(prefix=f"mnemobot-groq-{name}-"))
    stack = await open_stack(
        workdir / "bench.sqlite3",
        attempt_timeout=5.0,
        retry_delays=(0.2, 0.5, 1.0),
        concurrency=8,
        latency=0.005,
        transport_options={  # production's rate-limit and quota handling
            "retry_after_cap": 20.0,
            "rate_limit_cooldown": 2.0,
            "quota_cooldown": 600.0,
        },
    )
    for model_id, wire in WIRE.items():
        gateway = stack.consolidator.catalog.get(model_id).gateway
        provider = {"groq": stack.groq, "openai": stack.openai, "anthropic": stack.anthropic}[
            gateway
        ]
        if name == "mix":
            mix = _mix(gateway)
            steps = [
                rng.choice(mix) if rng.random() < FAILURE_RATE else good_call()
                for _ in range(sessions * 6)
            ]
            provider.script(wire, *steps)
        elif model_id == CHAIN[0]:
            provider.script(wire, Fault("groq_tpm_429"))
    seeded = await seed(stack, sessions, session_pool())
    await stack.worker.start()
    started = time.perf_counter()
    for chat_id in seeded:
        await stack.store.start_new_session(chat_id)
    while time.perf_counter() - started < 600:
        row = await stack.db.fetchone(
            "SELECT COUNT(*) AS n FROM consolidation_jobs WHERE state != 'done'"
        )
        if row is not None and row["n"] == 0:
            break
        await asyncio.sleep(0.1)
    elapsed = time.perf_counter() - started
    done = await stack.db.fetchall(
        "SELECT saved_by_model FROM consolidation_jobs WHERE state = 'done'"
    )
    share = Counter(str(r["saved_by_model"]) for r in done)
    groq_saved = sum(share.get(m, 0) for m in GROQ_CHAIN)
    print(f"\nscenario {name}: {sessions} sessions, {len(done)} saved, {elapsed:.1f} s wall")
    for model_id in CHAIN:
        count = share.get(model_id, 0)
        print(f"  {model_id:34s} {count:4d}  {100 * count / max(1, len(done)):5.1f}%")
    keys = stack.transport.status()["gateways"]["groq"]["keys"][0]
    print(f"  groq key 0 after the run: available={keys['available']} reason={keys['reason']!r}")
    await stack.close()
    return groq_saved, len(done), share


async def run(sessions: int, seed_value: int) -> int:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))  # errors only
    mix_groq, mix_done, _ = await scenario("mix", sessions, seed_value)
    first_groq, first_done, _ = await scenario("first_429", sessions, seed_value)
    print(
        f"\ngroq_chain_saved: mix {mix_groq}/{sessions} ({100 * mix_groq / sessions:.0f}%), "
        f"first_429 {first_groq}/{sessions} ({100 * first_groq / sessions:.0f}%)"
    )
    return 0 if mix_done == sessions and first_done == sessions else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    return asyncio.run(run(args.sessions, args.seed))


if __name__ == "__main__":
    sys.exit(main())
