"""How long a recording really is, from its own bytes rather than from what the sender says.

Telegram's `duration` of a voice note, audio file or video note is "as defined by the sender",
and a container's own length field is written by the sender too: an Ogg file's last granule
position, an MP3's Xing frame count, an MP4's `mdhd` duration. Each can claim one second for an
hour of speech. The containers are read by mutagen (a maintained parser, not ours), and where a
claim can be checked against the audio itself it is:

- Ogg Opus (every voice note): the packets are counted. Each Opus packet says in its first
  byte (RFC 6716, section 3.1) how many frames of which length it holds, so their sum is what a
  decoder will play, whatever the granule positions claim.
- MPEG audio (MP3): the frames are walked. Each frame header says how many samples it holds, so
  the count does not rest on the first frame's bitrate or on a Xing header.
- AAC in MP4 (M4A, video notes): the audio track's frames are counted (its sample size table,
  `stsz`, through mutagen's atom reader); each AAC frame decodes to 1024 samples, whatever the
  `mdhd` duration claims.
- Anything else mutagen knows (FLAC, WAV, Vorbis, ...): its length as the container states it.
  The size bound and the provider's own report (models/calls.py) stand beside it.

The container's own length stands while the audio agrees with it: what the packets or frames
hold always runs a little past it (encoder delay and padding, which the container trims), by a
fraction of a second. Past `AGREEMENT_S` the count is the measure: a lie can only make a file
look shorter. Parsing a long file takes a second of CPU: callers run it in a thread.
"""

from __future__ import annotations

import io
import struct
from typing import BinaryIO

import mutagen
from mutagen.mp3 import MP3, HeaderNotFoundError, MPEGFrame, iter_sync
from mutagen.mp4 import MP4, Atoms
from mutagen.ogg import OggPage

_OPUS_HEAD = b"OpusHead"
_OPUS_RATE = 48_000
# Samples (at 48 kHz) of one frame per TOC configuration (RFC 6716, table 2): SILK 10/20/40/60
# ms, Hybrid 10/20 ms, CELT 2.5/5/10/20 ms.
_OPUS_FRAME = (
    *(480, 960, 1920, 2880) * 3,
    *(480, 960) * 2,
    *(120, 240, 480, 960) * 4,
)
_AAC_FRAME = 1024  # samples one AAC(-LC) frame decodes to
# How far the audio counted may run past the container's stated length before the count wins:
# encoder delay and padding (a few MP3 frames, Opus pre-skip and end trimming) stay far below.
AGREEMENT_S = 0.25
# Past this many bytes of junk between two MPEG frames the walk stops (a real file has tags and
# padding, not megabytes of noise between frames).
_MPEG_RESYNC_BYTES = 64 * 1024


def recording_seconds(data: bytes) -> float | None:
    """The longest the recording can play, by its own bytes; None when no parser knows the
    format (the caller falls back to the sender's word and the size bound)."""
    stream = io.BytesIO(data)
    try:
        parsed = mutagen.File(stream)
    except Exception:  # mutagen's errors for a broken file vary by format
        parsed = None
    stated = float(getattr(getattr(parsed, "info", None), "length", 0.0) or 0.0)
    counted: float | None = None
    if data.startswith(b"OggS"):
        counted = opus_packet_seconds(data)
    elif isinstance(parsed, MP3):
        counted = _mpeg_frame_seconds(stream, int(getattr(parsed.info, "frame_offset", 0)))
    elif isinstance(parsed, MP4):
        counted = _aac_frame_seconds(stream, parsed)
    if parsed is None:
        return counted
    if counted is not None and counted > stated + AGREEMENT_S:
        return counted
    return stated


