"""Turn overhead: the time the bot itself adds to a chat turn, at 1 and at 100 concurrent chats.

The bot runs as a real process (`python -m bot`, production settings) against the fake Bot API
and a fake OpenAI gateway with a fixed latency, both in this process on 127.0.0.1. Every time
below is taken from the fakes' own records, on one clock:

- intake:  update pushed into the fake Telegram → the bot's first request to the provider
           (long-poll wake-up, PTB dispatch, access check, user message committed to SQLite,
           context built, litellm request sent);
- finish:  the provider's last chunk → the bot's final formatted Telegram message (assistant
           message and usage committed, markdown rendered, final edit — which waits for the
           ≈1 s per-message edit interval since the previous streamed edit, by design);
- turn:    update pushed → final message (includes the provider's own time).

Also: start-up time (process spawn → commands registered and polling), resident memory (RSS)
idle and after the load.

Run: .venv/bin/python benchmarks/turn_overhead.py [--turns 20] [--chats 100] [--rounds 2]
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
CHUNK_CHARS = 12
CHUNK_DELAY = 0.05
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


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def final_call(tg: FakeTelegram, chat_id: int, after: float) -> Call | None:
    """The bot's formatted final message for a turn: the first HTML send/edit after `after`."""
    for call in tg.calls:
        if (
            call.at >= after
            and call.method in ("sendMessage", "editMessageText")
            and call.params.get("chat_id") == chat_id
            and call.params.get("parse_mode") == "HTML"
        ):
            return call
    return None


async def run_turns(tg: FakeTelegram, openai: FakeProvider, turns: list[Turn]) -> float:
    """Push every turn's update at once; wait for all final messages. Returns the wall time."""
    started = time.monotonic()
    for turn in turns:
        turn.pushed_at = time.monotonic()
        tg.push(tg.make_text_update(turn.chat_id, OWNER, turn.text))

    def done() -> bool:
        return all(final_call(tg, t.chat_id, t.pushed_at) is not None for t in turns)

    await tg.wait_for(done, timeout=120 + 2 * len(turns))
    wall = time.monotonic() - started
    by_text = {r.body["messages"][-1]["content"]: r for r in openai.requests}
    for turn in turns:
        request = by_text[turn.text]
        turn.request_at = request.at
        turn.last_chunk_at = request.at + stream_seconds()
        call = final_call(tg, turn.chat_id, turn.pushed_at)
        assert call is not None
        turn.final_at = call.at
        earlier = [
            c.at
            for c in tg.calls
            if turn.pushed_at <= c.at < call.at
            and c.method in ("sendMessage", "editMessageText")
            and c.params.get("chat_id") == turn.chat_id
        ]
        turn.allowed_at = max(earlier) + EDIT_INTERVAL if earlier else 0.0
    return wall


def report(name: str, turns: list[Turn], wall: float) -> None:
    print(f"\n{name}: {len(turns)} turns in {wall:.2f} s ({len(turns) / wall:.1f} turns/s)")
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


async def main(turns_single: int, chats: int, rounds: int) -> None:
    async with (
        FakeTelegram(token=TOKEN) as tg,
        FakeProvider("openai", latency=PROVIDER_LATENCY) as openai,
    ):
        openai.set_default("*", Reply(ANSWER, chunk_chars=CHUNK_CHARS, chunk_delay=CHUNK_DELAY))
        workdir = Path(tempfile.mkdtemp(prefix="mnemobot-bench-"))
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
            sys.executable, "-m", "bot", cwd=workdir, env=env,
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
            print(f"start-up (spawn → commands registered, polling): {startup:.2f} s")
            print(f"RSS idle: {idle_rss:.1f} MiB")

            single: list[Turn] = []
            single_wall = 0.0
            for k in range(turns_single):
                turn = Turn(OWNER, f"single chat, turn {k}", 0.0)
                single_wall += await run_turns(tg, openai, [turn])
                single.append(turn)
            report("1 chat, sequential turns", single, single_wall)

            many: list[Turn] = []
            many_wall = 0.0
            for r in range(rounds):
                batch = [Turn(20_000 + c, f"chat {c}, round {r}", 0.0) for c in range(chats)]
                many_wall += await run_turns(tg, openai, batch)
                many.extend(batch)
            report(f"{chats} concurrent chats x {rounds} rounds", many, many_wall)
            print(f"\nRSS after load: {rss_mib(process.pid):.1f} MiB")
            chat_calls = [
                c for c in tg.calls if "chat_id" in c.params and c.at >= many[0].pushed_at
            ]
            per_turn = len(chat_calls) / len(many)
            rate = len(chat_calls) / many_wall
            print(
                f"Telegram calls during the concurrent rounds: {len(chat_calls)} "
                f"({per_turn:.1f} per turn, {rate:.1f}/s on average). AIORateLimiter keeps the "
                f"bot within Telegram's 30 messages/s, so at most {30 / per_turn:.1f} turns/s."
            )
            fallbacks = sum(1 for r in openai.requests if r.model != "gpt-5")
            print(f"provider requests: {len(openai.requests)} (fallbacks: {fallbacks})")
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
    parser.add_argument("--turns", type=int, default=20, help="sequential turns in one chat")
    parser.add_argument("--chats", type=int, default=100, help="concurrent chats")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of concurrent turns")
    args = parser.parse_args()
    asyncio.run(main(args.turns, args.chats, args.rounds))
