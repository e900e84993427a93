"""How long an audio file really is, from its own bytes rather than from what the sender says.

Telegram's `duration` of a voice note is "as defined by the sender". An Ogg file (voice notes
are Ogg/Opus) says its own length: the granule position of its last page counts samples, at
48 kHz for Opus (minus the pre-skip the Opus header names) and at the sample rate of the
Vorbis identification header for Vorbis. Other containers (MP3, M4A, MP4 video notes) are not
parsed: for those the size bound and the provider's own report stand in.
"""

from __future__ import annotations

import struct

_OGG_PAGE = b"OggS"
_OPUS_HEAD = b"OpusHead"
_VORBIS_HEAD = b"\x01vorbis"
# A last page holds at most 255 segments of 255 bytes, plus its header.
_LAST_PAGE_SPAN = 27 + 255 + 255 * 255


def ogg_seconds(data: bytes) -> float | None:
    """The length of an Ogg Opus or Vorbis file in seconds; None for anything else."""
    if not data.startswith(_OGG_PAGE):
        return None
    head = data[:512]
    if (at := head.find(_OPUS_HEAD)) >= 0 and len(head) >= at + 12:
        rate, skip = 48_000, struct.unpack_from("<H", head, at + 10)[0]
    elif (at := head.find(_VORBIS_HEAD)) >= 0 and len(head) >= at + 16:
        rate, skip = struct.unpack_from("<I", head, at + 12)[0], 0
    else:
        return None
    end = len(data)
    floor = max(0, end - _LAST_PAGE_SPAN)
    while (page := data.rfind(_OGG_PAGE, floor, end)) >= 0:
        if page + 14 <= len(data):
            granule = struct.unpack_from("<q", data, page + 6)[0]
            if granule >= 0 and rate > 0:
                return max(0.0, (granule - skip) / rate)
        end = page
    return None
