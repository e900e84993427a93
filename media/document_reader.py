"""Documents read in a supervised child process, so one hostile file cannot freeze the bot.

pypdf is pure Python and CPU-bound: a 2 KB PDF whose pages all share one compressed content
stream of text operators costs about a second of CPU per page, and a thread would hold the GIL
of the chat loop all along. So `extract_text` runs in a child Python process
(`media/document_child.py`) that sets its own RLIMIT_CPU and RLIMIT_AS before it touches the
file, and the caller waits for it with a wall-clock timeout. On timeout (or when the caller is
cancelled: /cancel, /new, shutdown) the child is killed and reaped; a child that dies of a
limit is the document's failure ("too_complex"), answered to the user like any unreadable file.

Children run in two shares of slots: the user's files (documents, images: FILE_READERS at
once) and web pages (PAGE_READERS), so a model reading page after page never keeps a user's
document waiting, nor a burst of documents the model's reads. A reader past its share waits
its turn, for SLOT_WAIT_SECONDS at most (its wall-clock timeout starts when its own child
starts); then it is refused with DocumentError("busy"), which the web tool returns as a clear
tool error and a document or photo answers politely: a queue that grows without bound is a
hang to whoever is at its end.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict
from enum import StrEnum
from typing import Any

import structlog

from media.documents import DocumentError, DocumentText
from media.page_text import PageText
from primitives.interpreter import child_env, python_command

log = structlog.get_logger("media.document_reader")

_BOOT = "from media.document_child import main; main()"
# Address space a reader may map: pypdf's objects for a 10 MB PDF stay far below this, and
# the interpreter with pypdf imported maps ~60 MB.
MEMORY_LIMIT_BYTES = 1024 * 1024 * 1024
# Children reading at once, per share; the machines this runs on have one or two cores to
# spare, and every child is niced below the chat loop.
FILE_READERS = 2
PAGE_READERS = 1
# The longest a reader waits for a slot of its share: past it the wait is a refusal ("busy").
SLOT_WAIT_SECONDS = 30.0


class Share(StrEnum):
    """Whose readers a child counts against."""

    FILES = "files"  # a document or an image the user sent
    PAGES = "pages"  # a web page (or a PDF) the model asked for


# The child parses hostile files: it gets no secret (no key, no bot token), only these.
CHILD_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")


class ReaderSlots:
    """The slots of both shares, one object per bot (the composition root builds it and hands
    it to every reader): a semaphore belongs to the event loop that first waits on it, so one
    set per process would tie every later loop to the first."""

    def __init__(self, files: int = FILE_READERS, pages: int = PAGE_READERS) -> None:
        self._semaphores = {
            Share.FILES: asyncio.Semaphore(files),
            Share.PAGES: asyncio.Semaphore(pages),
        }

    @asynccontextmanager
    async def slot(self, share: Share, wait: float | None = None) -> AsyncIterator[None]:
        """A slot of `share` for one child, waited for `wait` seconds at most
        (SLOT_WAIT_SECONDS when None, read at the call); raises DocumentError("busy") past
        that."""
        wait = SLOT_WAIT_SECONDS if wait is None else wait
        semaphore = self._semaphores[share]
        try:
            async with asyncio.timeout(wait):
                await semaphore.acquire()
        except TimeoutError:
            log.warning("reader_slot_busy", share=share.value, waited_s=wait)
            raise DocumentError("busy") from None
        try:
            yield
        finally:
            semaphore.release()


def child_request(
    *, file_name: str | None, mime_type: str | None, token_budget: int, timeout: float
) -> bytes:
    """The header line the child reads before the document's bytes."""
    limits = {"cpu_seconds": math.ceil(timeout) + 1, "memory_bytes": MEMORY_LIMIT_BYTES}
    header = {
        "file_name": file_name,
        "mime_type": mime_type,
        "token_budget": token_budget,
        **limits,
    }
    return json.dumps(header).encode("utf-8") + b"\n"


