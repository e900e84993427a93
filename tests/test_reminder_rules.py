"""Repeat rules and `when` parsing with an injected clock: daylight-saving changes, month ends,
leap days, weekdays (reminders/rules.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from memory.timezones import canonical_zone, to_local
from reminders.rules import WhenError, first_occurrence, next_occurrence, parse_when

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


def test_zone_names_are_checked_against_the_iana_database() -> None:
    assert canonical_zone("europe/lisbon") == "Europe/Lisbon"
    assert canonical_zone("America/New_York") == "America/New_York"
    assert canonical_zone("Mars/Olympus") is None
    assert canonical_zone("../../etc/passwd") is None
