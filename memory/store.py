"""Chats, sessions, messages and usage rows.

Messages are written the moment they exist (the user's before any model is called), so a crash
or a provider outage never loses what the user said.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from memory import MemoryLayerError
from memory.chats import ChatSetting, ensure_chat, set_chat_setting
from memory.db import Database
from memory.longterm import MemoryNotice, memory_of, unreported_notice
from memory.messages import (
    SESSION_MESSAGES,
    StoredMessage,
    ToolResult,
    calls_json,
    insert_row,
    row_to_message,
)
from memory.provenance import Provenance
from memory.queue import enqueue_consolidation, maybe_enqueue_window
from memory.timezones import ChatZone, chat_zone_of
from models.types import ToolCall, Usage
from primitives.clock import Clock, utc_now

# Turn keys older than this are pruned: a front end re-delivers an input within hours (Telegram
# keeps an unconfirmed update for 24 h), never a week later.
TURN_KEY_RETENTION = timedelta(days=7)
# What a usage row may be for: model calls of a chat turn, of the background memory work and of
# transcription, and web calls (model_id names the tool: no tokens, no cost, counted against
# WEB_DAILY_CALLS). Checked here rather than by the table, so a new kind needs no rebuild.
USAGE_PURPOSES = frozenset({"chat", "consolidation", "transcription", "web", "mcp", "task"})


class SessionClosedError(MemoryLayerError):
    """A write aimed at a session that is closed and whose consolidation has been claimed (or
    done, or forgotten). Such a message would never be consolidated nor deleted: it is refused.
    """

    def __init__(self, session_id: int) -> None:
        super().__init__(f"session {session_id} is closed and no longer takes messages")
        self.session_id = session_id


def to_iso(moment: datetime) -> str:
    """Stored timestamps: UTC, ISO 8601, millisecond precision, sortable as text."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def from_iso(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclass(frozen=True)
class NewSession:
    """Result of /new: the session that was closed (if any) and the fresh one."""

    closed_session_id: int | None
    new_session_id: int
    job_id: int | None = None


@dataclass(frozen=True)
class TurnStart:
    """The user's message of a new turn, stored. If the session had been idle past
    SESSION_IDLE_MINUTES, `idle_closed_session_id` is the session that was closed (and queued
    for consolidation as job `job_id`) in the same transaction, and the message opens a new one.
    """

    message: StoredMessage
    idle_closed_session_id: int | None = None
    job_id: int | None = None
    # The key was seen before and its message is still unanswered (a crash cut the first
    # handling short): nothing new was stored, the turn answers the stored message.
    resumed: bool = False
    # Read in the same transaction, so a turn makes no round trip of its own for them: the
    # model the chat chose with /model (None: never chose; the bot checks it is still
    # offered), the chat's time zone (every round's system prompt) and the memory change no
    # reply has announced yet (its reply shows it, then memory.longterm.memory_notice_shown).
    # A /model committed before the message was stored answers it; one after, the next turn.
    chat_model: str | None = field(kw_only=True)
    chat_zone: ChatZone = field(kw_only=True)
    memory_notice: MemoryNotice | None = field(kw_only=True)


@dataclass(frozen=True)
class RoundContext:
    """The stored part of a round's prompt (see Store.round_context)."""

    messages: list[StoredMessage]
    memory: str


