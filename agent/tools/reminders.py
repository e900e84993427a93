"""The chat model's reminder tools: `schedule_reminder`, `schedule_task`, `list_reminders`,
`cancel_reminder`.

Every result is something the model can act on (refused: why, and what to do instead). A
receipt is produced only by a reminder really stored or cancelled, and it carries the stored
reminder itself: the front end writes the user's receipt from it (local time, zone, text), not
from anything the model says.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any, TypedDict, Unpack

from memory.timezones import to_local, zone
from reminders.book import REMINDER, TASK, Reminder, ReminderBook, ScheduleRefusedError
from reminders.rules import REPEATS

SCHEDULE_REMINDER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "schedule_reminder",
        "description": (
            "Schedule a reminder the bot sends to this chat at the given time, without asking "
            "you again: the message will be the text you give. Use it when the user asks to "
            "be reminded of something or to get a message at a time. The user is shown a "
            "receipt with the stored time."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "when": {
                    "type": "string",
                    "description": (
                        "ISO 8601 date-time of the (first) reminder, e.g. 2026-12-02T09:00, "
                        "local to the user's time zone unless it carries an offset"
                    ),
                },
                "text": {
                    "type": "string",
                    "description": "what to remind of, in the user's language, e.g. 'call the "
                    "dentist'",
                },
                "repeat": {
                    "type": "string",
                    "enum": list(REPEATS),
                    "default": "none",
                    "description": "repeat rule: none, daily, weekdays (Mon-Fri), weekly, monthly",
                },
            },
            "required": ["when", "text"],
        },
    },
}
SCHEDULE_TASK_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "schedule_task",
        "description": (
            "Schedule a task: at the given time the bot runs the instruction as a new request "
            "to you, with your tools (recall, the web), and sends your answer to this chat. "
            "Use it when the user wants something done at a time or regularly — looked up, "
            "checked, summarised (e.g. 'every morning at 8, the weather in Lisbon'); for a "
            "plain message at a time use schedule_reminder. Write the task so it stands on "
            "its own later, in the user's words. The user is shown a receipt."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "when": SCHEDULE_REMINDER_TOOL["function"]["parameters"]["properties"]["when"],
                "task": {
                    "type": "string",
                    "description": "the instruction to carry out, in the user's words, e.g. "
                    "'the weather in Lisbon today and my first meeting'",
                },
                "repeat": SCHEDULE_REMINDER_TOOL["function"]["parameters"]["properties"]["repeat"],
            },
            "required": ["when", "task"],
        },
    },
}
LIST_REMINDERS_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "list_reminders",
        "description": (
            "List this chat's pending reminders and scheduled tasks with their ids and next times."
        ),
        "parameters": {"type": "object", "properties": {}},
    },
}
CANCEL_REMINDER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "cancel_reminder",
        "description": (
            "Cancel one of this chat's pending reminders or scheduled tasks by its id (from "
            "list_reminders). The user is shown a receipt."
        ),
        "parameters": {
            "type": "object",
            "properties": {"id": {"type": "integer", "description": "the reminder's id"}},
            "required": ["id"],
        },
    },
}
REMINDER_TOOLS: list[dict[str, Any]] = [
    SCHEDULE_REMINDER_TOOL,
    SCHEDULE_TASK_TOOL,
    LIST_REMINDERS_TOOL,
    CANCEL_REMINDER_TOOL,
]
REMINDER_TOOL_NAMES = frozenset(t["function"]["name"] for t in REMINDER_TOOLS)


@dataclass(frozen=True)
class ReminderResult:
    """What the model reads, and the reminder stored or cancelled (for the receipt)."""

    content: str
    ok: bool
    kind: str | None = None  # "reminder_set" or "reminder_cancelled" when something changed
    reminder: Reminder | None = None


def describe(reminder: Reminder) -> str:
    """One reminder for the model: id, next local time and zone, rule, text."""
    when = "no further time"
    if reminder.next_at is not None:
        local = to_local(reminder.next_at, zone(reminder.time_zone))
        when = local.strftime("%a %Y-%m-%d %H:%M")
    zone_note = reminder.time_zone if reminder.zone_known else "UTC, time zone not set"
    rule = "" if reminder.repeat == "none" else f", repeats {reminder.repeat}"
    if reminder.is_task:
        state = ", paused after failed runs" if reminder.paused else ""
        return f"task id {reminder.id}: {when} ({zone_note}){rule}{state}: {reminder.text}"
    return f"id {reminder.id}: {when} ({zone_note}){rule}: {reminder.text}"


class Asker(TypedDict, total=False):
    """Who asked for a reminder write and where: the setter, and the forum topic it goes to."""

    user_id: int | None
    user_name: str | None
    topic_id: int | None


async def run_reminder_tool(
    book: ReminderBook, chat_id: int, name: str, args: dict[str, Any], **asker: Unpack[Asker]
) -> ReminderResult:
    if name == "list_reminders":
        reminders = await book.pending(chat_id)
        if not reminders:
            return ReminderResult("this chat has no pending reminders or tasks", ok=True)
        lines = [f"{len(reminders)} pending reminder(s) and task(s):"]
        lines += [describe(r) for r in reminders]
        return ReminderResult("\n".join(lines), ok=True)
    result = await book.db.run_in_transaction(
        lambda conn: reminder_write_in(book, conn, chat_id, name, args, **asker)
    )
    if result.kind is not None:
        book.changed()
    if result.kind == "task_cancelled" and result.reminder is not None:
        book.cancelled(result.reminder.id)  # a run of it under way stops
    return result


def reminder_write_in(
    book: ReminderBook,
    conn: sqlite3.Connection,
    chat_id: int,
    name: str,
    args: dict[str, Any],
    **asker: Unpack[Asker],
) -> ReminderResult:
    """`schedule_reminder`, `schedule_task` or `cancel_reminder` inside the caller's
    transaction; the caller wakes the schedulers (`book.changed()`) after the commit when
    something changed."""
    user_id = asker.get("user_id")
    if name in ("schedule_reminder", "schedule_task"):
        return _schedule(
            book, conn, chat_id, name, args, user_id, asker.get("user_name"),
            asker.get("topic_id"),
        )  # fmt: skip
    return _cancel(book, conn, chat_id, args, user_id)


def _schedule(
    book: ReminderBook,
    conn: sqlite3.Connection,
    chat_id: int,
    name: str,
    args: dict[str, Any],
    user_id: int | None,
    user_name: str | None,
    topic_id: int | None,
) -> ReminderResult:
    task = name == "schedule_task"
    field = "task" if task else "text"
    when, text = args.get("when"), args.get(field)
    repeat = args.get("repeat") or "none"
    if not isinstance(when, str) or not isinstance(text, str):
        return ReminderResult(
            f"error: {name} needs 'when' (ISO 8601 date-time) and '{field}' as strings",
            ok=False,
        )
    if not isinstance(repeat, str):
        return ReminderResult(f"error: 'repeat' must be one of {', '.join(REPEATS)}", ok=False)
    try:
        reminder = book.schedule_in(
            conn,
            chat_id,
            when=when,
            text=text,
            repeat=repeat.strip().lower(),
            user_id=user_id,
            user_name=user_name,
            topic_id=topic_id,
            kind=TASK if task else REMINDER,
        )
    except ScheduleRefusedError as exc:
        return ReminderResult(f"error: not scheduled: {exc}", ok=False)
    content = f"scheduled: {describe(reminder)}"
    if not reminder.zone_known:
        content += (
            ". The user's time zone is not set, so this time is UTC; tell the user and, if "
            "you have not asked yet, ask for their city (they can use /timezone Area/City)"
        )
    kind = "task_set" if task else "reminder_set"
    return ReminderResult(content, ok=True, kind=kind, reminder=reminder)


def reminder_id(args: dict[str, Any]) -> int | None:
    """The `id` of a cancel_reminder call, or None when it is not one a reminder can have."""
    raw = args.get("id")
    if isinstance(raw, str) and raw.strip().isascii() and raw.strip().isdecimal():
        raw = int(raw.strip())
    if not isinstance(raw, int) or isinstance(raw, bool) or not 0 < raw < 2**63:
        return None
    return raw


def cancel_refusal(found: Reminder | None, wanted: int, user_id: int | None) -> str | None:
    """Why `cancel_reminder` of reminder `wanted` (`found`: that row, if this chat has it)
    changes nothing for the asker, or None when it would cancel it. A reminder another member
    set is not theirs to cancel (in a group, the ❌ button lets its setter or an admin do it;
    the tool cannot ask Telegram who is an admin, so it keeps to the asker's own)."""
    if found is not None and None not in (found.user_id, user_id) and found.user_id != user_id:
        return (
            f"error: reminder {wanted} was set by {found.user_name or 'another member'}, not by "
            "the user asking; nothing was cancelled. Only its setter or a group admin can "
            "cancel it, with the ❌ button of /reminders."
        )
    return None


def _cancel(
    book: ReminderBook,
    conn: sqlite3.Connection,
    chat_id: int,
    args: dict[str, Any],
    user_id: int | None,
) -> ReminderResult:
    """Cancel one of this chat's reminders for the asker (see `cancel_refusal`)."""
    wanted = reminder_id(args)
    if wanted is None:
        return ReminderResult(
            "error: cancel_reminder needs the reminder's integer 'id' (see list_reminders)",
            ok=False,
        )
    refusal = cancel_refusal(book.get_in(conn, chat_id, wanted), wanted, user_id)
    if refusal is not None:
        return ReminderResult(refusal, ok=False)
    reminder = book.cancel_in(conn, chat_id, wanted)
    if reminder is None:
        return ReminderResult(
            f"error: this chat has no pending reminder with id {wanted}; nothing was "
            "cancelled. Call list_reminders to see the ids.",
            ok=False,
        )
    kind = "task_cancelled" if reminder.is_task else "reminder_cancelled"
    return ReminderResult(f"cancelled: {describe(reminder)}", ok=True, kind=kind, reminder=reminder)
