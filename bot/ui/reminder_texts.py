"""The bot's words about reminders, written from the stored reminder in the user's language and
the reminder's time zone: receipts, the ⏰ message itself, the /reminders list.

Dates are formatted from the locale files (`weekdays_short`, `months_short`, `reminder_date`),
not from the process's locale, so "Tue 2 Dec, 09:00" reads right in every language we speak.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from datetime import datetime

from agent.tools.memory import Receipt
from bot.ui.i18n import t
from bot.ui.render import utf16_len
from memory.timezones import to_local, zone
from reminders.book import Reminder

FIRED_PREFIX = "⏰"
TASK_PREFIX = "🗓"
BUTTON_TEXT_CHARS = 20
# A /reminders page: under Telegram's 4,096 UTF-16 units per message, and few enough ❌
# buttons to find the right one on a phone.
LIST_PAGE_UNITS = 4000
LIST_PAGE_REMINDERS = 10


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
    noun = "task" if reminder.is_task else "reminder"
    if receipt.kind.endswith("_cancelled"):
        return t(f"receipt_{noun}_cancelled", lang, when=when, text=text)
    if not reminder.zone_known:
        return t(f"receipt_{noun}_set_utc", lang, when=when, text=text)
    return t(f"receipt_{noun}_set", lang, when=when, zone=reminder.time_zone, text=text)


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
    """❌ and the start of its text; a task's carries its mark too (🗓)."""
    text = reminder.text
    short = text if len(text) <= BUTTON_TEXT_CHARS else text[:BUTTON_TEXT_CHARS] + "…"
    return f"❌ {TASK_PREFIX} {short}" if reminder.is_task else f"❌ {short}"


@dataclass(frozen=True)
class ListPage:
    """One page of /reminders: its text, the reminders it shows (one ❌ button each), which
    page of how many."""

    text: str
    shown: list[Reminder]
    page: int  # from 0
    pages: int


def list_page(reminders: list[Reminder], lang: str | None, page: int = 0) -> ListPage:
    """Page `page` (clamped) of the chat's pending reminders. A page ends before its text
    would pass LIST_PAGE_UNITS or hold more than LIST_PAGE_REMINDERS: five reminders of 1,000
    characters made one message over Telegram's 4,096 units, which Telegram refused, so
    /reminders showed nothing at all. Numbers run on across pages."""
    if not reminders:
        return ListPage(t("reminders_none", lang), [], 0, 1)
    header = t("reminders_header", lang, count=len(reminders))
    pages: list[list[tuple[Reminder, str]]] = [[]]
    units = utf16_len(header)
    for number, reminder in enumerate(reminders, 1):
        zone_name = reminder.time_zone if reminder.zone_known else "UTC"
        if reminder.is_task:
            when = (
                t("reminders_task_paused", lang)
                if reminder.paused
                else when_text(reminder, None, lang)
            )
            line = f"{number}. {TASK_PREFIX} {when} ({zone_name}) — {reminder.text}"
        else:
            line = f"{number}. {when_text(reminder, None, lang)} ({zone_name}) — {reminder.text}"
        size = utf16_len(line) + 1
        current = pages[-1]
        if current and (units + size > LIST_PAGE_UNITS or len(current) >= LIST_PAGE_REMINDERS):
            pages.append([])
            units = utf16_len(header)
        pages[-1].append((reminder, line))
        units += size
    page = min(max(page, 0), len(pages) - 1)
    lines = [header, *(line for _, line in pages[page])]
    return ListPage("\n".join(lines), [r for r, _ in pages[page]], page, len(pages))


def list_text(reminders: list[Reminder], lang: str | None) -> str:
    """The first page of the list (a single page unless the reminders are many or long)."""
    return list_page(reminders, lang).text
