"""How many web calls (web_read, web_search) a user made today, against WEB_DAILY_CALLS.

A call is counted when it is made, whether it succeeded or not: a failed read costs the bot's
bandwidth and time too, and a model that retries a failing URL in a loop is what the cap is
for. Days are UTC calendar days, as in memory/usage.py. Rows older than two days are deleted as
new ones are written, so the table stays a few rows per user.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta

from memory.db import Database
from memory.store import to_iso
from memory.usage import day_start
from primitives.clock import Clock, utc_now

KINDS = ("read", "search")


class WebCalls:
    def __init__(self, db: Database, clock: Clock[datetime] = utc_now) -> None:
        self.db = db
        self.clock = clock

    async def today(self, user_id: int) -> int:
        """Web calls `user_id` made since midnight UTC."""
        row = await self.db.fetchone(
            "SELECT COUNT(*) AS n FROM web_calls WHERE user_id = ? AND created_at >= ?",
            (user_id, to_iso(day_start(self.clock()))),
        )
        return int(row["n"]) if row else 0

    async def take(self, chat_id: int, user_id: int | None, kind: str, cap: int) -> bool:
        """Count one call unless `user_id` already made `cap` today; False when the cap is
        reached (nothing counted). Checked and counted in one transaction, so two chats of
        one user cannot both take the last call."""
        if kind not in KINDS:
            raise ValueError(kind)
        now = self.clock()
        since, expired = to_iso(day_start(now)), to_iso(day_start(now) - timedelta(days=2))

        def take_one(conn: sqlite3.Connection) -> bool:
            if user_id is not None:
                (count,) = conn.execute(
                    "SELECT COUNT(*) FROM web_calls WHERE user_id = ? AND created_at >= ?",
                    (user_id, since),
                ).fetchone()
                if count >= cap:
                    return False
            conn.execute("DELETE FROM web_calls WHERE created_at < ?", (expired,))
            conn.execute(
                "INSERT INTO web_calls(chat_id, user_id, kind, created_at) VALUES (?, ?, ?, ?)",
                (chat_id, user_id, kind, to_iso(now)),
            )
            return True

        return await self.db.run_in_transaction(take_one)
