"""The SQLite database: one connection, WAL, explicit transactions, numbered migrations.

One connection guarded by a lock keeps transactions whole: with aiosqlite, two coroutines sharing
a connection would otherwise interleave statements inside each other's transactions.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiosqlite

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"
_MIGRATION_NAME = re.compile(r"^(\d{4})_[\w-]+\.sql$")


class MigrationError(Exception):
    """The migrations folder or the database's schema version is inconsistent."""


def discover_migrations(folder: Path = MIGRATIONS_DIR) -> list[tuple[int, Path]]:
    found: list[tuple[int, Path]] = []
    for path in sorted(folder.glob("*.sql")):
        match = _MIGRATION_NAME.match(path.name)
        if not match:
            raise MigrationError(f"migration file {path.name} is not named NNNN_name.sql")
        found.append((int(match.group(1)), path))
    numbers = [n for n, _ in found]
    if numbers != list(range(1, len(numbers) + 1)):
        raise MigrationError(f"migrations must be numbered 0001.. without gaps, found {numbers}")
    return found


class Database:
    """Owns the connection. Use `transaction()` for writes and `fetchall`/`fetchone` for reads."""

    def __init__(self, conn: aiosqlite.Connection, path: Path) -> None:
        self._conn = conn
        self.path = path
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls, path: Path | str, *, migrations: Path = MIGRATIONS_DIR) -> Database:
        path = Path(path)
        if str(path) != ":memory:":
            path.parent.mkdir(parents=True, exist_ok=True)
        conn = await aiosqlite.connect(path, isolation_level=None)
        try:
            conn.row_factory = sqlite3.Row
            await conn.execute("PRAGMA journal_mode=WAL")
            await conn.execute("PRAGMA synchronous=FULL")
            await conn.execute("PRAGMA busy_timeout=10000")
            await conn.execute("PRAGMA foreign_keys=ON")
            db = cls(conn, path)
            await db.migrate(discover_migrations(migrations))
        except BaseException:
            # aiosqlite's worker thread is not a daemon: a connection left open on a failed
            # start-up keeps the process alive after the error was reported.
            await conn.close()
            raise
        return db

    async def migrate(self, migrations: Iterable[tuple[int, Path]]) -> int:
        """Apply every migration newer than PRAGMA user_version, each in its own transaction."""
        async with self._lock:
            row = await (await self._conn.execute("PRAGMA user_version")).fetchone()
            current = int(row[0])
            known = list(migrations)
            if current > len(known):
                raise MigrationError(
                    f"database schema version {current} is newer than this code "
                    f"({len(known)}); upgrade mnemobot instead of downgrading"
                )
            for number, path in known:
                if number <= current:
                    continue
                script = path.read_text(encoding="utf-8")
                # executescript commits first; wrap the file in its own transaction.
                await self._conn.executescript(
                    f"BEGIN IMMEDIATE;\n{script}\nPRAGMA user_version={number};\nCOMMIT;"
                )
                current = number
            return current

    async def schema_version(self) -> int:
        row = await self.fetchone("PRAGMA user_version")
        assert row is not None
        return int(row[0])

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        """BEGIN IMMEDIATE … COMMIT, rolled back on any exception (including cancellation).

        /cancel and /new cancel running turns, often in the middle of a write. aiosqlite runs
        each statement on its own thread whether or not the awaiting task was cancelled, so a
        cancelled BEGIN or COMMIT still happens; we therefore let those statements settle
        before re-raising, and roll back whatever a cancelled caller left open. Otherwise the
        shared connection would stay inside a dead transaction and every later write would fail
        with "cannot start a transaction within a transaction".
        """
        async with self._lock:
            try:
                await _settle(self._conn.execute("BEGIN IMMEDIATE"))
                yield self._conn
            except BaseException:
                if self._conn.in_transaction:
                    await _settle(self._conn.execute("ROLLBACK"))
                raise
            try:
                await _settle(self._conn.execute("COMMIT"))
            except asyncio.CancelledError:
                if self._conn.in_transaction:
                    raise
                # The COMMIT landed while the caller was being cancelled: the write happened,
                # so the caller gets its result (a turn must know its message is stored) and
                # the cancellation lands at its next await instead.
                _cancel_at_next_await()

    async def fetchall(self, sql: str, params: Iterable[Any] = ()) -> list[sqlite3.Row]:
        async with self._lock:
            cursor = await self._conn.execute(sql, tuple(params))
            return list(await cursor.fetchall())

    async def fetchone(self, sql: str, params: Iterable[Any] = ()) -> sqlite3.Row | None:
        async with self._lock:
            cursor = await self._conn.execute(sql, tuple(params))
            return await cursor.fetchone()

    async def backup_to(self, target: Path | str) -> None:
        """Consistent online copy through SQLite's backup API (safe while the bot writes)."""
        target = Path(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        async with self._lock:
            dest = await aiosqlite.connect(target)
            try:
                await self._conn.backup(dest)
            finally:
                await dest.close()

    async def close(self) -> None:
        await self._conn.close()


def _cancel_at_next_await() -> None:
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()
        task.cancel()


async def _settle(awaitable: Awaitable[object]) -> None:
    """Await `awaitable` to completion even if we are cancelled meanwhile, then re-raise."""
    task = asyncio.ensure_future(awaitable)
    cancelled = False
    while True:
        try:
            await asyncio.shield(task)
            break
        except asyncio.CancelledError:
            if task.cancelled():
                raise
            cancelled = True
            if task.done():
                break
    task.result()
    if cancelled:
        raise asyncio.CancelledError
