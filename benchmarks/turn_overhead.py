"""Turn overhead: the time the bot itself adds to a chat turn, at 1, 100 and 300 concurrent chats.

The bot runs as a real process (`python -m bot`, production settings, started through
benchmarks/bot_probe.py which adds an event-loop lag monitor and database wait probes) against
the fake Bot API and a fake OpenAI gateway with a fixed latency, both in this process on
127.0.0.1. Every turn time below is taken from the fakes' own records, on one clock:

- intake:  update pushed into the fake Telegram → the bot's first request to the provider
           (long-poll wake-up, PTB dispatch, access check, user message committed to SQLite,
           context built, litellm request sent);
- finish:  the provider's last chunk → the bot's final formatted Telegram message (assistant
           message and usage committed, markdown rendered, final send or edit — an edit waits
           for the ≈1 s per-message edit interval since the previous streamed edit, by design);
- turn:    update pushed → final message (includes the provider's own time);
- loop lag: how late the bot's event loop woke a 10 ms sleep, over the phase;
- db:      waiting for the write transaction (and holding it), and the duration of reads.

Also: start-up time (process spawn → commands registered and polling), resident memory (RSS)
idle and after each phase, Telegram calls per turn.

Run: .venv/bin/python benchmarks/turn_overhead.py [--turns 10] [--chats 100,300] [--rounds 2]
The last line is the 100-chat run:
overhead: chats=100 intake_p99_ms=N provider_ms=N loop_lag_max_ms=N turns_per_s=N
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.fakes.providers import FakeProvider, Reply  # noqa: E402
from tests.fakes.telegram import Call, FakeTelegram  # noqa: E402

TOKEN = "777000:BENCH-TOKEN"
KEY = "sk-bench-key"
OWNER = 1000
PROVIDER_LATENCY = 0.5  # seconds before the provider's first byte
PROVIDER_RPS = 500.0  # the fake account's request limit: never the bottleneck here
CHUNK_CHARS = 12
CHUNK_DELAY = 0.05
FLUSH_WAIT_S = 1.0
EDIT_INTERVAL = 1.0  # the bot's production edit interval per message
ANSWER = " ".join(f"word{i:02d}" for i in range(40))  # 279 chars → 24 chunks ≈ 1.15 s of stream


@dataclass
class Turn:
    chat_id: int
    text: str
    pushed_at: float
    request_at: float = 0.0
    last_chunk_at: float = 0.0
    final_at: float = 0.0
    allowed_at: float = 0.0  # earliest final edit the 1 edit/s/message rule allows

    @property
    def intake_ms(self) -> float:
        return (self.request_at - self.pushed_at) * 1000

    @property
    def finish_ms(self) -> float:
        return (self.final_at - self.last_chunk_at) * 1000

    @property
    def net_finish_ms(self) -> float:
        return (self.final_at - max(self.last_chunk_at, self.allowed_at)) * 1000

    @property
    def turn_ms(self) -> float:
        return (self.final_at - self.pushed_at) * 1000


def stream_seconds() -> float:
    chunks = -(-len(ANSWER) // CHUNK_CHARS)
    return PROVIDER_LATENCY + (chunks - 1) * CHUNK_DELAY


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) the process used so far, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def is_final(call: Call) -> bool:
    """The bot's formatted final message of a turn: an HTML send or edit."""
    return (
        call.method in ("sendMessage", "editMessageText")
        and call.params.get("parse_mode") == "HTML"
    )


async def run_turns(tg: FakeTelegram, openai: FakeProvider, turns: list[Turn]) -> None:
    """Push every turn's update at once; wait for all final messages.

    The fake's call list is scanned incrementally (each call once): a full rescan every poll
    would cost this process — which also runs the fakes — O(turns x calls) CPU per 10 ms.
    """
    by_chat = {turn.chat_id: turn for turn in turns}
    pending = set(by_chat)
    first_call = len(tg.calls)
    scanned = first_call
    for turn in turns:
        turn.pushed_at = time.monotonic()
        tg.push(tg.make_text_update(turn.chat_id, OWNER, turn.text))

    def done() -> bool:
        nonlocal scanned
        calls = tg.calls
        while scanned < len(calls):
            call = calls[scanned]
            scanned += 1
            chat_id = call.params.get("chat_id")
            if chat_id in pending and is_final(call):
                by_chat[chat_id].final_at = call.at
                pending.discard(chat_id)
        return not pending

    await tg.wait_for(done, timeout=120 + 2 * len(turns))
    by_text = {r.body["messages"][-1]["content"]: r for r in openai.requests}
    earlier: dict[int, list[float]] = {}
    for call in tg.calls[first_call:]:
        turn = by_chat.get(call.params.get("chat_id"))  # type: ignore[arg-type]
        if (
            turn is not None
            and call.at < turn.final_at
            and call.method in ("sendMessage", "editMessageText")
        ):
            earlier.setdefault(turn.chat_id, []).append(call.at)
    for turn in turns:
        request = by_text[turn.text]
        turn.request_at = request.at
        turn.last_chunk_at = request.at + stream_seconds()
        before = earlier.get(turn.chat_id)
        turn.allowed_at = max(before) + EDIT_INTERVAL if before else 0.0


