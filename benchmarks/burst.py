"""Burst: 300 users write within one second to a bot whose provider allows 25 requests/s.

The bot runs as a real process (`python -m bot`, production settings, no *_RPS ceiling) against
the fake Bot API (in this process) and a fake OpenAI gateway in a child process of its own (so
the fake Telegram's work for 300 chats cannot delay the provider's clock and bunch arrivals
that the bot sent evenly), all on 127.0.0.1. The fake enforces 25 requests/s the way OpenAI
does (its per-minute limit, 1,500, enforced in one-second slices), says so in its real
`x-ratelimit-*` headers and answers its real 429 past the limit. Every user sends one message;
the answer streams after `--latency` seconds.

Printed: answered / failed turns, the provider's 429s, the wait for a slot (the bot's own
`queued_ms` per turn: time spent waiting for a turn in the gateway's queue) at p50/p99/max, its
spread across users, how closely the provider's order follows the users' order, and the pace
the provider saw. Last line:
`burst: answered=N/M failed=K provider_429=J p99_wait_ms=W`.

Run: .venv/bin/python -m benchmarks.burst [--users 300] [--rps 25] [--bot-repo PATH]
(`--bot-repo` runs another checkout's bot against the same fakes, for before/after figures.)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from aiohttp import web

REPO = Path(__file__).resolve().parents[1]

from benchmarks.common import (  # noqa: E402
    ChildServer,
    bot_settings,
    most_in_window,
    percentile,
    serve_forever,
    terminate,
    until_polling,
)
from primitives.litellm_env import LITELLM_FLAGS  # noqa: E402
from tests.fakes.providers import FakeProvider, Reply  # noqa: E402
from tests.fakes.telegram import FakeTelegram  # noqa: E402

TOKEN = "777001:BURST-TOKEN"
KEY = "sk-burst-key"
FIRST_USER = 50_000
ANSWER = "Thanks, noted: the burst is handled fairly and nobody is refused."
FAILED_PREFIX = "Sorry, no model could answer"


def spearman(xs: list[float], ys: list[float]) -> float:
    """Rank correlation: 1.0 = the provider served users exactly in the order they wrote."""

    def ranks(values: list[float]) -> list[float]:
        order = sorted(range(len(values)), key=values.__getitem__)
        out = [0.0] * len(values)
        for rank, index in enumerate(order):
            out[index] = float(rank)
        return out

    rx, ry = ranks(xs), ranks(ys)
    n = len(xs)
    if n < 2:
        return 1.0
    d2 = sum((a - b) ** 2 for a, b in zip(rx, ry, strict=True))
    return 1 - 6 * d2 / (n * (n * n - 1))


class Provider:
    """The fake OpenAI gateway in a child process, with a small control API: GET /info,
    GET /stats (request times and texts, refusals)."""

    def __init__(self) -> None:
        self.base_url = ""
        self.requests: list[tuple[float, str, bool]] = []  # (at, last user text, stream)
        self.rate_limited = 0
        self.rate_limited_at: list[float] = []
        self._child = ChildServer()

    async def start(self, rps: float, burst: float, latency: float) -> None:
        await self._child.start(
            __file__, "--serve-provider", "--rps", str(rps), "--burst", str(burst),
            "--latency", str(latency),
        )  # fmt: skip
        self.base_url = (await self._child.get_json("/info"))["base_url"]

    async def collect(self) -> None:
        stats = await self._child.get_json("/stats")
        self.requests = [tuple(r) for r in stats["requests"]]
        self.rate_limited = stats["rate_limited"]
        self.rate_limited_at = stats["rate_limited_at"]

    async def stop(self) -> None:
        await self._child.stop()


async def serve_provider(rps: float, burst: float, latency: float) -> None:
    """Child process: the fake gateway and its control API; prints the control port."""
    fake = FakeProvider("openai", latency=latency)
    await fake.start()
    fake.set_default("*", Reply(ANSWER, chunk_chars=16, chunk_delay=0.02))
    fake.enforce_rate_limit(rps, burst)

    async def info(_: web.Request) -> web.Response:
        return web.json_response({"base_url": fake.base_url})

    async def stats(_: web.Request) -> web.Response:
        requests = [(r.at, str(r.body["messages"][-1]["content"]), r.stream) for r in fake.requests]
        return web.json_response(
            {
                "requests": requests,
                "rate_limited": fake.rate_limited,
                "rate_limited_at": fake.rate_limited_at,
            }
        )

    app = web.Application()
    app.router.add_get("/info", info)
    app.router.add_get("/stats", stats)
    await serve_forever(app)


def turn_logs(stderr: str) -> dict[int, dict]:
    """The bot's `turn_finished` events by chat id (JSON log lines)."""
    found: dict[int, dict] = {}
    for line in stderr.splitlines():
        if not line.startswith("{") or '"turn_finished"' not in line:
            continue
        event = json.loads(line)
        found[int(event["chat_id"])] = event
    return found


