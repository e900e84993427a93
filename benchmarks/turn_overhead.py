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

Also: start-up time (process spawn → commands registered and polling), resident memory (RSS, the
bot and its provider worker processes together; CPU too)
idle and after each phase, Telegram calls per turn.

Phases, after one chat's sequential turns, for each chat count N:
- N conversations at once: each chat sends its first message at its own moment within the
  first second, then its next one as soon as it has the answer (no reading time), `--rounds`
  turns each. Every chat always has a turn in flight; messages arrive one by one, as N people
  typing send them. The summary line is this phase at 100 chats.
- N chats in one burst: every message pushed in the same millisecond. Here the last intake is
  bounded below by the CPU every intake needs (litellm's request set-up alone is a few ms per
  request, all under one GIL), so it is printed on its own `burst:` line.

Then, with bots of their own (benchmarks/streaming_modes.py): Telegram calls per turn with
drafts (private chats' default) and with edits, and the time from a Stop press on a draft to
the provider seeing its stream closed (`stop_to_cancel_p99_ms`, goal under 300).

Run: .venv/bin/python -m benchmarks.turn_overhead [--turns 10] [--chats 100,300] [--rounds 3]
     [--streaming-only]
The overhead summary line is the 100-conversation run:
overhead: chats=100 intake_p99_ms=N provider_ms=N loop_lag_max_ms=N turns_per_s=N
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

from benchmarks.common import (  # noqa: E402
    LoopLag,
    bot_environment,
    percentile,
    terminate,
    until_polling,
)
from benchmarks.streaming_modes import streaming_figures  # noqa: E402
from tests.fakes.providers import FakeProvider, Reply  # noqa: E402
from tests.fakes.telegram import Call, FakeTelegram  # noqa: E402

TOKEN = "777000:BENCH-TOKEN"
KEY = "sk-bench-key"
OWNER = 1000
PROVIDER_LATENCY = 0.5  # seconds before the provider's first byte
# The fake account's request limit, never the bottleneck here: at 500/s the pacer, spacing sends
# at the learned pace, took 220 ms to send a burst of 100. That is the provider's limit, not the
# bot's own delay this measures (benchmarks/burst.py measures limits).
PROVIDER_RPS = 5000.0
CHUNK_CHARS = 12
CHUNK_DELAY = 0.05
FLUSH_WAIT_S = 1.0
RAMP_S = 1.0  # the conversations' first messages arrive within this time
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


def family(pid: int) -> list[int]:
    """The bot's process and all its descendants: the provider workers (models/worker/pool.py),
    spawned by the bot or forked from a worker."""
    pids = [pid]
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            for child in children.read_text().split():
                pids += family(int(child))
        except OSError:  # a thread that ended meanwhile
            pass
    return pids


def rss_mib(pid: int) -> float:
    """Resident memory of the bot and its provider workers together."""
    return _family_mib(pid, "status", "VmRSS:")


def pss_mib(pid: int) -> float:
    """Proportional memory of the bot and its workers: a page that n of them share counts 1/n
    to each. A worker forked from another shares its imports with it, which a sum of RSS
    counts twice; the sum of PSS is what the family takes from the machine."""
    return _family_mib(pid, "smaps_rollup", "Pss:")


def _family_mib(pid: int, proc_file: str, field: str) -> float:
    """`field` (in kB) of /proc/<pid>/`proc_file`, summed over the bot and its descendants."""
    total = 0.0
    for member in family(pid):
        for line in Path(f"/proc/{member}/{proc_file}").read_text().splitlines():
            if line.startswith(field):
                total += int(line.split()[1]) / 1024
    return total


async def settled_rss_mib(pid: int, limit_s: float = 60.0) -> float:
    """The tree's RSS once start-up work is over: a provider worker that starts after polling
    (and warms up) grows for a few seconds. Settled: three samples a second apart within 2 MiB,
    with a worker among the processes."""
    last = rss_mib(pid)
    steady = 0
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        await asyncio.sleep(1.0)
        now = rss_mib(pid)
        steady = steady + 1 if len(family(pid)) > 1 and abs(now - last) < 2.0 else 0
        if steady >= 2:
            return now
        last = now
    return last


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) the bot and its provider workers used so far, all threads."""
    total = 0.0
    for member in family(pid):
        fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def is_final(call: Call) -> bool:
    """The bot's formatted final message of a turn: an HTML send or edit."""
    return (
        call.method in ("sendMessage", "editMessageText")
        and call.params.get("parse_mode") == "HTML"
    )


