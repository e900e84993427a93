"""Reminders at scale: 10,000 pending across 1,000 chats, against the fake Bot API with
Telegram's limits (about 30 messages per second bot-wide, one per second per chat, enforced
with Telegram's 429 answers).

The whole bot runs in this process (real PTB, the scheduler, SQLite); the reminders are
written straight into its database before it starts, as if made over the past weeks.

(c) idle: for IDLE_S seconds while all 10,000 wait (none due), the process's CPU time over
    wall time — the scheduler sleeps until the next due reminder, so this should be ~0 (what
    is left is PTB's getUpdates long poll).
(a) 1,000 of them (one per chat) fall due spread over one minute (~17/s): every one sent,
    none twice, and each one's lateness = when the fake Bot API received it − its due time.
(b) 1,000 more, all due in the same second: the time until the last is sent (Telegram's rate
    allows ~34 s), none twice.

(storm) a fresh bot and database: 40, then 100, reminders due in the same second in each of 2
    chats, the fake Bot API answering one send in ten with Telegram's 502 (`{"ok":false,
    "error_code":502,"description":"Bad Gateway"}`), one of those in two after it delivered the
    message, and enforcing one message per second per chat with Telegram's 429 and
    retry_after. None twice (a send answered 502 is not repeated: it may have landed), every
    other one sent, and the bot's event
    loop never held: a task sleeps 10 ms over and over and records how late it wakes (the
    fake Bot API shares the loop, so its work counts too). A scheduler that did not await with
    every slot busy and a 502's retry due would spin here; a watchdog thread reports such a
    freeze, which no task on the frozen loop could, and ends the run.

    python -m benchmarks.reminders [--chats 1000] [--per-chat 10] [--spread 60] [--idle 10]
    python -m benchmarks.reminders --storm            # the storm alone
    python -m benchmarks.reminders --no-storm         # (a)-(c) alone

Last lines: `reminders: due=N sent=N dup=N p99_late_ms=N burst_s=N idle_cpu_pct=N`, then
`reminder_storm: due=N sent=N dup=N loop_lag_max_ms=N` for each storm.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import re
import sqlite3
import tempfile
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import structlog

from benchmarks.common import LoopLag, percentile
from bot.app import build_application, prepare, running
from memory.db import Database
from memory.store import to_iso
from tests.fakes.telegram import FakeTelegram
from tests.support.e2e_bot import FakeServers, fake_settings
from tests.support.reminder_rows import add_pending

USERS_BASE = 10_000_000  # chat i is the private chat of user USERS_BASE + i
TELEGRAM_MESSAGES_PER_SECOND = 30
_TEXT = re.compile(r"r(\d+) ")


def seed(db_path: Path, chats: int, per_chat: int) -> None:
    """`per_chat` reminders per chat, all due next week or later."""
    conn = sqlite3.connect(db_path)
    later = datetime.now(UTC) + timedelta(days=7)
    rows: list[tuple[int, str, datetime]] = []
    for chat in range(chats):
        chat_id = USERS_BASE + chat
        for n in range(per_chat):
            at = later + timedelta(seconds=chat * per_chat + n)
            text = f"r{len(rows) + 1} water the plants"  # r<reminder id>
            rows.append((chat_id, text, at))
    add_pending(conn, rows)
    conn.commit()
    conn.close()


def bring_forward(
    db_path: Path, chats: int, per_chat: int, due: list[datetime]
) -> dict[int, datetime]:
    """The first reminder of each chat now falls due at due[chat] (as if it had been made for
    that time); returns reminder id → due time."""
    conn = sqlite3.connect(db_path)
    moved = {}
    for chat in range(chats):
        reminder_id = chat * per_chat + 1
        at = due[chat]
        conn.execute(
            "UPDATE reminders SET next_at = ?, local_start = ? WHERE id = ?",
            (to_iso(at), at.replace(tzinfo=None).strftime("%Y-%m-%dT%H:%M:%S"), reminder_id),
        )
        moved[reminder_id] = at
    conn.commit()
    conn.close()
    return moved


def add_burst(db_path: Path, chats: int, at: datetime) -> None:
    conn = sqlite3.connect(db_path)
    first = conn.execute("SELECT MAX(id) FROM reminders").fetchone()[0] + 1
    add_pending(conn, [(USERS_BASE + c, f"b{first + c} burst", at) for c in range(chats)])
    conn.commit()
    conn.close()


async def main(chats: int, per_chat: int, spread_s: float, idle_s: float) -> None:
    """(a)-(c): the last line is `reminders: ...`."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    logging.getLogger("telegram").setLevel(logging.CRITICAL)  # PTB logs each 429 it passes on
    with tempfile.TemporaryDirectory() as tmp:
        db_path = Path(tmp) / "bench.sqlite3"
        await (await Database.open(db_path)).close()  # the schema, before seeding
        async with FakeServers() as fakes:
            tg = fakes.tg
            tg.enforce_flood_limits = True
            tg.global_messages_per_second = TELEGRAM_MESSAGES_PER_SECOND
            allowed = ",".join(str(USERS_BASE + c) for c in range(chats))
            settings = fake_settings(fakes, DATABASE_PATH=db_path, ALLOWED_USER_IDS=allowed)
            seed(db_path, chats, per_chat)
            pending = chats * per_chat
            application = build_application(prepare(settings))
            async with running(application, poll_timeout=30):
                scheduler = application.bot_data.services.reminders.scheduler
                # (c) idle: 10,000 waiting, none due; after start-up has settled.
                await asyncio.sleep(3.0)
                cpu0, wall0 = time.process_time(), time.monotonic()
                await asyncio.sleep(idle_s)
                idle_pct = (time.process_time() - cpu0) / (time.monotonic() - wall0) * 100

                # (a) 1,000 due over `spread_s` seconds, from 2 s on.
                start_a = datetime.now(UTC) + timedelta(seconds=2)
                due = [start_a + timedelta(seconds=spread_s * c / chats) for c in range(chats)]
                due_by_id = bring_forward(db_path, chats, per_chat, due)
                scheduler.notify()
                offset = time.time() - time.monotonic()

                def sent_texts() -> list[tuple[str, float]]:
                    return [(c.params["text"], c.at) for c in tg.calls_of("sendMessage") if c.ok]

                def count(prefix: str) -> int:
                    return sum(1 for text, _ in sent_texts() if text.startswith(f"⏰ {prefix}"))

                while count("r") < chats:
                    await asyncio.sleep(0.2)
                    if datetime.now(UTC) > due[-1] + timedelta(seconds=120):
                        break
                late_ms = []
                seen: Counter[str] = Counter()
                for text, at in sent_texts():
                    match = _TEXT.search(text)
                    if not text.startswith("⏰ r") or match is None:
                        continue
                    seen[match.group(1)] += 1
                    due_at = due_by_id[int(match.group(1))].timestamp()
                    late_ms.append((at + offset - due_at) * 1000)
                sent_a = len(seen)
                dup_a = sum(n - 1 for n in seen.values())

                # (b) 1,000 due in the same second.
                burst_at = (datetime.now(UTC) + timedelta(seconds=3)).replace(microsecond=0)
                add_burst(db_path, chats, burst_at)
                scheduler.notify()
                while count("b") < chats:
                    await asyncio.sleep(0.2)
                    if datetime.now(UTC) > burst_at + timedelta(seconds=300):
                        break
                burst_times = [at for text, at in sent_texts() if text.startswith("⏰ b")]
                burst_s = max(burst_times) + offset - burst_at.timestamp() if burst_times else -1
                burst_seen = Counter(t for t, _ in sent_texts() if t.startswith("⏰ b"))
                dup_b = sum(n - 1 for n in burst_seen.values())
            rejected = sum(1 for c in tg.calls_of("sendMessage") if not c.ok)
    print(f"pending reminders: {pending} across {chats} chats")
    print(f"(c) idle {idle_s:.0f} s with all waiting: process CPU {idle_pct:.2f} %")
    print(
        f"(a) {chats} due over {spread_s:.0f} s: sent {sent_a}, duplicates {dup_a}, lateness "
        f"p50 {percentile(late_ms, 50):.0f} ms p99 {percentile(late_ms, 99):.0f} ms "
        f"max {max(late_ms, default=0):.0f} ms"
    )
    print(
        f"(b) {chats} due in one second: sent {len(burst_seen)}, duplicates {dup_b}, last sent "
        f"after {burst_s:.1f} s (Telegram's {TELEGRAM_MESSAGES_PER_SECOND}/s allows "
        f"{chats / TELEGRAM_MESSAGES_PER_SECOND:.1f} s); 429s answered by the fake: {rejected}"
    )
    print(
        f"reminders: due={chats} sent={sent_a} dup={dup_a + dup_b} "
        f"p99_late_ms={percentile(late_ms, 99):.0f} burst_s={burst_s:.1f} "
        f"idle_cpu_pct={idle_pct:.2f}"
    )


