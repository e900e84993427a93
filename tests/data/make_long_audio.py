"""Regenerate the long recordings in tests/data/ (run by hand; CI only reads the results).

Each is `voice_en.ogg`'s real speech looped to 30 s and encoded at a low bitrate, in a container
the bot accepts: far more audio than the size bound (the highest bitrate of its kind) admits,
so only measuring the file tells how long it is. Needs ffmpeg with libopus, libmp3lame and
libx264 (`apt-get install -y ffmpeg`). See tests/data/SOURCE.md.

    python tests/data/make_long_audio.py
"""

from __future__ import annotations

import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
SPEECH = HERE / "voice_en.ogg"
SECONDS = "30"
LOOPED = ("-stream_loop", "-1", "-i", str(SPEECH))
AUDIO = {
    # A voice note: Ogg/Opus, mono, 48 kHz, at Opus's speech bitrate.
    "long_voice.ogg": ("-ac", "1", "-ar", "48000", "-c:a", "libopus", "-b:a", "8k",
                       "-application", "voip"),
    # An audio file: MP3 (MPEG-2.5 layer III), mono, 8 kHz, 8 kbps, with LAME's Info frame.
    "long_audio.mp3": ("-ac", "1", "-ar", "8000", "-c:a", "libmp3lame", "-b:a", "8k"),
    # An audio file: AAC in MP4 (M4A), mono, 16 kHz, 16 kbps.
    "long_audio.m4a": ("-ac", "1", "-ar", "16000", "-c:a", "aac", "-b:a", "16k"),
}  # fmt: skip


def ffmpeg(*arguments: str) -> None:
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", *arguments], check=True)


def main() -> None:
    for name, codec in AUDIO.items():
        ffmpeg(*LOOPED, "-t", SECONDS, *codec, str(HERE / name))
    # A video note: H.264 (240x240, one still frame a second) with the speech as AAC.
    ffmpeg(
        "-f", "lavfi", "-i", "color=c=navy:s=240x240:r=1", *LOOPED, "-t", SECONDS,
        "-c:v", "libx264", "-preset", "veryslow", "-crf", "45", "-pix_fmt", "yuv420p",
        "-c:a", "aac", "-ac", "1", "-ar", "16000", "-b:a", "16k", "-shortest",
        str(HERE / "long_video_note.mp4"),
    )  # fmt: skip


if __name__ == "__main__":
    main()
