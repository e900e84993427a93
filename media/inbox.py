"""Voice notes waiting for a transcript, kept so that a failed transcription loses nothing.

A voice note (or audio file, or video note) is written here, with its Telegram file id, before
anything is downloaded or any model is called. If every transcription model fails, the row
stays (state 'failed') and the user can retry it later: the file id is all Telegram needs to
hand the audio out again. Once transcribed, the row points at the stored user message.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from memory.db import Database
from memory.store import to_iso, utc_now

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
    ) -> InboxItem:
        now = to_iso(utc_now())
        row = await self.db.run_in_transaction(
            lambda conn: conn.execute(
                "INSERT INTO media_inbox(chat_id, user_id, kind, file_id, file_unique_id, "
                "duration, file_size, mime_type, file_name, caption, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING *",
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
                    now,
                    now,
                ),
            ).fetchone()
        )
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
        """The row of a note whose update is held for the next start, which writes it anew."""
        await self.db.run_in_transaction(
            lambda conn: conn.execute(
                "DELETE FROM media_inbox WHERE id = ? AND state != 'done'", (item_id,)
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
    return InboxItem(**{name: row[name] for name in InboxItem.__dataclass_fields__})
