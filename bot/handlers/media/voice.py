"""Voice notes, audio files and video notes: transcribed inside the chat's turn, then answered.

The note is written to the media inbox with its file id first (by the intake,
bot/handlers/media/media.py, after the checks that need no download), then, inside the chat's turn,
downloaded and transcribed by the hidden transcription chain. The transcript is shown (quoted)
and answered as if typed; it is what the session stores. If every transcription model fails
the user is told, with a Retry button naming the inbox row (`retry_callback`: the row is claimed
in one UPDATE, so two presses answer once).

The transcription is the chat's turn in progress (`run_chat_turn` runs `prepare` as the chat's
running work): /cancel and /new stop it and the note keeps a Retry button; a graceful stop gives
it the grace of a reply, then cancels it and holds the update for the next start, which
transcribes and answers the note (`_transcription_stopped`). The transcript is kept in the inbox
row the moment the provider returns it: a stop or /cancel that cuts in after that (while the
transcript is shown, before the message is stored) is answered from the row later, never
transcribed and paid for twice.
"""

from __future__ import annotations

import asyncio
import html
import math
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import replace
from typing import Any

import structlog
from telegram import InlineKeyboardButton, InlineKeyboardMarkup, Update
from telegram.constants import ChatType, ParseMode
from telegram.error import TelegramError

from bot.handlers.access import user_language
from bot.handlers.media.downloads import download
from bot.handlers.media.media_limits import (
    audio_download_limit,
    least_audio_seconds,
    refuse_download,
    spend_refusal,
)
from bot.services import Context, Services
from bot.turns.chat_turns import FORGETTING
from bot.turns.request import TurnRequest
from bot.turns.turn import (
    held_on_stop,
    run_chat_turn,
    send_plain,
)
from bot.ui.i18n import t
from bot.ui.keyboards import callback_row_id
from bot.ui.render import utf16_len
from bot.ui.turn_texts import failure_reason
from media.audio import recording_seconds
from media.documents import trim_to_chars
from media.inbox import InboxItem
from memory.provenance import AUDIO, Provenance
from memory.store import StoredMessage
from memory.usage import SpendRecorder
from models.calls import CallOptions
from models.types import NO_KEY, Transcription, TransportError

# Every media handler logs as `bot.media`: one filter shows all voice note, photo and
# document events.
log = structlog.get_logger("bot.media")

RETRY_PREFIX = "mr:"
# A transcript longer than this is shown collapsed (expandable blockquote).
EXPAND_AFTER_CHARS = 300
# What the transcript message may show (UTF-16 units, under Telegram's 4096); the whole
# transcript is stored and answered anyway.
SHOWN_TRANSCRIPT_UNITS = 4000


async def transcribe_and_answer(
    services: Services,
    bot: Any,
    request: TurnRequest,
    item: InboxItem | Callable[[], Awaitable[InboxItem]],
) -> bool:
    """Inside the chat's turn: download, transcribe, show the transcript, answer it.

    `item` is the inbox row (a retry), or makes it: a new note's row is written inside the
    turn, before any download, so an update held back by a stop (and replayed after the
    restart) does not leave a second, orphaned row behind. Whether the note's text is stored:
    `run_chat_turn`.
    """
    current: list[InboxItem] = []

    async def prepare(turn: TurnRequest) -> TurnRequest | None:
        row = item if isinstance(item, InboxItem) else await item()
        current.append(row)
        try:
            return await _transcribe(services, bot, turn, row)
        except asyncio.CancelledError as stop:
            await _transcription_stopped(
                services, bot, turn, row, forgetting=FORGETTING in stop.args
            )
            raise

    async def stored(message: StoredMessage) -> None:
        await services.inbox.mark_done(current[-1].id, message.id)

    return await run_chat_turn(services, bot, request, prepare=prepare, on_stored=stored)


async def _transcribe(
    services: Services, bot: Any, request: TurnRequest, item: InboxItem
) -> TurnRequest | None:
    """The note as the request to store and answer: its transcript shown, and trimmed to the
    bound of a typed message; None when there is nothing to answer (the user was told)."""
    lang = request.language
    if item.transcript is not None:
        # Transcribed (and paid for) before a stop or a /cancel cut its turn short: answered
        # from the words kept, never uploaded again.
        log.info("transcript_reused", inbox_id=item.id)
        transcript: str | None = item.transcript
    else:
        transcript = await _new_transcript(services, bot, request, item)
    if transcript is None:
        return None
    await _show_transcript(bot, request, transcript, lang)
    caption = f"{item.caption}\n\n" if item.caption else ""
    # A transcript is what the user says, so it keeps to the bound of a typed message.
    limit = max(1, services.settings.MAX_INPUT_CHARS - len(caption))
    text, cut = trim_to_chars(transcript, limit)
    if cut:
        total = len(transcript)
        note = t("transcript_trimmed", lang, kept=f"{total - cut:,}", total=f"{total:,}")
        await send_plain(bot, request, note)
    return replace(
        request,
        text=caption + text,
        media=item.media(),
        provenance=recording_provenance(item, text),
        # A forwarded note keeps its origin when a Retry transcribes it (the retry has no
        # update to read it from).
        forward_origin=request.forward_origin or item.forward_origin,
    )


