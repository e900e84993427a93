"""Time zones: a zone's IANA name, the zone a chat has set, and local wall time ↔ UTC. No I/O.

In memory/, not reminders/, because the store reads a chat's zone with
each turn's start (memory/store.py TurnStart), the prompt's time line (agent/prompt.py) shows
it, and the reminder rules convert with it: the lowest layer all three may import.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones


@lru_cache(maxsize=1)
def _zone_names() -> dict[str, str]:
    return {name.lower(): name for name in available_timezones()}


def canonical_zone(name: str) -> str | None:
    """The IANA name for `name` (any letter case), or None if there is no such zone."""
    cleaned = name.strip()
    if not cleaned or len(cleaned) > 64:
        return None
    return _zone_names().get(cleaned.lower())


UNKNOWN_ZONE = "UTC"


@dataclass(frozen=True)
class ChatZone:
    name: str  # the IANA name, or "UTC" while unknown
    known: bool


def chat_zone_of(stored: str | None) -> ChatZone:
    """The zone a chat's stored `time_zone` names; UTC, marked unknown, while none is set."""
    if stored and canonical_zone(stored):
        return ChatZone(stored, True)
    return ChatZone(UNKNOWN_ZONE, False)


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


def to_utc(local: datetime, tz: ZoneInfo) -> datetime:
    """Local wall time → UTC. A time inside a spring-forward gap takes the offset in force
    before the change (02:30 that does not exist becomes 03:30), as clocks show it."""
    return local.replace(tzinfo=tz).astimezone(UTC)


def to_local(moment: datetime, tz: ZoneInfo) -> datetime:
    """UTC (aware) → local wall time (naive)."""
    return moment.astimezone(tz).replace(tzinfo=None)
