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

    python benchmarks/reminders.py [--chats 1000] [--per-chat 10] [--spread 60] [--idle 10]

Last line: `reminders: due=N sent=N dup=N p99_late_ms=N burst_s=N idle_cpu_pct=N`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import structlog

from benchmarks.common import percentile
from bot.app import build_application, prepare, running
from memory.db import Database
from memory.store import to_iso
from tests.e2e_bot import FakeServers, fake_settings

USERS_BASE = 10_000_000  # chat i is the private chat of user USERS_BASE + i
TELEGRAM_MESSAGES_PER_SECOND = 30
_TEXT = re.compile(r"r(\d+) ")


def seed(db_path: Path, chats: int, per_chat: int) -> None:
    """`per_chat` reminders per chat, all due next week or later."""
    conn = sqlite3.connect(db_path)
    now = to_iso(datetime.now(UTC))
    later = datetime.now(UTC) + timedelta(days=7)
    rows = []
    for chat in range(chats):
        chat_id = USERS_BASE + chat
        for n in range(per_chat):
            at = later + timedelta(seconds=chat * per_chat + n)
            local = at.replace(tzinfo=None).strftime("%Y-%m-%dT%H:%M:%S")
            text = f"r{len(rows) + 1} water the plants"  # r<reminder id>
            rows.append((chat_id, chat_id, "Ann", text, "UTC", 1, local, "none", to_iso(at),
                         "pending", now, now))  # fmt: skip
    conn.executemany(
        "INSERT INTO reminders(chat_id, user_id, user_name, text, time_zone, zone_known, "
        "local_start, repeat, next_at, state, created_at, updated_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
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
    now = to_iso(datetime.now(UTC))
    local = at.replace(tzinfo=None).strftime("%Y-%m-%dT%H:%M:%S")
    first = conn.execute("SELECT MAX(id) FROM reminders").fetchone()[0] + 1
    conn.executemany(
        "INSERT INTO reminders(chat_id, user_id, user_name, text, time_zone, zone_known, "
        "local_start, repeat, next_at, state, created_at, updated_at) "
        "VALUES (?, ?, 'Ann', ?, 'UTC', 1, ?, 'none', ?, 'pending', ?, ?)",
        [
            (USERS_BASE + c, USERS_BASE + c, f"b{first + c} burst", local, to_iso(at), now, now)
            for c in range(chats)
        ],
    )
    conn.commit()
    conn.close()


async def main(chats: int, per_chat: int, spread_s: float, idle_s: float) -> None:
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


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chats", type=int, default=1000)
    parser.add_argument("--per-chat", type=int, default=10)
    parser.add_argument("--spread", type=float, default=60.0)
    parser.add_argument("--idle", type=float, default=10.0)
    args = parser.parse_args()
    asyncio.run(main(args.chats, args.per_chat, args.spread, args.idle))
