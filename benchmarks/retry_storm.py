"""Retry storm: our transport against a naive retry policy, same faults, same load, same run.

Six fake gateways on 127.0.0.1 (two of each protocol), each enforcing its own provider-side rate
limit. Requests arrive open-loop at a rate well above one provider's limit, all asking for the
head of a six-model chain (one model per gateway). At a set moment gateway g1 starts answering
rate limits inside HTTP 200 bodies and gateway g2 starts hanging until the client times out.

- ours:  models.transport.Transport (error table, per-gateway buckets, breakers, retry budget).
- naive: three retries on the same model with backoff for HTTP 429/5xx/timeouts (status code
  only, as litellm reports it), then the next model of the chain; no buckets, no breakers.

Printed per policy: success rate (a non-empty answer), p50/p99 latency, amplification (upstream
requests per offered request), the highest request rate any provider saw in a one-second window,
and how many requests the providers themselves rejected for rate. Ends with one summary line.

Run: .venv/bin/python -m benchmarks.retry_storm [--seconds 20] [--rps 60]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
import warnings
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from primitives.litellm_env import keep_litellm_offline

keep_litellm_offline()  # before litellm's import below

import litellm  # noqa: E402
import structlog  # noqa: E402
from aiohttp import web  # noqa: E402

from benchmarks.common import ChildServer, most_in_window, percentile, serve_forever  # noqa: E402
from models.calls import CallOptions  # noqa: E402
from models.catalog import Catalog, ModelEntry  # noqa: E402
from models.gateways import Gateway  # noqa: E402
from models.transport import Transport  # noqa: E402
from models.types import TransportError  # noqa: E402
from models.worker.pool import WorkerPool  # noqa: E402
from tests.fakes.providers import FakeProvider, Fault, Reply  # noqa: E402

KINDS = ("openai", "groq", "anthropic", "openai", "groq", "anthropic")
PROVIDER_RPS = 25.0  # what each provider accepts before it answers 429
PROVIDER_BURST = 5.0
OUR_BUCKET_RPS = 20.0  # what we configure per gateway: below the provider's limit
TIMEOUT_S = 2.0
BACKOFF = (0.25, 0.5, 1.0)
GIVE_UP_S = 30.0  # a user (and our harness) stops waiting for an answer after this
FAILURES: Counter[str] = Counter()  # why our requests failed (last attempt's detail)
MESSAGES = [{"role": "user", "content": "Summarise the retry storm incident in one line."}]


@dataclass
class Outcome:
    ok: bool
    latency_s: float


class Fleet:
    """The six fakes, run in a child process so their CPU is not the client's CPU.

    The child serves a small control API on 127.0.0.1: GET /fleet (names, kinds, base URLs),
    POST /faults, GET /stats (request times and provider-side rate-limit rejections).
    """

    def __init__(self) -> None:
        self.providers: list[dict] = []
        self._child = ChildServer()

    async def start(self, latency: float) -> None:
        await self._child.start(__file__, "--serve-fleet", "--latency", str(latency))
        self.providers = await self._child.get_json("/fleet")

    async def stop(self) -> None:
        await self._child.stop()

    async def inject_faults(self) -> None:
        await self._child.post("/faults")

    async def stats(self) -> list[dict]:
        return await self._child.get_json("/stats")

    def catalog(self) -> Catalog:
        entries = [
            ModelEntry(
                f"m{i}", f"Model {i}", "bench", "", f"g{i}", f"bench-model-{i}",
                fallback=f"m{i + 1}" if i < len(KINDS) else None,
                input_price_per_mtok=1.0, output_price_per_mtok=2.0,
            )
            for i in range(1, len(KINDS) + 1)
        ]  # fmt: skip
        return Catalog.build(entries, gateways=[f"g{i}" for i in range(1, len(KINDS) + 1)])

    def gateways(self) -> dict[str, Gateway]:
        return {
            p["name"]: Gateway(
                p["name"], p["kind"], p["base_url"], (f"key-{p['name']}",), OUR_BUCKET_RPS
            )
            for p in self.providers
        }


async def serve_fleet(latency: float) -> None:
    """Child process: start the fakes and the control API, print the control port, serve."""
    fakes = []
    for i, kind in enumerate(KINDS, start=1):
        fp = FakeProvider(kind, name=f"g{i}", latency=latency)
        await fp.start()
        fp.set_default("*", Reply("All good: the queue drained and p99 recovered."))
        fp.enforce_rate_limit(PROVIDER_RPS, PROVIDER_BURST)
        fakes.append(fp)

    async def fleet(_: web.Request) -> web.Response:
        return web.json_response(
            [{"name": fp.name, "kind": fp.kind, "base_url": fp.base_url} for fp in fakes]
        )

    async def faults(_: web.Request) -> web.Response:
        fakes[0].set_default("*", Fault("throttling_in_200"))
        fakes[1].set_default("*", Fault("hang"))
        return web.json_response({"ok": True})

    async def stats(_: web.Request) -> web.Response:
        return web.json_response(
            [
                {
                    "name": fp.name,
                    "kind": fp.kind,
                    "times": [r.at for r in fp.requests],
                    "rate_limited": fp.rate_limited,
                }
                for fp in fakes
            ]
        )

    app = web.Application()
    app.router.add_get("/fleet", fleet)
    app.router.add_post("/faults", faults)
    app.router.add_get("/stats", stats)
    await serve_forever(app)


# --- the two policies -------------------------------------------------------------------------


def ours(fleet: Fleet) -> tuple[Callable[[], Awaitable[bool]], Callable[[], Awaitable[None]]]:
    workers = WorkerPool()
    transport = Transport(
        fleet.catalog(),
        fleet.gateways(),
        backoff=BACKOFF,
        retry_after_cap=2.0,
        bucket_burst=1.0,
        breaker_threshold=5,
        gateway_breaker_threshold=8,
        breaker_cooldown=10.0,
        retry_budget_initial=10.0,
        retry_budget_cap=20.0,
        retry_budget_ratio=0.1,
        retry_budget_per_second=0.5,
        timeout_grace=1.0,
        max_in_flight=16,
        workers=workers,
    )

    async def call() -> bool:
        try:
            result = await transport.complete("m1", MESSAGES, CallOptions(timeout=TIMEOUT_S))
        except TransportError as exc:
            FAILURES[exc.attempts[-1].detail if exc.attempts else "nothing tried"] += 1
            return False
        return bool(result.text.strip())

    async def close() -> None:
        await transport.aclose()
        await workers.aclose()

    return call, close


def naive(fleet: Fleet) -> tuple[Callable[[], Awaitable[bool]], Callable[[], Awaitable[None]]]:
    chain = [(p, f"bench-model-{i}") for i, p in enumerate(fleet.providers, start=1)]

    async def call() -> bool:
        for provider, wire in chain:
            for attempt in range(1 + len(BACKOFF)):
                try:
                    response = await litellm.acompletion(
                        model=f"{provider['kind']}/{wire}",
                        messages=MESSAGES,
                        api_base=provider["base_url"],
                        api_key=f"key-{provider['name']}",
                        max_retries=0,
                        timeout=TIMEOUT_S,
                    )
                except Exception as exc:  # the naive policy looks at the status code only
                    status = getattr(exc, "status_code", None)
                    retryable = (
                        status == 429
                        or status == 408
                        or (isinstance(status, int) and status >= 500)
                    )
                    if retryable and attempt < len(BACKOFF):
                        await asyncio.sleep(BACKOFF[attempt])
                        continue
                    break  # next model
                # HTTP 200 is success to a status-only policy, whatever the body says.
                return bool((response.choices[0].message.content or "").strip())
        return False

    async def close() -> None:
        return None

    return call, close


# --- load ---------------------------------------------------------------------------------------


async def run_policy(
    name: str,
    build: Callable[[Fleet], tuple[Callable[[], Awaitable[bool]], Callable[[], Awaitable[None]]]],
    seconds: float,
    rps: float,
    fault_at: float,
    latency: float,
) -> dict[str, float]:
    fleet = Fleet()
    await fleet.start(latency)
    call, close = build(fleet)
    results: list[Outcome] = []

    async def one() -> None:
        started = time.monotonic()
        try:
            ok = await asyncio.wait_for(call(), timeout=GIVE_UP_S)  # a client giving up
        except TimeoutError:
            ok = False
        results.append(Outcome(ok, time.monotonic() - started))

    tasks: list[asyncio.Task[None]] = []
    start = time.monotonic()
    offered = int(seconds * rps)
    faults_on = False
    for n in range(offered):
        due = start + n / rps
        now = time.monotonic()
        if due > now:
            await asyncio.sleep(due - now)
        if not faults_on and time.monotonic() - start >= fault_at:
            await fleet.inject_faults()
            faults_on = True
        tasks.append(asyncio.create_task(one()))
    await asyncio.gather(*tasks)
    await close()
    latencies = [r.latency_s for r in results]
    seen = await fleet.stats()
    peaks = {p["name"]: most_in_window(p["times"], 1.0) for p in seen}
    stats = {
        "offered": offered,
        "success": sum(r.ok for r in results) / offered,
        "p50_ms": percentile(latencies, 50) * 1000,
        "p99_ms": percentile(latencies, 99) * 1000,
        "amplification": sum(len(p["times"]) for p in seen) / offered,
        "peak_rps": max(peaks.values()),
        "provider_429s": sum(p["rate_limited"] for p in seen),
    }
    per_provider = ", ".join(
        f"{p['name']}({p['kind']})={len(p['times'])} req, peak {peaks[p['name']]}/s" for p in seen
    )
    print(
        f"{name:>5}: success {stats['success']:.2%}  p50 {stats['p50_ms']:.0f} ms  "
        f"p99 {stats['p99_ms']:.0f} ms  amplification {stats['amplification']:.2f}  "
        f"peak provider rate {stats['peak_rps']}/s  provider 429s {stats['provider_429s']}"
    )
    print(f"       {per_provider}")
    await fleet.stop()
    return stats


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="length of the offered load")
    parser.add_argument("--rps", type=float, default=50.0, help="offered requests per second")
    parser.add_argument("--fault-at", type=float, default=6.0, help="seconds until the faults")
    parser.add_argument("--latency", type=float, default=0.05, help="provider latency (s)")
    parser.add_argument("--serve-fleet", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fleet:
        await serve_fleet(args.latency)
        return

    logging.getLogger("LiteLLM").setLevel(logging.CRITICAL)
    # Requests the harness gives up on leave litellm coroutines un-awaited; that is expected.
    warnings.filterwarnings("ignore", category=RuntimeWarning)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    litellm.suppress_debug_info = True

    print(
        f"offered {args.rps:.0f} req/s for {args.seconds:.0f} s to the head of a 6-model chain; "
        f"each provider accepts {PROVIDER_RPS:.0f}/s (burst {PROVIDER_BURST:.0f}); our bucket "
        f"{OUR_BUCKET_RPS:.0f}/s per gateway; at t={args.fault_at:.0f} s g1 answers rate limits "
        f"inside HTTP 200 and g2 hangs (client timeout {TIMEOUT_S:.0f} s)"
    )
    mine = await run_policy("ours", ours, args.seconds, args.rps, args.fault_at, args.latency)
    if FAILURES:
        reasons = ", ".join(f"{n}x {why}" for why, n in FAILURES.most_common(4))
        print(f"       ours failed on: {reasons}")
    theirs = await run_policy("naive", naive, args.seconds, args.rps, args.fault_at, args.latency)
    verdict = (
        "goal met" if mine["success"] >= 0.99 and mine["amplification"] <= 1.3
        and mine["peak_rps"] <= PROVIDER_RPS and mine["provider_429s"] == 0 else "goal NOT met"
    )  # fmt: skip
    print(
        f"ours: highest rate a provider saw {mine['peak_rps']}/s (our bucket {OUR_BUCKET_RPS:.0f}/s"
        f" + burst 1, measured at the provider; provider limit {PROVIDER_RPS:.0f}/s), "
        f"provider-side rejections {mine['provider_429s']}: {verdict}"
    )
    print(
        f"ours: success={mine['success']:.4f} amplification={mine['amplification']:.2f} "
        f"p99_ms={mine['p99_ms']:.0f}; naive: success={theirs['success']:.4f} "
        f"amplification={theirs['amplification']:.2f} p99_ms={theirs['p99_ms']:.0f}"
    )


if __name__ == "__main__":
    asyncio.run(main())
