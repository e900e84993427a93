"""When a reminder falls due: the `when` a model gives, repeat rules. No I/O (time zones
themselves: memory/timezones.py).

Repeats are computed on LOCAL wall time with dateutil's rrule and only then converted to UTC
with the reminder's zone (zoneinfo, tzdata as the fallback database), so "every weekday at
08:30" stays 08:30 in Lisbon or New York across daylight-saving changes — the failure that made
other bots fire an 08:30 job at 00:30. Everything takes the current time as an argument, so the
rules are tested with any clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from dateutil.rrule import DAILY, FR, MO, MONTHLY, TH, TU, WE, WEEKLY, rrule

from memory.timezones import to_local, to_utc
from reminders import RemindersError

REPEATS = ("none", "daily", "weekdays", "weekly", "monthly")
MAX_AHEAD = timedelta(days=366)  # "more than a year ahead" is refused
LOCAL_FORMAT = "%Y-%m-%dT%H:%M:%S"
_FAR = timedelta(days=2)  # beyond any UTC offset, so a date this far out is refused unconverted


class WhenError(RemindersError, ValueError):
    """A `when` the model must correct; str(self) says how."""


@dataclass(frozen=True)
class When:
    at: datetime  # aware, UTC
    local: datetime  # naive wall time in the reminder's zone


def parse_when(text: str, tz: ZoneInfo, now: datetime) -> When:
    """An ISO 8601 date-time, local to `tz` unless it carries an offset; refused when past or
    more than a year ahead."""
    raw = text.strip()
    if not raw:
        raise WhenError("'when' is empty; give an ISO 8601 date-time like 2026-12-02T09:00")
    try:
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise WhenError(
            f"'when' {raw[:40]!r} is not an ISO 8601 date-time; use e.g. 2026-12-02T09:00 "
            "(local to the chat's time zone) and call again"
        ) from None
    # A date far from now is refused on its face, before any zone arithmetic: converting
    # 0001-01-01 or 9999-12-31 across an offset leaves datetime's range (OverflowError).
    # Offsets are under a day, so two days of margin keep every date let through convertible.
    distance = parsed.replace(tzinfo=None) - now.astimezone(UTC).replace(tzinfo=None)
    if distance < -_FAR:
        raise WhenError(
            f"'when' {raw[:40]!r} is long past (now it is {to_local(now, tz).strftime('%Y-%m-%d')}"
            f" in {tz.key}); nothing was scheduled. Ask the user for a future time."
        )
    if distance > MAX_AHEAD + _FAR:
        raise WhenError(
            "that is more than a year ahead; reminders can be set up to one year in advance"
        )
    if parsed.tzinfo is None:
        local = parsed.replace(second=parsed.second, microsecond=0)
        at = to_utc(local, tz)
    else:
        at = parsed.astimezone(UTC).replace(microsecond=0)
        local = to_local(at, tz)
    if at <= now:
        shown = local.strftime("%Y-%m-%d %H:%M")
        raise WhenError(
            f"{shown} ({tz.key}) is in the past (now it is "
            f"{to_local(now, tz).strftime('%Y-%m-%d %H:%M')}); nothing was scheduled. "
            "Ask the user for a future time."
        )
    if at - now > MAX_AHEAD:
        raise WhenError(
            "that is more than a year ahead; reminders can be set up to one year in advance"
        )
    return When(at, local)


_WEEKDAYS = (MO, TU, WE, TH, FR)


def _rule(local_start: datetime, repeat: str) -> rrule:
    if repeat == "daily":
        return rrule(DAILY, dtstart=local_start)
    if repeat == "weekdays":
        return rrule(DAILY, dtstart=local_start, byweekday=_WEEKDAYS)
    if repeat == "weekly":
        return rrule(WEEKLY, dtstart=local_start)
    if repeat == "monthly":
        day = local_start.day
        if day <= 28:
            return rrule(MONTHLY, dtstart=local_start, bymonthday=day)
        # The 29th-31st: the month's last day when it is shorter (31 Jan → 28/29 Feb → 31 Mar).
        return rrule(MONTHLY, dtstart=local_start, bymonthday=range(28, day + 1), bysetpos=-1)
    raise ValueError(f"not a repeating rule: {repeat!r}")


def next_occurrence(
    local_start: datetime, tz: ZoneInfo, repeat: str, after: datetime
) -> datetime | None:
    """The first occurrence strictly after `after` (aware), in UTC; None when there is none
    (a one-off reminder whose time has passed)."""
    if repeat == "none":
        at = to_utc(local_start, tz)
        return at if at > after else None
    rule = _rule(local_start, repeat)
    # Start a little before `after` in local time: around a DST change the wall-clock offset
    # differs by up to an hour (more in a few zones), and the UTC check below decides.
    probe = to_local(after, tz) - timedelta(hours=3)
    for candidate in rule.xafter(max(probe, local_start), count=16, inc=True):
        at = to_utc(candidate, tz)
        if at > after:
            return at
    return None  # unreachable for the rules above; kept total


def latest_occurrence(
    local_start: datetime, tz: ZoneInfo, repeat: str, now: datetime
) -> datetime | None:
    """The last occurrence at or before `now` (aware), in UTC; None when none has come yet.
    A task missed for days runs for its latest time, not its oldest (reminders/book.py)."""
    if repeat == "none":
        at = to_utc(local_start, tz)
        return at if at <= now else None
    # As in next_occurrence: probe a little past `now` in local time, the UTC check decides.
    probe = to_local(now, tz) + timedelta(hours=3)
    candidate = _rule(local_start, repeat).before(probe, inc=True)
    while candidate is not None and to_utc(candidate, tz) > now:
        candidate = _rule(local_start, repeat).before(candidate)
    return to_utc(candidate, tz) if candidate is not None else None


def first_occurrence(local_start: datetime, tz: ZoneInfo, repeat: str) -> datetime:
    """The reminder's first time in UTC: the start itself, or for "weekdays" a start on a
    weekend moves to the next weekday at the same time."""
    if repeat == "none":
        return to_utc(local_start, tz)
    first = _rule(local_start, repeat).after(local_start, inc=True)
    assert first is not None
    return to_utc(first, tz)


def format_local(moment: datetime) -> str:
    return moment.strftime(LOCAL_FORMAT)


def parse_local(text: str) -> datetime:
    return datetime.strptime(text, LOCAL_FORMAT)