@dataclass
class Phase:
    """One measured run: its turns, wall time and the bot's RSS at its end."""

    name: str
    turns: list[Turn]
    started: float
    ended: float
    rss: float
    cpu: float  # CPU seconds the bot used during the phase

    @property
    def wall(self) -> float:
        return self.ended - self.started

    @property
    def turns_per_s(self) -> float:
        return len(self.turns) / self.wall


def read_probe(path: Path) -> list[tuple[str, float, float]]:
    samples: list[tuple[str, float, float]] = []
    if not path.exists():
        return samples
    for line in path.read_text(encoding="ascii").splitlines():
        kind, at, value = line.split()
        samples.append((kind, float(at), float(value)))
    return samples


def probe_values(
    samples: list[tuple[str, float, float]], kind: str, start: float, end: float
) -> list[float]:
    return [value for k, at, value in samples if k == kind and start <= at <= end]


def spread(values: list[float]) -> str:
    if not values:
        return "no samples"
    return (
        f"p50 {percentile(values, 50):7.1f} ms   p99 {percentile(values, 99):7.1f} ms   "
        f"max {max(values):7.1f} ms   (n={len(values)})"
    )


def report(phase: Phase, tg: FakeTelegram, samples: list[tuple[str, float, float]]) -> None:
    turns = phase.turns
    print(
        f"\n{phase.name}: {len(turns)} turns in {phase.wall:.2f} s "
        f"({phase.turns_per_s:.1f} turns/s), RSS {phase.rss:.1f} MiB"
    )
    for label, values in (
        ("intake  (update → provider request)", [t.intake_ms for t in turns]),
        ("finish  (last chunk → final message)", [t.finish_ms for t in turns]),
        ("  of it beyond the 1 s edit interval", [t.net_finish_ms for t in turns]),
        ("turn    (update → final message)", [t.turn_ms for t in turns]),
    ):
        p50, p99 = percentile(values, 50), percentile(values, 99)
        mean = statistics.fmean(values)
        print(f"  {label:40s} p50 {p50:7.1f} ms   p99 {p99:7.1f} ms   mean {mean:7.1f} ms")
    print(f"  provider time per turn (fixed): {stream_seconds() * 1000:.0f} ms")
    print(f"  bot CPU per turn (all threads): {phase.cpu * 1000 / len(turns):.1f} ms")
    for label, kind in (
        ("event-loop lag (10 ms sleep, late by)", "lag"),
        ("  stalls ≥ 50 ms: loop thread's own CPU", "lag_busy"),
        ("provider loop lag (models/offloop.py)", "provider_lag"),
        ("garbage collection, generation 2", "gc2"),
        ("garbage collection, generations 0-1", "gc1"),
        ("db: wait for the write transaction", "db_write_wait"),
        ("db: write transaction held", "db_write_hold"),
        ("db: read (call → rows)", "db_read"),
    ):
        values = probe_values(samples, kind, phase.started, phase.ended)
        print(f"  {label:40s} {spread(values)}")
    calls = [c for c in tg.calls if "chat_id" in c.params and phase.started <= c.at <= phase.ended]
    per_turn = len(calls) / len(turns)
    by_method: dict[str, int] = {}
    for call in calls:
        by_method[call.method] = by_method.get(call.method, 0) + 1
    methods = ", ".join(f"{m} {n / len(turns):.2f}" for m, n in sorted(by_method.items()))
    print(
        f"  Telegram calls: {len(calls)} ({per_turn:.1f} per turn: {methods}; "
        f"{len(calls) / phase.wall:.1f}/s). At Telegram's 30 messages/s that allows "
        f"{30 / per_turn:.1f} turns/s."
    )


async def run_phase(
    name: str, process: asyncio.subprocess.Process, tg: FakeTelegram, openai: FakeProvider,
    rounds: list[list[Turn]],
) -> Phase:  # fmt: skip
    started = time.monotonic()
    cpu_before = cpu_seconds(process.pid)
    turns: list[Turn] = []
    for batch in rounds:
        await run_turns(tg, openai, batch)
        turns.extend(batch)
    cpu = cpu_seconds(process.pid) - cpu_before
    return Phase(name, turns, started, time.monotonic(), rss_mib(process.pid), cpu)