# --- (storm) ------------------------------------------------------------------------------------

STORM_CHATS = (20_000_001, 20_000_002)
STORM_PER_CHAT = 100
STORM_BAD_GATEWAY_EVERY = 10  # 10 % of sends answered 502
# One 502 in two comes after Telegram delivered the message (the answer was lost on the way
# back), the other before: a retry of the first kind is a duplicate, the second kind is lost
# unless retried. Which kind a 502 was, the bot cannot tell.
STORM_DELIVERED_EVERY = 2
STORM_TICK_S = 0.01
STORM_STALL_S = 10.0  # the loop silent this long: frozen, the watchdog reports and ends the run
_STORM_TEXT = re.compile(r"(s\d+) storm$")


def add_storm(db_path: Path, at: datetime, per_chat: int) -> None:
    """`per_chat` one-off reminders in each storm chat, all due at `at`."""
    conn = sqlite3.connect(db_path)
    add_pending(
        conn,
        [
            (chat, f"s{n * len(STORM_CHATS) + c} storm", at)
            for n in range(per_chat)
            for c, chat in enumerate(STORM_CHATS)
        ],
    )
    conn.commit()
    conn.close()


def storm_sent(tg: FakeTelegram) -> Counter[str]:
    """Messages in the storm chats per storm reminder, as the chats show them: a send answered
    502 after Telegram delivered it counts (a late one carries a prefix; its text ends alike)."""
    seen: Counter[str] = Counter()
    for chat in STORM_CHATS:
        for message in list(tg.bot_messages(chat)):
            match = _STORM_TEXT.search(message.text)
            if match is not None:
                seen[match.group(1)] += 1
    return seen


