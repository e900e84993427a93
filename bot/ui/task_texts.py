"""The bot's words about scheduled tasks: the answer's message, the lines that say a run was
skipped or failed, in the user's language and the task's time zone."""

from __future__ import annotations

import html
from dataclasses import dataclass
from datetime import datetime

from bot.ui.i18n import t
from bot.ui.reminder_texts import local_date, when_text
from bot.ui.render import plain_text, render_html, split_for_telegram, utf16_len
from memory.timezones import to_local, zone
from reminders.book import Reminder

TASK_MARK = "🗓"
HEADER_TASK_CHARS = 80
# Room the header, the blank line and the cut note take in the one message a run sends.
_MESSAGE_UNITS = 4096
_SPARE_UNITS = 64


def short_task(text: str, chars: int = HEADER_TASK_CHARS) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "…"


def header(task: Reminder) -> str:
    """The first line of a run's message, and its whole text until the answer is in it: what
    the notification shows."""
    return t("task_header", None, mark=TASK_MARK, task=short_task(task.text))


def next_run(task: Reminder | None, lang: str | None) -> str:
    if task is None or task.next_at is None or task.state != "pending":
        return t("task_no_next", lang)
    return t("task_next", lang, when=when_text(task, None, lang))


@dataclass(frozen=True)
class AnswerMessage:
    """A run's answer as one Telegram message: HTML and its plain fallback, both starting with
    the header; `plain` is also what the chat's session keeps."""

    html: str
    plain: str
    cut: bool


def answer_message(task: Reminder, answer: str, lang: str | None) -> AnswerMessage:
    """The header, a blank line and the answer, in ONE message: the message is completed by
    an edit, which is what makes its delivery happen once (reminders/task_runs.py). An answer
    longer than a message keeps its first part and says it was cut."""
    head = header(task)
    room = _MESSAGE_UNITS - utf16_len(head) - _SPARE_UNITS
    pieces = split_for_telegram(answer, room)
    body = pieces[0] if pieces else answer[:room]
    cut = len(pieces) > 1
    note = f"\n\n{t('task_answer_cut', lang)}" if cut else ""
    plain = f"{head}\n\n{plain_text(body)}{note}"
    rendered = f"{html.escape(head, quote=False)}\n\n{render_html(body)}{html.escape(note)}"
    return AnswerMessage(rendered, plain, cut)


def skipped_late_line(
    task: Reminder, due_at: datetime, hours: float, current: Reminder | None, lang: str | None
) -> str:
    due = local_date(to_local(due_at, zone(task.time_zone)), lang)
    return t(
        "task_skipped_late",
        lang,
        task=short_task(task.text),
        when=due,
        hours=f"{hours:g}",
        next=next_run(current, lang),
    )


def skipped_budget_line(
    task: Reminder, limit: str, current: Reminder | None, lang: str | None
) -> str:
    return t(
        "task_skipped_budget",
        lang,
        task=short_task(task.text),
        limit=limit,
        next=next_run(current, lang),
    )


def failed_line(
    task: Reminder,
    reason: str,
    current: Reminder | None,
    lang: str | None,
    *,
    failures: int,
    paused: bool,
) -> str:
    if paused:
        return t("task_paused", lang, task=short_task(task.text), reason=reason, count=failures)
    return t("task_failed", lang, task=short_task(task.text), reason=reason,
             next=next_run(current, lang))  # fmt: skip
