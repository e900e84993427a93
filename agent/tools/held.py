"""A memory or reminder write held for the asker's ✅ instead of carried out (design, "Web").

The agent loop sends a write here when untrusted content reached the model (agent/untrusted.py).
The call is checked the way the tool would check its shape, so a call the tool would refuse
anyway is refused now (the model can correct it) rather than shown to the user as a button
that can only fail; a well-formed one is kept in `pending_writes` exactly as the model made it,
with what it would do as of now (`Preview`: the memory lines a `forget_fact` removes, the time
and text of the reminder a `cancel_reminder` cancels) for the question to show. On ✅ the front
end runs that same call through the same `ChatTools` code (`keep_held`), inside the transaction
that re-reads the row and settles it; a `forget_fact` removes exactly the lines shown or
nothing. What the model reads says nothing was written and why, so it does not tell the user it
was.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from agent.tools.memory import ChatTools, Shown, ToolOutcome, reminder_outcome
from agent.tools.reminders import cancel_refusal, reminder_id, reminder_write_in
from memory.facts import MAX_FACT_CHARS, clean_fact
from memory.pending_writes import Kept, PendingWrite, PendingWrites
from memory.store import to_iso
from memory.timezones import to_local, zone
from models.types import ToolCall
from reminders.rules import REPEATS, format_local

HELD_NOTE = (
    "not done yet: this conversation holds content that is not the user's own words (a web "
    "page, search results, a document, or a forwarded or quoted message), so this write waits "
    "for the user's confirmation. The user is shown it now with a ✅ keep and a ❌ drop button; "
    "nothing is written unless they press ✅. Do not say it was saved or done; say it waits "
    "for their ✅."
)


def shape_error(name: str, args: dict[str, Any]) -> str | None:
    """Why the tool would refuse these arguments before touching anything, or None."""
    if name in ("remember", "forget_fact"):
        raw = args.get("fact")
        if not isinstance(raw, str) or len(clean_fact(raw)) < (1 if name == "remember" else 3):
            return f"{name} needs the fact as a non-empty string 'fact'"
        if name == "remember" and len(clean_fact(raw)) > MAX_FACT_CHARS:
            return f"keep one fact under {MAX_FACT_CHARS} characters and call again"
        return None
    if name == "schedule_reminder":
        when, text, repeat = args.get("when"), args.get("text"), args.get("repeat") or "none"
        if not isinstance(when, str) or not isinstance(text, str) or not text.strip():
            return "schedule_reminder needs 'when' (ISO 8601 date-time) and 'text' as strings"
        if not isinstance(repeat, str) or repeat.strip().lower() not in REPEATS:
            return f"'repeat' must be one of {', '.join(REPEATS)}"
        return None
    raw = args.get("id")
    if isinstance(raw, str) and raw.strip().isascii() and raw.strip().isdecimal():
        raw = int(raw.strip())
    if not isinstance(raw, int) or isinstance(raw, bool) or not 0 < raw < 2**63:
        return "cancel_reminder needs the reminder's integer 'id' (see list_reminders)"
    return None


@dataclass(frozen=True)
class Preview:
    """What a held write would do as of now, beyond its call: JSON for the question, and the
    memory version it was read from (forget_fact)."""

    shown: str | None = None
    memory_version: int | None = None


async def preview(
    tools: ChatTools, chat_id: int, call: ToolCall, args: dict[str, Any], user_id: int | None
) -> Preview | ToolOutcome:
    """What the ✅ question shows for this write; or the tool's refusal, given now rather than
    as a button that can only fail (no memory line states the fact, no such reminder)."""
    if call.name == "forget_fact":
        memory = await tools.memory(chat_id)
        lines = tools.forget_lines(call, args, memory.content)
        if isinstance(lines, ToolOutcome):
            return lines
        return Preview(json.dumps({"lines": lines}, ensure_ascii=False), memory.version)
    if call.name != "cancel_reminder":
        return Preview()
    wanted = reminder_id(args)
    assert wanted is not None  # shape_error checked it
    found = await tools.reminders.get(chat_id, wanted)
    refusal = cancel_refusal(found, wanted, user_id)
    if refusal is not None:
        return ToolOutcome(call.id, call.name, refusal, ok=False)
    if found is None or found.state not in ("pending", "done"):
        return ToolOutcome(
            call.id, call.name, f"error: this chat has no pending reminder with id {wanted}; "
            "nothing was cancelled. Call list_reminders to see the ids.", ok=False,
        )  # fmt: skip
    local = found.local_start
    if found.next_at is not None:
        local = to_local(found.next_at, zone(found.time_zone)).replace(tzinfo=None)
    shown = {
        "local": format_local(local),
        "time_zone": found.time_zone if found.zone_known else None,
        "repeat": found.repeat,
        "text": found.text,
    }
    return Preview(json.dumps(shown, ensure_ascii=False))


async def hold(
    pending: PendingWrites,
    tools: ChatTools,
    call: ToolCall,
    *,
    chat_id: int,
    user_id: int | None,
    user_name: str | None,
    topic_id: int | None,
) -> ToolOutcome:
    """Keep the write for the asker's ✅; the model is told it waits."""
    try:
        args = json.loads(call.arguments or "{}")
    except json.JSONDecodeError as exc:
        return ToolOutcome(call.id, call.name, f"error: arguments are not valid JSON ({exc.msg})",
                           ok=False)  # fmt: skip
    if not isinstance(args, dict):
        return ToolOutcome(call.id, call.name, "error: arguments must be a JSON object", ok=False)
    problem = shape_error(call.name, args)
    if problem is not None:
        return ToolOutcome(call.id, call.name, f"error: {problem}; nothing was written", ok=False)
    shown = await preview(tools, chat_id, call, args, user_id)
    if isinstance(shown, ToolOutcome):
        return shown
    write = await pending.add(
        chat_id,
        user_id=user_id,
        tool=call.name,
        arguments=json.dumps(args, ensure_ascii=False),
        user_name=user_name,
        topic_id=topic_id,
        preview=shown.shown,
        memory_version=shown.memory_version,
    )
    return ToolOutcome(call.id, call.name, HELD_NOTE, ok=True, pending=write)


