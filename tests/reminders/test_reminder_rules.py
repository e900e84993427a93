"""Repeat rules and `when` parsing with an injected clock: daylight-saving changes, month ends,
leap days, weekdays (reminders/rules.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from memory.timezones import canonical_zone, to_local
from reminders.rules import (
    WhenError,
    first_occurrence,
    latest_occurrence,
    next_occurrence,
    parse_when,
)

LISBON = ZoneInfo("Europe/Lisbon")
NEW_YORK = ZoneInfo("America/New_York")


def occurrences(local_start: datetime, tz: ZoneInfo, repeat: str, count: int) -> list[datetime]:
    """The first `count` occurrences in UTC, each found from the previous one as the
    scheduler does after a send."""
    found = [first_occurrence(local_start, tz, repeat)]
    while len(found) < count:
        following = next_occurrence(local_start, tz, repeat, found[-1])
        assert following is not None
        found.append(following)
    return found


@pytest.mark.parametrize(
    ("tz", "start", "utc_before", "utc_after"),
    [
        # Lisbon: WET (UTC+0) → WEST (UTC+1) on 29 March 2026, back on 25 October 2026.
        (LISBON, datetime(2026, 3, 27, 8, 30), "08:30", "07:30"),
        (LISBON, datetime(2026, 10, 23, 8, 30), "07:30", "08:30"),
        # New York: EST (UTC-5) → EDT (UTC-4) on 8 March 2026, back on 1 November 2026.
        (NEW_YORK, datetime(2026, 3, 6, 8, 30), "13:30", "12:30"),
        (NEW_YORK, datetime(2026, 10, 30, 8, 30), "12:30", "13:30"),
    ],
)
def test_a_daily_0830_stays_0830_local_across_a_dst_change(
    tz: ZoneInfo, start: datetime, utc_before: str, utc_after: str
) -> None:
    found = occurrences(start, tz, "daily", 5)
    assert [to_local(at, tz).strftime("%d %H:%M") for at in found] == [
        (start + timedelta(days=n)).strftime("%d 08:30") for n in range(5)
    ]
    # ... which is a different UTC hour before and after the change.
    assert found[0].strftime("%H:%M") == utc_before
    assert found[-1].strftime("%H:%M") == utc_after


def test_weekdays_skip_the_weekend_and_keep_the_local_time_over_dst() -> None:
    # Friday 6 March 2026 08:30 in New York; DST starts Sunday 8 March.
    found = occurrences(datetime(2026, 3, 6, 8, 30), NEW_YORK, "weekdays", 4)
    local = [to_local(at, NEW_YORK) for at in found]
    assert [d.strftime("%a %d %H:%M") for d in local] == [
        "Fri 06 08:30",
        "Mon 09 08:30",
        "Tue 10 08:30",
        "Wed 11 08:30",
    ]


def test_weekdays_made_on_a_saturday_start_on_monday() -> None:
    first = first_occurrence(datetime(2026, 12, 5, 9, 0), LISBON, "weekdays")
    assert to_local(first, LISBON) == datetime(2026, 12, 7, 9, 0)


def test_monthly_on_the_31st_takes_the_last_day_of_shorter_months() -> None:
    found = occurrences(datetime(2027, 1, 31, 9, 0), LISBON, "monthly", 5)
    assert [to_local(at, LISBON).date().isoformat() for at in found] == [
        "2027-01-31",
        "2027-02-28",
        "2027-03-31",
        "2027-04-30",
        "2027-05-31",
    ]


def test_monthly_on_the_29th_meets_the_leap_day() -> None:
    found = occurrences(datetime(2027, 12, 29, 7, 0), NEW_YORK, "monthly", 4)
    assert [to_local(at, NEW_YORK).date().isoformat() for at in found] == [
        "2027-12-29",
        "2028-01-29",
        "2028-02-29",  # 2028 is a leap year
        "2028-03-29",
    ]
    assert all(to_local(at, NEW_YORK).strftime("%H:%M") == "07:00" for at in found)


def test_a_one_off_reminder_on_the_leap_day_and_weekly_from_it() -> None:
    now = datetime(2028, 2, 1, tzinfo=UTC)
    when = parse_when("2028-02-29T10:15", LISBON, now)
    assert when.at == datetime(2028, 2, 29, 10, 15, tzinfo=UTC)  # Lisbon is UTC+0 in winter
    weekly = occurrences(when.local, LISBON, "weekly", 2)
    assert to_local(weekly[1], LISBON) == datetime(2028, 3, 7, 10, 15)


def test_a_missed_repeating_reminder_moves_to_the_first_time_after_now() -> None:
    # Daily at 09:00 Lisbon; the bot was down from the 1st to the 4th at noon.
    start = datetime(2026, 12, 1, 9, 0)
    down_until = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
    following = next_occurrence(start, LISBON, "daily", down_until)
    assert following == datetime(2026, 12, 5, 9, 0, tzinfo=UTC)
    # A one-off whose time passed has no next occurrence.
    assert next_occurrence(start, LISBON, "none", down_until) is None


def test_when_is_local_unless_it_has_an_offset() -> None:
    now = datetime(2026, 7, 1, 12, 0, tzinfo=UTC)
    local = parse_when("2026-07-02T09:00", LISBON, now)
    assert local.at == datetime(2026, 7, 2, 8, 0, tzinfo=UTC)  # WEST, UTC+1
    offset = parse_when("2026-07-02T09:00-04:00", LISBON, now)
    assert offset.at == datetime(2026, 7, 2, 13, 0, tzinfo=UTC)
    assert offset.local == datetime(2026, 7, 2, 14, 0)


@pytest.mark.parametrize(
    ("when", "says"),
    [
        ("2026-07-01T11:59", "in the past"),
        ("2027-07-05T12:00", "more than a year ahead"),
        ("tomorrow at nine", "not an ISO 8601 date-time"),
        ("", "empty"),
    ],
)
def test_when_refusals_tell_the_model_what_to_do(when: str, says: str) -> None:
    with pytest.raises(WhenError, match=says):
        parse_when(when, ZoneInfo("UTC"), datetime(2026, 7, 1, 12, 0, tzinfo=UTC))


@pytest.mark.parametrize(
    ("when", "says"),
    [
        ("0001-01-01T00:00", "long past"),
        ("0001-01-01T00:00+05:00", "long past"),
        ("0001-01-01T00:00-14:00", "long past"),
        ("9999-12-31T23:59", "more than a year ahead"),
        ("9999-12-31T23:59:59-12:00", "more than a year ahead"),
        ("9999-12-31T23:59+14:00", "more than a year ahead"),
    ],
)
@pytest.mark.parametrize("tz", [ZoneInfo("Asia/Tokyo"), NEW_YORK, ZoneInfo("Pacific/Kiritimati")])
def test_when_at_the_ends_of_the_calendar_is_refused_not_overflowed(
    when: str, says: str, tz: ZoneInfo
) -> None:
    """Years 1 and 9999 cannot be moved across a zone's offset (OverflowError, which reached
    the model as a tool crash): refused with a sentence the model can act on."""
    with pytest.raises(WhenError, match=says):
        parse_when(when, tz, datetime(2026, 7, 1, 12, 0, tzinfo=UTC))


def test_zone_names_are_checked_against_the_iana_database() -> None:
    assert canonical_zone("europe/lisbon") == "Europe/Lisbon"
    assert canonical_zone("America/New_York") == "America/New_York"
    assert canonical_zone("Mars/Olympus") is None
    assert canonical_zone("../../etc/passwd") is None


# Daylight-saving edges, with the exact UTC instants. New York springs forward at 02:00 local
# on 8 March 2026 (02:00-03:00 does not exist) and falls back at 02:00 on 1 November (01:00-
# 02:00 happens twice); Lisbon at 01:00 UTC on 29 March (01:00-02:00 local does not exist) and
# on 25 October (01:00-02:00 local twice).
def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("tz", "when", "utc"),
    [
        # In the gap: the offset before the change, as the clocks show it (03:30 EDT / WEST).
        (NEW_YORK, "2026-03-08T02:30", "2026-03-08T07:30"),
        (LISBON, "2026-03-29T01:30", "2026-03-29T01:30"),
        # In the overlap: the first of the two (still EDT / WEST), never an hour later.
        (NEW_YORK, "2026-11-01T01:30", "2026-11-01T05:30"),
        (LISBON, "2026-10-25T01:30", "2026-10-25T00:30"),
    ],
)
def test_a_time_in_a_dst_gap_or_overlap_is_one_exact_instant(
    tz: ZoneInfo, when: str, utc: str
) -> None:
    assert parse_when(when, tz, datetime(2026, 1, 1, tzinfo=UTC)).at == _utc(utc)


@pytest.mark.parametrize(
    ("tz", "start", "utc"),
    [
        # Daily at a time the change day does not have: that day at the hour after, then back.
        (NEW_YORK, datetime(2026, 3, 7, 2, 30),
         ["2026-03-07T07:30", "2026-03-08T07:30", "2026-03-09T06:30"]),
        (LISBON, datetime(2026, 3, 28, 1, 30),
         ["2026-03-28T01:30", "2026-03-29T01:30", "2026-03-30T00:30"]),
        # Daily at a time the change day has twice: once, at the first, then the new offset.
        (NEW_YORK, datetime(2026, 10, 31, 1, 30),
         ["2026-10-31T05:30", "2026-11-01T05:30", "2026-11-02T06:30"]),
        (LISBON, datetime(2026, 10, 24, 1, 30),
         ["2026-10-24T00:30", "2026-10-25T00:30", "2026-10-26T01:30"]),
    ],
)  # fmt: skip
def test_a_daily_reminder_in_the_gap_or_overlap_fires_once_that_day_at_the_exact_instant(
    tz: ZoneInfo, start: datetime, utc: list[str]
) -> None:
    assert occurrences(start, tz, "daily", 3) == [_utc(u) for u in utc]


@pytest.mark.parametrize(
    ("tz", "start", "after", "utc"),
    [
        # Daily 02:30 New York; the bot looks at 03:10 EDT (07:10 UTC) on the change day. That
        # day's 02:30 is 03:30 EDT, still ahead although its wall time is behind 03:10.
        (NEW_YORK, datetime(2026, 3, 1, 2, 30), "2026-03-08T07:10", "2026-03-08T07:30"),
        # Daily 01:30 Lisbon, looked at 02:10 WEST (01:10 UTC): that day's is 02:30 WEST.
        (LISBON, datetime(2026, 3, 1, 1, 30), "2026-03-29T01:10", "2026-03-29T01:30"),
        # Fall back: looked at in the second 01:10 (EST), the 01:50 already fired at the first
        # (05:50 UTC); the next is tomorrow's, not a second one today.
        (NEW_YORK, datetime(2026, 10, 1, 1, 50), "2026-11-01T06:10", "2026-11-02T06:50"),
        (LISBON, datetime(2026, 10, 1, 1, 50), "2026-10-25T01:10", "2026-10-26T01:50"),
    ],
)
def test_the_next_occurrence_looks_back_over_a_dst_change(
    tz: ZoneInfo, start: datetime, after: str, utc: str
) -> None:
    assert next_occurrence(start, tz, "daily", _utc(after)) == _utc(utc)


def test_latest_occurrence_is_the_last_time_at_or_before_now_across_a_dst_change() -> None:
    """A task missed while the bot was down runs for its latest time: 08:30 Lisbon on Sunday 28
    March 2027 is 07:30 UTC (summer time since 01:00 UTC), the day before 08:30 UTC."""
    lisbon = ZoneInfo("Europe/Lisbon")
    start = datetime(2027, 3, 25, 8, 30)
    at = latest_occurrence(start, lisbon, "daily", datetime(2027, 3, 28, 7, 45, tzinfo=UTC))
    assert at == datetime(2027, 3, 28, 7, 30, tzinfo=UTC)
    at = latest_occurrence(start, lisbon, "daily", datetime(2027, 3, 28, 7, 29, tzinfo=UTC))
    assert at == datetime(2027, 3, 27, 8, 30, tzinfo=UTC)
    assert (
        latest_occurrence(start, lisbon, "daily", datetime(2027, 3, 25, 8, 0, tzinfo=UTC)) is None
    )
    assert latest_occurrence(start, lisbon, "none", datetime(2027, 4, 1, tzinfo=UTC)) == datetime(
        2027, 3, 25, 8, 30, tzinfo=UTC
    )
