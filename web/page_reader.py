"""Decoding and extraction of a page in a supervised child process (TEMPORARY: folds into the
documents' reader child once issue 24's move lands)."""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from memory.document_reader import CHILD_ENV, MEMORY_LIMIT_BYTES, read_document
from memory.documents import DocumentError

_ROOT = str(Path(__file__).resolve().parents[1])
_BOOT = "import sys; sys.path.insert(0, sys.argv[1]); from web.page_child import main; main()"
# A PDF from the web is read with the budget of a large document.
PDF_TOKEN_BUDGET = 12_000


class PageReadFailure(Exception):
    pass


@dataclass(frozen=True)
class ChildPage:
    title: str
    text: str
    extractor: str


async def read_page_text(
    body: bytes,
    *,
    content_type: str,
    kind: str,
    timeout: float,  # noqa: ASYNC109
) -> ChildPage:
    header = {
        "content_type": content_type,
        "kind": kind,
        "cpu_seconds": math.ceil(timeout) + 1,
        "memory_bytes": MEMORY_LIMIT_BYTES,
    }
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-c", _BOOT, _ROOT),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env={name: os.environ[name] for name in CHILD_ENV if name in os.environ},
    )
    try:
        async with asyncio.timeout(timeout):
            output, _ = await process.communicate(json.dumps(header).encode() + b"\n" + body)
    except TimeoutError:
        raise PageReadFailure("it took too long to take apart") from None
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    try:
        answer = json.loads(output)
    except ValueError:
        raise PageReadFailure("it was too complex to take apart") from None
    if "error" in answer:
        raise PageReadFailure(str(answer["error"]))
    return ChildPage(**answer["page"])


async def read_pdf_text(body: bytes, *, timeout: float) -> str:  # noqa: ASYNC109
    try:
        document = await read_document(
            body,
            file_name="page.pdf",
            mime_type="application/pdf",
            token_budget=PDF_TOKEN_BUDGET,
            timeout=timeout,
        )
    except DocumentError as exc:
        raise PageReadFailure(f"the PDF could not be read ({exc.reason})") from None
    return document.text
