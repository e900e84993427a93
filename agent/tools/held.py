"""Tool calls held for the asker's ✅ instead of carried out.

Some calls must not run on the model's word alone: a memory or reminder write asked for with
untrusted content in view (agent/untrusted.py), a web call that would carry words out of the
bot after such content (agent/tools/egress.py), and an MCP tool with effects. Each family
registers once with `HeldCalls.register` (a `HeldFamily`): which tools it covers, when one of
its calls waits, how its arguments are checked before it is kept, what the model is told, how
the ✅ message names it, how it runs on ✅, and whether its result then joins the session.
Everything else (the row in `pending_writes`, the ✅ / ❌ message, who may press, expiry, the
one run) is shared.

A call is checked the way its tool would check its shape, so a call the tool would refuse
anyway is refused now (the model can correct it) rather than shown to the user as a button that
can only fail; a well-formed one is kept exactly as the model made it, with what it would do as
of now when its call alone does not say (`Preview`: the memory lines a `forget_fact` removes,
the time and text of the reminder a `cancel_reminder` cancels), and on ✅ that same call runs
through the same tool. A family whose calls are database writes runs them inside the
transaction that re-reads the row and settles it (`HeldFamily.apply_in`), so nothing (a
/forget, another tap) comes between the check and the write, and a `forget_fact` removes
exactly the lines shown or nothing. What the model reads says nothing was done and why, so it
does not tell the user it was.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from agent.tools.memory import ChatTools, Shown, ToolOutcome, reminder_outcome
from agent.tools.reminders import cancel_refusal, reminder_id, reminder_write_in
from memory.facts import MAX_FACT_CHARS, clean_fact
from memory.messages import ToolResult
from memory.pending_writes import GATED_TOOLS, Kept, PendingWrite, PendingWrites, TapFound
from memory.store import SessionClosedError, Store, to_iso
from memory.timezones import to_local, zone
from models.types import ToolCall
from reminders.rules import REPEATS, format_local

log = structlog.get_logger("agent.held")

HELD_NOTE = (
    "not done yet: this conversation holds content that is not the user's own words (a web "
    "page, search results, a document, or a forwarded or quoted message), so this write waits "
    "for the user's confirmation. The user is shown it now with a ✅ keep and a ❌ drop button; "
    "nothing is written unless they press ✅. Do not say it was saved or done; say it waits "
    "for their ✅."
)
# Characters of a result shown to the user under the ✅ message once a held call ran.
SHOWN_RESULT_CHARS = 300

# A locale key of the ✅ message's line and the values it names (bot/ui/pending_texts.py).
Description = tuple[str, dict[str, object]]


@dataclass(frozen=True)
class InView:
    """What a round has in view when its calls are decided (agent/loop.py)."""

    # Words that are not the user's reached the model (agent/untrusted.py).
    untrusted: bool
    # Another call of the same round reads outside content: its result is not in view yet, but
    # the calls of one round are decided together.
    reads_outside: bool
    # Where a web read may go at once: (scheme, host, port) of the links in the user's own
    # messages and of this turn's search results. Only filled when a read is asked for.
    origins: frozenset[tuple[str, str, int]] = frozenset()


@dataclass(frozen=True)
class Preview:
    """What a held call would do as of now, beyond its call: JSON for the ✅ message, and the
    memory version it was read from (forget_fact)."""

    shown: str | None = None
    memory_version: int | None = None


# What a family's ✅ line is computed from when the call alone does not say: the chat, the
# call, its arguments and the asker; or the tool's refusal, given at once.
Previewer = Callable[[int, ToolCall, dict[str, Any], int | None], Awaitable[Preview | ToolOutcome]]


@dataclass(frozen=True)
class HeldFamily:
    """One family of tools whose calls may wait for a ✅; `HeldCalls.register` adds it."""

    name: str
    covers: Callable[[str], bool]  # the tool names of the family
    waits: Callable[[str, dict[str, Any], InView], bool]  # must this call wait now?
    check: Callable[[str, dict[str, Any]], str | None]  # why its tool would refuse it, or None
    note: str  # the model's result for a held call
    run: Callable[[PendingWrite], Awaitable[ToolOutcome]]  # the call itself, on ✅
    describe: Callable[[str, dict[str, Any]], Description]  # the ✅ message's line
    # The result of a call run on ✅ is stored in the chat's session as that tool's result (with
    # the call), so the next turn sees it; a write's receipt is all a write needs.
    keeps_result: bool = False
    # What the user is shown of such a result under the ✅ message, briefly.
    shown: Callable[[ToolOutcome], str] = field(default=lambda o: o.content)
    # The prefix of the ✅ message's locale keys: `<texts>_question`, `_keep`, `_drop`,
    # `_dropped`, `_expired` (a write says "nothing was written", a web call "nothing was sent").
    texts: str = "pending"
    # What the ✅ message shows beyond the call (`Preview`), stored with the row, and its line.
    preview: Previewer | None = None
    shown_line: Callable[[str, dict[str, Any]], Description] | None = None
    # The call as a write inside the transaction that settles its row (instead of `run`), and
    # what follows its commit (a reminder made or cancelled wakes the scheduler).
    apply_in: Callable[[sqlite3.Connection, PendingWrite], ToolOutcome] | None = None
    after: Callable[[ToolOutcome], None] = field(default=lambda _outcome: None)


@dataclass(frozen=True)
class HeldRun:
    """A held call run on ✅: what its tool said, and what the user is shown of it."""

    outcome: ToolOutcome
    done: bool  # the row is settled kept (else failed)
    shown: str | None  # a brief view of the result, for families that keep it; else None


class HeldCalls:
    """The registered families, and the one way a call is held, named and run."""

    def __init__(self, pending: PendingWrites, store: Store) -> None:
        self.pending = pending
        self.store = store
        self._families: list[HeldFamily] = []

    def register(self, family: HeldFamily) -> None:
        if any(known.name == family.name for known in self._families):
            raise ValueError(f"held family {family.name!r} is registered already")
        self._families.append(family)

    def family_of(self, tool: str) -> HeldFamily | None:
        return next((family for family in self._families if family.covers(tool)), None)

    def must_wait(self, call: ToolCall, view: InView) -> bool:
        """Whether this call waits for a ✅ instead of running now. A call whose arguments are
        not a JSON object is decided as if it had none (its tool or `hold` refuses it)."""
        family = self.family_of(call.name)
        return family is not None and family.waits(call.name, _arguments(call) or {}, view)

    async def hold(
        self,
        call: ToolCall,
        *,
        chat_id: int,
        user_id: int | None,
        user_name: str | None,
        topic_id: int | None,
    ) -> ToolOutcome:
        """Keep the call for the asker's ✅; the model is told it waits."""
        family = self.family_of(call.name)
        if family is None:
            raise ValueError(call.name)
        try:
            args = json.loads(call.arguments or "{}")
        except json.JSONDecodeError as exc:
            return _refused(call, family, f"arguments are not valid JSON ({exc.msg})")
        if not isinstance(args, dict):
            return _refused(call, family, "arguments must be a JSON object")
        problem = family.check(call.name, args)
        if problem is not None:
            return _refused(call, family, problem)
        shown = Preview()
        if family.preview is not None:
            found = await family.preview(chat_id, call, args, user_id)
            if isinstance(found, ToolOutcome):
                log.info("held_call_refused", family=family.name, tool=call.name)
                return found
            shown = found
        write = await self.pending.add(
            chat_id,
            user_id=user_id,
            tool=call.name,
            arguments=json.dumps(args, ensure_ascii=False),
            user_name=user_name,
            topic_id=topic_id,
            preview=shown.shown,
            memory_version=shown.memory_version,
        )
        log.info("tool_call_held", chat_id=chat_id, family=family.name, tool=call.name)
        return ToolOutcome(call.id, call.name, family.note, ok=True, pending=write)

    def texts(self, write: PendingWrite) -> str:
        """The prefix of the locale keys of this call's ✅ message (`HeldFamily.texts`)."""
        family = self.family_of(write.tool)
        return family.texts if family is not None else "pending"

    def describe(self, write: PendingWrite) -> Description:
        """The ✅ message's line for this held call, from the stored call (never the model's
        words about it)."""
        family = self.family_of(write.tool)
        if family is None:
            return "pending_unknown", {"tool": write.tool}
        if write.preview is not None and family.shown_line is not None:
            return family.shown_line(write.tool, json.loads(write.preview))
        return family.describe(write.tool, json.loads(write.arguments))

    async def keep(self, write_id: int, chat_id: int, user_id: int) -> Kept[HeldRun]:
        """A ✅ by `user_id`: the held call run if it is the asker's and still pending. A
        family that writes (`apply_in`) is checked, carried out and settled in ONE transaction;
        any other is claimed, run and settled (`run`)."""
        peeked = await self.pending.get(write_id, chat_id)
        family = self.family_of(peeked.tool) if peeked is not None else None
        if family is None or family.apply_in is None:
            tapped = await self.pending.tap(write_id, chat_id, user_id, keep=True)
            if tapped.found is not TapFound.CLAIMED or tapped.write is None:
                return Kept(tapped.found, tapped.write)
            return Kept(TapFound.CLAIMED, tapped.write, await self.run(tapped.write))
        kept = await self.pending.keep(
            write_id, chat_id, user_id, family.apply_in, ok=lambda o: o.receipt is not None
        )
        if kept.result is None:
            return Kept(kept.found, kept.write)
        family.after(kept.result)  # after the commit
        done = kept.result.receipt is not None
        return Kept(kept.found, kept.write, HeldRun(kept.result, done, None))

    async def run(self, write: PendingWrite) -> HeldRun:
        """The held call, carried out now that its asker pressed ✅ (the row is claimed), and
        the row settled. A family that keeps results stores this one in the chat's open session
        as the tool's result, so the next turn reads it like any other."""
        family = self.family_of(write.tool)
        call = held_call(write)
        if family is None:
            outcome = ToolOutcome(call.id, call.name, "error: this tool is not available", ok=False)
            await self.pending.finish(write.id, ok=False)
            return HeldRun(outcome, False, None)
        outcome = await family.run(write)
        done = outcome.ok if family.keeps_result else outcome.receipt is not None
        await self.pending.finish(write.id, ok=done)
        if not family.keeps_result:
            return HeldRun(outcome, done, None)
        await self._keep(write, call, outcome)
        return HeldRun(outcome, done, family.shown(outcome)[:SHOWN_RESULT_CHARS])

    async def _keep(self, write: PendingWrite, call: ToolCall, outcome: ToolOutcome) -> None:
        """The call and its result as a tool round of the chat's open session. A session that
        closes in between (a /new at that moment) is retried once in the next one."""
        for _ in range(2):
            session_id = await self.store.active_session(write.chat_id)
            try:
                await self.store.add_tool_round(
                    write.chat_id,
                    session_id,
                    text="",
                    calls=[call],
                    results=[ToolResult(call.id, outcome.content, outcome.stored_provenance())],
                    model_id=None,
                )
                return
            except SessionClosedError:
                continue
        log.warning("held_result_not_stored", chat_id=write.chat_id, tool=write.tool)


