"""Recordings whose length fields lie, made from the real long recordings in tests/data/.

A sender controls every byte of a file: the granule positions of an Ogg file, the frame count
of an MP3's Xing/Info header, the duration in an MP4 track's `mdhd` box. These forgeries keep
the audio whole and change only the claim, so a parser that believes the claim sees a short note
while a decoder (and the provider) plays all of it.
"""

from __future__ import annotations

import io
import struct

from mutagen.mp4 import Atoms

from media.audio import ogg_pages
from tests.support.e2e_bot import MEDIA

LONG_VOICE = (MEDIA / "long_voice.ogg").read_bytes()
LONG_MP3 = (MEDIA / "long_audio.mp3").read_bytes()
LONG_M4A = (MEDIA / "long_audio.m4a").read_bytes()
LONG_VIDEO_NOTE = (MEDIA / "long_video_note.mp4").read_bytes()
LONG_SECONDS = 30.0  # each is 30 s of speech (tests/data/make_long_audio.py)

_OPUS_RATE = 48_000


def ogg_claiming(data: bytes, seconds: float) -> bytes:
    """The Ogg file with every granule position capped at `seconds` (plus the Opus pre-skip):
    its last page then says the stream ends at `seconds`. Pages are rewritten by mutagen, with
    their checksums, so every parser reads them as valid."""
    pages = ogg_pages(data)
    head = pages[0].packets[0]
    pre_skip = struct.unpack_from("<H", head, 10)[0]
    cap = pre_skip + int(seconds * _OPUS_RATE)
    for page in pages:
        if page.position > cap:
            page.position = cap
    return b"".join(page.write() for page in pages)


def mp3_claiming(data: bytes, frames: int) -> bytes:
    """The MP3 with its LAME Info (or Xing) header's frame count set to `frames`."""
    at = max(data.find(b"Info"), data.find(b"Xing"))
    assert at >= 0, "no Xing/Info header"
    flags = struct.unpack_from(">I", data, at + 4)[0]
    assert flags & 1, "the header has no frame count"
    return data[: at + 8] + struct.pack(">I", frames) + data[at + 12 :]


def mp4_claiming(data: bytes, seconds: float) -> bytes:
    """The MP4 with its sound track's `mdhd` duration set to `seconds` (and the movie's
    `mvhd` too), found with mutagen's atom reader; the samples are untouched."""
    stream = io.BytesIO(data)
    moov = Atoms(stream)[b"moov"]
    forged = bytearray(data)
    for trak in moov.findall(b"trak"):
        _, handler = trak[b"mdia", b"hdlr"].read(stream)
        if handler[8:12] == b"soun":
            _set_duration(forged, trak[b"mdia", b"mdhd"].offset + 8, seconds)
    _set_duration(forged, moov[b"mvhd",].offset + 8, seconds)
    return bytes(forged)


def _set_duration(data: bytearray, box: int, seconds: float) -> None:
    """A version-0 `mdhd`/`mvhd` body at `box`: flags, two times, time scale, duration."""
    assert data[box] == 0, "version 1 boxes are not forged here"
    scale = struct.unpack_from(">I", data, box + 12)[0]
    struct.pack_into(">I", data, box + 16, int(seconds * scale))
