"""Document text extraction and trimming (media/documents.py) on real files: a LibreOffice PDF
of real oasst2 Portuguese and Japanese text, an image-only PDF, and real multilingual text."""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import pytest

import media.document_reader
import media.documents
from media.document_reader import ReaderSlots, read_document
from media.documents import DocumentError, document_kind, extract_text, trim_to_tokens
from models.tokens import estimate_tokens
from primitives.tasks import stop_task
from tests.support.e2e_bot import MEDIA, TESTDATA
from tests.support.hostile_pdfs import pdf_bomb, surrogate_pdf
from tests.support.waits import within

PDF = (MEDIA / "multilingual.pdf").read_bytes()
SOURCE_TEXT = (MEDIA / "multilingual.txt").read_text(encoding="utf-8")


def _words(text: str) -> str:
    return "".join(text.split())


def test_pdf_text_layer_is_read_page_by_page() -> None:
    document = extract_text(
        PDF, file_name="a.pdf", mime_type="application/pdf", token_budget=100_000
    )
    assert document.kind == "pdf" and document.pages == 2 and not document.trimmed
    assert document.text.startswith("[page 1]") and "[page 2]" in document.text
    # Every line LibreOffice was given comes back (modulo its line wrapping).
    body = _words(document.text.replace("[page 1]", "").replace("[page 2]", ""))
    for line in SOURCE_TEXT.splitlines():
        assert _words(line) in body, line


def test_scanned_pdf_has_no_text_layer() -> None:
    with pytest.raises(DocumentError) as caught:
        extract_text(
            (MEDIA / "scanned.pdf").read_bytes(),
            file_name="scan.pdf",
            mime_type="application/pdf",
            token_budget=1000,
        )
    assert caught.value.reason == "no_text_layer"


