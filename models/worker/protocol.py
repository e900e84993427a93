"""Every message between the bot and a provider worker, and how one crosses the socket.

Both sides read this module: the bot (models/worker/process.py, models/worker/remote.py) and the
worker (models/worker/child.py). Each kind of message is one small frozen dataclass below; the
two sides match on these classes, never on positions in a tuple.

A message crosses as a pickled plain tuple, its kind's name then its fields in order
(`Chunk(7, data)` → `("chunk", 7, data)`), behind a 4-byte length, over a Unix socket pair only
the two processes hold. Not the dataclass itself: a pickled dataclass instance costs about five
times a tuple to write and read, and a streamed chunk is the message sent most (the bot reads
a hundred streams at once). A frame is at most `MAX_FRAME` bytes either way: a length beyond it
is a broken stream, not something to allocate for.

Bot → worker (8): `Call`, `Go`, `Cancel`, `Ping`, and the housekeeping requests `Prepare`,
`Warm`, `ClosePool`, `Fork`, each answered by `Done`.
Worker → bot (10): `Ready`, `Pong`, `Gate`, `Stream`, `Chunk`, `End`, `Result`, `Error`,
`Local`, `Done`.

One call's exchange: `Call` → (`Gate` → `Go`, when the pace did not let it go at once) →
`Result` | `Error` | `Local`, or `Stream` → `Chunk`… → `End`. The bot may `Cancel` at any time.
"""

from __future__ import annotations

import asyncio
import pickle
import struct
from dataclasses import dataclass
from typing import Any, ClassVar

from models.errors import Classified
from models.worker.ipc import CallNotEncodedError, ChunkData, ClientSpec, FrameError, WireFields

_LENGTH = struct.Struct("!I")
# A photo crosses as a data URL (~27 MB for Telegram's largest); a few of them fit.
MAX_FRAME = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Message:
    """One message; `kind` names it on the wire."""

    kind: ClassVar[str]


# --- bot → worker -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Call(Message):
    """Make litellm's `name` call ("completion" or "transcription") with `kwargs`, handing it
    the HTTP client `client` names. `gated`: ask (`Gate`) right before the request leaves."""

    kind = "call"
    call_id: int
    name: str
    kwargs: dict[str, Any]
    client: ClientSpec
    gated: bool


@dataclass(frozen=True, slots=True)
class Go(Message):
    """The answer to `Gate`: the request may leave now."""

    kind = "go"
    call_id: int


@dataclass(frozen=True, slots=True)
class Cancel(Message):
    """Stop this call (or housekeeping request): the bot has forgotten it."""

    kind = "cancel"
    call_id: int


@dataclass(frozen=True, slots=True)
class Ping(Message):
    """Are you there? (answered by `Pong`; silence for the heartbeat makes a worker lost)"""

    kind = "ping"


@dataclass(frozen=True, slots=True)
class Prepare(Message):
    """Build the HTTP clients of these gateways and keys now (TLS set-up), before calls."""

    kind = "prepare"
    call_id: int
    specs: list[ClientSpec]


@dataclass(frozen=True, slots=True)
class Warm(Message):
    """Load now what litellm loads during these models' first real calls."""

    kind = "warm"
    call_id: int
    model_names: list[str]


@dataclass(frozen=True, slots=True)
class ClosePool(Message):
    """Close the HTTP clients of one transport (`ClientSpec.pool`)."""

    kind = "close_pool"
    call_id: int
    pool: int


@dataclass(frozen=True, slots=True)
class Fork(Message):
    """Start a copy of yourself serving on spare socket `index`; `Done` carries its pid."""

    kind = "fork"
    call_id: int
    index: int


# --- worker → bot -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ready(Message):
    """Sent once, when litellm is imported: the worker takes messages."""

    kind = "ready"
    pid: int


@dataclass(frozen=True, slots=True)
class Pong(Message):
    """The answer to `Ping`."""

    kind = "pong"


@dataclass(frozen=True, slots=True)
class Gate(Message):
    """The request is about to leave: may it? (the bot keeps the gateway's pace; `Go`)"""

    kind = "gate"
    call_id: int


@dataclass(frozen=True, slots=True)
class Stream(Message):
    """The call's answer is a stream: `Chunk`s follow, then `End`."""

    kind = "stream"
    call_id: int
    headers: dict[str, str]
    wire: WireFields


@dataclass(frozen=True, slots=True)
class Chunk(Message):
    """One streamed chunk, as models/worker/ipc.py `chunk_data` makes it."""

    kind = "chunk"
    call_id: int
    data: ChunkData


@dataclass(frozen=True, slots=True)
class End(Message):
    """The stream ended: cleanly (`failure` None) or broken, classified."""

    kind = "end"
    call_id: int
    failure: Classified | None
    wire: WireFields


@dataclass(frozen=True, slots=True)
class Result(Message):
    """A whole answer (non-streamed completion, transcription) as plain data, and the headers
    litellm kept (models/worker/ipc.py `response_data`)."""

    kind = "result"
    call_id: int
    data: Any
    headers: dict[str, str]
    wire: WireFields


@dataclass(frozen=True, slots=True)
class Error(Message):
    """The provider's failure, classified in the worker beside the exception."""

    kind = "error"
    call_id: int
    failure: Classified
    wire: WireFields


@dataclass(frozen=True, slots=True)
class Local(Message):
    """The worker could not send the answer back (ours, never the provider's doing)."""

    kind = "local"
    call_id: int
    detail: str


@dataclass(frozen=True, slots=True)
class Done(Message):
    """A housekeeping request is done; `result` is what it made (a fork's pid), if anything."""

    kind = "done"
    call_id: int
    result: Any = None


TO_WORKER: tuple[type[Message], ...] = (Call, Go, Cancel, Ping, Prepare, Warm, ClosePool, Fork)
TO_BOT: tuple[type[Message], ...] = (
    Ready, Pong, Gate, Stream, Chunk, End, Result, Error, Local, Done,
)  # fmt: skip
KINDS: dict[str, type[Message]] = {cls.kind: cls for cls in (*TO_WORKER, *TO_BOT)}


# --- framing ------------------------------------------------------------------------------------


def encode(message: Message) -> bytes:
    """The frame of `message`. Raises CallNotEncodedError when it cannot cross."""
    names: tuple[str, ...] = message.__match_args__  # each kind lists its fields
    fields = tuple(getattr(message, name) for name in names)
    try:
        body = pickle.dumps((message.kind, *fields), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # PicklingError, TypeError, RecursionError, ...
        raise CallNotEncodedError(f"call could not be encoded: {type(exc).__name__}") from exc
    if len(body) > MAX_FRAME:
        raise CallNotEncodedError(f"call too large to send ({len(body)} bytes)")
    return _LENGTH.pack(len(body)) + body


async def read_message(reader: asyncio.StreamReader) -> Message:
    """The next message; IncompleteReadError when the other side has gone, FrameError or any
    unpickling error when what came is not a message."""
    size = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))[0]
    if size > MAX_FRAME:
        raise FrameError(f"frame of {size} bytes")
    return decode(pickle.loads(await reader.readexactly(size)))


def decode(body: Any) -> Message:
    """The message an unpickled frame holds; FrameError when it holds none."""
    if not isinstance(body, tuple) or not body:
        raise FrameError(f"not a message: {type(body).__name__}")
    cls = KINDS.get(body[0]) if isinstance(body[0], str) else None
    if cls is None:
        raise FrameError(f"unknown message {body[0]!r}")
    try:
        return cls(*body[1:])
    except TypeError as exc:  # the wrong number of fields
        raise FrameError(f"{cls.kind}: {exc}") from None