class FreezeWatch(threading.Thread):
    """Watches the loop from outside it: a spinning loop runs no task, so no timeout of ours
    could fire. When the lag task has not woken for STORM_STALL_S, or the storm outlasts its
    bound, prints what it saw and ends the process (status 3)."""

    def __init__(self, lag: LoopLag, tg: FakeTelegram, due: int, bound_s: float) -> None:
        super().__init__(name="freeze-watch", daemon=True)
        self.lag, self.tg, self.due = lag, tg, due
        self.deadline = time.monotonic() + bound_s
        self.started_at = time.monotonic()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.5):
            now = time.monotonic()
            last = self.lag.samples[-1][0] if self.lag.samples else self.started_at
            if now - last < STORM_STALL_S and now < self.deadline:
                continue
            seen = storm_sent(self.tg)
            refused = Counter(c.error for c in list(self.tg.calls) if not c.ok)
            what = "froze" if now - last >= STORM_STALL_S else "timed out"
            print(
                f"reminder_storm {what}: the bot's event loop last ran {now - last:.1f} s ago, "
                f"{now - self.started_at:.0f} s into the storm; sent {len(seen)} of "
                f"{self.due}, dup {sum(n - 1 for n in seen.values())}, refused by the fake "
                f"{dict(refused)}, loop lag max until then "
                f"{self.lag.max_s() * 1000:.0f} ms",
                flush=True,
            )
            os._exit(3)