def test_broken_pdf_is_unreadable_not_a_crash() -> None:
    with pytest.raises(DocumentError) as caught:
        extract_text(PDF[: len(PDF) // 3], file_name="cut.pdf", mime_type=None, token_budget=1000)
    assert caught.value.reason in ("unreadable_pdf", "no_text_layer")


@pytest.mark.parametrize(
    ("name", "mime", "kind"),
    [
        ("notes.md", "application/octet-stream", "text"),
        ("main.py", None, "text"),
        ("data.csv", "text/csv", "text"),
        ("report.PDF", None, "pdf"),
        ("Dockerfile", None, "text"),
        ("test.docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
         None),
        ("song.mp3", "audio/mpeg", None),
    ],
)  # fmt: skip
def test_document_kinds(name: str, mime: str | None, kind: str | None) -> None:
    assert document_kind(name, mime) == kind


def test_text_encodings_are_decoded_and_binary_refused() -> None:
    text = "Olá, 世界! naïve café"
    for data in (
        text.encode("utf-8"),
        b"\xef\xbb\xbf" + text.encode("utf-8"),
        text.encode("utf-16"),
    ):
        assert extract_text(data, file_name="a.txt", mime_type=None, token_budget=100).text == text
    latin = extract_text("café".encode("latin-1"), file_name="a.txt", mime_type=None,
                         token_budget=100)  # fmt: skip
    assert latin.text == "café"
    with pytest.raises(DocumentError) as caught:
        extract_text(b"\x00\x01\x02binary", file_name="a.txt", mime_type=None, token_budget=100)
    assert caught.value.reason == "binary"
    with pytest.raises(DocumentError) as caught:
        extract_text(b"  \n ", file_name="a.txt", mime_type=None, token_budget=100)
    assert caught.value.reason == "empty"


def test_long_real_text_is_trimmed_to_the_budget_keeping_head_and_tail() -> None:
    # A real multilingual conversation file, far over a small budget.
    text = (TESTDATA / "oasst2" / "oasst2_filtered.jsonl").read_text(encoding="utf-8")[:60_000]
    kept, cut = trim_to_tokens(text, 2000)
    assert cut > 0 and estimate_tokens(kept) <= 2000
    assert f"[… {cut} characters cut …]" in kept
    head, _, tail = kept.partition(f"\n\n[… {cut} characters cut …]\n\n")
    assert text.startswith(head) and text.endswith(tail)
    assert len(head) + len(tail) + cut == len(text)


def test_short_text_is_not_trimmed() -> None:
    assert trim_to_tokens("short", 100) == ("short", 0)


def test_a_surrogate_from_a_tounicode_map_is_replaced() -> None:
    # pypdf itself hands back "AA\ud800": a string no encoder accepts.
    document = extract_text(surrogate_pdf(), file_name="s.pdf", mime_type=None, token_budget=1000)
    assert document.text == "[page 1]\nAA\ufffd"
    document.text.encode("utf-8")  # what storing and sending it does


def test_nuls_and_control_characters_are_stripped_from_the_whole_text() -> None:
    head = "a" * 5000  # past the first 4 KB, where the binary check looks
    data = f"{head}\x00b\x07c\x1b[31md\te\r\nf\x7f".encode()
    document = extract_text(data, file_name="a.txt", mime_type=None, token_budget=100_000)
    assert document.text == f"{head}bc[31md\te\r\nf"
    utf16 = extract_text(
        "x\x00y".encode("utf-16"), file_name="a.txt", mime_type=None, token_budget=100
    )
    assert utf16.text == "xy"


def test_pages_past_the_cap_are_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(media.documents, "MAX_PDF_PAGES", 3)
    pdf = pdf_bomb(7, operators=2, text=b"word")
    document = extract_text(pdf, file_name="p.pdf", mime_type=None, token_budget=100_000)
    assert document.pages == 7
    assert document.text.count("[page ") == 3
    assert document.text.endswith("[… pages 4–7 not read …]")


def test_reading_stops_once_the_text_is_several_times_the_budget() -> None:
    # 20 pages of 1,500 words each (6,000 characters); a 500-token budget keeps ~1,250 bytes,
    # so reading stops once 5,000 characters are in: after the first page.
    pdf = pdf_bomb(20, operators=1500, text=b"word")
    document = extract_text(pdf, file_name="p.pdf", mime_type=None, token_budget=500)
    assert document.pages == 20 and document.trimmed
    assert "[page 2]" not in document.text
    assert document.text.endswith("[… pages 2–20 not read …]")


async def test_a_pdf_bomb_is_stopped_at_the_timeout_while_the_loop_runs() -> None:
    # 1,000 pages at ~0.6 s of CPU each: without a bound, ten minutes of a frozen event loop.
    bomb = pdf_bomb(1000)
    assert len(bomb) < 200_000
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    running = asyncio.create_task(ticker())
    before = set(_children())
    with pytest.raises(DocumentError) as caught:
        await read_document(
            bomb,
            file_name="bomb.pdf",
            mime_type=None,
            token_budget=12_000,
            timeout=2,
            slots=ReaderSlots(),
        )
    await stop_task(running)
    assert caught.value.reason == "too_complex"
    assert ticks > 10  # the loop kept running while the child worked
    assert set(_children()) <= before  # killed and reaped: no child (or zombie) left


async def test_a_reader_that_blocks_without_cpu_is_killed_at_the_wall_clock_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A child that sleeps (a stuck read, a lock) uses no CPU, so RLIMIT_CPU never ends it:
    only the wall-clock timeout does. It is answered as too complex, and the child is killed
    and reaped (its pid gone), not left sleeping beside the bot."""
    monkeypatch.setattr(media.document_reader, "_BOOT", _SLEEP)
    started: list[asyncio.subprocess.Process] = []
    spawn = asyncio.create_subprocess_exec

    async def watched(*args: Any, **kwargs: Any) -> asyncio.subprocess.Process:
        process = await spawn(*args, **kwargs)
        started.append(process)
        return process

    monkeypatch.setattr(asyncio, "create_subprocess_exec", watched)
    try:
        with pytest.raises(DocumentError) as caught:
            await within(
                read_document(
                    b"hello",
                    file_name="a.txt",
                    mime_type=None,
                    token_budget=100,
                    timeout=1,
                    slots=ReaderSlots(),
                ),
                20,  # the test's own bound: a reader without a time limit fails here
            )
        assert caught.value.reason == "too_complex"
        [child] = started
        assert child.returncode == -signal.SIGKILL
        assert child.pid not in _children()  # reaped: not even a zombie
        with pytest.raises(ProcessLookupError):
            os.kill(child.pid, 0)
    finally:
        for process in started:  # a broken reader must not leave its child behind the test
            if process.returncode is None:
                process.kill()
                await process.wait()


# Stands in for a child that blocks without using CPU.
_SLEEP = "import sys, time; sys.stdin.buffer.read(); time.sleep(3600)"


async def test_a_child_reads_a_real_pdf_like_the_function_does() -> None:
    document = await read_document(
        PDF,
        file_name="a.pdf",
        mime_type="application/pdf",
        token_budget=100_000,
        timeout=30,
        slots=ReaderSlots(),
    )
    assert document == extract_text(
        PDF, file_name="a.pdf", mime_type="application/pdf", token_budget=100_000
    )
    with pytest.raises(DocumentError) as caught:
        await read_document(
            b"\x00\x01",
            file_name="a.txt",
            mime_type=None,
            token_budget=100,
            timeout=30,
            slots=ReaderSlots(),
        )
    assert caught.value.reason == "binary"


def _children() -> list[int]:
    """Process ids whose parent is this process (zombies included)."""
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:
            found.append(int(entry))
    return found


async def test_the_reader_child_gets_no_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    # A child that parses hostile files must not hold the keys: it is given a few variables.
    monkeypatch.setenv("OPENAI_API_KEY", "sk-never-in-the-reader")
    monkeypatch.setattr(media.document_reader, "_BOOT", _PRINT_ENV)
    document = await read_document(
        b"", file_name="a.txt", mime_type=None, token_budget=100, timeout=30, slots=ReaderSlots()
    )
    assert "sk-never-in-the-reader" not in document.text
    assert "PATH" in document.text


# Stands in for the child's entry point: answers with its own environment as the "text".
_PRINT_ENV = (
    "import json, os, sys; sys.stdin.buffer.read(); "
    "print(json.dumps({'text': {'kind': 'text', 'text': json.dumps(dict(os.environ))}}))"
)