async def keep_held(
    tools: ChatTools, pending: PendingWrites, write_id: int, chat_id: int, user_id: int
) -> Kept[ToolOutcome]:
    """The asker's ✅: the held write carried out now, the same call through the same tool code
    with the same checks as in the turn, in the one transaction that finds it still pending."""
    now = to_iso(tools.clock())
    kept = await pending.keep(
        write_id,
        chat_id,
        user_id,
        lambda conn, write: apply_held(tools, conn, write, now),
        ok=lambda outcome: outcome.receipt is not None,
    )
    receipt = kept.result.receipt if kept.result is not None else None
    if receipt is not None and receipt.reminder is not None:
        tools.reminders.changed()  # after the commit: the scheduler looks again
    return kept


def apply_held(
    tools: ChatTools, conn: sqlite3.Connection, write: PendingWrite, now: str
) -> ToolOutcome:
    """One held write, inside the caller's transaction."""
    call = ToolCall(id=f"held-{write.id}", name=write.tool, arguments=write.arguments)
    args: dict[str, Any] = json.loads(write.arguments)
    if write.tool == "remember":
        return tools.remember_in(conn, write.chat_id, call, args, now)
    if write.tool == "forget_fact":
        shown = None
        if write.preview is not None and write.memory_version is not None:
            shown = Shown(list(json.loads(write.preview)["lines"]), write.memory_version)
        return tools.forget_in(conn, write.chat_id, call, args, now, shown=shown)
    result = reminder_write_in(
        tools.reminders, conn, write.chat_id, write.tool, args,
        user_id=write.user_id, user_name=write.user_name, topic_id=write.topic_id,
    )  # fmt: skip
    return reminder_outcome(call, result)
