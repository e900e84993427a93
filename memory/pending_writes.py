"""Tool calls that wait for the asker's ✅.

A model that read untrusted content (a web page, search results, a document, a forwarded or
quoted message of someone else) may have been told by that content to write the memory or to
send what it knows somewhere. Such a call is not carried out: it is kept here, the bot shows it
with ✅ and ❌, and only the asker's ✅ runs it, exactly as the model asked. The rows live in the
database, so a restart between the answer and the tap loses nothing. Which tools may wait is the
agent's to decide (agent/tools/held.py registers each family); this table only checks that the
name is a tool name.

A row moves once: pending → kept or failed (the asker's ✅: the write and its settling in ONE
transaction, `keep`, which also re-reads the row, so a ✅ racing /forget either finds the row
gone or ran wholly before it); pending → running → kept or failed, for a caller whose call
cannot run inside a transaction (`tap`, then `finish`); pending → dropped (❌) or expired (a tap
after PENDING_TTL). Two taps at once cannot both run it: only one finds it pending.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Generic, TypeVar

from memory.db import Database
from memory.store import from_iso, to_iso
from primitives.clock import Clock, utc_now

# How long a proposed write waits for its tap. A day: long enough to see it the next morning,
# short enough that an old proposal is not kept by a tap on a message scrolled far away.
PENDING_TTL = timedelta(hours=24)
# The memory and reminder writes: held whenever untrusted content is in view.
GATED_TOOLS = frozenset(
    {"remember", "forget_fact", "schedule_reminder", "schedule_task", "cancel_reminder"}
)
# What a held call's tool may be named: what a provider accepts as a function name.
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


class TapFound(StrEnum):
    """What a tap on ✅ or ❌ found."""

    CLAIMED = "claimed"  # it was pending and is now this tap's to settle
    NOT_ASKER = "not_asker"  # someone else proposed it; nothing changed
    EXPIRED = "expired"  # too late; marked expired now
    SETTLED = "settled"  # kept, dropped, failed, expired or running already
    MISSING = "missing"  # no such write (its chat was forgotten)


@dataclass(frozen=True)
class PendingWrite:
    id: int
    chat_id: int
    user_id: int | None
    user_name: str | None
    topic_id: int | None
    tool: str
    arguments: str
    state: str
    created_at: str
    expires_at: str
    # What the ✅ question showed beyond the call itself (JSON; forget_fact: the lines that
    # would go, cancel_reminder: the reminder), and the memory version it was read from.
    preview: str | None = None
    memory_version: int | None = None


@dataclass(frozen=True)
class Tapped:
    found: TapFound
    write: PendingWrite | None


T = TypeVar("T")


@dataclass(frozen=True)
class Kept(Generic[T]):
    """What a ✅ found and, when it was the asker's and still pending, what the write did."""

    found: TapFound
    write: PendingWrite | None
    result: T | None = None


