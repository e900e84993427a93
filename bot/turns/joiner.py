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
import time
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from bot.ui.render import utf16_len
from primitives.clock import Clock
from primitives.waits import wait_or_timeout

# A part at least this long (UTF-16 units) may have been cut by the client. Clients cut at a
# boundary before 4096, so real parts fall a little short of the limit; a human message of this
# length only waits `window` seconds longer, while a missed part would cost a whole extra turn.
DEFAULT_FULL_PART_UNITS = 3000
# At most this many parts join into one turn (a 16-part message is ~64,000 UTF-16 units, four
# times the default MAX_INPUT_CHARS). Without a cap, full-size parts kept a group open, and
# every part skipped the rate limit, for as long as they kept coming.
MAX_SPLIT_PARTS = 16

RefT = TypeVar("RefT")


@dataclass
class JoinedTurn(Generic[RefT]):
    """The text of one user turn and the references of every part, in arrival order."""

    parts: list[str] = field(default_factory=list)
    refs: list[RefT] = field(default_factory=list)
    # True when the parts passed a cap: the turn is cut short and must be refused as too long.
    overflowed: bool = False

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

    Caps: a group closes at once when it holds `max_parts` parts or more than `max_chars`
    characters; the leader then gets the turn marked `overflowed` (to be refused as too long),
    and further full-size parts of that key arriving within `window` of each other are
    dropped (they belong to the refused message) until a short, final part or a pause.
    """

    def __init__(
        self,
        window: float,
        *,
        full_part_units: int = DEFAULT_FULL_PART_UNITS,
        max_parts: int = MAX_SPLIT_PARTS,
        max_chars: int | None = None,
        clock: Clock[float] = time.monotonic,
    ) -> None:
        self.window = window
        self.full_part_units = full_part_units
        self.max_parts = max_parts
        self.max_chars = max_chars
        self._clock = clock
        self._groups: dict[Hashable, _Group[RefT]] = {}
        self._dropping: dict[Hashable, float] = {}  # key -> until when overflow parts drop
        self.dropped = 0

    def _is_full(self, text: str) -> bool:
        return utf16_len(text) >= self.full_part_units

    def _over_cap(self, turn: JoinedTurn[RefT]) -> bool:
        if len(turn.parts) > self.max_parts:
            return True
        return self.max_chars is not None and sum(len(p) for p in turn.parts) > self.max_chars

    def _drops(self, key: Hashable, text: str) -> bool:
        """True if this part belongs to a message that already overflowed (and is dropped)."""
        now = self._clock()
        if len(self._dropping) > 1024:  # bounded memory over months of uptime
            self._dropping = {k: u for k, u in self._dropping.items() if u > now}
        until = self._dropping.get(key)
        if until is None or until <= now:
            self._dropping.pop(key, None)
            return False
        self.dropped += 1
        if self._is_full(text):
            self._dropping[key] = now + self.window
        else:
            del self._dropping[key]  # the message's last part
        return True

    async def submit(self, key: Hashable, text: str, ref: RefT) -> JoinedTurn[RefT] | None:
        group = self._groups.get(key)
        if group is not None and not group.closed:
            group.turn.parts.append(text)
            group.turn.refs.append(ref)
            if self._over_cap(group.turn):
                group.turn.overflowed = True
                group.closed = True
                if self._is_full(text):
                    self._dropping[key] = self._clock() + self.window
            elif not self._is_full(text):
                group.closed = True
            group.more.set()
            return None
        if self._drops(key, text):
            return None
        turn: JoinedTurn[RefT] = JoinedTurn([text], [ref])
        if self.window <= 0 or not self._is_full(text):
            return turn
        group = _Group(turn, asyncio.Event())
        self._groups[key] = group
        try:
            while not group.closed:
                group.more.clear()
                if not await wait_or_timeout(group.more, timeout=self.window):
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
