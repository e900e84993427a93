"""Drafts against edits, and how fast Stop ends the model call; run by benchmarks/turn_overhead.py.

The bot runs as a real process (`python -m bot`, production edit interval) against its own fake
Bot API and fake OpenAI gateway in this process, so the figures do not mix with the overhead
phases. Two bots in turn, the same answer streamed in one private chat:

- Telegram calls per turn with drafts (the default) and with edits
  (TELEGRAM_DRAFT_STREAMING=false): every request naming the chat, from the user's message to
  the final formatted message;
- Stop: a long answer streams as a draft, the user presses its Stop button (the fake delivers
  `stopped_message_generation`), and the time until the fake provider sees the bot hang up on
  the stream is taken on the fakes' one clock. The provider notices a hang-up at its next write
  (chunks 20 ms apart), so the figure is at most that much late.

Prints `streaming: …` per mode and `stop: … stop_to_cancel_p99_ms=N` (goal: under 300 ms).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import bot_environment, percentile, terminate, until_polling
from tests.fakes.providers import FakeProvider, Reply
from tests.fakes.telegram import FakeTelegram

TOKEN = "777001:BENCH-DRAFTS"
KEY = "sk-bench-drafts"
REPO = Path(__file__).resolve().parents[1]
USER = 2000  # a private chat's id is its user's
STREAMED = " ".join(f"word{i:03d}" for i in range(160))  # 1,279 chars, 107 chunks: ≈ 5.3 s
STOPPED = "".join(f"long{i:03d} " for i in range(400))  # 8 s of stream: a Stop always cuts it


async def _bot(
    tg: FakeTelegram, openai: FakeProvider, database: Path, **values: str
) -> asyncio.subprocess.Process:
    """`python -m bot` against the fakes; its calls are counted from its start."""
    env = bot_environment(
        repo=REPO,
        token=TOKEN,
        telegram=tg,
        users=[USER],
        openai_key=KEY,
        openai_base_url=openai.base_url,
        database=database,
    )
    env.update(LOG_LEVEL="WARNING", **values)
    tg.calls.clear()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", cwd=database.parent, env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    await until_polling(tg)
    return process


async def _calls_per_turn(tg: FakeTelegram, turns: int) -> dict[str, float]:
    """Sequential turns in the chat; the mean number of each request per turn."""
    counts: dict[str, int] = {}
    for index in range(turns):
        start = len(tg.calls)
        before = len(tg.bot_messages(USER))
        tg.push(tg.make_text_update(USER, USER, f"question {index}"))
        await tg.wait_for(
            lambda b=before: (
                len(tg.bot_messages(USER)) > b and tg.bot_messages(USER)[-1].parse_mode == "HTML"
            ),
            timeout=120,
        )
        for call in tg.calls[start:]:
            if call.params.get("chat_id") == USER:
                counts[call.method] = counts.get(call.method, 0) + 1
    return {method: n / turns for method, n in sorted(counts.items())}


async def _stop_latencies(tg: FakeTelegram, openai: FakeProvider, rounds: int) -> list[float]:
    """Stop pressed on the draft of a long answer, `rounds` times: ms until the hang-up."""
    latencies: list[float] = []
    for index in range(rounds):
        messages = len(tg.bot_messages(USER))
        cuts = len(openai.cut_at)
        tg.push(tg.make_text_update(USER, USER, f"talk for long, {index}"))
        await tg.wait_for(lambda: bool(tg.current_drafts(USER)), timeout=120)
        pressed_at = time.monotonic()
        tg.press_stop(USER)
        await tg.wait_for(lambda c=cuts: len(openai.cut_at) > c, timeout=60)
        latencies.append((openai.cut_at[-1] - pressed_at) * 1000)
        await tg.wait_for(lambda m=messages: len(tg.bot_messages(USER)) > m, timeout=60)
    return latencies


async def streaming_figures(*, turns: int = 10, stops: int = 20) -> None:
    """Print the calls per turn with drafts and with edits, and the Stop latency."""
    workdir = Path(tempfile.mkdtemp(prefix="mnemobot-bench-drafts-"))
    async with FakeTelegram(token=TOKEN) as tg, FakeProvider("openai", latency=0.3) as openai:
        openai.enforce_rate_limit(5000.0, burst=5000.0, tokens_per_minute=1e9)
        per_mode: dict[str, dict[str, float]] = {}
        for mode, value in (("drafts", "true"), ("edits", "false")):
            openai.set_default("*", Reply(STREAMED, chunk_chars=12, chunk_delay=0.05))
            database = workdir / f"{mode}.sqlite3"
            process = await _bot(tg, openai, database, TELEGRAM_DRAFT_STREAMING=value)
            try:
                per_mode[mode] = await _calls_per_turn(tg, turns)
                if mode == "drafts":
                    openai.set_default("*", Reply(STOPPED, chunk_chars=8, chunk_delay=0.02))
                    latencies = await _stop_latencies(tg, openai, stops)
            finally:
                await terminate(process)
        print(f"\nstreaming one {len(STREAMED)}-character answer ({turns} turns, 1 chat):")
        for mode, methods in per_mode.items():
            listed = ", ".join(f"{m} {n:.2f}" for m, n in methods.items())
            print(f"streaming: mode={mode} telegram_calls_per_turn={sum(methods.values()):.1f} "
                  f"({listed})")  # fmt: skip
        print(
            f"stop: presses={len(latencies)} "
            f"stop_to_cancel_p50_ms={percentile(latencies, 50):.0f} "
            f"stop_to_cancel_p99_ms={percentile(latencies, 99):.0f} "
            f"max_ms={max(latencies):.0f}"
        )
