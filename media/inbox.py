"""Voice notes waiting for a transcript, kept so that a failed transcription loses nothing.

A voice note (or audio file, or video note) is written here, with its Telegram file id, before
anything is downloaded or any model is called. If every transcription model fails, the row
stays (state 'failed') and the user can retry it later: the file id is all Telegram needs to
hand the audio out again. Once transcribed, the row keeps the transcript at once (a stop that
cuts in before the user message is stored then costs no second transcription: the replayed note
finds its row and its words, `add`), and finally points at the stored user message.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass

from memory.db import Database
from memory.store import to_iso
from primitives.clock import utc_now

VOICE_KINDS = ("voice", "audio", "video_note")


@dataclass(frozen=True)
class InboxItem:
    id: int
    chat_id: int
    user_id: int
    kind: str
    file_id: str
    file_unique_id: str
    duration: int
    file_size: int | None
    mime_type: str | None
    file_name: str | None
    caption: str | None
    state: str
    attempts: int
    # What the provider heard, kept as soon as it returned (migrations/0014): a note whose turn
    # was cut short after that is answered from it, never uploaded and paid for again.
    transcript: str | None = None
    # A forwarded note: whose words it holds (as the message's `forward_origin`), kept so a
    # Retry stores it as theirs too.
    forward_origin: dict[str, object] | None = None

    def media(self) -> dict[str, object]:
        """The `media` record of the user message the transcript becomes."""
        record: dict[str, object] = {
            "kind": self.kind,
            "file_id": self.file_id,
            "file_unique_id": self.file_unique_id,
            "duration": self.duration,
        }
        if self.file_name:
            record["file_name"] = self.file_name
        if self.caption:
            record["caption"] = self.caption
        return record


class MediaInbox:
    """The `media_inbox` table (see migrations/0006_media.sql)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def add(
        self,
        *,
        chat_id: int,
        user_id: int,
        kind: str,
        file_id: str,
        file_unique_id: str,
        duration: int,
        file_size: int | None = None,
        mime_type: str | None = None,
        file_name: str | None = None,
        caption: str | None = None,
        forward_origin: dict[str, object] | None = None,
    ) -> InboxItem:
        """The note's row, written before any download. A note replayed after a stop cut its
        turn short gets back the row that already holds its transcript (same chat and file,
        still pending), so it is answered without being uploaded and paid for again."""
        now = to_iso(utc_now())

        def add_or_resume(conn: sqlite3.Connection) -> sqlite3.Row | None:
            kept = conn.execute(
                "UPDATE media_inbox SET updated_at = ? WHERE id = (SELECT id FROM media_inbox "
                "WHERE chat_id = ? AND file_unique_id = ? AND state = 'pending' "
                "AND transcript IS NOT NULL ORDER BY id DESC LIMIT 1) RETURNING *",
                (now, chat_id, file_unique_id),
            ).fetchone()
            if kept is not None:
                return kept
            return conn.execute(
                "INSERT INTO media_inbox(chat_id, user_id, kind, file_id, file_unique_id, "
                "duration, file_size, mime_type, file_name, caption, forward_origin, "
                "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "RETURNING *",
                (
                    chat_id,
                    user_id,
                    kind,
                    file_id,
                    file_unique_id,
                    duration,
                    file_size,
                    mime_type,
                    file_name,
                    caption,
                    json.dumps(forward_origin, ensure_ascii=False) if forward_origin else None,
                    now,
                    now,
                ),
            ).fetchone()

        row = await self.db.run_in_transaction(add_or_resume)
        assert row is not None
        return _item(row)

    async def get(self, item_id: int) -> InboxItem | None:
        row = await self.db.fetchone("SELECT * FROM media_inbox WHERE id = ?", (item_id,))
        return _item(row) if row else None

    async def claim(self, item_id: int, chat_id: int) -> InboxItem | None:
        """The failed row, now pending again, for the one caller that claimed it; None when it is
        not this chat's, not failed, or another caller (a second press of Retry) claimed it
        first. One UPDATE: two presses can never both transcribe, store and answer it."""
        now = to_iso(utc_now())
        row = await self.db.run_in_transaction(
            lambda conn: conn.execute(
                "UPDATE media_inbox SET state = 'pending', updated_at = ? "
                "WHERE id = ? AND chat_id = ? AND state = 'failed' RETURNING *",
                (now, item_id, chat_id),
            ).fetchone()
        )
        return _item(row) if row else None

    async def release(self, item_id: int) -> None:
        """A claimed row whose turn never settled it (refused, cancelled) can be retried again."""
        now = to_iso(utc_now())
        await self.db.run_in_transaction(
            lambda conn: conn.execute(
                "UPDATE media_inbox SET state = 'failed', updated_at = ? "
                "WHERE id = ? AND state = 'pending'",
                (now, item_id),
            )
        )

    async def discard(self, item_id: int) -> None:
        """The row of a note whose update is held for the next start, which writes it anew;
        a row holding its transcript stays, for the next start to answer from (`add`)."""
        await self.db.run_in_transaction(
            lambda conn: conn.execute(
                "DELETE FROM media_inbox WHERE id = ? AND state != 'done' AND transcript IS NULL",
                (item_id,),
            )
        )

    async def keep_transcript(self, item_id: int, transcript: str) -> None:
        """What the provider heard, kept the moment it returned (see the module docstring)."""
        now = to_iso(utc_now())
        await self.db.run_in_transaction(
            lambda conn: conn.execute(
                "UPDATE media_inbox SET transcript = ?, updated_at = ? WHERE id = ?",
                (transcript, now, item_id),
            )
        )

    async def mark_failed(self, item_id: int) -> None:
        await self._set(item_id, "failed", None)

    async def mark_done(self, item_id: int, message_id: int) -> None:
        await self._set(item_id, "done", message_id)

    async def _set(self, item_id: int, state: str, message_id: int | None) -> None:
        now = to_iso(utc_now())
        await self.db.run_in_transaction(
            lambda conn: conn.execute(
                "UPDATE media_inbox SET state = ?, message_id = COALESCE(?, message_id), "
                "attempts = attempts + (? = 'failed'), updated_at = ? WHERE id = ?",
                (state, message_id, state, now, item_id),
            )
        )


def _item(row: sqlite3.Row) -> InboxItem:
    fields = {name: row[name] for name in InboxItem.__dataclass_fields__}
    origin = fields["forward_origin"]
    fields["forward_origin"] = json.loads(origin) if origin else None
    return InboxItem(**fields)
