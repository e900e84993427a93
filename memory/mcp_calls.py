"""The MCP calls made, per user and per server: the ledger behind MCP_USER_DAILY_CALLS, the MCP
line of /usage and the counts of /mcp.

A call is counted when it starts (`take`, the cap checked and the row written in one
transaction, so two chats of one user cannot both take the last call) and settled when it ends
(`settle`: outcome and duration). Days are UTC calendar days, as in memory/usage.py.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from memory.db import Database
from memory.store import to_iso, utc_now
from memory.usage import Clock, day_start

Outcome = Literal["ok", "error", "timeout", "down", "closed", "protocol"]
KEEP_DAYS = 40


@dataclass(frozen=True)
class ServerCalls:
    """One server's calls today."""

    calls: int
    failures: int  # every outcome but 'ok' (and 'running')


class McpCalls:
    def __init__(self, db: Database, clock: Clock = utc_now) -> None:
        self.db = db
        self.clock = clock

    async def take(
        self, chat_id: int, user_id: int | None, server: str, tool: str, cap: int
    ) -> int | None:
        """The new call's row id, or None when `user_id` already made `cap` calls today."""
        now = self.clock()
        since, expired = to_iso(day_start(now)), to_iso(day_start(now) - timedelta(KEEP_DAYS))

        def take_one(conn: sqlite3.Connection) -> int | None:
            if user_id is not None:
                (count,) = conn.execute(
                    "SELECT COUNT(*) FROM mcp_calls WHERE user_id = ? AND created_at >= ?",
                    (user_id, since),
                ).fetchone()
                if count >= cap:
                    return None
            conn.execute("DELETE FROM mcp_calls WHERE created_at < ?", (expired,))
            cursor = conn.execute(
                "INSERT INTO mcp_calls(chat_id, user_id, server, tool, created_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (chat_id, user_id, server, tool, to_iso(now)),
            )
            return int(cursor.lastrowid or 0)

        return await self.db.run_in_transaction(take_one)

    async def settle(self, call_id: int, outcome: Outcome, duration_ms: int) -> None:
        def settle_one(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE mcp_calls SET outcome = ?, duration_ms = ? WHERE id = ?",
                (outcome, duration_ms, call_id),
            )

        await self.db.run_in_transaction(settle_one)

    async def today(self, user_id: int) -> int:
        """MCP calls `user_id` made since midnight UTC."""
        row = await self.db.fetchone(
            "SELECT COUNT(*) AS n FROM mcp_calls WHERE user_id = ? AND created_at >= ?",
            (user_id, to_iso(day_start(self.clock()))),
        )
        return int(row["n"]) if row else 0

    async def per_server_today(self) -> dict[str, ServerCalls]:
        """Calls and failures of each server since midnight UTC."""
        rows = await self.db.fetchall(
            "SELECT server, COUNT(*) AS calls,"
            " SUM(outcome NOT IN ('ok', 'running')) AS failures"
            " FROM mcp_calls WHERE created_at >= ? GROUP BY server",
            (to_iso(day_start(self.clock())),),
        )
        return {r["server"]: ServerCalls(int(r["calls"]), int(r["failures"] or 0)) for r in rows}