def held_call(write: PendingWrite) -> ToolCall:
    """The stored call, as its tool runs it on ✅."""
    return ToolCall(id=f"held-{write.id}", name=write.tool, arguments=write.arguments)


class ToolRunner(Protocol):
    """What runs a family's calls at once, and on ✅ the same way (WebTools, McpTools)."""

    async def run(self, chat_id: int, user_id: int | None, call: ToolCall) -> ToolOutcome: ...


@dataclass(frozen=True)
class CallHooks:
    """What tells one family of outward calls apart: which tools, when a call waits, why its
    tool would refuse it, the model's note, the ✅ message's line and the result shown."""

    covers: Callable[[str], bool]
    waits: Callable[[str, dict[str, Any], InView], bool]
    check: Callable[[str, dict[str, Any]], str | None]
    note: str
    describe: Callable[[str, dict[str, Any]], Description]
    shown: Callable[[ToolOutcome], str]


def outward_family(name: str, runner: ToolRunner, hooks: CallHooks) -> HeldFamily:
    """A family of calls that read or act outside (the web, MCP servers): a held call runs on
    ✅ through the same `runner` as a call at once (its caps and ledger count it then), its
    result joins the session, and its texts are the `held_<name>_…` keys."""

    async def run(write: PendingWrite) -> ToolOutcome:
        return await runner.run(write.chat_id, write.user_id, held_call(write))

    return HeldFamily(
        name=name, covers=hooks.covers, waits=hooks.waits, check=hooks.check, note=hooks.note,
        run=run, describe=hooks.describe, keeps_result=True, shown=hooks.shown,
        texts=f"held_{name}",
    )  # fmt: skip