async def read_document(
    data: bytes,
    *,
    file_name: str | None,
    mime_type: str | None,
    token_budget: int,
    timeout: float,  # noqa: ASYNC109 - the wall-clock bound of the child, part of the contract
    slots: ReaderSlots,
    share: Share = Share.FILES,
    slot_wait: float | None = None,
) -> DocumentText:
    """`extract_text` in a child process bounded by `timeout` seconds of wall clock (and CPU)
    and MEMORY_LIMIT_BYTES; raises DocumentError, reason "too_complex" for a child that ran
    out of time or memory, "busy" when no slot of `share` came free within `slot_wait`."""
    header = child_request(
        file_name=file_name, mime_type=mime_type, token_budget=token_budget, timeout=timeout
    )
    output, returncode = await in_child(
        header + data, timeout, slots=slots, share=share, slot_wait=slot_wait
    )
    return _parse(output, returncode)


async def read_page(
    body: bytes,
    *,
    content_type: str,
    kind: str,
    timeout: float,  # noqa: ASYNC109 - the wall-clock bound of the child
    slots: ReaderSlots,
    slot_wait: float | None = None,
) -> PageText:
    """`page_text` (a fetched web page: decoding, then its main text) in the same bounded
    child as documents, on the pages' share of slots; raises DocumentError ("too_complex",
    "busy") as `read_document` does."""
    header = {
        "task": "page",
        "content_type": content_type,
        "kind": kind,
        "cpu_seconds": math.ceil(timeout) + 1,
        "memory_bytes": MEMORY_LIMIT_BYTES,
    }
    line = json.dumps(header).encode("utf-8") + b"\n"
    output, returncode = await in_child(
        line + body, timeout, slots=slots, share=Share.PAGES, slot_wait=slot_wait
    )
    return PageText(**_answer(output, returncode)["page"])


async def in_child(
    request: bytes,
    timeout: float,  # noqa: ASYNC109 - the wall-clock bound of the child
    *,
    slots: ReaderSlots,
    child: str = "media.document_child",
    share: Share = Share.FILES,
    slot_wait: float | None = None,
) -> tuple[bytes, int | None]:
    """One child's answer to `request` (header line and bytes), within `timeout` seconds; the
    child is killed and reaped on timeout or cancellation. `child`: the module whose main()
    runs in it (images have their own, media/image_child.py); `share`: whose of `slots` it takes
    (see the module docstring), waited for `slot_wait` seconds at most ("busy")."""
    async with slots.slot(share, slot_wait):
        process = await asyncio.create_subprocess_exec(
            *python_command(_BOOT.replace("media.document_child", child)),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env=child_env({name: os.environ[name] for name in CHILD_ENV if name in os.environ}),
        )
        try:
            async with asyncio.timeout(timeout):
                output, _ = await process.communicate(request)
        except TimeoutError:
            log.warning("document_reader_timeout", pid=process.pid, timeout_s=timeout)
            raise DocumentError("too_complex") from None
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()  # reaped even when the caller was cancelled
    return output, process.returncode


def _parse(output: bytes, returncode: int | None) -> DocumentText:
    """The child's one JSON line: {"text": {...}} or {"error": reason}."""
    return DocumentText(**_answer(output, returncode)["text"])


def _answer(output: bytes, returncode: int | None) -> dict[str, Any]:
    """The child's answer, or DocumentError for its error or its death."""
    try:
        answer = json.loads(output)
    except ValueError:
        # Killed by RLIMIT_CPU (SIGXCPU) or RLIMIT_AS outside Python's reach: nothing written.
        log.warning("document_reader_died", returncode=returncode)
        raise DocumentError("too_complex") from None
    if "error" in answer:
        raise DocumentError(str(answer["error"]))
    return dict(answer)


def answer_line(document: DocumentText | PageText | DocumentError) -> bytes:
    """What the child writes: the extracted text, or the reason it could not be read."""
    if isinstance(document, DocumentError):
        return json.dumps({"error": document.reason}).encode("utf-8")
    if isinstance(document, PageText):
        return json.dumps({"page": asdict(document)}).encode("utf-8")
    return json.dumps({"text": asdict(document)}).encode("utf-8")
