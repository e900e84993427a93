"""What a file a user sends may be before it costs anything, and the lines that refuse one.

The limits every kind of media meets (the download cap, the least duration a recording's size
allows, the user's spending caps) and how a refusal reads, shared by the media intake
(bot/handlers/media/media.py, before any download) and the turns that download the file (voice,
photos, documents).
"""

from __future__ import annotations

import math
from typing import Any

from bot.handlers.media.downloads import Download
from bot.services import Services
from bot.turns.request import TurnRequest
from bot.turns.turn import send_plain
from bot.ui.i18n import t

# Bots may download files up to 20 MB through getFile on the public Bot API.
TELEGRAM_DOWNLOAD_LIMIT = 20 * 1024 * 1024
VOICE_KINDS = ("voice", "audio", "video_note")
# The most bits per second each kind plausibly carries (Telegram records voice notes as Opus at
# ~24-35 kbps; MP3 tops out at 320 kbps; a video note is mostly video). A file's size divided by
# this is the least it can last: a 20 MB "1 s" voice note holds at least 1,310 s. The size a
# sender announces with no duration check is how hours of speech would pass as one second.
MAX_AUDIO_BITRATE = {"voice": 128_000, "audio": 320_000, "video_note": 4_000_000}


def file_limit(services: Services, kind: str) -> int:
    """The most bytes downloaded for a file of this kind: Telegram's limit for bots, and for
    documents and images (photos too) MAX_DOCUMENT_BYTES."""
    if kind in VOICE_KINDS:
        return TELEGRAM_DOWNLOAD_LIMIT
    return min(TELEGRAM_DOWNLOAD_LIMIT, services.settings.MAX_DOCUMENT_BYTES)


def least_audio_seconds(kind: str, size: int) -> int:
    """The fewest whole seconds `size` bytes of this kind of recording can last."""
    return math.ceil(size * 8 / MAX_AUDIO_BITRATE[kind])


def audio_download_limit(kind: str, max_seconds: int) -> int:
    """The most bytes a recording within `max_seconds` may have: the download cap."""
    return min(TELEGRAM_DOWNLOAD_LIMIT, max_seconds * MAX_AUDIO_BITRATE[kind] // 8)


def human_size(size: int) -> str:
    """Bytes as Telegram clients show file sizes (binary units, written MB and KB)."""
    if size >= 1024 * 1024:
        return f"{size / (1024 * 1024):.1f} MB"
    if size >= 1024:
        return f"{size / 1024:.0f} KB"
    return f"{size} B"


async def spend_refusal(services: Services, user_id: int, lang: str | None) -> str | None:
    """None when the user may spend; else the line to show ("" when the guard stays silent,
    e.g. a later refusal in a burst)."""
    refused = await services.guard.check_spend(user_id)
    if refused is None:
        return None
    if refused.reply_key is None:
        return ""
    return t(refused.reply_key, lang, **refused.reply_values)


async def refuse_download(bot: Any, turn: TurnRequest, got: Download, limit: int) -> None:
    """The line for a download that brought no bytes (the transfer:
    bot/handlers/media/downloads.py)."""
    lang = turn.language
    if got.too_big:
        most = human_size(limit)
        await send_plain(bot, turn, t("file_too_big", lang, size=f"> {most}", limit=most))
    else:
        await send_plain(bot, turn, t("download_failed", lang))
