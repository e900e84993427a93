"""Joins the parts of a long message that Telegram clients split into several updates.

A client splits a message over 4096 UTF-16 units into parts of nearly 4096 units each (cut at a
word or line boundary) and sends them one after another. Treated separately, each part would get
its own reply and its own model call. So: a part that is nearly full opens (or extends) a group
and waits up to `window` seconds for the next part; a shorter part is the last one and closes
the group at once. An ordinary short message is never delayed.

Telegram-free: callers pass the text and any reference (e.g. a message id) they want back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from bot.render import TELEGRAM_TEXT_LIMIT, utf16_len

TELEGRAM_MESSAGE_LIMIT = TELEGRAM_TEXT_LIMIT
# A part at least this long (UTF-16 units) may have been cut by the client. Clients cut at a
# boundary before 4096, so real parts fall a little short of the limit; a human message of this
# length only waits `window` seconds longer, while a missed part would cost a whole extra turn.
DEFAULT_FULL_PART_UNITS = 3000

RefT = TypeVar("RefT")


@dataclass
class JoinedTurn(Generic[RefT]):
    """The text of one user turn and the references of every part, in arrival order."""

    parts: list[str] = field(default_factory=list)
    refs: list[RefT] = field(default_factory=list)

    @property
    def text(self) -> str:
        return join_parts(self.parts)


def join_parts(parts: list[str]) -> str:
    """Concatenate parts, keeping the cut's whitespace if the client left it, else a newline.

    Clients cut at a space or line break and may drop it; a newline keeps the words apart
    without inventing content.
    """
    if not parts:
        return ""
    text = parts[0]
    for part in parts[1:]:
        if text[-1:].isspace() or part[:1].isspace():
            text += part
        else:
            text += "\n" + part
    return text


@dataclass
class _Group(Generic[RefT]):
    turn: JoinedTurn[RefT]
    more: asyncio.Event
    closed: bool = False


class MessageJoiner(Generic[RefT]):
    """Per-key (chat, user) grouping of split message parts.

    `submit` returns the joined turn to the caller that brought the first part (the leader) once
    the group closes, and None to callers whose part joined an open group: their update is
    handled by the leader. Call it before taking the chat's turn lock, or later parts would
    queue behind the leader that is waiting for them.
    """

    def __init__(self, window: float, *, full_part_units: int = DEFAULT_FULL_PART_UNITS) -> None:
        self.window = window
        self.full_part_units = full_part_units
        self._groups: dict[Hashable, _Group[RefT]] = {}

    def _is_full(self, text: str) -> bool:
        return utf16_len(text) >= self.full_part_units

    async def submit(self, key: Hashable, text: str, ref: RefT) -> JoinedTurn[RefT] | None:
        group = self._groups.get(key)
        if group is not None and not group.closed:
            group.turn.parts.append(text)
            group.turn.refs.append(ref)
            if not self._is_full(text):
                group.closed = True
            group.more.set()
            return None
        turn: JoinedTurn[RefT] = JoinedTurn([text], [ref])
        if self.window <= 0 or not self._is_full(text):
            return turn
        group = _Group(turn, asyncio.Event())
        self._groups[key] = group
        try:
            while not group.closed:
                group.more.clear()
                try:
                    await asyncio.wait_for(group.more.wait(), timeout=self.window)
                except TimeoutError:
                    break
        finally:
            group.closed = True
            if self._groups.get(key) is group:
                del self._groups[key]
        return turn

    def leader_ref(self, key: Hashable) -> RefT | None:
        """The first part's reference of the group open for `key`, if any."""
        group = self._groups.get(key)
        if group is None or group.closed:
            return None
        return group.turn.refs[0]

    def flush(self) -> None:
        """Close every open group now (shutdown): leaders return what they have at once."""
        for group in self._groups.values():
            group.closed = True
            group.more.set()

    @property
    def pending(self) -> int:
        return len(self._groups)
