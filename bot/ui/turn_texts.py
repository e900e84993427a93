"""The words a turn shows besides the answer: a line per write the tools did, and the reason a
turn (or a transcription, or a task's run) got no answer from any model."""

from __future__ import annotations

from collections.abc import Sequence

from agent.events import Receipt
from bot.ui.i18n import t
from bot.ui.reminder_texts import reminder_receipt_line
from bot.ui.render import utf16_len
from memory.facts import MAX_FACT_CHARS
from models.types import Outcome, TransportError

# UTF-16 units the receipt lines of one answer may take: with the answer's last piece cut to
# leave room for them, a message never passes Telegram's 4096.
RECEIPTS_MAX_UNITS = 1500


def failure_reason(error: TransportError, lang: str | None) -> str:
    outcome = error.last_outcome
    known = {
        Outcome.RATE_LIMIT: "reason_rate_limit",
        Outcome.QUOTA: "reason_quota",
        Outcome.AUTH: "reason_auth",
        Outcome.UNAVAILABLE: "reason_unavailable",
        Outcome.TIMEOUT: "reason_timeout",
        Outcome.EMPTY: "reason_empty",
        Outcome.BAD_REQUEST: "reason_bad_request",
    }
    return t(known.get(outcome, "reason_other"), lang) if outcome else t("reason_other", lang)


def receipt_line(receipt: Receipt, lang: str | None) -> str:
    """The bot's own words for a memory or reminder write, from the executed tool call.

    A remembered fact is shown whole: the tool refuses one longer than MAX_FACT_CHARS, so what
    is saved is never longer than what the receipt shows. A forgotten text (memory lines, which
    a consolidation may have written long) is shortened past that: it names what is gone."""
    reminder = reminder_receipt_line(receipt, lang)
    if reminder is not None:
        return reminder
    key = "receipt_remembered" if receipt.kind == "remembered" else "receipt_forgotten"
    fact = receipt.text
    if len(fact) > MAX_FACT_CHARS:
        fact = fact[: MAX_FACT_CHARS - 1] + "…"
    return t(key, lang, fact=fact)


def receipt_lines(receipts: Sequence[Receipt], lang: str | None) -> list[str]:
    """One line per write while they fit RECEIPTS_MAX_UNITS (a message holds 4096), then one
    line saying how many more there are and where to see them: receipts never make an answer
    undeliverable, and no write goes unmentioned."""
    lines: list[str] = []
    used = 0
    for index, receipt in enumerate(receipts):
        line = receipt_line(receipt, lang)
        cost = utf16_len(line) + 1
        if used + cost > RECEIPTS_MAX_UNITS:
            lines.append(t("receipts_more", lang, count=len(receipts) - index))
            break
        lines.append(line)
        used += cost
    return lines


def with_receipts(note: str, receipts: Sequence[Receipt], lang: str | None) -> str:
    """A cancel or failure note, followed by the receipts of the writes done before it."""
    return "\n".join([note, *receipt_lines(receipts, lang)])
