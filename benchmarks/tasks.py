"""Scheduled tasks at load: 200 tasks fall due at once across 50 chats while 20 other chats
talk, against a provider that takes 1.6 s per answer.

The whole bot runs in this process (real PTB polling the fake Bot API, real litellm in the
provider worker talking HTTP to the fake OpenAI gateway, SQLite); the tasks are written
straight into its database, due now, as if set over the past weeks. The fake Bot API enforces
Telegram's limits (about 30 messages per second bot-wide, one per second per chat, with 429s).

(base) the 20 chats talk for `--base` seconds with no task due: each sends a message, waits
       for the whole reply, sends the next. Their reply times give the baseline p99.
(load) the 200 tasks fall due, and the same 20 chats talk until every task has answered.
       Each task's answer is counted in the chat (once, or a duplicate), its lateness is
       when its answer was in the chat − its due time, the chats' reply p99 is compared with
       the baseline's (`chat_p99_ratio`), and a task sleeping 10 ms over and over on the
       bot's loop records how late it wakes (`loop_lag_max_ms`).

Tasks run a few at a time at background priority (bot/app.py TASK_RUNS_AT_ONCE,
models/policy/pacing.py): they queue behind the chats, never the other way round.

    python -m benchmarks.tasks [--tasks 200] [--task-chats 50] [--talkers 20] [--latency 1.6]

Last line: `tasks: due=N ran=N dup=N late_p99_s=N chat_p99_ratio=N loop_lag_max_ms=N`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import re
import sqlite3
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import structlog

from benchmarks.common import LoopLag, percentile
from tests.support.e2e_bot import BotUnderTest, bot_under_test
from tests.support.reminder_rows import add_pending

TASK_USERS = 30_000_000  # task chat c is the private chat of user TASK_USERS + c
TALKERS = 40_000_000  # talking chat c is the private chat of user TALKERS + c
_TASK_TEXT = re.compile(r"^🗓 t(\d+) ")


def seed_tasks(db_path: Path, tasks: int, chats: int, at: datetime) -> None:
    conn = sqlite3.connect(db_path)
    rows = [(TASK_USERS + n % chats, f"t{n + 1} the weather in Lisbon", at) for n in range(tasks)]
    add_pending(conn, rows, kind="task")
    conn.commit()
    conn.close()


class Talkers:
    """Chats that each send a message, wait for the whole reply, and send the next."""

    def __init__(self, bot: BotUnderTest, count: int) -> None:
        self.bot = bot
        self.chats = [TALKERS + c for c in range(count)]
        self.replies: list[tuple[float, float]] = []  # (finished at, seconds) per reply
        self._tasks: list[asyncio.Task[None]] = []
        self._stop = asyncio.Event()

    def start(self) -> None:
        self._stop.clear()
        self._tasks = [asyncio.create_task(self._talk(chat)) for chat in self.chats]

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)

    def seconds_between(self, start: float, end: float) -> list[float]:
        return [s for at, s in self.replies if start <= at <= end]

    async def _talk(self, chat: int) -> None:
        bot, turns = self.bot, self.bot.services.turns
        n = 0
        while not self._stop.is_set():
            n += 1
            before = len(bot.messages(chat))
            started = time.monotonic()
            bot.say(chat, f"question {n}: what should I cook tonight?", user_id=chat)
            await bot.tg.wait_for(
                lambda: len(bot.messages(chat)) > before and turns.waiting(chat) == 0,  # noqa: B023
                timeout=300,
            )
            self.replies.append((time.monotonic(), time.monotonic() - started))


async def main(tasks: int, task_chats: int, talkers: int, latency: float, base_s: float) -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    logging.getLogger("telegram").setLevel(logging.CRITICAL)
    users = [TASK_USERS + c for c in range(task_chats)] + [TALKERS + c for c in range(talkers)]
    with tempfile.TemporaryDirectory() as tmp:
        async with bot_under_test(
            Path(tmp),
            ALLOWED_USER_IDS=",".join(str(u) for u in users),
            USER_MESSAGES_PER_MINUTE="0",
            CHAT_TIMEOUT="60",
            PROVIDER_WORKERS=None,
        ) as bot:
            bot.tg.enforce_flood_limits = True
            bot.openai.latency = latency
            talk = Talkers(bot, talkers)
            lag = LoopLag(0.01)
            lag.start()
            # A first reply in each chat (the provider worker's start, litellm's import, each
            # chat's first rows): part of neither phase.
            await asyncio.gather(*(bot.ask(c, "hello", user_id=c) for c in talk.chats))
            # As `python -m bot` does once started (bot/runner.py, _freeze_heap): what start-up
            # left stays out of every later full collection.
            gc.collect()
            gc.freeze()

            talk.start()
            base_start = time.monotonic()
            await asyncio.sleep(base_s)
            base_end = time.monotonic()

            due = datetime.now(UTC).replace(microsecond=0)
            # Off the loop: sqlite3 waits for the bot's writer with the loop held otherwise.
            await asyncio.to_thread(seed_tasks, bot.settings.DATABASE_PATH, tasks, task_chats, due)
            offset = time.time() - time.monotonic()
            load_start = time.monotonic()
            bot.services.tasks.scheduler.notify()

            def answered() -> Counter[int]:
                seen: Counter[int] = Counter()
                for chat in range(task_chats):
                    for message in bot.messages(TASK_USERS + chat):
                        match = _TASK_TEXT.match(message.text)
                        if match and "\n\n" in message.text:
                            seen[int(match.group(1))] += 1
                return seen

            with contextlib.suppress(AssertionError):  # a bound for a hang: reported below
                await bot.tg.wait_for(lambda: len(answered()) >= tasks, timeout=900)
            load_end = time.monotonic()
            await talk.stop()
            await lag.stop()
            seen = answered()
            late_s = []
            for chat in range(task_chats):
                for message in bot.messages(TASK_USERS + chat):
                    if _TASK_TEXT.match(message.text) and "\n\n" in message.text:
                        done_at = message.edit_times[-1] if message.edit_times else message.sent_at
                        late_s.append(done_at + offset - due.timestamp())
            runs = await bot.rows("SELECT state, COUNT(*) AS n FROM task_runs GROUP BY state")
            rejected = sum(1 for c in bot.tg.calls if not c.ok)
    base = talk.seconds_between(base_start, base_end)
    load = talk.seconds_between(load_start, load_end)
    base_p99, load_p99 = percentile(base, 99), percentile(load, 99)
    ratio = load_p99 / base_p99 if base_p99 else 0.0
    lag_ms = max(lag.between(load_start, load_end), default=0.0) * 1000
    # The worst wake-ups and the CPU the loop's thread used meanwhile: a late wake-up with
    # little CPU is the machine not running us (other processes), not our loop holding on.
    worst = sorted(
        ((late, cpu) for (at, late), cpu in zip(lag.samples, lag.cpu_s, strict=True)
         if load_start <= at <= load_end),
        reverse=True,
    )[:3]  # fmt: skip
    print(f"provider latency {latency:.1f} s; {talkers} chats talking; {tasks} tasks in "
          f"{task_chats} chats due at once")  # fmt: skip
    print(f"(base) {len(base)} replies in {base_end - base_start:.0f} s: p50 "
          f"{percentile(base, 50):.2f} s p99 {base_p99:.2f} s")  # fmt: skip
    print(f"(load) {len(load)} replies in {load_end - load_start:.0f} s: p50 "
          f"{percentile(load, 50):.2f} s p99 {load_p99:.2f} s")  # fmt: skip
    print(f"task runs: {dict((r['state'], r['n']) for r in runs)}; answered {len(seen)}, "
          f"lateness p50 {percentile(late_s, 50):.1f} s p99 {percentile(late_s, 99):.1f} s; "
          f"Bot API calls refused: {rejected}")  # fmt: skip
    print("worst loop wake-ups (late ms / loop CPU ms): "
          + ", ".join(f"{late * 1000:.0f}/{cpu * 1000:.0f}" for late, cpu in worst))  # fmt: skip
    print(
        f"tasks: due={tasks} ran={len(seen)} dup={sum(n - 1 for n in seen.values())} "
        f"late_p99_s={percentile(late_s, 99):.1f} chat_p99_ratio={ratio:.2f} "
        f"loop_lag_max_ms={lag_ms:.0f}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--task-chats", type=int, default=50)
    parser.add_argument("--talkers", type=int, default=20)
    parser.add_argument("--latency", type=float, default=1.6)
    parser.add_argument("--base", type=float, default=30.0, help="seconds of talk without tasks")
    args = parser.parse_args()
    asyncio.run(main(args.tasks, args.task_chats, args.talkers, args.latency, args.base))
