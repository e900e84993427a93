"""Feeding a StreamingReply as a model would, and comparing texts across message splits."""

from __future__ import annotations

import asyncio
import re

from bot.ui.streaming import StreamingReply


async def stream_into(reply: StreamingReply, text: str, *, chunk: int, pause: float) -> None:
    """Append `text` in pieces of `chunk` characters, `pause` seconds apart."""
    for start in range(0, len(text), chunk):
        await reply.append(text[start : start + chunk])
        await asyncio.sleep(pause)


def content(text: str) -> str:
    """The text without whitespace: what survives being split into messages and trimmed."""
    return re.sub(r"\s+", "", text)
