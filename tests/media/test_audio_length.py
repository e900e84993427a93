"""`recording_seconds` (media/audio.py): a recording's length from its own audio, through
mutagen, whatever its length fields claim. Real files (tests/data/make_long_audio.py) and
forgeries of them (tests/support/forged_audio.py); ffmpeg decodes each forgery to its full 30 s."""

from __future__ import annotations

import io

import mutagen
import pytest

from media.audio import recording_seconds
from tests.support.e2e_bot import MEDIA
from tests.support.forged_audio import (
    LONG_M4A,
    LONG_MP3,
    LONG_VIDEO_NOTE,
    LONG_VOICE,
    mp3_claiming,
    mp4_claiming,
    ogg_claiming,
)

VOICE = (MEDIA / "voice_en.ogg").read_bytes()


@pytest.mark.parametrize(
    ("data", "seconds"),
    [
        (LONG_VOICE, 30.0),  # Ogg/Opus: the last granule, minus the pre-skip
        (LONG_MP3, 30.168),  # MP3: LAME's Info frame count, minus encoder delay and padding
        (LONG_M4A, 30.064),  # AAC in MP4
        (LONG_VIDEO_NOTE, 30.064),  # H.264 + AAC in MP4
        (VOICE, (115_714 - 312) / 48_000),  # Telegram-style voice note
    ],
)
def test_an_honest_recording_measures_what_its_container_states(
    data: bytes, seconds: float
) -> None:
    assert recording_seconds(data) == pytest.approx(seconds, abs=0.001)


def test_a_forged_ogg_granule_does_not_shorten_the_voice_note() -> None:
    forged = ogg_claiming(LONG_VOICE, 1.0)
    assert mutagen.File(io.BytesIO(forged)).info.length == pytest.approx(1.0)  # the claim
    # The Opus packets hold 30 s (and the 20 ms of pre-skip and end padding around them).
    assert recording_seconds(forged) == pytest.approx(30.02, abs=0.01)


def test_a_forged_mp3_frame_count_does_not_shorten_the_file() -> None:
    forged = mp3_claiming(LONG_MP3, 14)
    assert mutagen.File(io.BytesIO(forged)).info.length == pytest.approx(1.008)  # the claim
    # 420 frames of 576 samples at 8 kHz (the Info frame included): the audio itself.
    assert recording_seconds(forged) == pytest.approx(420 * 576 / 8000)


@pytest.mark.parametrize("data", [LONG_M4A, LONG_VIDEO_NOTE])
def test_a_forged_mp4_duration_does_not_shorten_the_recording(data: bytes) -> None:
    forged = mp4_claiming(data, 1.0)
    assert mutagen.File(io.BytesIO(forged)).info.length == pytest.approx(1.0)  # the claim
    # 470 AAC frames of 1024 samples at 16 kHz: the audio itself.
    assert recording_seconds(forged) == pytest.approx(470 * 1024 / 16000)


def test_what_no_parser_knows_has_no_length() -> None:
    assert recording_seconds(b"\x00" * 4096) is None
    assert recording_seconds(b"OggS" + b"\x00" * 100) is None
