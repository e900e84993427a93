"""TEMPORARY child for web/page_reader.py (folds into the documents' reader child)."""

from __future__ import annotations

import json
import os
import resource
import sys
from dataclasses import asdict


def main() -> None:
    os.nice(10)
    stdin = sys.stdin.buffer
    header = json.loads(stdin.readline())
    cpu = int(header["cpu_seconds"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    memory = int(header["memory_bytes"])
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    data = stdin.read()
    from web.decode import decode_body
    from web.extract import PageText, main_text

    try:
        text = decode_body(data, header["content_type"], header["kind"])
        page = main_text(text) if header["kind"] == "html" else PageText("", text, "plain")
        answer = {"page": asdict(page)}
    except MemoryError:
        answer = {"error": "too complex"}
    sys.stdout.buffer.write(json.dumps(answer).encode())
    sys.stdout.buffer.flush()
