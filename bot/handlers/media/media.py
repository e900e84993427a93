"""A media message in: voice, audio, video notes, photos and documents, checked and routed.

Everything a text message goes through applies here first and in the same order: the
allowlist (bot/handlers/guard.py, before any handler), group addressing, then the checks that
need no download (duration, the size Telegram announces, the least duration that size allows,
whether the chat's model can see, whether we read that kind of document), then the rate limit
and the spending caps (`TurnGuard.check_spend`). Only then is anything downloaded, so a
stranger, an over-long note or a user over their cap costs nothing. Then each kind becomes a
chat turn of its own module:

- voice, audio, video notes: bot/handlers/media/voice.py (transcribed, shown, answered; Retry);
- photos and image documents: bot/handlers/media/photos.py (an image part for a model that sees);
- documents: bot/handlers/media/documents.py (text read in a supervised child process).

What the update announces about its file: bot/handlers/media/media_files.py; the limits it meets and
the lines that refuse one: bot/handlers/media/media_limits.py; the download:
bot/handlers/media/downloads.py.
"""

from __future__ import annotations

import structlog
from telegram import InlineKeyboardMarkup, Message, Update

from bot.handlers.access import say, user_language
from bot.handlers.media.documents import answer_document
from bot.handlers.media.media_files import Incoming, incoming_media
from bot.handlers.media.media_limits import (
    VOICE_KINDS,
    file_limit,
    human_size,
    least_audio_seconds,
    spend_refusal,
)
from bot.handlers.media.photos import answer_photo
from bot.handlers.media.voice import transcribe_and_answer
from bot.incoming import clean_text, is_addressed_to_bot, is_group, strip_bot_mentions
from bot.services import Context, Services
from bot.turns.request import turn_request_for
from bot.ui.i18n import t
from bot.ui.keyboards import model_keyboard
from media.documents import document_kind
from media.inbox import InboxItem

log = structlog.get_logger("bot.media")


async def media_message(update: Update, context: Context) -> None:
    """Any non-text message: voice, audio, video note, photo, document; else a polite line."""
    message = update.effective_message
    if message is None:
        return
    bot = context.bot
    group = is_group(message)
    if group and not is_addressed_to_bot(message, bot.username, bot.id):
        return
    services = context.bot_data.services
    lang = user_language(update)
    incoming = incoming_media(message)
    if incoming is None:
        await say(message, t("text_only", lang))
        return
    refusal = await _refusal_before_download(services, message, incoming, lang)
    if refusal is not None:
        text, markup = refusal
        await say(message, text, reply_markup=markup)
        return
    user = update.effective_user
    assert user is not None
    refused = await spend_refusal(services, user.id, lang)
    if refused is not None:
        if refused:
            await say(message, refused)
        return
    caption = message.caption or ""
    if group and caption:
        caption = strip_bot_mentions(message, bot.username, bot.id)
    caption = clean_text(caption)
    request = turn_request_for(message, user.id, bot, update.update_id, text="", lang=lang)
    log.info(
        "media_received",
        kind=incoming.kind,
        file_size=incoming.file_size,
        duration=incoming.duration,
    )
    if incoming.kind in VOICE_KINDS:

        async def new_item() -> InboxItem:
            return await services.inbox.add(
                chat_id=message.chat_id,
                user_id=user.id,
                kind=incoming.kind,
                file_id=incoming.file_id,
                file_unique_id=incoming.file_unique_id,
                duration=incoming.duration,
                file_size=incoming.file_size,
                mime_type=incoming.mime_type,
                file_name=incoming.file_name,
                caption=caption or None,
                forward_origin=request.forward_origin,
            )

        saved = await transcribe_and_answer(services, bot, request, new_item)
    elif incoming.kind == "photo":
        saved = await answer_photo(services, bot, request, incoming, caption)
    else:
        saved = await answer_document(services, bot, request, incoming, caption)
    if saved:
        services.lifecycle.tracker.mark_stored(update.update_id)


async def _refusal_before_download(
    services: Services, message: Message, incoming: Incoming, lang: str | None
) -> tuple[str, InlineKeyboardMarkup | None] | None:
    """Whatever can be refused from the update alone: nothing is downloaded for these."""
    limit_s = services.settings.MAX_VOICE_SECONDS
    if incoming.kind in VOICE_KINDS and incoming.duration > limit_s:
        return t("voice_too_long", lang, seconds=incoming.duration, limit=limit_s), None
    if (
        incoming.kind == "document"
        and document_kind(incoming.file_name, incoming.mime_type) is None
    ):
        name = incoming.file_name or incoming.mime_type or "?"
        return t("document_unsupported", lang, name=name), None
    limit = file_limit(services, incoming.kind)
    if incoming.file_size is not None and incoming.file_size > limit:
        size, most = human_size(incoming.file_size), human_size(limit)
        return t("file_too_big", lang, size=size, limit=most), None
    if incoming.kind in VOICE_KINDS and incoming.file_size is not None:
        # The duration is the sender's word; the size bounds how short the recording can be.
        least = least_audio_seconds(incoming.kind, incoming.file_size)
        if least > limit_s:
            size = human_size(incoming.file_size)
            text = t("voice_too_long_for_size", lang, size=size, seconds=least, limit=limit_s)
            return text, None
    if incoming.kind == "photo":
        model = await services.chat_model(message.chat_id)
        if not model.vision:
            seeing = [e for e in services.available_models() if e.vision]
            if not seeing:
                return t("vision_none", lang), None
            names = ", ".join(e.label for e in seeing)
            text = t("vision_unsupported", lang, label=model.label, models=names)
            return text, model_keyboard(seeing, model.id, lang)
    return None
