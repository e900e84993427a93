"""How long a voice note, audio file or video note is, measured from its own bytes before it is
uploaded, and billed at the longest of what was measured, what the provider heard and what its
size allows.

Real PTB and litellm against the fakes. The recordings are real: 30 s of speech at a low
bitrate in each container the bot accepts (tests/data/make_long_audio.py), some with their
length fields forged (tests/support/forged_audio.py): audio a decoder plays whole, a claim of 1 s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bot.ui.i18n import t
from tests.e2e.test_e2e_media import GROQ_PER_SECOND, answered
from tests.support.e2e_bot import OWNER, BotUnderTest, bot_under_test
from tests.support.forged_audio import (
    LONG_M4A,
    LONG_MP3,
    LONG_VIDEO_NOTE,
    LONG_VOICE,
    mp3_claiming,
    mp4_claiming,
    ogg_claiming,
)

SPOKEN = "Give me a vegan pancake recipe."


def note(bot: BotUnderTest, kind: str, data: bytes, name: str, mime: str) -> dict[str, Any]:
    """The update's field for a recording of `kind` that claims to last 1 s."""
    stored = bot.tg.add_file(data, file_path=f"{kind}/{name}")
    fields: dict[str, Any] = {**bot.tg.file_fields(stored), "duration": 1}
    if kind == "video_note":
        return {"video_note": {**fields, "length": 240}}
    return {kind: {**fields, "mime_type": mime, **({"file_name": name} if kind == "audio" else {})}}


FORGED = {
    # Ogg/Opus whose granule positions end at 1 s: its last page says 1 s.
    "voice, granule forged": ("voice", ogg_claiming(LONG_VOICE, 1.0), "v.oga", "audio/ogg"),
    # MP3 whose LAME Info frame counts 14 frames (1 s); the 419 frames are all there.
    "mp3, Info frames forged": ("audio", mp3_claiming(LONG_MP3, 14), "a.mp3", "audio/mpeg"),
    # AAC in MP4 whose sound track's mdhd (and the movie's mvhd) say 1 s.
    "m4a, mdhd forged": ("audio", mp4_claiming(LONG_M4A, 1.0), "a.m4a", "audio/mp4"),
    "video note, mdhd forged": (
        "video_note",
        mp4_claiming(LONG_VIDEO_NOTE, 1.0),
        "n.mp4",
        "video/mp4",
    ),
}


@pytest.mark.parametrize("case", list(FORGED))
async def test_a_recording_longer_than_the_limit_is_refused_before_any_upload(
    tmp_path: Path, case: str
) -> None:
    kind, data, name, mime = FORGED[case]
    async with bot_under_test(tmp_path, MAX_VOICE_SECONDS=10) as bot:
        bot.send_media(OWNER, note(bot, kind, data, name, mime))
        await bot.wait(lambda: bool(bot.texts(OWNER)), timeout=90)
        await bot.wait_idle(OWNER)
        # 30 s of speech in a file that claims 1 s (and whose size allows 2 s at most): its
        # own audio says 30 s, over the 10 s limit. Nothing reached a provider.
        # (Each holds 30.0-30.3 s: the encoders' delay and padding.)
        assert bot.texts(OWNER) == [t("voice_too_long", seconds=31, limit=10)]
        assert not bot.transcription_requests() and not bot.chat_requests()
        assert await bot.rows("SELECT * FROM usage") == []
        assert await bot.rows("SELECT state FROM media_inbox") == [{"state": "failed"}]


async def test_groq_is_asked_for_the_duration_and_a_longer_one_is_billed(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        # The provider decoded 45 s (more than the 30 s the file's bytes admit to): it bills
        # what it heard, and so does the ledger.
        bot.groq.hears(LONG_M4A, SPOKEN, seconds=45.0)
        bot.send_media(OWNER, note(bot, "audio", LONG_M4A, "a.m4a", "audio/mp4"))
        await bot.wait(lambda: answered(bot, OWNER), timeout=90)
        [(gateway, upload)] = bot.transcription_requests()
        assert gateway == "groq" and upload.body["response_format"] == "verbose_json"
        [usage] = await bot.rows(
            "SELECT model_id, cost_usd, audio_seconds FROM usage WHERE purpose = 'transcription'"
        )
        assert usage == {
            "model_id": "whisper-large-v3-turbo",
            "cost_usd": pytest.approx(45.0 * GROQ_PER_SECOND),
            "audio_seconds": 45.0,
        }


async def test_a_shorter_reported_duration_never_lowers_the_bill(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        # Whisper says 2 s of a file whose own audio holds 30 s: the measure stands.
        bot.groq.hears(LONG_MP3, SPOKEN, seconds=2.0)
        bot.send_media(OWNER, note(bot, "audio", LONG_MP3, "a.mp3", "audio/mpeg"))
        await bot.wait(lambda: answered(bot, OWNER), timeout=90)
        [usage] = await bot.rows("SELECT audio_seconds FROM usage WHERE purpose = 'transcription'")
        assert usage["audio_seconds"] == pytest.approx(30.168)
