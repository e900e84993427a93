"""A memory or reminder write held for the asker's ✅ instead of carried out (design, "Web").

The agent loop sends a write here when untrusted content reached the model (agent/untrusted.py).
The call is checked the way the tool would check its shape, so a call the tool would refuse
anyway is refused now (the model can correct it) rather than shown to the user as a button
that can only fail; a well-formed one is kept in `pending_writes` exactly as the model made it,
and on ✅ the front end runs that same call through `ChatTools` (`run_held`). What the model
reads says nothing was written and why, so it does not tell the user it was.
"""

from __future__ import annotations

import json
from typing import Any

from agent.tools.memory import ChatTools, ToolOutcome
from memory.facts import MAX_FACT_CHARS, clean_fact
from memory.pending_writes import PendingWrite, PendingWrites
from models.types import ToolCall
from reminders.rules import REPEATS

HELD_NOTE = (
    "not done yet: this conversation holds content that is not the user's own words (a web "
    "page, search results, a document, or a forwarded or quoted message), so this write waits "
    "for the user's confirmation. The user is shown it now with a ✅ keep and a ❌ drop button; "
    "nothing is written unless they press ✅. Do not say it was saved or done; say it waits "
    "for their ✅."
)


# Writes that cannot wait for a tap yet (no row kind for them): with untrusted content in
# view they are refused, and the model tells the user to ask again in their own words.
REFUSED_WHEN_HELD = frozenset({"schedule_task"})


def refused_when_held(call: ToolCall) -> ToolOutcome:
    return ToolOutcome(
        call.id,
        call.name,
        "not done: this conversation holds content that is not the user's own words (a web "
        "page, search results, a document, or a forwarded or quoted message), and a task "
        "cannot be scheduled from it. Nothing was scheduled; tell the user to ask for the task "
        "again in a message of their own.",
        ok=False,
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


async def hold(
    pending: PendingWrites,
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
    write = await pending.add(
        chat_id,
        user_id=user_id,
        tool=call.name,
        arguments=json.dumps(args, ensure_ascii=False),
        user_name=user_name,
        topic_id=topic_id,
    )
    return ToolOutcome(call.id, call.name, HELD_NOTE, ok=True, pending=write)


async def run_held(tools: ChatTools, write: PendingWrite) -> ToolOutcome:
    """The held write, carried out now that its asker pressed ✅: the same call, the same tool,
    the same checks as if it had run in the turn."""
    call = ToolCall(id=f"held-{write.id}", name=write.tool, arguments=write.arguments)
    return await tools.run(
        write.chat_id,
        call,
        user_id=write.user_id,
        user_name=write.user_name,
        topic_id=write.topic_id,
    )