async def main(users: int, rps: float, burst: float, latency: float, bot_repo: Path) -> None:
    openai = Provider()
    await openai.start(rps, burst, latency)
    async with FakeTelegram(token=TOKEN) as tg:
        ids = [FIRST_USER + n for n in range(users)]
        workdir = Path(tempfile.mkdtemp(prefix="mnemobot-burst-"))
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
        env.update(
            bot_settings(
                repo=bot_repo,
                token=TOKEN,
                telegram=tg,
                users=ids,
                openai_key=KEY,
                openai_base_url=openai.base_url,
                database=workdir / "burst.sqlite3",
            ),
            **LITELLM_FLAGS,
            LOG_FORMAT="json",
            LOG_LEVEL="INFO",
        )
        stderr_path = workdir / "bot.log"
        with stderr_path.open("wb") as log:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bot", cwd=workdir, env=env,
                stdout=asyncio.subprocess.DEVNULL, stderr=log,
            )  # fmt: skip
        try:
            await until_polling(tg)
            await asyncio.sleep(1.0)
            pushed: dict[int, float] = {}
            start = time.monotonic()
            for n, user in enumerate(ids):  # all users within one second
                due = start + n / users
                if due > time.monotonic():
                    await asyncio.sleep(due - time.monotonic())
                pushed[user] = time.monotonic()
                tg.push(tg.make_text_update(user, user, f"burst message from {user}"))

            def final(user: int) -> str | None:
                texts = [m.text for m in tg.bot_messages(user)]
                done = [t for t in texts if t.startswith((ANSWER, FAILED_PREFIX))]
                return done[-1] if done else None

            try:
                await tg.wait_for(lambda: all(final(u) for u in ids), timeout=120 + users / 2)
            except AssertionError:
                pass  # counted below as not answered
            wall = time.monotonic() - start
        finally:
            await terminate(process)
            await openai.collect()
            await openai.stop()
        stderr = stderr_path.read_text(encoding="utf-8", errors="replace")

    answered = sum(1 for u in ids if (final(u) or "").startswith(ANSWER))
    fell_back = sum(1 for u in ids if (final(u) or "").startswith(ANSWER) and final(u) != ANSWER)
    failed = users - answered
    logs = turn_logs(stderr)
    waits = [float(logs[u].get("queued_ms") or 0.0) for u in ids if u in logs]
    has_queue_figures = any("queued_ms" in e for e in logs.values())
    # From the provider's side: when each user's first request arrived after the user wrote.
    first_request: dict[int, float] = {}
    for at, text, _ in openai.requests:
        first_request.setdefault(int(text.rsplit(" ", 1)[-1]), at)
    to_provider = [(first_request[u] - pushed[u]) * 1000 for u in ids if u in first_request]
    served = [u for u in ids if u in first_request]
    order = spearman([pushed[u] for u in served], [first_request[u] for u in served])
    times = sorted(at for at, _, _ in openai.requests)
    span = (times[-1] - times[0]) if len(times) > 1 else 0.0

    print(f"bot: {bot_repo}")
    print(
        f"{users} users wrote within 1 s; the provider allows {rps:g} requests/s "
        f"(bursts of {burst:g}) and answers after {latency:g} s"
    )
    print(
        f"answered {answered}/{users} ({fell_back} by a fallback model), failed {failed} "
        f"(all in {wall:.1f} s)"
    )
    print(
        f"provider: {len(openai.requests)} requests, {openai.rate_limited} refused with 429, "
        f"pace {len(times) / span if span else 0:.1f} requests/s over {span:.1f} s, "
        f"at most {most_in_window(times, 1.0)} in one second and "
        f"{most_in_window(times, 0.2)} in 0.2 s"
    )
    if openai.rate_limited_at:
        refused = [round(at - start, 1) for at in openai.rate_limited_at]
        print(f"429s at (s after the first message): {refused[:20]}")
    if has_queue_figures and waits:
        print(
            f"wait for a slot (bot's queued_ms): p50 {percentile(waits, 50):.0f} ms, "
            f"p99 {percentile(waits, 99):.0f} ms, max {max(waits):.0f} ms"
        )
    else:
        print("wait for a slot: not reported by this bot (no queued_ms in its turn logs)")
    if to_provider:
        print(
            "user wrote -> request reached the provider: "
            f"p50 {percentile(to_provider, 50):.0f} ms, p99 {percentile(to_provider, 99):.0f} ms,"
            f" max {max(to_provider):.0f} ms"
        )
    spread = waits if has_queue_figures and waits else to_provider
    if spread:
        print(
            "spread across users: "
            f"p10 {percentile(spread, 10):.0f} ms, p50 {percentile(spread, 50):.0f} ms, "
            f"p90 {percentile(spread, 90):.0f} ms, stdev {statistics.pstdev(spread):.0f} ms; "
            f"order kept (rank correlation writing -> served) {order:.3f}"
        )
    p99 = percentile(spread, 99) if spread else float("nan")
    print(
        f"burst: answered={answered}/{users} failed={failed} "
        f"provider_429={openai.rate_limited} p99_wait_ms={p99:.0f}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=300)
    parser.add_argument("--rps", type=float, default=25.0, help="provider's requests per second")
    parser.add_argument(
        "--burst", type=float, default=None, help="provider's burst (default: one second's worth)"
    )
    parser.add_argument("--latency", type=float, default=1.0, help="provider's first byte (s)")
    parser.add_argument("--bot-repo", type=Path, default=REPO, help="checkout whose bot runs")
    parser.add_argument("--serve-provider", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_provider:
        asyncio.run(serve_provider(args.rps, args.burst or args.rps, args.latency))
        sys.exit(0)
    burst = args.burst if args.burst is not None else args.rps
    asyncio.run(main(args.users, args.rps, burst, args.latency, args.bot_repo.resolve()))
