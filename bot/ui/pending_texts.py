"""The message that shows a tool call held for the asker's ✅.

One message per held call (memory/pending_writes.py), sent after the answer: what exactly would
be written, fetched or searched, from the stored call (never the model's words about it) as its
family describes it (agent/tools/held.py), with ✅ and ❌. The buttons carry only the row's id;
bot/handlers/pending.py handles the presses.
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog
from telegram import Bot, InlineKeyboardButton, InlineKeyboardMarkup, LinkPreviewOptions
from telegram.error import TelegramError

from agent.tools.held import HeldCalls, ShownTime
from bot.ui.i18n import t
from bot.ui.reminder_texts import local_date
from memory.facts import MAX_FACT_CHARS
from memory.pending_writes import PENDING_TTL, PendingWrite
from reminders.rules import parse_local

log = structlog.get_logger("bot.pending")

KEEP_PREFIX = "pw:k:"
DROP_PREFIX = "pw:d:"
# A refusal's reason is shortened to this.
SHOWN_CHARS = MAX_FACT_CHARS
# A field of the ✅ line past this is cut: each family bounds its own (a fact is at most
# MAX_FACT_CHARS, a URL is shown whole up to agent/tools/egress.py's SHOWN_CHARS), this only
# keeps the message within Telegram's 4,096 characters.
FIELD_CHARS = 1600
NO_PREVIEW = LinkPreviewOptions(is_disabled=True)  # the call may hold a link from a page


def keyboard(write_id: int, lang: str | None, texts: str = "pending") -> InlineKeyboardMarkup:
    keep = InlineKeyboardButton(t(f"{texts}_keep", lang), callback_data=f"{KEEP_PREFIX}{write_id}")
    drop = InlineKeyboardButton(t(f"{texts}_drop", lang), callback_data=f"{DROP_PREFIX}{write_id}")
    return InlineKeyboardMarkup([[keep, drop]])


def short(text: object) -> str:
    value = " ".join(str(text).split())
    return value if len(value) <= SHOWN_CHARS else value[: SHOWN_CHARS - 1] + "…"


def _field(value: object, lang: str | None) -> str:
    """One value of the ✅ line: a local time in the user's language; text on one line per
    line it has (the memory lines a forget removes are shown one under the other)."""
    if isinstance(value, ShownTime):
        return local_date(parse_local(value.local), lang)
    text = "\n".join(" ".join(line.split()) for line in str(value).splitlines())
    return text if len(text) <= FIELD_CHARS else text[: FIELD_CHARS - 1] + "…"


def write_line(write: PendingWrite, lang: str | None, held: HeldCalls) -> str:
    """The exact call, in the user's language, from the stored call and what it would do as of
    the question (the lines a forget removes, the reminder a cancel cancels), never the model's
    words."""
    key, fields = held.describe(write)
    return t(key, lang, **{name: _field(value, lang) for name, value in fields.items()})


def question_text(write: PendingWrite, lang: str | None, held: HeldCalls) -> str:
    question = t(f"{held.texts(write)}_question", lang)
    return f"{question}\n{write_line(write, lang, held)}"


async def send_pending(
    bot: Bot,
    writes: Sequence[PendingWrite],
    lang: str | None,
    held: HeldCalls,
    *,
    reply_to_message_id: int | None,
    message_thread_id: int | None,
) -> None:
    """One message per held write, after the answer; a Telegram error is logged (the write
    still waits, and expires unanswered)."""
    for write in writes:
        try:
            await bot.send_message(
                write.chat_id,
                question_text(write, lang, held),
                reply_markup=keyboard(write.id, lang, held.texts(write)),
                reply_to_message_id=reply_to_message_id,
                message_thread_id=message_thread_id,
                link_preview_options=NO_PREVIEW,
            )
        except TelegramError as exc:
            log.warning("pending_write_not_shown", chat_id=write.chat_id, error=str(exc))


def ttl_hours() -> str:
    return f"{PENDING_TTL.total_seconds() / 3600:g}"
