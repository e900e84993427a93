"""Reminders: when one falls due (rules), the book of reminders in the database, the scheduler.

Import direction: `bot → agent → web, mcp_client → reminders, media → memory → models →
primitives`; reminders and media do not import each other.
"""

from primitives import MnemobotError


class RemindersError(MnemobotError):
    """Base of the reminders layer's errors: a reminder the model asked for that cannot be
    stored as asked; str(error) tells the model what to do instead. Each is a ValueError too.

    RemindersError
    ├── WhenError             reminders/rules.py  a `when` that is not a usable date-time
    └── ScheduleRefusedError  reminders/book.py   a reminder refused (in the past, too many, ...)
    """
