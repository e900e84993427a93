"""Our MCP test server, written with the SDK's MCPServer: one tool per behaviour a client must
survive. `python ours.py` serves stdio; `python ours.py http PORT` serves streamable HTTP on
127.0.0.1:PORT (path /mcp).

Tools: `lookup` (read-only), `append_note` (a side effect: a line appended to $NOTES_FILE),
`hang` (never answers), `crash` (the process exits mid-call), `huge` (a result of N characters),
`env_list` (its own environment), `pid` (its process id), `picture` (an image), `plan_trip`
(pydantic arguments: `$defs`, `$ref`, null unions in its schema), `fails` (an is_error result).

With OURS_IGNORE_EOF=1 in its environment it stays alive after its input ends, as a careless
server would: only the launcher's parent-death signal can then end it when the bot dies.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

from mcp.server.mcpserver import Image, MCPServer
from mcp_types import ToolAnnotations
from pydantic import BaseModel

READ_ONLY = ToolAnnotations(read_only_hint=True)
# The smallest valid PNG (1×1, transparent).
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000100e221bc330000000049454e44ae426082"
)

server = MCPServer("ours")


@server.tool(annotations=READ_ONLY, structured_output=False)
def lookup(query: str) -> str:
    """Look a word up in the club's records."""
    return f"found: {query} (member since 2019)"


@server.tool(structured_output=False)
def append_note(text: str) -> str:
    """Append a line to the club's notes."""
    with Path(os.environ["NOTES_FILE"]).open("a", encoding="utf-8") as notes:
        notes.write(text + "\n")
    return f"appended: {text}"


@server.tool(annotations=READ_ONLY, structured_output=False)
async def hang(seconds: float = 3600.0) -> str:
    """Wait (for a long time) before answering."""
    await asyncio.sleep(seconds)
    return "done waiting"


@server.tool(annotations=READ_ONLY, structured_output=False)
def crash() -> str:
    """Exit the server process in the middle of the call."""
    os._exit(3)


@server.tool(annotations=READ_ONLY, structured_output=False)
def huge(chars: int = 5_000_000) -> str:
    """A very long result."""
    return "y" * chars


@server.tool(annotations=READ_ONLY, structured_output=False)
def env_list() -> str:
    """The server's own environment, as JSON."""
    return json.dumps(dict(os.environ), sort_keys=True)


@server.tool(annotations=READ_ONLY, structured_output=False)
def pid() -> str:
    """The server's process id."""
    return str(os.getpid())


@server.tool(annotations=READ_ONLY)
def picture() -> Image:
    """A tiny picture."""
    return Image(data=PNG, format="png")


class Stop(BaseModel):
    city: str
    nights: int | None = None


class Trip(BaseModel):
    traveller: str
    stops: list[Stop]
    note: str | None = None


@server.tool(annotations=READ_ONLY, structured_output=False)
def plan_trip(trip: Trip, budget: float | None = None) -> str:
    """Plan a trip with several stops."""
    return f"{trip.traveller}: {len(trip.stops)} stops, budget {budget}"


@server.tool(annotations=READ_ONLY, structured_output=False)
def fails() -> str:
    """Always fails."""
    raise ValueError("the records are locked")


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
        if os.environ.get("OURS_IGNORE_EOF") == "1":
            time.sleep(3600)
