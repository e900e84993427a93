"""models/worker/protocol.py: every message crosses the socket and comes back as itself, and
what is not one of them is refused (the pool then replaces the worker that sent it)."""

from __future__ import annotations

import asyncio
import pickle
import struct
from typing import Any

import pytest

from models.errors import Classified
from models.gateways import Gateway
from models.types import Outcome
from models.worker.ipc import ClientSpec, FrameError
from models.worker.protocol import (
    KINDS,
    TO_BOT,
    TO_WORKER,
    Call,
    Cancel,
    Chunk,
    ClosePool,
    Done,
    End,
    Error,
    Fork,
    Gate,
    Go,
    Local,
    Message,
    Ping,
    Pong,
    Prepare,
    Ready,
    Result,
    Stream,
    Warm,
    encode,
    read_message,
)

GATEWAY = Gateway("openai", "openai", "http://127.0.0.1:9/v1", ("sk-a", "sk-b"))
SPEC = ClientSpec(1, GATEWAY, 0, "sk-a")
WIRE = (200, {"x-ratelimit-remaining-requests": "9"}, None, 12.5)
FAILED = Classified(Outcome.RATE_LIMIT, "429 slow down", 429)

ONE_OF_EACH: list[Message] = [
    Call(1, "completion", {"model": "openai/gpt-4.1", "messages": []}, SPEC, True),
    Go(1),
    Cancel(1),
    Ping(),
    Prepare(2, [SPEC]),
    Warm(3, ["openai/gpt-4.1"]),
    ClosePool(4, 1),
    Fork(5, 0),
    Ready(4242),
    Pong(),
    Gate(1),
    Stream(1, {"x-request-id": "r1"}, WIRE),
    Chunk(1, ((3, 1), (("stop", "hi", None),))),
    End(1, None, WIRE),
    Result(1, {"text": "hello"}, {}, WIRE),
    Error(1, FAILED, WIRE),
    Local(1, "provider worker: TypeError"),
    Done(5, 4243),
]


def test_there_are_eighteen_kinds_and_each_has_its_own_name() -> None:
    assert len(TO_WORKER) + len(TO_BOT) == 18 == len(KINDS)
    assert {type(m) for m in ONE_OF_EACH} == set(KINDS.values())


async def _read_back(frame: bytes) -> Message:
    reader = asyncio.StreamReader()
    reader.feed_data(frame)
    reader.feed_eof()
    return await read_message(reader)


@pytest.mark.parametrize("message", ONE_OF_EACH, ids=lambda m: m.kind)
async def test_every_message_crosses_and_comes_back_as_itself(message: Message) -> None:
    assert await _read_back(encode(message)) == message


def _frame(body: Any) -> bytes:
    data = pickle.dumps(body)
    return struct.pack("!I", len(data)) + data


@pytest.mark.parametrize(
    "body",
    [("chunk",), ("chunk", 1, "data", "extra"), ("hello", 1), (7, 1), ["go", 1], ()],
    ids=["too-few-fields", "too-many-fields", "unknown-kind", "kind-not-a-name", "list", "empty"],
)
async def test_what_is_not_a_message_is_refused(body: Any) -> None:
    with pytest.raises(FrameError):
        await _read_back(_frame(body))
