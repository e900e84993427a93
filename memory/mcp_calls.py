"""The MCP calls made, per user and per server: the rows behind MCP_USER_DAILY_CALLS, the MCP
lines of /usage and the counts of /mcp.

Each call is one row of the usage ledger (purpose "mcp", model_id `<server>/<tool>`, no tokens,
no cost), as web calls are (memory/web_calls.py): one record of what a user's turns used. It is
written when the call starts (`take`: the cap checked and the row written in one transaction,
so two chats of one user cannot both take the last call) with the outcome 'running', and
settled when it ends (`settle`: outcome and duration). Days are UTC calendar days, as in
memory/usage.py. Neither the arguments nor the result are kept.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from memory.db import Database
from memory.store import Store, to_iso
from memory.usage import day_start
from models.types import Usage
from primitives.clock import Clock, utc_now

Outcome = Literal["ok", "error", "timeout", "down", "closed", "protocol"]
PURPOSE = "mcp"
RUNNING = "running"
_TODAY = "SELECT COUNT(*) AS n FROM usage WHERE user_id = ? AND created_at >= ? AND purpose = 'mcp'"


def ledger_name(server: str, tool: str) -> str:
    """The ledger's model_id of an MCP call (server names hold no '/': mcp_client/config.py)."""
    return f"{server}/{tool}"


@dataclass(frozen=True)
class ServerCalls:
    """One server's calls today."""

    calls: int
    failures: int  # every settled outcome but 'ok'


class McpCalls:
    def __init__(self, db: Database, clock: Clock[datetime] = utc_now) -> None:
        self.db = db
        self.clock = clock

    async def take(
        self, chat_id: int, user_id: int | None, server: str, tool: str, cap: int
    ) -> int | None:
        """The new call's row id, or None when `user_id` already made `cap` calls today."""
        now = self.clock()
        since = to_iso(day_start(now))

        def take_one(conn: sqlite3.Connection) -> int | None:
            if user_id is not None:
                (count,) = conn.execute(_TODAY, (user_id, since)).fetchone()
                if count >= cap:
                    return None
            name = ledger_name(server, tool)
            Store.insert_usage(conn, chat_id, user_id, name, PURPOSE, Usage(), to_iso(now))
            (row_id,) = conn.execute("SELECT last_insert_rowid()").fetchone()
            conn.execute("UPDATE usage SET outcome = ? WHERE id = ?", (RUNNING, row_id))
            return int(row_id)

        return await self.db.run_in_transaction(take_one)

    async def settle(self, call_id: int, outcome: Outcome, duration_ms: int) -> None:
        def settle_one(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE usage SET outcome = ?, duration_ms = ? WHERE id = ? AND purpose = 'mcp'",
                (outcome, duration_ms, call_id),
            )

        await self.db.run_in_transaction(settle_one)

    async def today(self, user_id: int) -> int:
        """MCP calls `user_id` made since midnight UTC."""
        row = await self.db.fetchone(_TODAY, (user_id, to_iso(day_start(self.clock()))))
        return int(row["n"]) if row else 0

    async def per_server_today(self) -> dict[str, ServerCalls]:
        """Calls and failures of each server since midnight UTC."""
        rows = await self.db.fetchall(
            "SELECT substr(model_id, 1, instr(model_id, '/') - 1) AS server, COUNT(*) AS calls,"
            " SUM(outcome NOT IN ('ok', 'running')) AS failures FROM usage"
            " WHERE purpose = 'mcp' AND created_at >= ? GROUP BY server",
            (to_iso(day_start(self.clock())),),
        )
        return {r["server"]: ServerCalls(int(r["calls"]), int(r["failures"] or 0)) for r in rows}