class PendingWrites:
    def __init__(self, db: Database, clock: Clock[datetime] = utc_now) -> None:
        self.db = db
        self.clock = clock

    async def add(
        self,
        chat_id: int,
        *,
        user_id: int | None,
        tool: str,
        arguments: str,
        user_name: str | None = None,
        topic_id: int | None = None,
        preview: str | None = None,
        memory_version: int | None = None,
    ) -> PendingWrite:
        """Keep one proposed call; it waits PENDING_TTL for its tap."""
        if not TOOL_NAME.fullmatch(tool):
            raise ValueError(tool)
        now = self.clock()
        created, expires = to_iso(now), to_iso(now + PENDING_TTL)

        def insert(conn: sqlite3.Connection) -> PendingWrite:
            row = conn.execute(
                "INSERT INTO pending_writes(chat_id, user_id, user_name, topic_id, tool, "
                "arguments, created_at, expires_at, preview, memory_version) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING *",
                (
                    chat_id, user_id, user_name, topic_id, tool, arguments, created, expires,
                    preview, memory_version,
                ),
            ).fetchone()  # fmt: skip
            return _write(row)

        return await self.db.run_in_transaction(insert)

    async def by_ids(self, ids: list[int]) -> list[PendingWrite]:
        """The writes with these ids still waiting, in order (a task's run proposed them)."""
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        rows = await self.db.fetchall(
            f"SELECT * FROM pending_writes WHERE id IN ({marks}) AND state = 'pending' ORDER BY id",
            ids,
        )
        return [_write(row) for row in rows]

    async def tap(self, write_id: int, chat_id: int, user_id: int, *, keep: bool) -> Tapped:
        """A tap on ✅ (keep) or ❌ by `user_id` in `chat_id`. Only the asker settles it; ❌
        drops it at once, ✅ claims it (state running) for the caller to run and `finish`."""
        now = self.clock()

        def claim(conn: sqlite3.Connection) -> Tapped:
            tapped = _check(conn, write_id, chat_id, user_id, now)
            if tapped.found is TapFound.CLAIMED:
                _settle(conn, write_id, "running" if keep else "dropped", now)
            return tapped

        return await self.db.run_in_transaction(claim)

    async def get(self, write_id: int, chat_id: int) -> PendingWrite | None:
        row = await self.db.fetchone(
            "SELECT * FROM pending_writes WHERE id = ? AND chat_id = ?", (write_id, chat_id)
        )
        return _write(row) if row is not None else None

    async def keep(
        self,
        write_id: int,
        chat_id: int,
        user_id: int,
        apply: Callable[[sqlite3.Connection, PendingWrite], T],
        ok: Callable[[T], bool],
    ) -> Kept[T]:
        """A ✅ by `user_id`: if the write is the asker's and still pending, `apply` carries it
        out and the row is settled (kept, or failed when `ok` says so), all in ONE transaction
        with the re-read of the row. Nothing that changes the chat (a /forget, another tap)
        can come between the check and the write."""
        now = self.clock()

        def run(conn: sqlite3.Connection) -> Kept[T]:
            tapped = _check(conn, write_id, chat_id, user_id, now)
            if tapped.found is not TapFound.CLAIMED or tapped.write is None:
                return Kept(tapped.found, tapped.write)
            result = apply(conn, tapped.write)
            _settle(conn, write_id, "kept" if ok(result) else "failed", now)
            return Kept(TapFound.CLAIMED, tapped.write, result)

        return await self.db.run_in_transaction(run)

    async def finish(self, write_id: int, *, ok: bool) -> None:
        """The claimed write ran: kept, or failed (the tool refused it and said why)."""
        now = self.clock()

        def settle(conn: sqlite3.Connection) -> None:
            _settle(conn, write_id, "kept" if ok else "failed", now)

        await self.db.run_in_transaction(settle)

    async def counts_since(self, since: datetime) -> dict[tuple[str, str], int]:
        """Held calls proposed since `since`, by (tool, state now): what /stats shows of them."""
        rows = await self.db.fetchall(
            "SELECT tool, state, COUNT(*) AS n FROM pending_writes WHERE created_at >= ? "
            "GROUP BY tool, state",
            (to_iso(since),),
        )
        return {(str(row["tool"]), str(row["state"])): int(row["n"]) for row in rows}


def _check(
    conn: sqlite3.Connection, write_id: int, chat_id: int, user_id: int, now: datetime
) -> Tapped:
    """What a tap finds (an expired row is marked so here); CLAIMED: the tapper may settle it."""
    row = conn.execute(
        "SELECT * FROM pending_writes WHERE id = ? AND chat_id = ?", (write_id, chat_id)
    ).fetchone()
    if row is None:
        return Tapped(TapFound.MISSING, None)
    write = _write(row)
    if write.user_id is not None and write.user_id != user_id:
        return Tapped(TapFound.NOT_ASKER, write)
    if write.state != "pending":
        return Tapped(TapFound.SETTLED, write)
    if from_iso(write.expires_at) <= now:
        _settle(conn, write_id, "expired", now)
        return Tapped(TapFound.EXPIRED, write)
    return Tapped(TapFound.CLAIMED, write)


def _settle(conn: sqlite3.Connection, write_id: int, state: str, now: datetime) -> None:
    conn.execute(
        "UPDATE pending_writes SET state = ?, settled_at = ? WHERE id = ?",
        (state, to_iso(now), write_id),
    )


def _write(row: sqlite3.Row) -> PendingWrite:
    return PendingWrite(
        id=int(row["id"]),
        chat_id=int(row["chat_id"]),
        user_id=row["user_id"],
        user_name=row["user_name"],
        topic_id=row["topic_id"],
        tool=str(row["tool"]),
        arguments=str(row["arguments"]),
        state=str(row["state"]),
        created_at=str(row["created_at"]),
        expires_at=str(row["expires_at"]),
        preview=row["preview"],
        memory_version=row["memory_version"],
    )
