"""Downloading a file a user sent: getFile, then the bytes streamed up to a limit.

Telegram-facing but knows nothing of turns or replies: it returns the bytes or why there are
none (`Download`), and bot/handlers/media/media_limits.py says what to tell the user.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import httpx
import structlog
from telegram.error import TelegramError

# Every media handler logs as `bot.media`: one filter shows all voice note, photo and
# document events.
log = structlog.get_logger("bot.media")

# Seconds without progress before a file download gives up.
DOWNLOAD_TIMEOUT_S = 60.0
LOCAL_CHUNK_BYTES = 1 << 20  # a local Bot API server's file is read a mebibyte at a time


@dataclass(frozen=True)
class Download:
    """A file's bytes, or why there are none: `too_big` (past the limit: announced by getFile
    or found while streaming), else a failure."""

    data: bytes | None
    too_big: bool = False


async def download(bot: Any, file_id: str, limit: int) -> Download:
    """The file through getFile and the Bot API's file endpoint, read at most to `limit` bytes.

    The size getFile reports is checked first; the download itself is streamed and stopped
    past `limit`, since an update and getFile may both omit the size (and a local Bot API
    server serves files of up to 2 GB).
    """
    try:
        telegram_file = await bot.get_file(file_id)
        if telegram_file.file_size is not None and telegram_file.file_size > limit:
            log.info("download_refused", size=telegram_file.file_size, limit=limit)
            return Download(None, too_big=True)
        url = telegram_file.file_path or ""
        if not url.startswith(("http://", "https://")):
            # A local Bot API server (--local) answers with a path on this machine, files up
            # to 2 GB, and may omit the size: read from disk, stopped past the limit, never
            # whole (PTB's download_as_bytearray would read all of it into memory first).
            data = await asyncio.to_thread(_read_local, url, limit + 1)
        else:
            data = await _stream(url, limit + 1)
    except (TelegramError, httpx.HTTPError, OSError) as exc:
        # httpx errors name the URL, which holds the bot token: only the class is logged.
        log.warning("download_failed", error=type(exc).__name__)
        return Download(None)
    if len(data) > limit:
        log.info("download_stopped", limit=limit)
        return Download(None, too_big=True)
    return Download(data)


def _read_local(path: str, most: int) -> bytes:
    """At most `most` bytes of the file at `path`, read in chunks (a file larger than that on
    disk: only its first `most` bytes are read, which the caller finds too big)."""
    chunks: list[bytes] = []
    size = 0
    with open(path, "rb") as file:
        while size < most:
            chunk = file.read(min(LOCAL_CHUNK_BYTES, most - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    return b"".join(chunks)


async def _stream(url: str, most: int) -> bytes:
    """At most `most` bytes of the file at `url` (the connection is dropped there)."""
    chunks: list[bytes] = []
    size = 0
    async with (
        httpx.AsyncClient(timeout=DOWNLOAD_TIMEOUT_S) as client,
        client.stream("GET", url) as response,
    ):
        response.raise_for_status()
        async for chunk in response.aiter_bytes():
            chunks.append(chunk)
            size += len(chunk)
            if size >= most:
                break
    return b"".join(chunks)[:most]