async def run_burst(tg: FakeTelegram, openai: FakeProvider, turns: list[Turn]) -> list[Turn]:
    """Push every turn's update in the same millisecond; wait for all final messages."""
    first_call = len(tg.calls)
    for turn in turns:
        turn.pushed_at = time.monotonic()
        tg.push(tg.make_text_update(turn.chat_id, OWNER, turn.text))
    await _until_answered(tg, {turn.chat_id: turn for turn in turns}, first_call)
    _fill_in(tg, openai, turns, first_call)
    return turns


async def run_conversations(
    tg: FakeTelegram, openai: FakeProvider, chat_ids: list[int], rounds: int, ramp_s: float
) -> list[Turn]:
    """`len(chat_ids)` conversations at once: each chat sends its first message at its own
    moment within the first `ramp_s` seconds, then each next one as soon as the answer to the
    last is complete (no reading time), `rounds` in all. So every chat always has a turn in
    flight, and messages arrive one by one, as a hundred people typing send them, not all in
    the same millisecond (that is `run_burst`)."""
    turns: list[Turn] = []
    in_flight: dict[int, Turn] = {}
    sent = dict.fromkeys(chat_ids, 0)
    first_call = len(tg.calls)
    begin = time.monotonic()
    starts = {chat: begin + ramp_s * i / len(chat_ids) for i, chat in enumerate(chat_ids)}

    def send(chat_id: int) -> None:
        turn = Turn(chat_id, f"chat {chat_id}, round {sent[chat_id]}", time.monotonic())
        sent[chat_id] += 1
        in_flight[chat_id] = turn
        turns.append(turn)
        tg.push(tg.make_text_update(chat_id, OWNER, turn.text))

    def answered(turn: Turn) -> None:
        del in_flight[turn.chat_id]
        if sent[turn.chat_id] < rounds:
            send(turn.chat_id)

    scanned = first_call
    deadline = begin + 120 + 2 * len(chat_ids) * rounds
    while starts or in_flight:
        now = time.monotonic()
        for chat_id in [c for c, at in starts.items() if at <= now]:
            del starts[chat_id]
            send(chat_id)
        scanned = _scan_finals(tg, in_flight, scanned, answered)
        if now > deadline:
            raise AssertionError(f"{len(in_flight)} turns unanswered")
        await asyncio.sleep(0.002)
    _fill_in(tg, openai, turns, first_call)
    return turns


def _scan_finals(
    tg: FakeTelegram, in_flight: dict[int, Turn], scanned: int, on_final: Callable[[Turn], None]
) -> int:
    """Look at the fake's calls from `scanned` on (each call once: a full rescan every poll
    would cost this process, which also runs the fakes, O(turns x calls) CPU); a turn's final
    message sets its `final_at` and is reported. Returns how far it looked."""
    calls = tg.calls
    while scanned < len(calls):
        call = calls[scanned]
        scanned += 1
        turn = in_flight.get(call.params.get("chat_id"))  # type: ignore[arg-type]
        if turn is not None and is_final(call):
            turn.final_at = call.at
            on_final(turn)
    return scanned


async def _until_answered(tg: FakeTelegram, in_flight: dict[int, Turn], first_call: int) -> None:
    scanned = first_call

    def done() -> bool:
        nonlocal scanned
        scanned = _scan_finals(tg, in_flight, scanned, lambda turn: in_flight.pop(turn.chat_id))
        return not in_flight

    await tg.wait_for(done, timeout=120 + 2 * len(in_flight))


