"""kill -9 of the real bot (`python -m bot`) with 100 reminder claims pending: the next start
polls at once, and each of the 100 is then sent exactly once.

Why it matters: a claim without an outcome is resent after a start, and the scheduler has 64
send slots. With 65 or more such claims, a loop that came round with no await (every slot busy,
a retry due: "look again at once") inside post_init would leave the restarted bot never polling,
never answering anyone, and frozen again at every restart.

The 100 claims are made honestly: 100 reminders fall due at once in 10 chats (written into the
database before the start, as if set over the past weeks; the book would refuse more than 50
pending in one chat), and the fake Bot API answers every send with Telegram's 429 and a
minute's retry_after, as in a long flood penalty. Each failed send frees its slot, so the
scheduler claims all 100 and holds them as retries; then the bot is killed.
"""

from __future__ import annotations

import os
import signal
import sqlite3
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memory.db import Database
from tests.support.e2e_bot import FakeServers, bot_process, query, subprocess_env, wait_until
from tests.support.reminder_rows import add_pending

pytestmark = pytest.mark.slow

CHATS = [7001 + n for n in range(10)]  # private chats: chat id = user id
PER_CHAT = 10
CLAIMS = len(CHATS) * PER_CHAT
PENALTY_S = 60  # longer than the first run: no retry falls due before the kill


async def seed(db_path: Path, due: datetime) -> None:
    """The schema (migrations run by opening), then 100 one-off reminders all due at `due`."""
    await (await Database.open(db_path)).close()
    conn = sqlite3.connect(db_path)
    try:
        add_pending(
            conn,
            (
                (chat, f"storm{chat}x{n} stretch your legs", due)
                for chat in CHATS
                for n in range(PER_CHAT)
            ),
        )
        conn.commit()
    finally:
        conn.close()


def open_claims(db_path: Path) -> int:
    rows = query(db_path, "SELECT COUNT(*) AS n FROM reminder_deliveries WHERE outcome IS NULL")
    return int(rows[0]["n"])


def sent_texts(fakes: FakeServers, since: int = 0) -> list[str]:
    """The reminder texts of the sends the fake Bot API accepted, from call number `since`."""
    calls = fakes.tg.calls[since:]
    return [str(c.params["text"]) for c in calls if c.method == "sendMessage" and c.ok]


def reminder_texts(db_path: Path) -> set[str]:
    return {r["text"] for r in query(db_path, "SELECT text FROM reminders")}


def sent_counts(fakes: FakeServers, texts: set[str], since: int = 0) -> Counter[str]:
    """How often each reminder's text was in an accepted send (a late one is marked, so the
    text is matched as the end of the message)."""
    counts: Counter[str] = Counter()
    for sent in sent_texts(fakes, since):
        for text in texts:
            if sent.endswith(text):
                counts[text] += 1
    return counts


async def test_a_restart_with_100_open_claims_polls_and_sends_each_once(tmp_path: Path) -> None:
    db_path = tmp_path / "bot.sqlite3"
    await seed(db_path, datetime.now(UTC) - timedelta(seconds=1))
    texts = reminder_texts(db_path)
    assert len(texts) == CLAIMS

    async with FakeServers() as fakes:
        tg = fakes.tg
        env = subprocess_env(
            fakes,
            db_path,
            user=CHATS[0],
            ALLOWED_USER_IDS=",".join(map(str, CHATS)),
            SHUTDOWN_GRACE_SECONDS="1",
            LOG_LEVEL="INFO",
        )
        log_path = db_path.with_suffix(".log")
        # Every send refused with Telegram's flood answer (429, retry after a minute).
        tg.inject_error("sendMessage", count=1_000_000, retry_after=PENALTY_S)

        async with bot_process(env, cwd=tmp_path, log_path=log_path) as proc:
            await wait_until(lambda: open_claims(db_path) == CLAIMS, "100 open claims", 60)
            os.killpg(proc.pid, signal.SIGKILL)  # the bot and any worker it forked
            await proc.wait()
        assert proc.returncode == -signal.SIGKILL
        assert sent_texts(fakes) == []  # nothing reached a chat before the kill
        assert open_claims(db_path) == CLAIMS
        refused = [c for c in tg.calls_of("sendMessage") if not c.ok]
        assert refused and {c.error for c in refused} == {
            f"Too Many Requests: retry after {PENALTY_S}"
        }

        tg.inject_error("sendMessage", count=0)  # the penalty is over
        killed_at = len(tg.calls)
        async with bot_process(env, cwd=tmp_path, log_path=log_path) as proc:
            # The restarted bot polls for updates: its loop is not stuck in post_init.
            await tg.wait_for(
                lambda: any(c.method == "getUpdates" for c in tg.calls[killed_at:]), timeout=30
            )
            await tg.wait_for(
                lambda: len(sent_counts(fakes, texts, killed_at)) == CLAIMS, timeout=120
            )
            await wait_until(lambda: open_claims(db_path) == 0, "every claim marked", 30)
            proc.send_signal(signal.SIGTERM)
            await proc.wait()

    # Each of the 100 reached its chat exactly once, from the claim the crash left: no claim
    # lost, none sent twice, no new claim made for an occurrence already claimed.
    counts = sent_counts(fakes, texts, killed_at)
    assert set(counts) == texts
    assert [text for text, n in counts.items() if n != 1] == []
    deliveries = query(db_path, "SELECT outcome FROM reminder_deliveries")
    assert [r["outcome"] for r in deliveries] == ["sent"] * CLAIMS
    log_text = log_path.read_text("utf-8")
    assert f'"count": {CLAIMS}' in log_text and "reminders_resent_after_crash" in log_text
