"""The bot's words about reminders, written from the stored reminder in the user's language and
the reminder's time zone: receipts, the ⏰ message itself, the /reminders list.

Dates are formatted from the locale files (`weekdays_short`, `months_short`, `reminder_date`),
not from the process's locale, so "Tue 2 Dec, 09:00" reads right in every language we speak.
"""

from __future__ import annotations

import html
from datetime import datetime

from agent.tools.memory import Receipt
from bot.ui.i18n import t
from memory.timezones import to_local, zone
from reminders.book import Reminder

FIRED_PREFIX = "⏰"
BUTTON_TEXT_CHARS = 20


def local_date(moment: datetime, lang: str | None) -> str:
    """A naive local wall time as "Tue 2 Dec, 09:00" in `lang`."""
    weekdays = t("weekdays_short", lang).split()
    months = t("months_short", lang).split()
    return t(
        "reminder_date",
        lang,
        weekday=weekdays[moment.weekday()],
        day=moment.day,
        month=months[moment.month - 1],
        time=moment.strftime("%H:%M"),
    )


def when_text(reminder: Reminder, moment: datetime | None, lang: str | None) -> str:
    """The reminder's time (`moment`, UTC; its next one by default) in its zone, with its rule."""
    moment = moment or reminder.next_at
    text = "—" if moment is None else local_date(to_local(moment, zone(reminder.time_zone)), lang)
    if reminder.repeat != "none":
        text += ", " + t(f"repeat_{reminder.repeat}", lang)
    return text


def reminder_receipt_line(receipt: Receipt, lang: str | None) -> str | None:
    """The receipt of a reminder the model set or cancelled; None for other receipts."""
    reminder = receipt.reminder
    if reminder is None:
        return None
    text = reminder.text if len(reminder.text) <= 300 else reminder.text[:299] + "…"
    when = when_text(reminder, None, lang)
    if receipt.kind == "reminder_cancelled":
        return t("receipt_reminder_cancelled", lang, when=when, text=text)
    if not reminder.zone_known:
        return t("receipt_reminder_set_utc", lang, when=when, text=text)
    return t("receipt_reminder_set", lang, when=when, zone=reminder.time_zone, text=text)


def fired_text(
    reminder: Reminder, due_at: datetime, *, late: bool, lang: str | None, now: datetime
) -> str:
    """The plain text of a fired reminder: "⏰ call the dentist", or marked late with the time
    it was due (its date too when that was another day)."""
    if not late:
        return f"{FIRED_PREFIX} {reminder.text}"
    tz = zone(reminder.time_zone)
    due = to_local(due_at, tz)
    when = due.strftime("%H:%M")
    if due.date() != to_local(now, tz).date():
        when = local_date(due, lang)
    return t("reminder_late", lang, when=when, text=reminder.text)


def fired_html(plain: str, reminder: Reminder, *, group: bool) -> str:
    """The message as sent: in a group it names, with a mention, who set the reminder."""
    body = html.escape(plain, quote=False)
    if not group or reminder.user_id is None:
        return body
    name = html.escape(reminder.user_name or str(reminder.user_id), quote=False)
    mention = f'<a href="tg://user?id={reminder.user_id}">{name}</a>'
    return f"{body}\n— {mention}"


def button_label(reminder: Reminder) -> str:
    text = reminder.text
    short = text if len(text) <= BUTTON_TEXT_CHARS else text[:BUTTON_TEXT_CHARS] + "…"
    return f"❌ {short}"


def list_text(reminders: list[Reminder], lang: str | None) -> str:
    if not reminders:
        return t("reminders_none", lang)
    lines = [t("reminders_header", lang, count=len(reminders))]
    for number, reminder in enumerate(reminders, 1):
        zone_name = reminder.time_zone if reminder.zone_known else "UTC"
        when = when_text(reminder, None, lang)
        lines.append(f"{number}. {when} ({zone_name}) — {reminder.text}")
    return "\n".join(lines)
