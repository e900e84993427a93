"""PDF bomb: one small PDF whose pages all share a compressed content stream of text operators.

The bot runs in this process (real PTB and litellm against the fakes on 127.0.0.1, as in the
end-to-end tests); a ticker on the bot's event loop measures how late it wakes up (the loop
stall) from the moment the document is sent until the sender gets an answer. One text turn
runs first, so the figure is the bomb's, not the first turn's one-time imports. Each page of the
bomb (tests/support/hostile_pdfs.py, made in code) costs pypdf ~0.6 s of CPU and shows no text.

Printed: the file's size, the stall of the idle bot over a few seconds (the machine's own
noise: other processes' load shows there too), the answer the sender got, and a last line
`pdf_bomb: pages=N loop_stall_max_ms=N answered_in_s=N`.
Goal: the stall stays under 50 ms and a clear answer arrives within DOCUMENT_TIMEOUT.

Run: .venv/bin/python -m benchmarks.pdf_bomb [--pages 1000] [--timeout 30]
(`--timeout` sets DOCUMENT_TIMEOUT; leave it out on a checkout that has no such setting.)
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

from benchmarks.common import LoopLag  # noqa: E402
from tests.support.e2e_bot import OWNER, bot_under_test  # noqa: E402
from tests.support.hostile_pdfs import pdf_bomb  # noqa: E402

TICK_S = 0.005
IDLE_S = 5.0


async def measure(pages: int, document_timeout: float | None) -> None:
    bomb = pdf_bomb(pages)
    print(f"bomb: {pages} pages in {len(bomb):,} bytes")
    settings = {} if document_timeout is None else {"DOCUMENT_TIMEOUT": document_timeout}
    with tempfile.TemporaryDirectory() as tmp:
        async with bot_under_test(Path(tmp), **settings) as bot:
            await bot.ask(OWNER, "hello")  # warm up: the first turn's imports are not the bomb's
            answers = len(bot.texts(OWNER))
            # The machine's own noise first: the same ticker on the idle bot for IDLE_S seconds.
            idle = LoopLag(TICK_S)
            idle.start()
            await asyncio.sleep(IDLE_S)
            await idle.stop()
            print(f"idle: loop_stall_max_ms={idle.max_s() * 1000:.0f} over {IDLE_S:g} s")
            stall = LoopLag(TICK_S)
            started = time.perf_counter()
            bot.send_media(OWNER, bot.document(bomb, "bomb.pdf", "application/pdf"))
            stall.start()
            await bot.wait(lambda: len(bot.texts(OWNER)) > answers, timeout=3600)
            answered_in = time.perf_counter() - started
            await stall.stop()
            print(f"answer: {bot.texts(OWNER)[answers]}")
    print(
        f"pdf_bomb: pages={pages} loop_stall_max_ms={stall.max_s() * 1000:.0f} "
        f"answered_in_s={answered_in:.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=1000)
    parser.add_argument("--timeout", type=float, default=None, help="DOCUMENT_TIMEOUT")
    args = parser.parse_args()
    asyncio.run(measure(args.pages, args.timeout))


if __name__ == "__main__":
    main()
