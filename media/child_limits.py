"""The set-up every bounded reader child does first (media/document_child.py, media/image_child.py).

Before it touches a hostile file, a child lowers its own scheduling priority (on a machine with
one or two cores it yields to the bot's loop, so its CPU time never comes out of the chat
loop's) and sets RLIMIT_CPU and RLIMIT_AS from the header its parent sent, so a file that would
spin or balloon dies in the child, never in the bot. One function for both children, so the two
cannot drift apart in how they bound themselves. Imports nothing of the bot.
"""

from __future__ import annotations

import json
import os
import resource
import sys
from typing import Any

# Scheduling niceness: on a machine with one or two cores the reader yields to the bot's loop.
NICENESS = 10


def limited_request() -> tuple[dict[str, Any], bytes]:
    """Bound this process, then read the request from stdin: the JSON header line (with
    `cpu_seconds` and `memory_bytes`) and the bytes after it."""
    os.nice(NICENESS)
    stdin = sys.stdin.buffer
    header: dict[str, Any] = json.loads(stdin.readline())
    cpu = int(header["cpu_seconds"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    memory = int(header["memory_bytes"])
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    return header, stdin.read()