def recording_provenance(item: InboxItem, transcript: str) -> Provenance | None:
    """An audio file is a recording of anyone (a call, a lecture, someone else's message):
    its transcript is not the user's words; its caption is. A voice note or video note is the
    user speaking: their own words, no provenance."""
    if item.kind != "audio":
        return None
    source = item.file_name or "audio file"
    return Provenance(AUDIO, source, chars=len(transcript), own=item.caption or None)


async def _new_transcript(
    services: Services, bot: Any, request: TurnRequest, item: InboxItem
) -> str | None:
    """Download, measure and transcribe the note; None when it is refused or fails (the user
    was told, with a Retry button where a retry can help)."""
    lang = request.language
    inbox = services.inbox
    settings = services.settings
    limit_s = settings.MAX_VOICE_SECONDS
    most = audio_download_limit(item.kind, limit_s)
    got = await download(bot, item.file_id, most)
    if got.data is None:
        await inbox.mark_failed(item.id)
        await refuse_download(bot, request, got, most)
        return None
    audio = got.data
    # mutagen walks every packet or frame of a long file (about a second of CPU for an hour of
    # audio): in a thread, so the chats go on meanwhile.
    seconds = audio_seconds(item, audio, await asyncio.to_thread(recording_seconds, audio))
    if seconds > limit_s:
        log.info("voice_too_long", inbox_id=item.id, seconds=seconds)
        await inbox.mark_failed(item.id)
        shown = math.ceil(seconds)
        await send_plain(bot, request, t("voice_too_long", lang, seconds=shown, limit=limit_s))
        return None
    try:
        result = await _billed_transcription(services, request, item, audio, seconds)
    except TransportError as exc:
        await inbox.mark_failed(item.id)
        if exc.attempts and all(a.detail == NO_KEY for a in exc.attempts):
            # Not a passing failure: no transcription model has a key. A retry cannot help.
            log.warning("transcription_unconfigured")
            await send_plain(bot, request, t("transcription_unavailable", lang))
            return None
        log.warning(
            "transcription_failed",
            inbox_id=item.id,
            attempts=[f"{a.model_id}@{a.gateway}:{a.outcome}" for a in exc.attempts],
        )
        await send_plain(
            bot,
            request,
            t("transcription_failed", lang, reason=failure_reason(exc, lang)),
            reply_markup=_retry_markup(item, lang),
        )
        return None
    log.info(
        "transcribed",
        inbox_id=item.id,
        model=result.model_id,
        seconds=seconds,
        chars=len(result.text),
    )
    if not result.text:
        await inbox.mark_failed(item.id)
        await send_plain(bot, request, t("transcript_empty", lang))
        return None
    return result.text


async def _transcription_stopped(
    services: Services, bot: Any, request: TurnRequest, item: InboxItem, *, forgetting: bool
) -> None:
    """The note's turn was cancelled while it was downloaded or transcribed (the attempt in
    flight is billed by `_billed_transcription` all the same).

    A graceful stop holds the note's update for the next start (`held_on_stop`), which writes
    the row anew and transcribes it: this row goes, or it would stay behind, orphaned; unless
    the transcript came back before the stop cut in: then the row stays, holding it, and the
    next start answers from it (`MediaInbox.add`). Any other stop keeps the note for the Retry
    button (which answers from a kept transcript too), saying so: /cancel and /new stop the work,
    not the user's words; a Retry cut short by a stop likewise. /forget's stop offers nothing:
    the forgetting deletes the note."""
    inbox = services.inbox
    if held_on_stop(services, request):
        await inbox.discard(item.id)
        log.info("transcription_held_for_restart", inbox_id=item.id)
        return
    if forgetting:
        log.info("transcription_forgotten", inbox_id=item.id)
        return
    await inbox.mark_failed(item.id)
    key = "transcription_interrupted" if services.lifecycle.closing else "transcription_cancelled"
    log.info("transcription_stopped", inbox_id=item.id, note=key)
    lang = request.language
    await send_plain(bot, request, t(key, lang), reply_markup=_retry_markup(item, lang))


def _retry_markup(item: InboxItem, lang: str | None) -> InlineKeyboardMarkup:
    """The Retry button under a note that was not transcribed (`retry_callback`)."""
    button = InlineKeyboardButton(t("retry_button", lang), callback_data=f"{RETRY_PREFIX}{item.id}")
    return InlineKeyboardMarkup([[button]])


def audio_seconds(item: InboxItem, audio: bytes, measured: float | None) -> float:
    """How long the recording is (at least): what its own bytes hold (`recording_seconds`:
    media/audio.py), else what the sender announced, and never less than its size allows.
    This is what the note is refused by before any upload, and billed at (at least)."""
    told = float(item.duration) if measured is None else measured
    return max(told, float(least_audio_seconds(item.kind, len(audio))))


def _audio_file_name(item: InboxItem) -> str:
    """The upload's name tells the provider the container (Whisper sniffs the extension)."""
    if item.file_name:
        return item.file_name
    return {"voice": "voice.ogg", "video_note": "video_note.mp4"}.get(item.kind, "audio.ogg")


