"""The message that shows a memory or reminder write held for the asker's ✅ (design, "Web").

One message per held write (memory/pending_writes.py), sent after the answer: what exactly would
be written, from the stored call and what it would do as of then (the memory lines a
`forget_fact` removes, the time and text of the reminder a `cancel_reminder` cancels; never the
model's words about it), with ✅ keep and ❌ drop.
The buttons carry only the row's id; bot/handlers/pending.py handles the presses.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import structlog
from telegram import Bot, InlineKeyboardButton, InlineKeyboardMarkup, LinkPreviewOptions
from telegram.error import TelegramError

from bot.ui.i18n import t
from bot.ui.reminder_texts import local_date
from memory.facts import MAX_FACT_CHARS
from memory.pending_writes import PENDING_TTL, PendingWrite
from reminders.rules import parse_local

log = structlog.get_logger("bot.pending")

KEEP_PREFIX = "pw:k:"
DROP_PREFIX = "pw:d:"
# A fact is at most MAX_FACT_CHARS, so it is shown whole: the user sees exactly what is kept. A
# reminder's text past this is shortened (its receipt after ✅ shows it as stored).
SHOWN_CHARS = MAX_FACT_CHARS
NO_PREVIEW = LinkPreviewOptions(is_disabled=True)  # the write may hold a link from a page


def keyboard(write_id: int, lang: str | None) -> InlineKeyboardMarkup:
    keep = InlineKeyboardButton(t("pending_keep", lang), callback_data=f"{KEEP_PREFIX}{write_id}")
    drop = InlineKeyboardButton(t("pending_drop", lang), callback_data=f"{DROP_PREFIX}{write_id}")
    return InlineKeyboardMarkup([[keep, drop]])


def short(text: object) -> str:
    value = " ".join(str(text).split())
    return value if len(value) <= SHOWN_CHARS else value[: SHOWN_CHARS - 1] + "…"


def write_line(write: PendingWrite, lang: str | None) -> str:
    """The exact write, in the user's language, from the stored call (not the model's words)."""
    args: dict[str, Any] = json.loads(write.arguments)
    if write.tool == "remember":
        return t("pending_remember", lang, fact=short(args.get("fact", "")))
    shown: dict[str, Any] | None = json.loads(write.preview) if write.preview else None
    if write.tool == "forget_fact":
        if shown is not None:  # the exact lines a ✅ removes
            return t("pending_forget_lines", lang, lines="\n".join(shown["lines"]))
        return t("pending_forget", lang, fact=short(args.get("fact", "")))
    if write.tool == "schedule_reminder":
        repeat = str(args.get("repeat") or "none")
        return t(
            "pending_reminder",
            lang,
            when=short(args.get("when", "")),
            repeat=repeat,
            text=short(args.get("text", "")),
        )
    if shown is not None:  # the reminder a ✅ cancels, at its local time
        when = local_date(parse_local(shown["local"]), lang)
        if shown["repeat"] != "none":
            when += ", " + t(f"repeat_{shown['repeat']}", lang)
        zone = shown["time_zone"] or "UTC"
        return t("pending_cancel_reminder_at", lang, when=when, zone=zone,
                 text=short(shown["text"]))  # fmt: skip
    return t("pending_cancel_reminder", lang, id=short(args.get("id", "")))


def question_text(write: PendingWrite, lang: str | None) -> str:
    return f"{t('pending_question', lang)}\n{write_line(write, lang)}"


async def send_pending(
    bot: Bot,
    writes: Sequence[PendingWrite],
    lang: str | None,
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
                question_text(write, lang),
                reply_markup=keyboard(write.id, lang),
                reply_to_message_id=reply_to_message_id,
                message_thread_id=message_thread_id,
                link_preview_options=NO_PREVIEW,
            )
        except TelegramError as exc:
            log.warning("pending_write_not_shown", chat_id=write.chat_id, error=str(exc))


def ttl_hours() -> str:
    return f"{PENDING_TTL.total_seconds() / 3600:g}"
