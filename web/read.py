"""web_read's work: fetch one URL within its bounds, take its main text out of it in the reader
child, and hand back the text with the URL it came from.

Fetching (web/fetch.py) runs on the loop, since it is waiting on a socket. Decoding and
extraction are CPU work on hostile input (a 5 MB page of nested tags takes seconds of lxml):
they run in the supervised reader child documents use, bounded in wall clock, CPU and memory,
so the chat loop never parses a page. A PDF goes through the document reader as if a user had
sent it.

Every failure is a WebError whose message the model can relay: a private address, too many
redirects, too large, too slow, an unsupported type, a TLS error, a name that resolves to
nothing — and a page with no text, which is an error rather than an empty success.
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from media.document_reader import ReaderSlots, Share, read_document, read_page
from media.documents import DocumentError
from web.addresses import Allowance
from web.errors import EmptyTextError, WebError
from web.fetch import (
    MAX_PAGE_BYTES,
    MAX_PDF_BYTES,
    READ_TIMEOUT_SECONDS,
    Fetched,
    Origin,
    Resolver,
    fetch,
    guarded_client,
    loaded_tls,
    system_resolver,
    with_scheme,
)

log = structlog.get_logger("web.read")

# The longest main text handed to the model (WEB_READ_MAX_CHARS's default).
DEFAULT_MAX_CHARS = 15_000
# Wall clock the reader child gets for one page (decoding, extraction), on top of the fetch.
EXTRACT_TIMEOUT_SECONDS = 20.0
# A PDF from the web is read with the budget of a large document (tokens, before the cut).
PDF_TOKEN_BUDGET = 12_000
# What the document reader's reasons mean for a page.
_REASONS = {
    "too_complex": "it was too complex to take apart in time",
    "no_text_layer": "the PDF has no text layer (a scan)",
    "unreadable_pdf": "the PDF is broken",
    "busy": "every page reader of the bot stayed busy; try again in a minute",
}


@dataclass(frozen=True)
class PageRead:
    """A page's main text, possibly cut, with where it really came from."""

    url: str  # the final URL, after redirects
    title: str
    text: str  # at most max_chars characters of main text, the cut marked
    kind: str  # "html", "text", "json" or "pdf"
    total_chars: int  # characters of main text before the cut
    extractor: str

    @property
    def cut(self) -> bool:
        return self.total_chars > len(self.text)


async def read_url(
    url: str,
    *,
    allowance: Allowance,
    slots: ReaderSlots,
    max_chars: int = DEFAULT_MAX_CHARS,
    resolver: Resolver = system_resolver,
    timeout: float = READ_TIMEOUT_SECONDS,  # noqa: ASYNC109 - the fetch's own deadline
    extract_timeout: float = EXTRACT_TIMEOUT_SECONDS,
    max_bytes: int = MAX_PAGE_BYTES,
    refused: frozenset[Origin] = frozenset(),
) -> PageRead:
    """The main text of `url` (see the module docstring); raises WebError. `refused`: origins
    never read, at the first URL or any redirect (the search backend's)."""
    tls = await loaded_tls()
    client, _ = guarded_client(
        allowance, resolver=resolver, timeout=timeout, tls=tls, refused=refused
    )
    async with client:
        fetched = await fetch(
            with_scheme(url),
            client,
            timeout=timeout,
            max_bytes=max_bytes,
            max_pdf_bytes=MAX_PDF_BYTES,
        )
    return await extract(fetched, slots=slots, max_chars=max_chars, timeout=extract_timeout)


async def extract(
    fetched: Fetched,
    *,
    slots: ReaderSlots,
    max_chars: int,
    timeout: float,  # noqa: ASYNC109 - the reader child's wall-clock bound
) -> PageRead:
    """The main text of a fetched body, taken out in the reader child."""
    try:
        if fetched.kind == "pdf":
            document = await read_document(
                fetched.body,
                file_name="page.pdf",
                mime_type="application/pdf",
                token_budget=PDF_TOKEN_BUDGET,
                timeout=timeout,
                slots=slots,
                share=Share.PAGES,
            )
            title, text, extractor = "", document.text, "pdf"
        else:
            page = await read_page(
                fetched.body,
                content_type=fetched.content_type,
                kind=fetched.kind,
                timeout=timeout,
                slots=slots,
            )
            title, text, extractor = page.title, page.text, page.extractor
    except DocumentError as exc:
        log.warning("web_page_unreadable", reason=exc.reason, kind=fetched.kind)
        reason = _REASONS.get(exc.reason, exc.reason)
        raise WebError(f"the page at {fetched.url} could not be read: {reason}") from None
    text = text.strip()
    if not text:
        raise EmptyTextError(f"no readable text at {fetched.url} (the page may need JavaScript)")
    return PageRead(
        url=fetched.url,
        title=title,
        text=cut_text(text, max_chars),
        kind=fetched.kind,
        total_chars=len(text),
        extractor=extractor,
    )


def cut_text(text: str, max_chars: int) -> str:
    """`text`, or its first `max_chars` characters (at a paragraph or line end when one is
    near) and a marker saying how much was left out."""
    if len(text) <= max_chars:
        return text
    head = text[:max_chars]
    for boundary in ("\n\n", "\n", ". "):
        at = head.rfind(boundary, max_chars * 3 // 4)
        if at > 0:
            head = head[: at + len(boundary)]
            break
    head = head.rstrip()
    left = len(text) - len(head)
    return f"{head}\n\n[… cut here: {left} more characters of the page not shown …]"


def page_block(page: PageRead) -> str:
    """What the model reads for a page: a source line with the final URL, the title, the
    text. The agent frames it as untrusted data."""
    lines = [f"Source: {page.url}"]
    if page.title:
        lines.append(f"Title: {page.title}")
    return "\n".join(lines) + "\n\n" + page.text
