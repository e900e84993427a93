"""Text out of the documents users send (PDF, plain text, markdown, code, CSV), trimmed to fit.

This knows nothing of Telegram: it gets a file name, a MIME type and bytes. What it returns is
what the model reads and what the session stores, so a document can be recalled later.

- PDFs are read with pypdf, page by page, at most `MAX_PDF_PAGES` pages, and reading stops once
  the text is `TEXT_CAP_FACTOR` times what the token budget keeps (it is trimmed to that
  anyway). A PDF whose pages hold no text (a scan, a photo of a page) is reported as such rather
  than handed to the model empty. Any exception of the parser is the document's error, never
  ours. pypdf is CPU-bound on hostile input (one small file can cost minutes): the bot never
  calls `extract_text` on its event loop but in a supervised child process
  (`media/document_reader.py`).
- Text files are decoded as UTF-8 (with or without BOM), then UTF-16 when there is a BOM, then
  Latin-1 as a last resort (every byte is valid there), so no text file is ever refused for its
  encoding; a file with NUL bytes in its first 4 KB and no BOM is taken as binary.
- Every text, PDF or not, loses its NULs and control characters (tabs and line breaks stay),
  and lone surrogates (pypdf decodes a ToUnicode map to `<D800>` with `surrogatepass`; such a
  string cannot be encoded later) become U+FFFD.
- The text is trimmed to a token budget: the head and the tail are kept (a document's start
  says what it is, its end often concludes), and a note says how much of the middle was cut.
"""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath

from media import MediaError
from models.tokens import estimate_tokens

# File name endings read as text. Telegram often sends code as application/octet-stream, so
# the name is trusted as much as the MIME type.
TEXT_SUFFIXES = frozenset(
    {
        ".txt", ".md", ".markdown", ".rst", ".csv", ".tsv", ".json", ".jsonl", ".yaml", ".yml",
        ".toml", ".ini", ".cfg", ".conf", ".log", ".xml", ".html", ".htm", ".css", ".py",
        ".js", ".ts", ".tsx", ".jsx", ".java", ".kt", ".go", ".rs", ".c", ".h", ".cc", ".cpp",
        ".hpp", ".cs", ".rb", ".php", ".swift", ".sh", ".bash", ".zsh", ".sql", ".r", ".lua",
        ".pl", ".scala", ".hs", ".ex", ".exs", ".dart", ".vue", ".svelte", ".tex", ".srt",
        ".vtt", ".env", ".dockerfile", ".makefile",
    }
)  # fmt: skip
TEXT_MIME_TYPES = frozenset(
    {
        "application/json", "application/xml", "application/x-yaml", "application/yaml",
        "application/toml", "application/javascript", "application/x-sh", "application/sql",
        "application/x-python", "application/csv",
    }
)  # fmt: skip
PDF_MIME = "application/pdf"
# Pages read at most: past this the rest of the PDF is left out (with a note).
MAX_PDF_PAGES = 300
# Reading stops once the text holds this many times what the token budget keeps.
TEXT_CAP_FACTOR = 4
# estimate_tokens counts about 0.4 token per byte of English prose (a CJK character about one),
# so a budget of N tokens keeps roughly 2.5 N bytes of it.
BYTES_PER_TOKEN = 2.5
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]+")
_SURROGATE = re.compile("[\ud800-\udfff]")


class DocumentError(MediaError):
    """The document cannot be read; `reason` is a short key the bot turns into a sentence."""


@dataclass(frozen=True)
class DocumentText:
    """The text of a document, possibly trimmed, and what was cut."""

    kind: str  # "pdf" or "text"
    text: str
    pages: int = 0
    total_tokens: int = 0  # estimated tokens of the whole text
    kept_tokens: int = 0
    cut_chars: int = 0  # characters left out of the middle (0: nothing was cut)

    @property
    def trimmed(self) -> bool:
        return self.cut_chars > 0


def document_kind(file_name: str | None, mime_type: str | None) -> str | None:
    """ "pdf", "text", or None when the document is no kind we read."""
    mime = (mime_type or "").lower()
    suffix = PurePosixPath((file_name or "").lower()).suffix
    if mime == PDF_MIME or suffix == ".pdf":
        return "pdf"
    if mime.startswith("text/") or mime in TEXT_MIME_TYPES or suffix in TEXT_SUFFIXES:
        return "text"
    name = PurePosixPath((file_name or "").lower()).name
    if name in ("dockerfile", "makefile", "readme", "license"):
        return "text"
    return None


