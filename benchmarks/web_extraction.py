"""Main-text extraction of web pages, scored with the article-extraction benchmark's own metric.

The 91 saved pages of ../shared/testdata/web-extraction (every other page of Scrapinghub's
article-extraction benchmark, with their human-annotated article bodies) are served by an HTTP
server in a child process on 127.0.0.1, and read here through exactly what `web_read` runs:
`web.read.read_url` — the guarded fetch (127.0.0.1 allowed as WEB_ALLOW_PRIVATE would allow
it), decoding, and extraction in the reader child — 4 pages at a time, while a ticker on this
process's event loop records how late it wakes (the loop is the bot's in real use). The text
is scored whole (WEB_READ_MAX_CHARS is a display limit, not the extractor's work).

Metric, as evaluate.py of that benchmark computes it: the word 4-gram shingles (tokens `\\w+`)
of extracted and true text, tp/fp/fn counted per shingle and normalised per page, precision
and recall averaged over pages, F1 from the two averages.

Printed: pages the pair's second opinion (readability) won, the slowest pages, and a last line
`web_extraction: pages=91 F1=… P=… R=… p50_ms=… p99_ms=… loop_lag_max_ms=…`.
Published on all 181 pages: trafilatura 2.0.0 F1 0.958, readability-lxml 0.922. Goal on this
half: F1 ≥ 0.96.

Run: .venv/bin/python -m benchmarks.web_extraction
"""

from __future__ import annotations

import asyncio
import gzip
import json
import re
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

from aiohttp import web  # noqa: E402

from benchmarks.common import ChildServer, LoopLag, percentile, serve_forever  # noqa: E402
from media.document_reader import ReaderSlots  # noqa: E402
from web.addresses import parse_allowance  # noqa: E402
from web.errors import WebError  # noqa: E402
from web.read import read_url  # noqa: E402

DATA = REPO.parent / "shared" / "testdata" / "web-extraction"
AT_ONCE = 4
TICK_S = 0.005
_TOKEN = re.compile(r"\w+", re.UNICODE | re.MULTILINE | re.IGNORECASE | re.DOTALL)

Counts = tuple[float, float, float]


def shingles(text: str, n: int = 4) -> Counter[tuple[str, ...]]:
    tokens = _TOKEN.findall(text or "")
    grams = [tuple(tokens[i : i + n]) for i in range(max(1, len(tokens) - n + 1))]
    return Counter(gram for gram in grams if gram)


def shingle_counts(true: str, pred: str) -> Counts:
    """tp, fp, fn over shingles, normalised so that long pages weigh no more than short ones."""
    truth, guess = shingles(true), shingles(pred)
    tp = fp = fn = 0.0
    for key in set(truth) | set(guess):
        t, p = truth.get(key, 0), guess.get(key, 0)
        tp += min(t, p)
        fp += max(0, p - t)
        fn += max(0, t - p)
    total = tp + fp + fn
    return (tp / total, fp / total, fn / total) if total else (0.0, 0.0, 0.0)


def precision(tp: float, fp: float, fn: float) -> float:
    if fp == fn == 0:
        return 1.0
    return 0.0 if tp == fp == 0 else tp / (tp + fp)


def recall(tp: float, fp: float, fn: float) -> float:
    if fp == fn == 0:
        return 1.0
    return 0.0 if tp == fn == 0 else tp / (tp + fn)


def score(rows: list[Counts]) -> tuple[float, float, float]:
    """(F1, precision, recall) as the benchmark computes them."""
    p = statistics.mean([precision(*row) for row in rows if row[0] + row[1] > 0])
    r = statistics.mean([recall(*row) for row in rows if row[0] + row[2] > 0])
    return 2 * p * r / (p + r), p, r


def truth() -> dict[str, dict[str, str]]:
    return json.loads((DATA / "ground-truth.json").read_text(encoding="utf-8"))


async def serve() -> None:
    """The child: each saved page at /page/<key>, as a server that says its charset would."""

    async def page(request: web.Request) -> web.Response:
        body = gzip.decompress(
            (DATA / "html" / f"{request.match_info['key']}.html.gz").read_bytes()
        )
        return web.Response(body=body, headers={"Content-Type": "text/html; charset=utf-8"})

    app = web.Application()
    app.router.add_get("/page/{key}", page)
    await serve_forever(app)


async def main() -> None:
    pages = truth()
    server = ChildServer()
    await server.start(__file__, "--serve")
    allowance = parse_allowance("127.0.0.1")
    slots = asyncio.Semaphore(AT_ONCE)
    readers = ReaderSlots()
    texts: dict[str, str] = {}
    extractor: Counter[str] = Counter()
    took: dict[str, float] = {}
    errors: dict[str, str] = {}

    async def one(key: str) -> None:
        async with slots:
            started = time.perf_counter()
            try:
                read = await read_url(
                    f"{server.control}/page/{key}",
                    allowance=allowance,
                    slots=readers,
                    max_chars=10**9,
                )
                texts[key] = read.text
                extractor[read.extractor] += 1
            except WebError as exc:
                texts[key], errors[key] = "", str(exc)
            took[key] = (time.perf_counter() - started) * 1000

    lag = LoopLag(TICK_S)
    lag.start()
    try:
        await asyncio.gather(*(one(key) for key in sorted(pages)))
    finally:
        await lag.stop()
        await server.stop()
    rows = [shingle_counts(pages[key].get("articleBody", ""), texts[key]) for key in sorted(pages)]
    f1, p, r = score(rows)
    times = list(took.values())
    lags = sorted(late * 1000 for _, late in lag.samples)
    over = sum(1 for late in lags if late > 20)
    print(
        f"loop lag ms: p50={percentile(lags, 50):.1f} p99={percentile(lags, 99):.1f}, "
        f"{over} of {len(lags)} wake-ups over 20 ms"
    )
    print(f"extractor chosen: {dict(extractor)}; errors: {len(errors)}")
    for key, error in sorted(errors.items()):
        print(f"  {key[:12]} {error}")
    slowest = sorted(took.items(), key=lambda item: -item[1])[:3]
    print("slowest: " + ", ".join(f"{key[:12]} {ms:.0f} ms" for key, ms in slowest))
    print(
        f"web_extraction: pages={len(pages)} F1={f1:.3f} P={p:.3f} R={r:.3f} "
        f"p50_ms={percentile(times, 50):.0f} p99_ms={percentile(times, 99):.0f} "
        f"loop_lag_max_ms={lag.max_s() * 1000:.0f}"
    )


if __name__ == "__main__":
    asyncio.run(serve() if sys.argv[1:] == ["--serve"] else main())
