"""The SQLite database: one writer, a few readers, WAL, explicit transactions, migrations.

Writes go through ONE connection guarded by a lock, which keeps transactions whole: with
aiosqlite, two coroutines sharing a connection would otherwise interleave statements inside each
other's transactions. Reads go to a small pool of read-only connections beside it: in WAL mode
a reader sees the last committed state and neither waits for nor blocks the writer, so under
load (a hundred chats at once) a turn's reads do not queue behind every other turn's writes.
Reads, like writes, go to a connection's thread in batches: every round trip to a thread also
waits for a turn of the event loop, so under load a read asked for alone would wait for a busy
loop twice (there and back), and every other read behind it.
"""

from __future__ import annotations

import asyncio
import contextvars
import re
import sqlite3
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite

from memory import MemoryLayerError

T = TypeVar("T")

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"
_MIGRATION_NAME = re.compile(r"^(\d{4})_[\w-]+\.sql$")


class MigrationError(MemoryLayerError):
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


DEFAULT_READERS = 2  # read connections; each has its own thread, and the machine few cores


class Database:
    """Owns the connections. Use `run_in_transaction()` for writes and `fetchall`/`fetchone`/
    `read` for reads.

    Reads see committed data only: a read issued after a transaction returned sees its writes;
    a read never sees the inside of a transaction still open. An in-memory database (tests)
    cannot be shared between connections, so it reads through the writer.
    """

    def __init__(
        self,
        conn: aiosqlite.Connection,
        path: Path,
        readers: list[aiosqlite.Connection] | None = None,
    ) -> None:
        self._conn = conn
        self.path = path
        self._lock = asyncio.Lock()
        self._readers = list(readers or [])
        self._pending: list[_Write] = []  # run_in_transaction's writes not sent yet
        self._background: list[_Write] = []  # the same, for background=True callers
        self._drainer: asyncio.Task[None] | None = None
        self._idle_readers = list(self._readers)
        self._pending_reads: list[_Read] = []  # reads not sent yet
        self._read_drainers: set[asyncio.Task[None]] = set()

    @classmethod
    async def open(
        cls,
        path: Path | str,
        *,
        migrations: Path = MIGRATIONS_DIR,
        readers: int = DEFAULT_READERS,
    ) -> Database:
        path = Path(path)
        in_memory = str(path) == ":memory:"
        if not in_memory:
            path.parent.mkdir(parents=True, exist_ok=True)
        opened: list[aiosqlite.Connection] = []
        try:
            conn = await _connect(path, opened)
            await conn.execute("PRAGMA journal_mode=WAL")
            await conn.execute("PRAGMA synchronous=FULL")
            await conn.execute("PRAGMA foreign_keys=ON")
            db = cls(conn, path)
            await db.migrate(discover_migrations(migrations))
            # Readers open after the migrations, on the schema they will read.
            for _ in range(0 if in_memory else readers):
                reader = await _connect(path, opened)
                await reader.execute("PRAGMA query_only=ON")  # a reader can never write
                db._readers.append(reader)
                db._idle_readers.append(reader)
        except BaseException:
            # aiosqlite's worker threads are not daemons: a connection left open on a failed
            # start-up keeps the process alive after the error was reported.
            for connection in opened:
                await connection.close()
            raise
        return db

    async def migrate(self, migrations: Iterable[tuple[int, Path]]) -> int:
        """Apply every migration newer than PRAGMA user_version, each in its own transaction."""
        async with self._lock:
            row = await (await self._conn.execute("PRAGMA user_version")).fetchone()
            current = int(row[0]) if row is not None else 0  # the pragma always answers one row
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

    async def run_in_transaction(
        self, fn: Callable[[sqlite3.Connection], T], *, background: bool = False
    ) -> T:
        """Run `fn` inside BEGIN IMMEDIATE … COMMIT in one call on the writer's thread: the one
        way to write.

        `background=True` is for work nobody is waiting to see (a consolidation's commit, the
        archive's indexing): such a write goes to the thread alone, never in a batch with
        others, and only when no other write is waiting. A user's write (a message, /new)
        therefore waits for at most one background transaction, the one already on the
        thread, instead of a batch of several consolidation commits
        (`benchmarks/consolidation.py`: /new's p99 was a batch of up to 8 commits).

        `fn` runs synchronously on the thread that owns the connection (plain sqlite3 calls, no
        awaits) and its result is returned. An async transaction (BEGIN, each statement and
        COMMIT awaited one by one) would make a round trip to that thread for each, every one
        also waiting for a turn of the event loop: under load (a hundred chats at once) the
        writer's lock would be held across many turns of a busy loop, and every other write
        would queue behind them; and a caller cancelled between two of its statements would
        leave the shared connection inside a transaction someone must roll back. Here writes
        that queued up meanwhile go to the thread together, each still in its own savepoint
        (in the order they were asked), so a hundred waiting writes cost one turn of the event
        loop, not a hundred.

        Any exception in `fn` or in the COMMIT (SQLITE_BUSY, an I/O error, a full disk, a
        deferred constraint; SQLite then leaves the transaction open) rolls back, and the
        caller gets the error with the connection clean. Cancellation (/cancel and /new cancel
        running turns, often in the middle of a write; so does shutdown): a caller cancelled
        before its write went to the thread writes nothing. Once there, the write runs to its
        end whatever happens to the caller: if it committed, the write happened, so the caller
        gets its result (a turn must know its message is stored) and the cancellation lands at
        its next await; if it rolled back, nothing was written and the cancellation is raised.
        """
        write = _Write(fn, asyncio.get_running_loop().create_future())
        queue = self._background if background else self._pending
        queue.append(write)
        if self._drainer is None or self._drainer.done():
            # Drains every caller's writes: it carries none of their log context.
            self._drainer = asyncio.create_task(self._drain_writes(), context=contextvars.Context())
        cancelled = False
        while not write.outcome.done():
            try:
                # Unlike awaiting the future, waiting neither cancels it nor raises its error.
                await asyncio.wait([write.outcome])
            except asyncio.CancelledError:
                if not write.sent:
                    queue.remove(write)
                    raise
                cancelled = True
        error = write.outcome.exception()
        if error is not None:
            if cancelled:
                raise asyncio.CancelledError from error
            raise error
        if cancelled:
            _cancel_at_next_await()
        return write.outcome.result()

    async def _drain_writes(self) -> None:
        """Send the queued writes to the writer's thread, all that are waiting at once, under
        the writer's lock (so they never interleave with a migration or a backup).

        A batch on the thread runs to its end even if this task is cancelled (shutdown): its
        callers get their outcomes; writes still queued then are cancelled, never lost silently.
        """
        batch: list[_Write] = []
        try:
            async with self._lock:
                while self._pending or self._background:
                    if self._pending:
                        batch, self._pending = self._pending, []
                    else:
                        batch = [self._background.pop(0)]
                    for write in batch:
                        write.sent = True
                    call = asyncio.ensure_future(
                        self._conn._execute(_run_writes, self._conn._conn, [w.fn for w in batch])
                    )
                    cancelled = False
                    while not call.done():
                        try:
                            await asyncio.wait([call])
                        except asyncio.CancelledError:
                            cancelled = True
                    _deliver(batch, call)
                    batch = []
                    if cancelled:
                        raise asyncio.CancelledError
        finally:
            for write in [*batch, *self._pending, *self._background]:
                write.outcome.cancel()  # a caller's outcome future: it sees its write cancelled
            self._pending.clear()
            self._background.clear()

    async def fetchall(self, sql: str, params: Iterable[Any] = ()) -> list[sqlite3.Row]:
        """Rows of one query, from a read connection (never waits for a write)."""
        bound = tuple(params)
        return await self.read(lambda conn: conn.execute(sql, bound).fetchall())

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """`fn`'s result, run on a read connection's thread (plain sqlite3 calls, no awaits,
        no writes: the connection is query-only). A search that needs several queries, each
        depending on the one before, asks for them here in one round trip instead of one per
        query, each of which also waits for a turn of a busy event loop.

        Reads asked for while the read connections are busy go to a connection's thread
        together, the next time one is free: a hundred turns reading at once cost a few turns
        of the event loop, not two each. A caller cancelled meanwhile simply gets nothing.
        """
        if not self._readers:
            async with self._lock:
                return await self._conn._execute(fn, self._conn._conn)
        read = _Read(fn, asyncio.get_running_loop().create_future())
        self._pending_reads.append(read)
        if self._idle_readers:
            reader = self._idle_readers.pop()
            drainer = asyncio.create_task(self._drain_reads(reader), context=contextvars.Context())
            self._read_drainers.add(drainer)
            drainer.add_done_callback(self._read_drainers.discard)
        return await read.outcome

    async def _drain_reads(self, reader: aiosqlite.Connection) -> None:
        """Send waiting queries to `reader`'s thread, its share of them at a time (the others
        go to the other free connections), until none wait; then `reader` is free again."""
        batch: list[_Read] = []
        try:
            while self._pending_reads:
                share = -(-len(self._pending_reads) // len(self._readers))  # ceiling
                batch = self._pending_reads[:share]
                del self._pending_reads[:share]
                batch = [read for read in batch if not read.outcome.done()]
                if not batch:
                    continue
                bodies = [read.fn for read in batch]
                outcomes = await reader._execute(_run_reads, reader._conn, bodies)
                for read, (ok, value) in zip(batch, outcomes, strict=True):
                    if read.outcome.done():
                        continue  # its caller was cancelled
                    if ok:
                        read.outcome.set_result(value)
                    else:
                        read.outcome.set_exception(value)
                batch = []
        except BaseException as error:
            # Cancelled (shutdown) or the connection failed: the queries in hand get the error;
            # a cancelled wait leaves the statement to finish on the reader's own thread, before
            # the next one starts there, so the reader can go back at once.
            cancelled = isinstance(error, asyncio.CancelledError)
            if cancelled:  # nobody may be left to send the rest: they end too, not hang
                batch, self._pending_reads = [*batch, *self._pending_reads], []
            for read in batch:
                if not read.outcome.done():
                    if cancelled:
                        read.outcome.cancel()  # a caller's outcome future, as for writes
                    else:
                        read.outcome.set_exception(error)
            raise
        finally:
            self._idle_readers.append(reader)

    async def fetchone(self, sql: str, params: Iterable[Any] = ()) -> sqlite3.Row | None:
        """The first row of one query (use it for queries that return at most a few rows)."""
        rows = await self.fetchall(sql, params)
        return rows[0] if rows else None

    async def checkpoint(self) -> bool:
        """Copy the WAL into the database file and truncate it to nothing; False if a reader
        kept it from finishing (the next checkpoint then does it).

        After a delete that must leave nothing readable (/forget, ARCHIVE_DAYS): the WAL holds
        every page as it was written, the deleted words too, until a checkpoint overwrites it.
        TRUNCATE waits (busy_timeout) for readers still on an older snapshot; reads are short.
        """
        async with self._lock:
            busy = await self._conn._execute(_checkpoint, self._conn._conn)
        return not busy

    async def close(self) -> None:
        if self._drainer is not None and not self._drainer.done():
            await asyncio.wait([self._drainer])  # writes already asked for are written first
        if self._read_drainers:
            await asyncio.wait(self._read_drainers)  # reads already asked for are answered
        for reader in self._readers:
            await reader.close()
        self._readers.clear()
        await self._conn.close()


async def _connect(path: Path, opened: list[aiosqlite.Connection]) -> aiosqlite.Connection:
    conn = await aiosqlite.connect(path, isolation_level=None)
    opened.append(conn)
    conn.row_factory = sqlite3.Row
    await conn.execute("PRAGMA busy_timeout=10000")
    # Deleted content is overwritten with zeros, not left in free space for anyone holding the
    # file to read (/forget, ARCHIVE_DAYS). Set here because builds differ in their default.
    await conn.execute("PRAGMA secure_delete=ON")
    return conn


class _Write:
    """One `run_in_transaction` call: its body, whether it went to the thread, its outcome."""

    def __init__(self, fn: Callable[[sqlite3.Connection], Any], outcome: asyncio.Future[Any]):
        self.fn = fn
        self.outcome = outcome
        self.sent = False


class _Read:
    """One `read` (or `fetchall`) call: its body and the future its caller awaits."""

    def __init__(self, fn: Callable[[sqlite3.Connection], Any], outcome: asyncio.Future[Any]):
        self.fn = fn
        self.outcome = outcome


def _checkpoint(conn: sqlite3.Connection) -> bool:
    """On the writer's thread: PRAGMA wal_checkpoint(TRUNCATE), read to its end (a statement
    left unread would keep every later COMMIT of the connection from committing)."""
    [(busy, _, _)] = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    return bool(busy)


def _run_reads(
    conn: sqlite3.Connection, bodies: list[Callable[[sqlite3.Connection], Any]]
) -> list[tuple[bool, Any]]:
    """On a reader's thread: each body's result, (True, result) or (False, the exception)."""
    outcomes: list[tuple[bool, Any]] = []
    for fn in bodies:
        try:
            outcomes.append((True, fn(conn)))
        except Exception as error:  # that caller gets it; the next body runs as usual
            outcomes.append((False, error))
    return outcomes


def _deliver(batch: list[_Write], call: asyncio.Future[list[tuple[bool, Any]]]) -> None:
    """Hand each write of a batch its outcome (all of them the error if the call failed)."""
    error = None if call.cancelled() else call.exception()
    failed = call.cancelled() or error is not None
    outcomes = [] if failed else call.result()
    for index, write in enumerate(batch):
        if write.outcome.done():
            continue
        if call.cancelled():
            write.outcome.cancel()  # the caller's outcome future takes the batch's cancellation
        elif error is not None:
            write.outcome.set_exception(error)
        else:
            ok, value = outcomes[index]
            if ok:
                write.outcome.set_result(value)
            else:
                write.outcome.set_exception(value)


def _run_writes(
    conn: sqlite3.Connection, bodies: list[Callable[[sqlite3.Connection], Any]]
) -> list[tuple[bool, Any]]:
    """On the writer's thread: (True, result) or (False, the exception) for each body.

    Group commit: the bodies share one transaction, each inside its own savepoint, so a body
    that fails is undone alone and only its caller gets the error; and the batch costs one
    COMMIT, one fsync of the WAL (synchronous=FULL), not one per write: at 300 chats, a few
    hundred single-write transactions, each with its own fsync, keep writers waiting 2.5 s.
    No caller hears of its write before the COMMIT, so a crash loses nothing anyone was told
    of. If the COMMIT itself fails (a deferred constraint, an I/O error, SQLITE_BUSY), the
    batch is rolled back and every body runs again alone, in its own transaction: the failure
    then lands on the write that causes it (bodies only touch the database, which the
    rollback restored).
    """
    if len(bodies) == 1:
        return _run_alone(conn, bodies)
    outcomes: list[tuple[bool, Any]] = []
    conn.execute("BEGIN IMMEDIATE")
    try:
        for fn in bodies:
            conn.execute("SAVEPOINT mnemobot_write")
            try:
                result = fn(conn)
            except Exception as error:  # undone alone; the next body goes on
                conn.execute("ROLLBACK TO mnemobot_write")
                conn.execute("RELEASE mnemobot_write")
                outcomes.append((False, error))
            else:
                conn.execute("RELEASE mnemobot_write")
                outcomes.append((True, result))
        conn.execute("COMMIT")
    except BaseException as error:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        if not isinstance(error, Exception):
            raise  # not a database's refusal: nothing is written, every caller hears of it
        return _run_alone(conn, bodies)
    return outcomes


def _run_alone(
    conn: sqlite3.Connection, bodies: list[Callable[[sqlite3.Connection], Any]]
) -> list[tuple[bool, Any]]:
    """Each body in its own transaction."""
    outcomes: list[tuple[bool, Any]] = []
    for fn in bodies:
        try:
            outcomes.append((True, _run_in_transaction(conn, fn)))
        except BaseException as error:  # the caller gets it; the next body starts clean
            outcomes.append((False, error))
    return outcomes


def _run_in_transaction(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    """BEGIN IMMEDIATE, `fn`, COMMIT; ROLLBACK on any exception (including a failed COMMIT,
    which leaves the transaction open)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = fn(conn)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return result


def _cancel_at_next_await() -> None:
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()
        task.cancel()  # ourselves again: the cancellation deferred until the write is in