def clean_text(text: str) -> str:
    """`text` without NULs and control characters, lone surrogates replaced by U+FFFD."""
    return _SURROGATE.sub("\ufffd", _CONTROL.sub("", text))


def text_cap(token_budget: int) -> int:
    """Characters of text worth reading for a budget: a few times what trimming keeps."""
    return int(token_budget * BYTES_PER_TOKEN * TEXT_CAP_FACTOR)


def extract_text(
    data: bytes, *, file_name: str | None, mime_type: str | None, token_budget: int
) -> DocumentText:
    """The document's text trimmed to `token_budget`; raises DocumentError (reason keys:
    "unsupported", "no_text_layer", "unreadable_pdf", "binary", "empty", "too_complex").

    CPU-bound and unbounded in time on a hostile PDF: call it through
    `media.document_reader.read_document`, never on an event loop."""
    kind = document_kind(file_name, mime_type)
    if kind is None:
        raise DocumentError("unsupported")
    if kind == "pdf":
        text, pages = _pdf_text(data, text_cap(token_budget))
    else:
        text, pages = _decode_text(data), 0
    text = clean_text(text).strip()
    if not text:
        raise DocumentError("no_text_layer" if kind == "pdf" else "empty")
    kept, cut = trim_to_tokens(text, token_budget)
    return DocumentText(
        kind=kind,
        text=kept,
        pages=pages,
        total_tokens=estimate_tokens(text),
        kept_tokens=estimate_tokens(kept),
        cut_chars=cut,
    )


def _pdf_text(data: bytes, cap: int) -> tuple[str, int]:
    """The text of the first MAX_PDF_PAGES pages, until `cap` characters; (text, page count)."""
    from pypdf import PdfReader

    # pypdf logs warnings about every quirk of real-world PDFs; they are not our errors.
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            reader.decrypt("")  # many "protected" PDFs only restrict printing
        count = len(reader.pages)
        pages: list[str] = []
        size = read = 0
        for index in range(min(count, MAX_PDF_PAGES)):
            read = index + 1
            page_text = clean_text(reader.pages[index].extract_text() or "").strip()
            if page_text:
                pages.append(f"[page {read}]\n{page_text}")
                size += len(pages[-1])
            if size >= cap:
                break
        if size and read < count:
            pages.append(f"[… pages {read + 1}–{count} not read …]")
        return "\n\n".join(pages), count
    except MemoryError:
        raise DocumentError("too_complex") from None
    except Exception:  # pypdf raises many kinds on broken files; none may crash a turn
        raise DocumentError("unreadable_pdf") from None


def _decode_text(data: bytes) -> str:
    if data.startswith(b"\xef\xbb\xbf"):
        return data[3:].decode("utf-8", errors="replace")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16", errors="replace")
    if b"\x00" in data[:4096]:
        raise DocumentError("binary")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def trim_to_tokens(text: str, budget: int) -> tuple[str, int]:
    """`text` if it fits `budget` (estimated tokens), else its head and tail with a marker;
    returns (text, characters cut). Cuts at line boundaries when one is near."""
    if estimate_tokens(text) <= budget:
        return text, 0
    # The marker (\n\n[… 12345678 characters cut …]\n\n) is estimated at 22 tokens at most.
    return _trim_middle(text, lambda kept: estimate_tokens(kept) + 22 <= budget)


def trim_to_chars(text: str, limit: int) -> tuple[str, int]:
    """`text` if it has at most `limit` characters, else its head and tail with a marker (the
    whole fits `limit`); returns (text, characters cut). A transcript is trimmed this way to
    MAX_INPUT_CHARS, the bound of a typed message."""
    if len(text) <= limit:
        return text, 0
    return _trim_middle(text, lambda kept: len(kept) + 40 <= limit)


def _trim_middle(text: str, fits: Callable[[str], bool]) -> tuple[str, int]:
    """The head (two thirds) and tail (one third) of `text` that `fits`, with a marker."""
    low, high = 0, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        head_len = middle * 2 // 3
        tail_len = middle - head_len
        if fits(text[:head_len] + text[len(text) - tail_len :]):
            low = middle
        else:
            high = middle - 1
    head_len = low * 2 // 3
    tail_len = low - head_len
    head = text[:head_len]
    cut_at = head.rfind("\n", max(0, head_len - 400))
    if cut_at > 0:
        head = head[:cut_at]
    tail = text[len(text) - tail_len :] if tail_len else ""
    newline = tail.find("\n", 0, 400)
    if newline >= 0:
        tail = tail[newline + 1 :]
    cut = len(text) - len(head) - len(tail)
    return f"{head}\n\n[… {cut} characters cut …]\n\n{tail}", cut
