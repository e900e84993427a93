"""How many web calls (web_read, web_search) a user made today, against WEB_DAILY_CALLS.

Each call is one row of the usage ledger (purpose "web", model_id the tool's name, no tokens,
no cost), so /usage lists web calls beside the model calls of the same turns and the cap reads
the same rows: one record, not a count kept apart. A call is recorded when it is made, whether
it succeeded or not: a failed read costs the bot's bandwidth and time too, and a model that
retries a failing URL in a loop is what the cap is for. Days are UTC calendar days, as in
memory/usage.py. Neither the URL nor the query is kept: they can say more about a person than
the count needs.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime

from memory.db import Database
from memory.store import Store, to_iso
from memory.usage import day_start
from models.types import Usage
from primitives.clock import Clock, utc_now

KINDS = ("read", "search")
PURPOSE = "web"
_TODAY = "SELECT COUNT(*) AS n FROM usage WHERE user_id = ? AND created_at >= ? AND purpose = 'web'"


def tool_of(kind: str) -> str:
    """The ledger's model_id of a web call: the tool's name."""
    return f"web_{kind}"


class WebCalls:
    def __init__(self, db: Database, clock: Clock[datetime] = utc_now) -> None:
        self.db = db
        self.clock = clock

    async def today(self, user_id: int) -> int:
        """Web calls `user_id` made since midnight UTC."""
        row = await self.db.fetchone(_TODAY, (user_id, to_iso(day_start(self.clock()))))
        return int(row["n"]) if row else 0

    async def take(self, chat_id: int, user_id: int | None, kind: str, cap: int) -> bool:
        """Record one call unless `user_id` already made `cap` today; False when the cap is
        reached (nothing recorded). Checked and recorded in one transaction, so two chats of
        one user cannot both take the last call."""
        if kind not in KINDS:
            raise ValueError(kind)
        now = self.clock()
        since = to_iso(day_start(now))

        def take_one(conn: sqlite3.Connection) -> bool:
            if user_id is not None:
                (count,) = conn.execute(_TODAY, (user_id, since)).fetchone()
                if count >= cap:
                    return False
            Store.insert_usage(conn, chat_id, user_id, tool_of(kind), PURPOSE, Usage(), to_iso(now))
            return True

        return await self.db.run_in_transaction(take_one)