def _arguments(call: ToolCall) -> dict[str, Any] | None:
    try:
        args = json.loads(call.arguments or "{}")
    except json.JSONDecodeError:
        return None
    return args if isinstance(args, dict) else None


def _refused(call: ToolCall, family: HeldFamily, problem: str) -> ToolOutcome:
    log.info("held_call_refused", family=family.name, tool=call.name)
    return ToolOutcome(call.id, call.name, f"error: {problem}; nothing was done", ok=False)


# the memory and reminder writes ----------------------------------------------------------


def shape_error(name: str, args: dict[str, Any]) -> str | None:
    """Why the tool would refuse these arguments before touching anything, or None."""
    if name in ("remember", "forget_fact"):
        raw = args.get("fact")
        if not isinstance(raw, str) or len(clean_fact(raw)) < (1 if name == "remember" else 3):
            return f"{name} needs the fact as a non-empty string 'fact'"
        if name == "remember" and len(clean_fact(raw)) > MAX_FACT_CHARS:
            return f"keep one fact under {MAX_FACT_CHARS} characters and call again"
        return None
    if name in ("schedule_reminder", "schedule_task"):
        field = "task" if name == "schedule_task" else "text"
        when, text, repeat = args.get("when"), args.get(field), args.get("repeat") or "none"
        if not isinstance(when, str) or not isinstance(text, str) or not text.strip():
            return f"{name} needs 'when' (ISO 8601 date-time) and '{field}' as strings"
        if not isinstance(repeat, str) or repeat.strip().lower() not in REPEATS:
            return f"'repeat' must be one of {', '.join(REPEATS)}"
        return None
    raw = args.get("id")
    if isinstance(raw, str) and raw.strip().isascii() and raw.strip().isdecimal():
        raw = int(raw.strip())
    if not isinstance(raw, int) or isinstance(raw, bool) or not 0 < raw < 2**63:
        return "cancel_reminder needs the reminder's integer 'id' (see list_reminders)"
    return None


