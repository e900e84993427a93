"""Document text extraction and trimming (memory/documents.py) on real files: a LibreOffice PDF
of real oasst2 Portuguese and Japanese text, an image-only PDF, and real multilingual text."""

from __future__ import annotations

import pytest

from memory.documents import DocumentError, document_kind, extract_text, trim_to_tokens
from memory.transcript import estimate_tokens
from tests.e2e_bot import MEDIA, TESTDATA

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