async def _billed_transcription(
    services: Services, request: TurnRequest, item: InboxItem, audio: bytes, seconds: float
) -> Transcription:
    """The note through the transcription chain, every attempt that may cost money recorded
    under "transcription" however the call ends: a transcript, every model failing, or the
    turn cancelled while a provider holds the upload (the transport tells each attempt to
    `on_spend` as it ends; nothing else carries a cancelled attempt's cost).

    `seconds` (`audio_seconds`) is what a timed-out or cancelled attempt is billed at, and the
    least a success is billed at (the provider's reported duration wins when it is longer):
    the recording's own length as its bytes tell it, never less than its size allows; the
    sender's announced duration is a claim, used only where nothing could measure it."""
    settings = services.settings
    spending = SpendRecorder(services.store, request.chat_id, request.user_id, "transcription")
    try:
        result = await services.transport.transcribe(
            settings.TRANSCRIPTION_MODEL,
            audio,
            CallOptions(
                timeout=settings.TRANSCRIPTION_TIMEOUT,
                user_key=request.user_id,
                on_spend=spending.add,
            ),
            filename=_audio_file_name(item),
            mime_type=item.mime_type or "audio/ogg",
            duration_s=seconds,
        )
        if result.text:
            # Paid for: kept before anything else can cut the turn short (a stop, a /cancel),
            # so the note is never transcribed twice (`_transcribe` answers from the row).
            await _written_whatever_happens(services.inbox.keep_transcript(item.id, result.text))
        return result
    finally:
        try:
            await spending.flush()
        except Exception:  # the ledger's failure must not hide the transcript or the error
            log.exception("usage_not_recorded", inbox_id=item.id)


async def _written_whatever_happens(write: Coroutine[Any, Any, None]) -> None:
    """Run `write` to its end even when the caller is cancelled meanwhile; the cancellation
    still reaches the caller, once the write is done."""
    task = asyncio.ensure_future(write)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait([task])  # waiting does not cancel it
        raise


def transcript_html(heading: str, transcript: str) -> str:
    """The heading and the transcript quoted; collapsed (expandable) when long.

    Telegram counts a message's length in UTF-16 units after parsing; a transcript longer than
    SHOWN_TRANSCRIPT_UNITS is shown cut (with "…"): it is stored and answered whole anyway.
    """
    shown = transcript
    if utf16_len(heading) + utf16_len(shown) + 1 > SHOWN_TRANSCRIPT_UNITS:
        budget = SHOWN_TRANSCRIPT_UNITS - utf16_len(heading) - 3
        while utf16_len(shown) > budget:
            shown = shown[: max(0, len(shown) - max(1, (utf16_len(shown) - budget) // 2))]
        shown = shown.rstrip() + " …"
    tag = "blockquote expandable" if len(transcript) > EXPAND_AFTER_CHARS else "blockquote"
    return f"{html.escape(heading)}\n<{tag}>{html.escape(shown, quote=False)}</blockquote>"


async def _show_transcript(
    bot: Any, request: TurnRequest, transcript: str, lang: str | None
) -> None:
    heading = t("transcript_heading", lang)
    try:
        await bot.send_message(
            request.chat_id,
            transcript_html(heading, transcript),
            parse_mode=ParseMode.HTML,
            reply_to_message_id=request.reply_to_message_id,
            message_thread_id=request.message_thread_id,
        )
    except TelegramError as exc:  # showing it is a courtesy; the turn goes on
        log.warning("transcript_not_shown", error=str(exc))


async def retry_callback(update: Update, context: Context) -> None:
    """The Retry button of a failed transcription: the same checks, then the same turn."""
    query = update.callback_query
    services = context.bot_data.services
    if query is None:
        return
    lang = user_language(update)
    message = query.message
    item_id = callback_row_id(query.data, RETRY_PREFIX)
    user = update.effective_user
    assert user is not None
    if message is None or item_id is None or services.turns.is_running(message.chat.id):
        await query.answer(t("retry_gone", lang), show_alert=True)
        return
    refused = await spend_refusal(services, user.id, lang)
    if refused is not None:
        if refused:
            await query.answer(refused, show_alert=True)
        return
    inbox = services.inbox
    item = await inbox.claim(item_id, message.chat.id)  # a second press finds it claimed
    if item is None:
        await query.answer(t("retry_gone", lang), show_alert=True)
        return
    await query.answer()
    try:
        await query.edit_message_reply_markup(None)
    except TelegramError as exc:
        log.debug("retry_button_not_removed", error=str(exc))
    chat = message.chat
    request = TurnRequest(
        chat_id=chat.id,
        user_id=user.id,
        text="",
        language=lang,
        reply_to_message_id=None,
        private=chat.type == ChatType.PRIVATE,
    )
    try:
        if await transcribe_and_answer(services, context.bot, request, item):
            services.lifecycle.tracker.mark_stored(update.update_id)
    finally:
        await inbox.release(item.id)  # only if the turn never settled it (refused, cancelled)