def _fill_in(tg: FakeTelegram, openai: FakeProvider, turns: list[Turn], first_call: int) -> None:
    """Each turn's provider request and the earliest moment its final edit was allowed."""
    by_text = {r.body["messages"][-1]["content"]: r for r in openai.requests}
    by_chat: dict[int, list[Turn]] = {}
    for turn in turns:
        by_chat.setdefault(turn.chat_id, []).append(turn)
    earlier: dict[int, float] = {}  # per turn (by id): its last message before the final
    for call in tg.calls[first_call:]:
        if call.method not in ("sendMessage", "editMessageText"):
            continue
        for turn in by_chat.get(call.params.get("chat_id"), []):  # type: ignore[arg-type]
            if turn.pushed_at <= call.at < turn.final_at:
                earlier[id(turn)] = max(earlier.get(id(turn), 0.0), call.at)
    for turn in turns:
        request = by_text[turn.text]
        turn.request_at = request.at
        turn.last_chunk_at = request.at + stream_seconds()
        before = earlier.get(id(turn))
        turn.allowed_at = before + EDIT_INTERVAL if before else 0.0


@dataclass
class Phase:
    """One measured run: its turns, wall time and the bot's RSS at its end."""

    name: str
    turns: list[Turn]
    started: float
    ended: float
    rss: float
    pss: float
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
        f"({phase.turns_per_s:.1f} turns/s), RSS {phase.rss:.1f} MiB, PSS {phase.pss:.1f} MiB"
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
    if len(turns) > 1:
        slowest = sorted(turns, key=lambda t: t.intake_ms, reverse=True)[:5]
        when = ", ".join(
            f"{t.pushed_at - phase.started:.1f} s: {t.intake_ms:.0f} ms" for t in slowest
        )
        print(f"  slowest intakes (pushed, into the phase): {when}")
    harness = [late * 1000 for late in HARNESS_LAG.between(phase.started, phase.ended)]
    print(
        f"  {'harness loop lag (the fakes stamp late)':40s} p50 {percentile(harness, 50):7.1f} ms"
        f"   p99 {percentile(harness, 99):7.1f} ms   max {max(harness, default=0.0):7.1f} ms"
    )
    cpu_ms = phase.cpu * 1000 / len(turns)
    print(f"  bot CPU per turn (bot and provider workers, all threads): {cpu_ms:.1f} ms")
    for label, kind in (
        ("event-loop lag (10 ms sleep, late by)", "lag"),
        ("  stalls ≥ 50 ms: loop thread's own CPU", "lag_busy"),
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


# The fakes stamp each request when their handler runs on this process's loop: if that loop is
# late, every stamp is late by as much, and the bot's intake looks longer than it is.
HARNESS_LAG = LoopLag(tick_s=0.01)


async def run_phase(
    name: str, process: asyncio.subprocess.Process, run: Callable[[], Awaitable[list[Turn]]]
) -> Phase:
    started = time.monotonic()
    cpu_before = cpu_seconds(process.pid)
    turns = await run()
    cpu = cpu_seconds(process.pid) - cpu_before
    return Phase(
        name, turns, started, time.monotonic(), rss_mib(process.pid), pss_mib(process.pid), cpu
    )


async def main(turns_single: int, chat_counts: list[int], rounds: int) -> None:
    HARNESS_LAG.start()
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
        env = bot_environment(
            repo=REPO,
            token=TOKEN,
            telegram=tg,
            users=[OWNER],
            openai_key=KEY,
            openai_base_url=openai.base_url,
            database=workdir / "bench.sqlite3",
        )
        env.update(
            OPENAI_RPS="10000",  # measure the bot, not our own per-gateway request budget
            LOG_LEVEL="WARNING",
        )
        spawned = time.monotonic()
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "benchmarks.bot_probe", str(probe_file),
            cwd=workdir, env=env,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            await until_polling(tg)
            startup = time.monotonic() - spawned
            await asyncio.sleep(1.0)
            idle_rss = rss_mib(process.pid)
            print(f"machine load (uptime): {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")
            print(f"start-up (spawn → commands registered, polling): {startup:.2f} s")
            print(f"RSS idle (bot and provider workers): {idle_rss:.1f} MiB")
            warm_rss = await settled_rss_mib(process.pid)
            print(
                f"RSS idle once warmed up (bot and provider workers): {warm_rss:.1f} MiB "
                f"(PSS {pss_mib(process.pid):.1f} MiB, {len(family(process.pid))} processes)"
            )

            phases: list[Phase] = []
            bursts: list[Phase] = []
            phases.append(
                await run_phase(
                    "1 chat, sequential turns",
                    process,
                    partial(run_conversations, tg, openai, [OWNER], turns_single, 0.0),
                )
            )
            for index, chats in enumerate(chat_counts):
                ids = [100_000 * (index + 1) + c for c in range(chats)]
                name = (
                    f"{chats} conversations at once, {rounds} turns each "
                    f"(first messages within {RAMP_S:.0f} s)"
                )
                phases.append(
                    await run_phase(
                        name, process, partial(run_conversations, tg, openai, ids, rounds, RAMP_S)
                    )
                )
                await asyncio.sleep(1.0)  # let the last edits and writes settle between phases
                burst = [Turn(chat_id, f"chat {chat_id}, burst", 0.0) for chat_id in ids]
                name = f"{chats} chats in one burst (every message in the same millisecond)"
                bursts.append(await run_phase(name, process, partial(run_burst, tg, openai, burst)))
                phases.append(bursts[-1])
                await asyncio.sleep(1.0)
            await asyncio.sleep(FLUSH_WAIT_S)  # the probe writes its samples twice a second
            samples = read_probe(probe_file)
            for phase in phases:
                report(phase, tg, samples)
            fallbacks = sum(1 for r in openai.requests if r.model != "gpt-5")
            print(f"\nprovider requests: {len(openai.requests)} (fallbacks: {fallbacks})")
            print(f"machine load (uptime): {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")
            for burst in bursts:
                intake = [t.intake_ms for t in burst.turns]
                print(
                    f"burst: chats={len(burst.turns)} intake_p50_ms={percentile(intake, 50):.0f} "
                    f"intake_p99_ms={percentile(intake, 99):.0f}"
                )
            summary = next((p for p in phases[1:] if p.name.startswith("100 conv")), None)
            if summary is None and len(phases) > 1:
                summary = phases[1]
            if summary is not None:
                chats = len({t.chat_id for t in summary.turns})
                lag = probe_values(samples, "lag", summary.started, summary.ended)
                print(
                    f"overhead: chats={chats} "
                    f"intake_p99_ms={percentile([t.intake_ms for t in summary.turns], 99):.0f} "
                    f"provider_ms={stream_seconds() * 1000:.0f} "
                    f"loop_lag_max_ms={max(lag) if lag else float('nan'):.0f} "
                    f"turns_per_s={summary.turns_per_s:.1f}"
                )
        finally:
            stderr = await terminate(process)
            if process.returncode:
                print(stderr.decode(errors="replace")[-2000:], file=sys.stderr)
    await HARNESS_LAG.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=10, help="sequential turns in one chat")
    parser.add_argument(
        "--chats", default="100,300", help="concurrent chats per phase, comma-separated"
    )
    parser.add_argument("--rounds", type=int, default=3, help="turns per conversation")
    parser.add_argument(
        "--streaming-only", action="store_true", help="only drafts against edits, and Stop"
    )
    args = parser.parse_args()
    counts = [int(n) for n in args.chats.split(",") if n.strip()]
    if not args.streaming_only:
        asyncio.run(main(args.turns, counts, args.rounds))
    asyncio.run(streaming_figures())
