"""How long measuring a recording takes (media/audio.py), at the largest file each kind may be.

A voice note is downloaded up to MAX_VOICE_SECONDS at the highest bitrate a voice note carries
(9.6 MB at the default 600 s); an audio file or a video note up to Telegram's 20 MB. At a low
bitrate such a file holds hours of audio, and mutagen walks every Opus packet, MPEG frame or
MP4 sample table entry of it. The voice handler runs the measure in a thread: this prints the
CPU it takes and how late the event loop woke a 10 ms sleep meanwhile.

The files are made from the fixtures, no encoder needed: a chained Ogg/Opus file (the 30 s
voice note again and again, each copy its own logical stream, as a decoder plays a chain) and
an MP3 of the 30 s file's frames repeated. Run: `python -m benchmarks.voice_length`.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from media.audio import ogg_pages, recording_seconds

MEDIA = Path(__file__).resolve().parents[1] / "tests" / "data"
VOICE_LIMIT_BYTES = 600 * 128_000 // 8  # MAX_VOICE_SECONDS 600 at a voice note's top bitrate
FILE_LIMIT_BYTES = 20 * 1024 * 1024  # Telegram's download limit for bots


def chained_ogg(size: int) -> bytes:
    """Copies of long_voice.ogg, each with a serial number of its own, up to `size` bytes."""
    data = (MEDIA / "long_voice.ogg").read_bytes()
    pages = ogg_pages(data)
    out = bytearray()
    serial = 1
    while len(out) + len(data) <= size:
        for page in pages:
            page.serial = serial
            out += page.write()
        serial += 1
    return bytes(out)


def repeated_mp3(size: int) -> bytes:
    data = (MEDIA / "long_audio.mp3").read_bytes()
    return data * (size // len(data))


async def measure(name: str, data: bytes) -> None:
    lags: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        while not done.is_set():
            asked = time.perf_counter()
            await asyncio.sleep(0.01)
            lags.append(time.perf_counter() - asked - 0.01)

    tick = asyncio.create_task(ticker())
    cpu = time.process_time()
    seconds = await asyncio.to_thread(recording_seconds, data)
    cpu = time.process_time() - cpu
    done.set()
    await tick
    print(
        f"voice_measure: file={name} mb={len(data) / 1e6:.1f} audio_s={seconds:.0f} "
        f"cpu_s={cpu:.2f} loop_lag_max_ms={max(lags, default=0.0) * 1000:.0f}"
    )


async def main() -> None:
    await measure("voice.ogg", chained_ogg(VOICE_LIMIT_BYTES))
    await measure("audio.mp3", repeated_mp3(FILE_LIMIT_BYTES))
    await measure("video_note.mp4", (MEDIA / "long_video_note.mp4").read_bytes())


if __name__ == "__main__":
    asyncio.run(main())
