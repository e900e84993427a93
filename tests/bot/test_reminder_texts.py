"""The bot's words about reminders: receipts in every language from the stored reminder, the
late mark, and the group mention (bot/ui/reminder_texts.py)."""

from __future__ import annotations

from datetime import UTC, datetime

from agent.tools.memory import Receipt
from bot.ui.reminder_texts import fired_html, fired_text, list_text, reminder_receipt_line
from reminders.book import Reminder


def reminder(**changes: object) -> Reminder:
    values: dict[str, object] = {
        "id": 3,
        "chat_id": -100123,
        "user_id": 77,
        "user_name": "Ana <3",
        "text": "call the dentist & ask",
        "time_zone": "Europe/Lisbon",
        "zone_known": True,
        "local_start": datetime(2026, 12, 2, 9, 0),
        "repeat": "none",
        "next_at": datetime(2026, 12, 2, 9, 0, tzinfo=UTC),  # Lisbon is UTC+0 in December
        "state": "pending",
    }
    values.update(changes)
    return Reminder(**values)  # type: ignore[arg-type]


def test_receipts_name_the_local_time_and_zone_in_the_users_language() -> None:
    made = reminder()
    set_receipt = Receipt("reminder_set", made.text, reminder=made)
    assert reminder_receipt_line(set_receipt, "en") == (
        "⏰ Reminder set: Wed 2 Dec, 09:00 (Europe/Lisbon) — call the dentist & ask"
    )
    assert reminder_receipt_line(set_receipt, "ja") == (
        "⏰ リマインダーを設定しました: 12月2日(水) 09:00 (Europe/Lisbon) — call the dentist & ask"
    )
    new_york = reminder(time_zone="America/New_York", repeat="weekdays")
    assert reminder_receipt_line(Receipt("reminder_set", "x", reminder=new_york), "pt") == (
        "⏰ Lembrete marcado: qua, 2 dez, 04:00, todos os dias úteis (America/New_York) — "
        "call the dentist & ask"
    )
    cancelled = Receipt("reminder_cancelled", made.text, reminder=made)
    assert reminder_receipt_line(cancelled, "en") == (
        "❌ Reminder cancelled: Wed 2 Dec, 09:00 — call the dentist & ask"
    )
    assert reminder_receipt_line(Receipt("remembered", "a fact"), "en") is None


def test_a_late_reminder_says_when_it_was_due_and_a_group_one_mentions_its_setter() -> None:
    made = reminder()
    due = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
    same_day = datetime(2026, 12, 2, 11, 0, tzinfo=UTC)
    assert fired_text(made, due, late=False, lang="en", now=same_day) == (
        "⏰ call the dentist & ask"
    )
    assert fired_text(made, due, late=True, lang="en", now=same_day) == (
        "⏰ (late, was due 09:00) call the dentist & ask"
    )
    next_day = datetime(2026, 12, 3, 8, 0, tzinfo=UTC)
    assert fired_text(made, due, late=True, lang="tr", now=next_day) == (
        "⏰ (gecikmeli, zamanı 2 Ara Çar, 09:00 idi) call the dentist & ask"
    )
    plain = fired_text(made, due, late=False, lang="en", now=same_day)
    assert fired_html(plain, made, group=True) == (
        '⏰ call the dentist &amp; ask\n— <a href="tg://user?id=77">Ana &lt;3</a>'
    )
    assert fired_html(plain, made, group=False) == "⏰ call the dentist &amp; ask"


def test_the_list_shows_utc_for_reminders_made_without_a_zone() -> None:
    listed = list_text([reminder(time_zone="UTC", zone_known=False, repeat="daily")], "en")
    assert listed.splitlines() == [
        "Pending reminders (1); press ❌ to cancel one:",
        "1. Wed 2 Dec, 09:00, every day (UTC) — call the dentist & ask",
    ]