def opus_packet_seconds(data: bytes) -> float | None:
    """What the Opus packets of an Ogg file hold, summed from their TOC bytes; None when the
    file holds no Opus stream. Every logical stream that starts with an OpusHead counts (a
    chained file plays them one after the other)."""
    pages: dict[int, list[OggPage]] = {}
    for page in ogg_pages(data):
        pages.setdefault(page.serial, []).append(page)
    samples = 0
    opus = False
    for serial_pages in pages.values():
        try:  # packets whole again, however the pages split them
            stream_packets = OggPage.to_packets(serial_pages)
        except Exception:  # pages missing in the middle: not a stream a decoder plays whole
            continue
        if not stream_packets or not stream_packets[0].startswith(_OPUS_HEAD):
            continue
        opus = True
        # The first two packets are the identification and comment headers.
        samples += sum(_opus_packet_samples(p) for p in stream_packets[2:])
    return samples / _OPUS_RATE if opus else None


def ogg_pages(data: bytes) -> list[OggPage]:
    """The Ogg file's pages in order, up to its end or its first broken page (what came before
    a broken page is what a player plays). The forged recordings of the tests and the voice
    benchmark read pages the same way, through this."""
    stream = io.BytesIO(data)
    pages: list[OggPage] = []
    while True:
        try:
            pages.append(OggPage(stream))
        except Exception:  # the end, or a broken page: what came before is what plays
            return pages


def _opus_packet_samples(packet: bytes) -> int:
    """Samples (48 kHz) one Opus packet decodes to: frames times frame length (RFC 6716 3.1);
    an empty packet (DTX) holds none."""
    if not packet:
        return 0
    toc = packet[0]
    code = toc & 0x03
    if code == 0:
        frames = 1
    elif code in (1, 2):
        frames = 2
    else:
        frames = packet[1] & 0x3F if len(packet) > 1 else 0
    return frames * _OPUS_FRAME[toc >> 3]


def _mpeg_frame_seconds(stream: BinaryIO, start: int) -> float:
    """The MPEG audio frames from `start` on, walked with mutagen's frame parser: samples per
    frame from each header, summed. Junk between frames is skipped up to a bound."""
    total = 0.0
    stream.seek(start)
    while True:
        here = stream.tell()
        try:
            frame = MPEGFrame(stream)
        except HeaderNotFoundError:
            if not _resync(stream, here + 1):
                return total
            continue
        if stream.tell() <= here:
            return total
        total += _mpeg_frame_samples(frame) / frame.sample_rate


def _mpeg_frame_samples(frame: MPEGFrame) -> int:
    """Samples in one frame: 384 for layer I, 576 for layer III of MPEG-2/2.5, else 1152."""
    if frame.layer == 1:
        return 384
    if frame.layer == 3 and frame.version >= 2:
        return 576
    return 1152


def _aac_frame_seconds(stream: BinaryIO, parsed: MP4) -> float | None:
    """The AAC frames of the file's first sound track (the one mutagen reads): their count from
    the track's `stsz` table, 1024 samples each, at the rate of the decoder's own configuration
    (mutagen reads it from `esds`). None for another codec or a file without that table (a
    fragmented MP4)."""
    info = parsed.info
    rate = int(getattr(info, "sample_rate", 0) or 0)
    if not str(getattr(info, "codec", "")).startswith("mp4a.40") or rate <= 0:
        return None
    try:
        atoms = Atoms(stream)
        for trak in atoms[b"moov"].findall(b"trak"):
            ok, handler = trak[b"mdia", b"hdlr"].read(stream)
            if ok and handler[8:12] == b"soun":
                ok, table = trak[b"mdia", b"minf", b"stbl", b"stsz"].read(stream)
                if not ok or len(table) < 12:
                    return None
                return struct.unpack_from(">I", table, 8)[0] * _AAC_FRAME / rate
    except Exception:  # mutagen's errors for a broken atom tree vary
        return None
    return None


def _resync(stream: BinaryIO, offset: int) -> bool:
    """Move to the next MPEG frame sync after `offset`; False when none is near."""
    stream.seek(offset)
    for _ in iter_sync(stream, _MPEG_RESYNC_BYTES):
        return True
    return False
