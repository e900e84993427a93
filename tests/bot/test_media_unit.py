"""The Telegram side of media without a network: which photo size is taken, how transcripts are
shown, what a photo or voice note looks like to consolidation, the Bot API file URL."""

from __future__ import annotations

from typing import Any

from telegram import Bot, Message

from bot.app import file_base_url
from bot.handlers.media.media_files import incoming_media
from bot.handlers.media.media_limits import TELEGRAM_DOWNLOAD_LIMIT
from bot.handlers.media.photos import photo_text
from bot.handlers.media.voice import transcript_html
from memory.consolidation.transcript import render_message
from memory.provenance import PHOTO, Provenance
from memory.store import StoredMessage
from tests.fakes.telegram import parse_html
from tests.support.e2e_bot import real_update


def _message(update: dict[str, Any]) -> Message:
    return Message.de_json(update["message"], Bot("1:x"))  # type: ignore[return-value]


def test_the_largest_photo_size_within_the_download_limit_is_taken() -> None:
    update = real_update("message_with_photo.json", 1, 1)
    sizes = update["message"]["photo"]
    assert incoming_media(_message(update)).file_id == sizes[-1]["file_id"]  # type: ignore[union-attr]
    # A (hypothetical) huge original over 20 MB: the next size down is used instead.
    huge = {"file_id": "HUGE", "file_unique_id": "HUGE", "width": 9000, "height": 6000}
    sizes.append({**sizes[-1], **huge, "file_size": TELEGRAM_DOWNLOAD_LIMIT + 1})
    assert incoming_media(_message(update)).file_id == sizes[-2]["file_id"]  # type: ignore[union-attr]


def test_real_voice_and_image_document_updates() -> None:
    voice = incoming_media(_message(real_update("message_with_voice.json", 1, 1)))
    assert voice is not None and (voice.kind, voice.duration) == ("voice", 1)
    image = real_update("message_with_document.json", 1, 1)
    image["message"]["document"]["mime_type"] = "image/png"
    assert incoming_media(_message(image)).kind == "photo"  # type: ignore[union-attr]
    sticker = incoming_media(_message(real_update("message_with_sticker.json", 1, 1)))
    assert sticker is None


def test_transcript_is_quoted_escaped_and_collapsed_when_long() -> None:
    short = transcript_html("🎙 Transcript:", "a <b> & c")
    text, entities = parse_html(short)  # Telegram's own HTML rules (fake Bot API)
    assert text == "🎙 Transcript:\na <b> & c"
    assert [e["type"] for e in entities] == ["blockquote"]
    _, entities = parse_html(transcript_html("h", "word " * 200))
    assert [e["type"] for e in entities] == ["expandable_blockquote"]


def test_consolidation_sees_photo_captions_and_spoken_words_never_bytes() -> None:
    def stored(
        content: str, media: dict[str, object], provenance: Provenance | None = None
    ) -> StoredMessage:
        return StoredMessage(
            1, 1, 1, "user", content, "2026-11-30T10:00:00.000Z", media=media,
            provenance=provenance,
        )  # fmt: skip

    # What a photo shows may be anyone's words: a stub; its caption is the user's own.
    seen = Provenance(PHOTO, PHOTO, own="my cat")
    photo = stored(photo_text("my cat"), {"kind": "photo", "file_id": "AgAD"}, seen)
    assert render_message(photo) == (
        "[2026-11-30 10:00] user: my cat\n    [photo from the user: not shown]"
    )
    assert photo_text("") == "[photo]"
    voice = stored("call mum tonight", {"kind": "voice", "file_id": "AwAD", "duration": 2})
    assert render_message(voice) == (
        "[2026-11-30 10:00] user: [voice note, transcribed] call mum tonight"
    )


def test_file_base_url_drops_the_bot_suffix() -> None:
    assert file_base_url("https://api.telegram.org/bot") == "https://api.telegram.org/file/bot"
    assert file_base_url("http://127.0.0.1:8081/bot/") == "http://127.0.0.1:8081/file/bot"


def test_a_very_long_transcript_is_shown_cut_within_telegrams_limit() -> None:
    # Emoji count two UTF-16 units each: a character cut would overflow 4096 units.
    spoken = ("😀 speech " * 1200).strip()
    text, entities = parse_html(transcript_html("🎙 Transcript:", spoken))
    assert len(text.encode("utf-16-le")) // 2 <= 4096
    assert text.endswith(" …") and text.removeprefix("🎙 Transcript:\n")[:-2] in spoken
    assert [e["type"] for e in entities] == ["expandable_blockquote"]
