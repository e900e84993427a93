"""Memory and reminder writes that wait for the asker's ✅ (design brief, "Web").

A model that read untrusted content (a web page, search results, a document, a forwarded or
quoted message of someone else) may have been told by that content to write the memory. Such a
write is not carried out: it is kept here, the bot shows it with ✅ and ❌, and only the asker's
✅ runs it, exactly as the model asked. The rows live in the database, so a restart between the
answer and the tap loses nothing.

A row moves once, in one transaction each: pending → running (the asker's ✅ claimed it) →
kept or failed (what the tool said); pending → dropped (❌) or expired (a tap after
PENDING_TTL). Two taps at once cannot both run it: only one finds it pending.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from memory.db import Database
from memory.store import from_iso, to_iso
from primitives.clock import Clock, utc_now

# How long a proposed write waits for its tap. A day: long enough to see it the next morning,
# short enough that an old proposal is not kept by a tap on a message scrolled far away.
PENDING_TTL = timedelta(hours=24)
GATED_TOOLS = frozenset({"remember", "forget_fact", "schedule_reminder", "cancel_reminder"})


class Claim(StrEnum):
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


@dataclass(frozen=True)
class Tapped:
    claim: Claim
    write: PendingWrite | None


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
    ) -> PendingWrite:
        """Keep one proposed write; it waits PENDING_TTL for its tap."""
        if tool not in GATED_TOOLS:
            raise ValueError(tool)
        now = self.clock()
        created, expires = to_iso(now), to_iso(now + PENDING_TTL)

        def insert(conn: sqlite3.Connection) -> PendingWrite:
            row = conn.execute(
                "INSERT INTO pending_writes(chat_id, user_id, user_name, topic_id, tool, "
                "arguments, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING *",
                (chat_id, user_id, user_name, topic_id, tool, arguments, created, expires),
            ).fetchone()
            return _write(row)

        return await self.db.run_in_transaction(insert)

    async def tap(self, write_id: int, chat_id: int, user_id: int, *, keep: bool) -> Tapped:
        """A tap on ✅ (keep) or ❌ by `user_id` in `chat_id`. Only the asker settles it; ❌
        drops it at once, ✅ claims it (state running) for the caller to run and `finish`."""
        now = self.clock()

        def claim(conn: sqlite3.Connection) -> Tapped:
            row = conn.execute(
                "SELECT * FROM pending_writes WHERE id = ? AND chat_id = ?", (write_id, chat_id)
            ).fetchone()
            if row is None:
                return Tapped(Claim.MISSING, None)
            write = _write(row)
            if write.user_id is not None and write.user_id != user_id:
                return Tapped(Claim.NOT_ASKER, write)
            if write.state != "pending":
                return Tapped(Claim.SETTLED, write)
            if from_iso(write.expires_at) <= now:
                _settle(conn, write_id, "expired", now)
                return Tapped(Claim.EXPIRED, write)
            _settle(conn, write_id, "running" if keep else "dropped", now)
            return Tapped(Claim.CLAIMED, write)

        return await self.db.run_in_transaction(claim)

    async def finish(self, write_id: int, *, ok: bool) -> None:
        """The claimed write ran: kept, or failed (the tool refused it and said why)."""
        now = self.clock()

        def settle(conn: sqlite3.Connection) -> None:
            _settle(conn, write_id, "kept" if ok else "failed", now)

        await self.db.run_in_transaction(settle)


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
    )
