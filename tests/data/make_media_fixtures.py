"""Regenerate the media fixtures in tests/data/ (run by hand; CI only reads the results).

Needs Debian packages that CI does not: espeak-ng, sox, opus-tools, libreoffice-writer-nogui,
fonts-noto-cjk, imagemagick and img2pdf (`apt-get install -y espeak-ng sox opus-tools
libreoffice-writer-nogui fonts-noto-cjk imagemagick img2pdf`). See tests/data/SOURCE.md.

    python tests/data/make_media_fixtures.py
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
OASST2 = HERE.parents[2] / "shared" / "testdata" / "oasst2" / "oasst2_filtered.jsonl"

SPEECH_PROMPT = "ed1c5d38-c2e0-49b3-a45b-6e7a96ac3cb6"  # en: "Give me a vegan pancake recipe."
PT_REPLY = "47e2e2a5-45fc-4563-9248-d78142be1a91"  # pt-BR assistant reply
JA_PROMPT = "912d245b-192c-4add-b09e-eabc9b641c84"  # ja prompt (egg song), with its reply
# ImageMagick 6's binary by its full path (a stand-in named `convert` may come first on PATH).
CONVERT = "/usr/bin/convert"
JA_REPLY = "4ea5a21f-238d-40d2-8952-2dfb89a5b076"


def oasst2_messages() -> dict[str, dict[str, object]]:
    found: dict[str, dict[str, object]] = {}

    def walk(message: dict[str, object]) -> None:
        found[str(message["message_id"])] = message
        for reply in message.get("replies") or []:  # type: ignore[attr-defined]
            walk(reply)

    for line in OASST2.read_text(encoding="utf-8").splitlines():
        walk(json.loads(line)["prompt"])
    return found


def run(*command: str, cwd: Path | None = None) -> None:
    subprocess.run(command, check=True, cwd=cwd)


def main() -> None:
    messages = oasst2_messages()
    speech = str(messages[SPEECH_PROMPT]["text"])
    (HERE / "voice_en.txt").write_text(speech + "\n", encoding="utf-8")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        # Speech: espeak-ng (22.05 kHz WAV) -> sox to 48 kHz mono -> Ogg/Opus, as Telegram
        # voice notes are (mono Opus at 48 kHz in an Ogg container).
        wav = work / "voice.wav"
        wav48 = work / "voice48.wav"
        run("espeak-ng", "-v", "en-us", "-s", "150", "-w", str(wav), speech)
        run("sox", str(wav), "-r", "48000", "-c", "1", str(wav48))
        run(
            "opusenc", "--quiet", "--bitrate", "24", "--comp", "10",
            str(wav48), str(HERE / "voice_en.ogg"),
        )  # fmt: skip

        # A real PDF with multilingual text, written by LibreOffice from a plain text file.
        document = "\n\n".join(
            [
                "OpenAssistant conversations (oasst2)",
                "Português (pt-BR):",
                str(messages[PT_REPLY]["text"]),
                "日本語 (ja):",
                str(messages[JA_PROMPT]["text"]),
                str(messages[JA_REPLY]["text"]),
            ]
        )
        (HERE / "multilingual.txt").write_text(document + "\n", encoding="utf-8")
        source = work / "multilingual.txt"
        source.write_text(document + "\n", encoding="utf-8")
        run(
            "soffice", "--headless", "--infilter=Text (encoded):UTF8,LF,,,",
            "--convert-to", "pdf", "--outdir", str(work), str(source),
        )  # fmt: skip
        (HERE / "multilingual.pdf").write_bytes((work / "multilingual.pdf").read_bytes())

        # A "scanned" page: text rendered into a picture, wrapped in a PDF with no text layer.
        png = work / "scan.png"
        run(
            CONVERT, "-size", "620x160", "xc:white", "-fill", "black", "-pointsize", "28",
            "-annotate", "+20+90", "Scanned page: no text layer", "-colors", "2",
            "-depth", "1", str(png),
        )  # fmt: skip
        run("img2pdf", "--output", str(HERE / "scanned.pdf"), str(png))

        # A real photograph: ImageMagick's built-in "rose:" sample, as a JPEG.
        run(CONVERT, "rose:", "-quality", "85", str(HERE / "rose.jpg"))


if __name__ == "__main__":
    main()