async def run_held(tools: ChatTools, write: PendingWrite) -> ToolOutcome:
    """The held write, carried out now that its asker pressed ✅: the same call, the same tool,
    the same checks as if it had run in the turn."""
    return await tools.run(
        write.chat_id,
        held_call(write),
        user_id=write.user_id,
        user_name=write.user_name,
        topic_id=write.topic_id,
    )


def _write_line(name: str, args: dict[str, Any]) -> Description:
    if name == "remember":
        return "pending_remember", {"fact": args.get("fact", "")}
    if name == "forget_fact":
        return "pending_forget", {"fact": args.get("fact", "")}
    if name == "schedule_reminder":
        repeat = str(args.get("repeat") or "none")
        fields = {"when": args.get("when", ""), "repeat": repeat, "text": args.get("text", "")}
        return "pending_reminder", fields
    if name == "schedule_task":
        repeat = str(args.get("repeat") or "none")
        fields = {"when": args.get("when", ""), "repeat": repeat, "text": args.get("task", "")}
        return "pending_task", fields
    return "pending_cancel_reminder", {"id": args.get("id", "")}


@dataclass(frozen=True)
class ShownTime:
    """A local wall time (naive ISO) for the ✅ line: the front end writes it in the user's
    language."""

    local: str


def _shown_line(name: str, shown: dict[str, Any]) -> Description:
    """The ✅ line from what the call would do as of the question (`preview`)."""
    if name == "forget_fact":
        return "pending_forget_lines", {"lines": "\n".join(shown["lines"])}
    local = shown["local"]
    return "pending_cancel_reminder_at", {
        "when": ShownTime(local),
        "zone": shown["time_zone"] or "UTC",
        "text": shown["text"],
    }


async def preview(
    tools: ChatTools, chat_id: int, call: ToolCall, args: dict[str, Any], user_id: int | None
) -> Preview | ToolOutcome:
    """What the ✅ message shows for this write; or the tool's refusal, given now rather than
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


def apply_held(
    tools: ChatTools, conn: sqlite3.Connection, write: PendingWrite, now: str
) -> ToolOutcome:
    """One held write, inside the caller's transaction: the same tool code as in a turn."""
    call = held_call(write)
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


def write_family(tools: ChatTools) -> HeldFamily:
    """Memory and reminder writes: held whenever untrusted content is in view, or read in the
    same round, whichever the model listed first."""

    async def run(write: PendingWrite) -> ToolOutcome:
        return await run_held(tools, write)

    async def shown(
        chat_id: int, call: ToolCall, args: dict[str, Any], user_id: int | None
    ) -> Preview | ToolOutcome:
        return await preview(tools, chat_id, call, args, user_id)

    def apply_in(conn: sqlite3.Connection, write: PendingWrite) -> ToolOutcome:
        return apply_held(tools, conn, write, to_iso(tools.clock()))

    def after(outcome: ToolOutcome) -> None:
        if outcome.receipt is not None and outcome.receipt.reminder is not None:
            tools.reminders.changed()  # the scheduler looks again

    return HeldFamily(
        name="write",
        covers=GATED_TOOLS.__contains__,
        waits=lambda _name, _args, view: view.untrusted or view.reads_outside,
        check=shape_error,
        note=HELD_NOTE,
        run=run,
        describe=_write_line,
        preview=shown,
        shown_line=_shown_line,
        apply_in=apply_in,
        after=after,
    )
