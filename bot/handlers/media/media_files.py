"""What a media message announces about its file, before anything is downloaded.

`Incoming` is the file's kind and ids and the sender's claims about it (size, duration, MIME
type, file name): what the checks before a download read (bot/handlers/media/media.py) and what the
photo and document turns download. Claims, not facts: the download and the readers check
what matters again on the bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from telegram import Message

from bot.handlers.media.media_limits import TELEGRAM_DOWNLOAD_LIMIT

IMAGE_MIME_TYPES = ("image/jpeg", "image/png", "image/webp", "image/gif")


@dataclass(frozen=True)
class Incoming:
    """What an update announces about its file, before anything is downloaded."""

    kind: str  # voice, audio, video_note, photo, document
    file_id: str
    file_unique_id: str
    file_size: int | None
    duration: int = 0
    mime_type: str | None = None
    file_name: str | None = None


def _seconds(duration: int | timedelta) -> int:
    """PTB gives a duration in whole seconds, or as a timedelta when PTB_TIMEDELTA is set."""
    return int(duration.total_seconds()) if isinstance(duration, timedelta) else duration


def incoming_media(message: Message) -> Incoming | None:
    """The file of a media message; a photo's largest size within the download limit.

    An image sent as a file (a document with an image MIME type) counts as a photo.
    """
    if message.voice is not None:
        v = message.voice
        return Incoming(
            "voice",
            v.file_id,
            v.file_unique_id,
            v.file_size,
            _seconds(v.duration),
            v.mime_type,
            None,
        )
    if message.audio is not None:
        a = message.audio
        return Incoming(
            "audio",
            a.file_id,
            a.file_unique_id,
            a.file_size,
            _seconds(a.duration),
            a.mime_type,
            a.file_name,
        )
    if message.video_note is not None:
        n = message.video_note
        return Incoming(
            "video_note", n.file_id, n.file_unique_id, n.file_size, _seconds(n.duration)
        )
    if message.photo:
        sizes = sorted(message.photo, key=lambda p: (p.width * p.height, p.file_size or 0))
        fitting = [p for p in sizes if (p.file_size or 0) <= TELEGRAM_DOWNLOAD_LIMIT]
        best = fitting[-1] if fitting else sizes[-1]
        return Incoming("photo", best.file_id, best.file_unique_id, best.file_size, 0, "image/jpeg")
    if message.document is not None:
        d = message.document
        mime = (d.mime_type or "").lower()
        kind = "photo" if mime in IMAGE_MIME_TYPES else "document"
        return Incoming(kind, d.file_id, d.file_unique_id, d.file_size, 0, mime, d.file_name)
    return None
