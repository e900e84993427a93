"""The child process that reads one document or one web page (started by
`media/document_reader.py`).

It limits itself first (RLIMIT_CPU, RLIMIT_AS: a hostile PDF then dies here, not in the bot;
and a lower scheduling priority, so its CPU time never comes out of the chat loop's),
reads a JSON header line and the document's bytes from stdin, and writes one JSON answer to
stdout. It imports nothing of the bot and holds nothing worth keeping.
"""

from __future__ import annotations

import sys

from media.child_limits import limited_request
from media.document_reader import answer_line
from media.documents import DocumentError, extract_text
from media.page_text import page_text


def main() -> None:
    header, data = limited_request()
    try:
        if header.get("task") == "page":
            answer = answer_line(
                page_text(data, content_type=header["content_type"], kind=header["kind"])
            )
        else:
            answer = answer_line(
                extract_text(
                    data,
                    file_name=header["file_name"],
                    mime_type=header["mime_type"],
                    token_budget=int(header["token_budget"]),
                )
            )
    except DocumentError as exc:
        answer = answer_line(exc)
    except MemoryError:
        answer = answer_line(DocumentError("too_complex"))
    sys.stdout.buffer.write(answer)
    sys.stdout.buffer.flush()
