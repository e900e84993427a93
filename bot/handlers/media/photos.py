"""Photos (and images sent as files): an image part for a chat model that can see.

The intake (bot/handlers/media/media.py) has already refused a photo the chat's model cannot see
(with buttons to switch to one that can); here, inside the chat's turn, the image is
downloaded, fitted to what every model of the fallback chain accepts (media/image_reader.py:
its header checked here, any decode in a bounded child process) and sent as a data URL. The
session stores "[photo: caption]" and the file id, never the bytes.
"""

from __future__ import annotations

import base64
from dataclasses import replace
from typing import Any

import structlog

from bot.handlers.media.downloads import download
from bot.handlers.media.media_files import Incoming
from bot.handlers.media.media_limits import file_limit, refuse_download
from bot.services import Services
from bot.turns.request import TurnRequest
from bot.turns.turn import run_chat_turn, send_plain
from bot.ui.i18n import t
from media.image_reader import fit_image_bounded
from media.images import ImageError, ImageLimit, limit_for
from memory.provenance import PHOTO, Provenance

# Every media handler logs as `bot.media`: one filter shows all voice note, photo and
# document events.
log = structlog.get_logger("bot.media")


def photo_text(caption: str) -> str:
    """What the session stores for a photo and what consolidation reads: never the bytes."""
    return f"[photo: {caption}]" if caption.strip() else "[photo]"


async def answer_photo(
    services: Services, bot: Any, request: TurnRequest, incoming: Incoming, caption: str
) -> bool:
    """A chat turn on the photo: downloaded and fitted inside the turn, sent as an image part.
    Whether the message is stored: `run_chat_turn`."""
    media: dict[str, object] = {
        "kind": "photo",
        "file_id": incoming.file_id,
        "file_unique_id": incoming.file_unique_id,
    }
    if caption:
        media["caption"] = caption
    if incoming.file_name:
        media["file_name"] = incoming.file_name

    async def prepare(turn: TurnRequest) -> TurnRequest | None:
        most = file_limit(services, incoming.kind)
        got = await download(bot, incoming.file_id, most)
        if got.data is None:
            await refuse_download(bot, turn, got, most)
            return None
        limit = await _image_limit(services, turn.chat_id)
        try:
            image = await fit_image_bounded(got.data, limit, slots=services.readers)
        except ImageError as exc:
            log.info("image_refused", reason=exc.reason, size=len(got.data))
            await send_plain(bot, turn, t(f"image_{exc.reason}", turn.language))
            return None
        if image.scaled:
            log.info("image_scaled", size=len(got.data), sent=len(image.data))
        encoded = base64.b64encode(image.data).decode("ascii")
        url = f"data:{image.mime_type};base64,{encoded}"
        # What a photo shows (a screenshot's text) may be anyone's words; the caption is the
        # user's own.
        provenance = Provenance(PHOTO, incoming.file_name or PHOTO, own=caption or None)
        return replace(
            turn, text=photo_text(caption), media=media, image_url=url, provenance=provenance
        )

    return await run_chat_turn(services, bot, request, prepare=prepare)


async def _image_limit(services: Services, chat_id: int) -> ImageLimit:
    """What every model of the chat model's fallback chain accepts."""
    model = await services.chat_model(chat_id)
    gateways = services.gateways
    return limit_for(
        gateways[entry.gateway].protocol
        for entry in services.catalog.chain(model.id)
        if entry.gateway in gateways
    )