async def main(turns_single: int, chat_counts: list[int], rounds: int) -> None:
    async with (
        FakeTelegram(token=TOKEN) as tg,
        FakeProvider("openai", latency=PROVIDER_LATENCY) as openai,
    ):
        openai.set_default("*", Reply(ANSWER, chunk_chars=CHUNK_CHARS, chunk_delay=CHUNK_DELAY))
        # Like a real account, the provider states its (generous) limits on every answer, so the
        # bot's pacer learns them instead of slow-starting into an unknown limit.
        openai.enforce_rate_limit(PROVIDER_RPS, burst=PROVIDER_RPS, tokens_per_minute=1e9)
        workdir = Path(tempfile.mkdtemp(prefix="mnemobot-bench-"))
        probe_file = workdir / "probe.txt"
        env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_TOKEN"))}
        env.update(
            PYTHONPATH=str(REPO),
            TELEGRAM_BOT_TOKEN=TOKEN,
            TELEGRAM_BASE_URL=tg.base_url,
            ALLOWED_USER_IDS=str(OWNER),
            OPENAI_API_KEY=KEY,
            OPENAI_API_BASE=openai.base_url,
            OPENAI_RPS="10000",  # measure the bot, not our own per-gateway request budget
            USER_MESSAGES_PER_MINUTE="0",
            DEFAULT_MODEL="gpt-5",
            DATABASE_PATH=str(workdir / "bench.sqlite3"),
            LOG_LEVEL="WARNING",
        )
        spawned = time.monotonic()
        process = await asyncio.create_subprocess_exec(
            sys.executable, str(REPO / "benchmarks" / "bot_probe.py"), str(probe_file),
            cwd=workdir, env=env,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            await tg.wait_for(
                lambda: bool(tg.calls_of("setMyCommands")) and bool(tg.calls_of("getUpdates")),
                timeout=90,
            )
            startup = time.monotonic() - spawned
            await asyncio.sleep(1.0)
            idle_rss = rss_mib(process.pid)
            print(f"machine load (uptime): {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")
            print(f"start-up (spawn → commands registered, polling): {startup:.2f} s")
            print(f"RSS idle: {idle_rss:.1f} MiB")

            phases: list[Phase] = []
            single = [[Turn(OWNER, f"single chat, turn {k}", 0.0)] for k in range(turns_single)]
            phases.append(await run_phase("1 chat, sequential turns", process, tg, openai, single))
            for index, chats in enumerate(chat_counts):
                base = 100_000 * (index + 1)
                batches = [
                    [Turn(base + c, f"chat {c} of {chats}, round {r}", 0.0) for c in range(chats)]
                    for r in range(rounds)
                ]
                name = f"{chats} concurrent chats x {rounds} rounds"
                phases.append(await run_phase(name, process, tg, openai, batches))
                await asyncio.sleep(1.0)  # let the last edits and writes settle between phases
            await asyncio.sleep(FLUSH_WAIT_S)  # the probe writes its samples twice a second
            samples = read_probe(probe_file)
            for phase in phases:
                report(phase, tg, samples)
            fallbacks = sum(1 for r in openai.requests if r.model != "gpt-5")
            print(f"\nprovider requests: {len(openai.requests)} (fallbacks: {fallbacks})")
            print(f"machine load (uptime): {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")
            summary = next((p for p in phases[1:] if len(p.turns) == 100 * rounds), None)
            if summary is None and len(phases) > 1:
                summary = phases[1]
            if summary is not None:
                chats = len(summary.turns) // rounds
                lag = probe_values(samples, "lag", summary.started, summary.ended)
                print(
                    f"overhead: chats={chats} "
                    f"intake_p99_ms={percentile([t.intake_ms for t in summary.turns], 99):.0f} "
                    f"provider_ms={stream_seconds() * 1000:.0f} "
                    f"loop_lag_max_ms={max(lag) if lag else float('nan'):.0f} "
                    f"turns_per_s={summary.turns_per_s:.1f}"
                )
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                _, stderr = await asyncio.wait_for(process.communicate(), 60)
            except TimeoutError:
                process.kill()
                _, stderr = await process.communicate()
            if process.returncode:
                print(stderr.decode(errors="replace")[-2000:], file=sys.stderr)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=10, help="sequential turns in one chat")
    parser.add_argument(
        "--chats", default="100,300", help="concurrent chats per phase, comma-separated"
    )
    parser.add_argument("--rounds", type=int, default=2, help="rounds of concurrent turns")
    args = parser.parse_args()
    counts = [int(n) for n in args.chats.split(",") if n.strip()]
    asyncio.run(main(args.turns, counts, args.rounds))