async def storm(bound_s: float, per_chat: int = STORM_PER_CHAT) -> None:
    """(storm): prints `reminder_storm: due=N sent=N dup=N loop_lag_max_ms=N` for each storm."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    logging.getLogger("telegram").setLevel(logging.CRITICAL)
    due = per_chat * len(STORM_CHATS)
    with tempfile.TemporaryDirectory() as tmp:
        db_path = Path(tmp) / "storm.sqlite3"
        await (await Database.open(db_path)).close()
        async with FakeServers() as fakes:
            tg = fakes.tg
            tg.enforce_flood_limits = True  # one message per second per chat, Telegram's 429
            tg.global_messages_per_second = TELEGRAM_MESSAGES_PER_SECOND
            tg.inject_error(
                "sendMessage",
                count=10**9,
                status=502,
                description="Bad Gateway",
                every=STORM_BAD_GATEWAY_EVERY,
                delivered_every=STORM_DELIVERED_EVERY,
            )
            allowed = ",".join(map(str, STORM_CHATS))
            settings = fake_settings(fakes, DATABASE_PATH=db_path, ALLOWED_USER_IDS=allowed)
            application = build_application(prepare(settings))
            async with running(application, poll_timeout=30):
                scheduler = application.bot_data.services.reminders.scheduler
                await asyncio.sleep(2.0)  # start-up settled: the lag is the storm's
                # As `python -m bot` does once started (bot/runner.py, _freeze_heap): what
                # start-up left stays out of every later full collection. Without it one full
                # collection walked that heap here, 43 ms of CPU in the middle of the storm.
                gc.collect()
                gc.freeze()
                at = (datetime.now(UTC) + timedelta(seconds=3)).replace(microsecond=0)
                # A blocking write of ours: before the lag is sampled.
                add_storm(db_path, at, per_chat)
                lag = LoopLag(STORM_TICK_S)
                lag.start()
                watch = FreezeWatch(lag, tg, due, bound_s)
                watch.start()
                scheduler.notify()
                started = time.monotonic()
                db = application.bot_data.services.db

                async def outcomes(which: str) -> int:
                    # Through the bot's own connection: a plain sqlite3 read here would hold
                    # the loop and count as the bot's lag.
                    row = await db.fetchone(
                        f"SELECT COUNT(*) AS n FROM reminder_deliveries WHERE {which}"
                    )
                    return int(row["n"]) if row is not None else 0

                # Done when every reminder's claim has its outcome (sent, or maybe sent).
                while await outcomes("outcome IS NOT NULL") < due:
                    await asyncio.sleep(0.2)
                    if time.monotonic() - started > bound_s:
                        break
                took_s = time.monotonic() - started
                unknown = await outcomes("outcome = 'unknown'")
                await lag.stop()
                watch.done.set()
            seen = storm_sent(tg)
            refused = Counter(c.error for c in tg.calls_of("sendMessage") if not c.ok)
            answered_502 = [c for c in tg.calls_of("sendMessage") if c.error == "Bad Gateway"]
            landed_502 = sum(1 for c in answered_502 if c.delivered)
    late = [s for _, s in lag.samples]
    worst = max(range(len(late)), key=late.__getitem__, default=None)
    if worst is not None:
        print(
            f"(storm) the worst wake-up came {late[worst] * 1000:.0f} ms late; the loop's thread "
            f"ran {lag.cpu_s[worst] * 1000:.0f} ms of CPU in it (the rest: not scheduled by "
            f"the machine, or waiting in a blocking call); wake-ups over 50 ms late: "
            f"{sum(1 for s in late if s > 0.05)}; the most CPU the loop's thread ran between "
            f"two wake-ups (what our loop held at most): {max(lag.cpu_s) * 1000:.0f} ms"
        )
    print(
        f"(storm) {due} due in one second in {len(STORM_CHATS)} chats, 1 send in "
        f"{STORM_BAD_GATEWAY_EVERY} answered 502, 1 message/s per chat enforced: sent "
        f"{len(seen)} in {took_s:.0f} s (Telegram's 1/s per chat allows {per_chat} s); "
        f"refused by the fake: {dict(refused)}; loop lag over {len(late)} wake-ups of "
        f"{STORM_TICK_S * 1000:.0f} ms: p50 {percentile(late, 50) * 1000:.1f} ms, "
        f"p99 {percentile(late, 99) * 1000:.1f} ms, max {lag.max_s() * 1000:.1f} ms"
    )
    print(
        f"(storm) 502s: {len(answered_502)}, {landed_502} of them after Telegram delivered; "
        f"claims recorded as maybe sent (not sent again): {unknown}"
    )
    print(
        f"reminder_storm: due={due} sent={len(seen)} dup={sum(n - 1 for n in seen.values())} "
        f"loop_lag_max_ms={lag.max_s() * 1000:.0f}"
    )


async def run_parts(args: argparse.Namespace) -> None:
    """Both parts on ONE event loop: the provider worker pool belongs to the loop that first
    used it (models/worker/pool.py)."""
    if not args.storm:
        await main(args.chats, args.per_chat, args.spread, args.idle)
    if not args.no_storm:
        for per_chat in args.storm_per_chat:
            await storm(args.storm_bound, per_chat)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chats", type=int, default=1000)
    parser.add_argument("--per-chat", type=int, default=10)
    parser.add_argument("--spread", type=float, default=60.0)
    parser.add_argument("--idle", type=float, default=10.0)
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--storm", action="store_true", help="the storm alone")
    which.add_argument("--no-storm", action="store_true", help="(a)-(c) alone")
    parser.add_argument(
        "--storm-bound", type=float, default=300.0, help="seconds the storm may take at most"
    )
    parser.add_argument("--storm-per-chat", type=int, nargs="+", default=[40, STORM_PER_CHAT])
    args = parser.parse_args()
    asyncio.run(run_parts(args))