class Store:
    """Typed access to the core tables. Every write is one transaction."""

    def __init__(
        self,
        db: Database,
        clock: Clock[datetime] = utc_now,
        *,
        memory_window: int | None = None,
        keep_recent: int = 10,
        session_idle: timedelta | None = None,
        on_job_enqueued: Callable[[], None] | None = None,
    ) -> None:
        self.db = db
        self.clock = clock
        # Automatic consolidation: None disables it (MEMORY_WINDOW / MEMORY_KEEP_RECENT).
        self.memory_window = memory_window
        self.keep_recent = keep_recent
        # Called after a transaction that queued a consolidation job (the worker's notify).
        self.on_job_enqueued = on_job_enqueued
        # SESSION_IDLE_MINUTES: a user message after this much silence opens a new session.
        self.session_idle = session_idle

    def now(self) -> str:
        return to_iso(self.clock())

    # Writes: each one is ONE call on the writer's thread (Database.run_in_transaction), whose
    # body is plain sqlite3. Under load a write waits for the writer, not for the event loop
    # between each of its statements.

    # chats -------------------------------------------------------------------------------

    async def get_chat_model(self, chat_id: int) -> str | None:
        row = await self.db.fetchone("SELECT model_id FROM chats WHERE chat_id = ?", (chat_id,))
        return row["model_id"] if row else None

    async def set_chat_model(self, chat_id: int, model_id: str) -> None:
        await self._set_chat_setting(chat_id, "model_id", model_id)

    async def get_chat_language(self, chat_id: int) -> str | None:
        row = await self.db.fetchone("SELECT language FROM chats WHERE chat_id = ?", (chat_id,))
        return row["language"] if row else None

    async def set_chat_language(self, chat_id: int, language: str | None) -> None:
        await self._set_chat_setting(chat_id, "language", language)

    async def _set_chat_setting(self, chat_id: int, column: ChatSetting, value: str | None) -> None:
        now = self.now()

        def write(conn: sqlite3.Connection) -> None:
            set_chat_setting(conn, chat_id, column, value, now)

        await self.db.run_in_transaction(write)

    # sessions ----------------------------------------------------------------------------

    @classmethod
    def _active_session(cls, conn: sqlite3.Connection, chat_id: int, now: str) -> int:
        ensure_chat(conn, chat_id, now)
        for row in conn.execute(
            "SELECT id FROM sessions WHERE chat_id = ? AND closed_at IS NULL", (chat_id,)
        ).fetchall():
            return int(row["id"])
        cursor = conn.execute(
            "INSERT INTO sessions(chat_id, opened_at) VALUES (?, ?)", (chat_id, now)
        )
        assert cursor.lastrowid is not None
        return cursor.lastrowid

    async def active_session(self, chat_id: int) -> int:
        """The chat's open session, opened now if there is none."""
        now = self.now()
        return await self.db.run_in_transaction(
            lambda conn: self._active_session(conn, chat_id, now)
        )

    async def start_new_session(self, chat_id: int) -> NewSession:
        """Close the active session and open a fresh one in one transaction (/new)."""
        now = self.now()

        def write(conn: sqlite3.Connection) -> NewSession:
            closed = self.close_active_session(conn, chat_id, now)
            new_id = self._active_session(conn, chat_id, now)
            job_id = None
            if closed is not None:
                job_id = self.on_session_closed(conn, chat_id, closed, now)
            return NewSession(closed_session_id=closed, new_session_id=new_id, job_id=job_id)

        started = await self.db.run_in_transaction(write)
        if started.job_id is not None:
            self._job_enqueued()
        return started

    def _job_enqueued(self) -> None:
        if self.on_job_enqueued is not None:
            self.on_job_enqueued()

    @staticmethod
    def close_active_session(conn: sqlite3.Connection, chat_id: int, now: str) -> int | None:
        row = conn.execute(
            "UPDATE sessions SET closed_at = ? WHERE chat_id = ? AND closed_at IS NULL "
            "RETURNING id",
            (now, chat_id),
        ).fetchone()
        return int(row["id"]) if row else None

    def on_session_closed(
        self, conn: sqlite3.Connection, chat_id: int, session_id: int, now: str
    ) -> int | None:
        """Hook inside /new's transaction: queue consolidation of the closed session."""
        return enqueue_consolidation(conn, chat_id, session_id, now)

    # messages ----------------------------------------------------------------------------

    async def add_message(
        self,
        chat_id: int,
        role: str,
        content: str,
        *,
        user_id: int | None = None,
        model_id: str | None = None,
        tool_calls: list[ToolCall] | None = None,
        tool_call_id: str | None = None,
        usage: Usage | None = None,
        session_id: int | None = None,
        media: dict[str, object] | None = None,
        provenance: Provenance | None = None,
    ) -> StoredMessage:
        """Append a message to the chat's active session (or `session_id`) and return it.

        An explicit `session_id` (a turn writing its answer next to its question) must still
        take messages: open, or closed with its consolidation not yet started, so the job
        picks the message up. Otherwise SessionClosedError: the message would be orphaned.
        `media` records how a user message came (voice note, photo, document: kind, Telegram
        file id, caption, file name); `content` is always the text models read; `provenance`
        says where its words came from when they are not the user's (memory/provenance.py).
        """
        now = self.now()
        stored, window_job = await self.db.run_in_transaction(
            lambda conn: self._insert_message(
                conn, now, chat_id, role, content, user_id, model_id, tool_calls, tool_call_id,
                usage, session_id, media, None, provenance,
            )
        )  # fmt: skip
        if window_job is not None:
            self._job_enqueued()
        return stored

    async def add_answer(
        self,
        chat_id: int,
        user_id: int | None,
        content: str,
        *,
        model_id: str,
        usage: Usage,
        session_id: int | None = None,
        purpose: str = "chat",
        spends: Sequence[tuple[str, Usage]] = (),
    ) -> StoredMessage:
        """The assistant's answer and the usage rows of what it cost, in ONE transaction.

        `spends`: (model id, usage) of each attempt not recorded yet (memory.usage's
        SpendRecorder). A turn's closing writes: one wait for the writer instead of several,
        and never an answer stored without its spend (or the reverse) if the process dies.
        """
        now = self.now()
        spends = list(spends)

        def write(conn: sqlite3.Connection) -> tuple[StoredMessage, int | None]:
            stored = self._insert_message(
                conn, now, chat_id, "assistant", content, None, model_id, None, None, usage,
                session_id, None,
            )  # fmt: skip
            for spent_on, spent in spends:
                self.insert_usage(conn, chat_id, user_id, spent_on, purpose, spent, now)
            return stored

        stored, window_job = await self.db.run_in_transaction(write)
        if window_job is not None:
            self._job_enqueued()
        return stored

    def _insert_message(
        self,
        conn: sqlite3.Connection,
        now: str,
        chat_id: int,
        role: str,
        content: str,
        user_id: int | None,
        model_id: str | None,
        tool_calls: list[ToolCall] | None,
        tool_call_id: str | None,
        usage: Usage | None,
        session_id: int | None,
        media: dict[str, object] | None,
        forward_origin: dict[str, object] | None = None,
        provenance: Provenance | None = None,
    ) -> tuple[StoredMessage, int | None]:
        """Insert one message inside the caller's transaction; returns it and the
        automatic-consolidation job it queued."""
        if session_id is None:
            session_id = self._active_session(conn, chat_id, now)
        elif not self._takes_messages(conn, session_id):
            raise SessionClosedError(session_id)
        message = insert_row(
            conn,
            session_id,
            chat_id,
            role,
            content,
            calls_json(tool_calls),
            tool_call_id,
            user_id,
            model_id,
            usage,
            now,
            media,
            forward_origin,
            provenance,
        )
        window_job = None
        if self.memory_window is not None:
            window_job = maybe_enqueue_window(
                conn,
                chat_id,
                session_id,
                now,
                window=self.memory_window,
                keep_recent=self.keep_recent,
            )
        return message, window_job

    async def store_user_turn(
        self,
        chat_id: int,
        content: str,
        *,
        user_id: int | None,
        key: str | None = None,
        media: dict[str, object] | None = None,
        forward_origin: dict[str, object] | None = None,
        provenance: Provenance | None = None,
    ) -> TurnStart | None:
        """Store the user's message that starts a turn (`forward_origin`: whose words a
        forwarded message holds; `provenance`: where words that are not the user's came from,
        see StoredMessage).

        One transaction does it all, so a crash or restart at any point changes nothing:
        the idempotency key is recorded with the message; and if the active session has been
        silent (no user or assistant message) for `session_idle`, it is closed, a new one
        opened and the old one queued for consolidation, exactly as /new does.

        A `key` seen before stores nothing: None (skip the turn), unless its message is still
        the unanswered last message of the open session, which the turn then answers
        (`resumed`).
        """
        moment = self.clock()
        now = to_iso(moment)
        idle = self.session_idle

        def write(conn: sqlite3.Connection) -> tuple[TurnStart | None, int | None]:
            idle_closed = job_id = None
            if key is not None and not self._claim_key(conn, key, chat_id, moment):
                unanswered = self._unanswered(conn, key)
                if unanswered is None:
                    return None, None
                return self._started(conn, chat_id, unanswered, resumed=True), None
            session_id = self._active_session(conn, chat_id, now)
            if idle is not None and self._idle(conn, session_id, moment - idle):
                idle_closed = self.close_active_session(conn, chat_id, now)
                session_id = self._active_session(conn, chat_id, now)
                if idle_closed is not None:
                    job_id = self.on_session_closed(conn, chat_id, idle_closed, now)
            message, window_job = self._insert_message(
                conn, now, chat_id, "user", content, user_id, None, None, None, None,
                session_id, media, forward_origin, provenance,
            )  # fmt: skip
            if key is not None:
                conn.execute("UPDATE turn_keys SET message_id = ? WHERE key = ?", (message.id, key))
            started = self._started(conn, chat_id, message, idle_closed, job_id)
            return started, window_job

        started, window_job = await self.db.run_in_transaction(write)
        if started is not None and (started.job_id is not None or window_job is not None):
            self._job_enqueued()
        return started

    @staticmethod
    def _started(
        conn: sqlite3.Connection,
        chat_id: int,
        message: StoredMessage,
        idle_closed_session_id: int | None = None,
        job_id: int | None = None,
        *,
        resumed: bool = False,
    ) -> TurnStart:
        """The turn's start, with what it reads besides its message (see TurnStart): two
        lookups by primary key."""
        row = conn.execute(
            "SELECT model_id, time_zone FROM chats WHERE chat_id = ?", (chat_id,)
        ).fetchone()
        return TurnStart(
            message,
            idle_closed_session_id,
            job_id,
            resumed,
            chat_model=row["model_id"] if row is not None else None,
            chat_zone=chat_zone_of(row["time_zone"] if row is not None else None),
            memory_notice=unreported_notice(conn, chat_id),
        )

    @staticmethod
    def _claim_key(conn: sqlite3.Connection, key: str, chat_id: int, moment: datetime) -> bool:
        """Record `key`; False if it was already recorded (the input was handled before)."""
        conn.execute(
            "DELETE FROM turn_keys WHERE created_at < ?", (to_iso(moment - TURN_KEY_RETENTION),)
        )
        cursor = conn.execute(
            "INSERT INTO turn_keys(key, chat_id, created_at) VALUES (?, ?, ?) "
            "ON CONFLICT(key) DO NOTHING RETURNING key",
            (key, chat_id, to_iso(moment)),
        )
        return cursor.fetchone() is not None

    _UNANSWERED = (
        "SELECT m.* FROM turn_keys k JOIN messages m ON m.id = k.message_id "
        "JOIN sessions s ON s.id = m.session_id AND s.closed_at IS NULL "
        "WHERE k.key = ? AND NOT EXISTS (SELECT 1 FROM messages later "
        "WHERE later.session_id = m.session_id AND later.id > m.id)"
    )

    async def turn_answered(self, key: str) -> bool:
        """True if `key` was handled before and needs no answer now (see store_user_turn): a
        turn checks this before work that costs money (a transcription), not only at the store.
        """
        row = await self.db.fetchone(
            f"SELECT EXISTS(SELECT 1 FROM turn_keys WHERE key = ?) AS seen, "
            f"EXISTS({self._UNANSWERED}) AS open",
            (key, key),
        )
        return row is not None and bool(row["seen"]) and not row["open"]

    @classmethod
    def _unanswered(cls, conn: sqlite3.Connection, key: str) -> StoredMessage | None:
        """The key's message if it is still the last message of an open session."""
        row = conn.execute(cls._UNANSWERED, (key,)).fetchone()
        return row_to_message(row) if row is not None else None

    @staticmethod
    def _idle(conn: sqlite3.Connection, session_id: int, since: datetime) -> bool:
        """True if the session has messages and the last one is older than `since`."""
        row = conn.execute(
            "SELECT MAX(created_at) AS last FROM messages WHERE session_id = ?", (session_id,)
        ).fetchone()
        return row is not None and row["last"] is not None and from_iso(row["last"]) <= since

    @staticmethod
    def _takes_messages(conn: sqlite3.Connection, session_id: int) -> bool:
        """Open, or closed with a consolidation that has not started (it reads the session's
        messages when it runs, so a message written now is consolidated with the rest)."""
        row = conn.execute(
            "SELECT s.closed_at IS NULL AS open, EXISTS(SELECT 1 FROM consolidation_jobs j "
            "WHERE j.session_id = s.id AND j.kind = 'session_closed' AND j.state = 'pending') "
            "AS waiting FROM sessions s WHERE s.id = ?",
            (session_id,),
        ).fetchone()
        return row is not None and bool(row["open"] or row["waiting"])

    async def add_tool_round(
        self,
        chat_id: int,
        session_id: int,
        *,
        text: str,
        calls: list[ToolCall],
        results: Sequence[ToolResult],
        model_id: str | None,
        usage: Usage | None = None,
    ) -> list[StoredMessage]:
        """Store one tool round of a chat turn in ONE transaction: the assistant message that
        called the tools and every result, with where its words came from — never a call
        without its results, which the next request's provider would refuse. No window
        consolidation is queued here: the turn is still running, and the final answer's
        `add_message` queues it."""
        now = self.now()

        def write(conn: sqlite3.Connection) -> list[StoredMessage]:
            if not self._takes_messages(conn, session_id):
                raise SessionClosedError(session_id)
            called = insert_row(
                conn, session_id, chat_id, "assistant", text, calls_json(calls), None, None,
                model_id, usage, now,
            )  # fmt: skip
            results_stored = [
                insert_row(
                    conn,
                    session_id,
                    chat_id,
                    "tool",
                    result.content,
                    None,
                    result.call_id,
                    None,
                    None,
                    None,
                    now,
                    provenance=result.provenance,
                    pending_write_id=result.pending_write_id,
                )
                for result in results
            ]
            return [called, *results_stored]

        return await self.db.run_in_transaction(write)

    async def session_messages(self, session_id: int) -> list[StoredMessage]:
        rows = await self.db.fetchall(SESSION_MESSAGES, (session_id,))
        return [row_to_message(row) for row in rows]

    async def round_context(self, session_id: int, chat_id: int) -> RoundContext:
        """What a round of a turn builds its prompt from: the session's messages and the chat's
        memory, in one round trip to a reader (two would each wait behind every other chat's
        reads and for a turn of the event loop, under load on the path to the provider)."""

        def read(conn: sqlite3.Connection) -> RoundContext:
            rows = conn.execute(SESSION_MESSAGES, (session_id,)).fetchall()
            messages = [row_to_message(row) for row in rows]
            return RoundContext(messages, memory_of(conn, chat_id).content)

        return await self.db.read(read)

    async def open_session_message_ids(self, chat_id: int) -> list[int]:
        """Ids of the messages in the chat's open session: what the chat already shows, which
        a search of the past (/recall) leaves out."""
        rows = await self.db.fetchall(
            "SELECT m.id FROM messages m JOIN sessions s ON s.id = m.session_id "
            "WHERE s.chat_id = ? AND s.closed_at IS NULL",
            (chat_id,),
        )
        return [int(row["id"]) for row in rows]

    async def messages_by_ids(self, ids: list[int]) -> list[StoredMessage]:
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        rows = await self.db.fetchall(
            f"SELECT * FROM messages WHERE id IN ({marks}) ORDER BY id", ids
        )
        return [row_to_message(row) for row in rows]

    # usage -------------------------------------------------------------------------------

    async def record_usage(
        self,
        chat_id: int,
        user_id: int | None,
        model_id: str,
        purpose: str,
        usage: Usage,
    ) -> None:
        now = self.now()
        await self.db.run_in_transaction(
            lambda conn: self.insert_usage(conn, chat_id, user_id, model_id, purpose, usage, now)
        )

    @staticmethod
    def insert_usage(
        conn: sqlite3.Connection,
        chat_id: int,
        user_id: int | None,
        model_id: str,
        purpose: str,
        usage: Usage,
        now: str,
    ) -> None:
        """One usage row, inside the caller's `Database.run_in_transaction` body."""
        if purpose not in USAGE_PURPOSES:
            raise ValueError(f"unknown usage purpose {purpose!r}")
        conn.execute(
            "INSERT INTO usage(chat_id, user_id, model_id, purpose, prompt_tokens, "
            "completion_tokens, cost_usd, created_at, estimated, audio_seconds) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                chat_id,
                user_id,
                model_id,
                purpose,
                usage.prompt_tokens,
                usage.completion_tokens,
                usage.cost_usd,
                now,
                int(usage.estimated),
                usage.audio_seconds,
            ),
        )
