"""The agent loop of one chat turn: stream the model, run the tools it calls, continue.

Each round builds the prompt afresh from what is stored (system prompt with the memory as it is
now, the session within the context budget, this turn's earlier tool rounds; both read in one
round trip, `Store.round_context`), streams the model
through the transport, and either ends the turn (an answer) or runs the requested memory tools,
stores the call and its results in one transaction, and goes round again. After AGENT_MAX_STEPS
tool rounds the model is asked once more with `tool_choice: none`, so it must answer in words.

Failures: within a round the transport retries and walks the fallback chain with the same
messages, so a fallback continues from the same tool results; later rounds stay on the model
that answered. Every model call reports its spend through the transport's `on_spend` as it ends
(answered, broken after text, cancelled) and the turn records all of it, so a turn of several
rounds — or one cut short — costs what it really cost. A cancel keeps the text the user saw of
the current round.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import structlog

from agent.events import AgentDone, AgentEvent, ToolRound, ToolsStarting, UntrustedContent
from agent.prompt import (
    MAX_TOOL_RESULT_CHARS,
    WEB_RESULT_OVERHEAD_CHARS,
    Framing,
    build_prompt,
    reply_reserve,
    time_text,
    with_image,
)
from agent.task_context import TaskContext
from agent.tools.egress import Origin, link_origins, user_origins, web_family
from agent.tools.held import HeldCalls, InView, write_family
from agent.tools.mcp import McpTools, mcp_family
from agent.tools.memory import CHAT_TOOLS, ChatTools, Receipt, ToolOutcome
from agent.tools.web import WEB_TOOL_NAMES, WebTools
from agent.untrusted import calls_web, untrusted_in_prompt
from memory.messages import ToolResult
from memory.pending_writes import GATED_TOOLS, PendingWrite, PendingWrites
from memory.store import SessionClosedError, Store
from memory.timezones import ChatZone
from memory.usage import SpendRecorder
from models.calls import CallOptions
from models.catalog import Catalog
from models.policy.pacing import Priority
from models.types import (
    SIZE_LIMIT,
    TIME_LIMIT,
    AnswerBounds,
    ChatResult,
    Message,
    StreamDone,
    StreamEvent,
    StreamRestart,
    TextDelta,
    ToolCall,
    TransportError,
    Usage,
)
from primitives.clock import Clock, utc_now

log = structlog.get_logger("agent.loop")

DEFAULT_MAX_STEPS = 4
# Tool calls run per round and per turn. A model that asks for more gets, for each call past
# the cap, a result saying it was not run (every call needs a result), and once the turn's cap
# is spent the next round allows no tool call: one answer cannot write the memory without end.
MAX_TOOL_CALLS_PER_ROUND = 8
MAX_TOOL_CALLS_PER_TURN = 16
# A tool call's arguments past this are refused unread: every tool takes a fact, a query or a
# short text, and parsing (and running) what a model poured into one call would cost the chat
# loop. The model is told, so it can call again with less.
MAX_TOOL_ARGUMENT_BYTES = 8192
# What one answer may hold at all (`AnswerBounds`): the calls past these are not refused one by
# one but cut with the answer, since each call kept is stored and sent back with every later
# round. Twice the calls a turn may run, four times the arguments a call may have.
MAX_KEPT_TOOL_CALLS = 2 * MAX_TOOL_CALLS_PER_TURN
MAX_KEPT_TOOL_ARGUMENT_CHARS = 4 * MAX_TOOL_ARGUMENT_BYTES
# Characters one answer may show and keep, all its rounds together (MAX_ANSWER_CHARS).
DEFAULT_MAX_ANSWER_CHARS = 32_000


class StreamingClient(Protocol):
    """The transport method the loop needs (models.transport.Transport has it)."""

    def stream(
        self, model_id: str, messages: list[Message], options: CallOptions
    ) -> AsyncGenerator[StreamEvent, None]: ...


@dataclass(frozen=True)
class AgentTurn:
    """One turn to answer: the user's message is already stored in `session_id`."""

    chat_id: int
    user_id: int | None
    session_id: int
    model_id: str
    # The chat's time zone, read with the turn's start (memory.store.TurnStart): every round's
    # system prompt gives the local time in it, without a round trip to the database.
    chat_zone: ChatZone
    # A photo sent with this turn's message (data URL): an image part of that message in every
    # round's prompt; never stored, later turns see the stored "[photo: caption]".
    image_url: str | None = None
    # Who wrote the turn's message, as the front end names them (a group reminder mentions them).
    user_name: str | None = None
    # The forum topic the message was written in, if any: a reminder set here is sent there.
    topic_id: int | None = None
    # The turn's message carries words of others: it was forwarded (its origin is stored with
    # it), or it quotes a message that is not the sender's own. Such content is not the user's
    # statement and must write nothing by itself: a memory or reminder write asked for in this
    # turn waits for the user's tap (design.md "Untrusted content writes nothing by itself").
    others_words: bool = False
    # A scheduled task's run (agent/task_run.py): its transcript instead of the session, its
    # own tools and time, every write held for a tap, background priority, billed as a task.
    task: TaskContext | None = None
    # Set by the front end when the user stops the answer while tools run: a tool call that
    # has started finishes (its effect is whole or absent), the round's later calls are not
    # run, and the turn ends after the round instead of asking the model again. A stop while
    # the model streams is a plain cancellation of the turn.
    stop: asyncio.Event | None = None

    @property
    def stop_requested(self) -> bool:
        return self.stop is not None and self.stop.is_set()


class AgentLoop:
    """Shared by every chat; `run` is one turn."""

    def __init__(
        self,
        *,
        store: Store,
        transport: StreamingClient,
        catalog: Catalog,
        tools: ChatTools,
        web: WebTools | None = None,
        mcp: McpTools | None = None,
        pending_writes: PendingWrites | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
        timeout: float = 60.0,
        max_answer_tokens: int | None = None,
        answer_seconds: float | None = None,
        max_answer_chars: int = DEFAULT_MAX_ANSWER_CHARS,
        clock: Clock[datetime] = utc_now,
    ) -> None:
        self.store = store
        self.transport = transport
        self.catalog = catalog
        self.tools = tools
        # web_search / web_read (agent/tools/web.py); None: no web tools at all.
        self.web = web
        # The operator's MCP tools (agent/tools/mcp.py); None: MCP_CONFIG is unset.
        self.mcp = mcp
        if mcp is not None:
            mcp.reserve({tool["function"]["name"] for tool in self.own_tools()})
        # Where a write waits for its ✅ when untrusted content reached the model (by default
        # in the store's own database, made when first needed).
        self._pending_writes = pending_writes
        self._held: HeldCalls | None = None
        self.max_steps = max_steps
        self.timeout = timeout
        # Bounds of one answer: tokens per model request (MAX_ANSWER_TOKENS) and seconds for
        # the whole turn, every round included (MAX_ANSWER_SECONDS).
        self.max_answer_tokens = max_answer_tokens
        self.answer_seconds = answer_seconds
        # And in size: characters shown and kept (MAX_ANSWER_CHARS), all rounds together, and
        # the tool calls one answer may hold (`bounds`).
        self.max_answer_chars = max_answer_chars
        self.clock = clock

    @property
    def pending_writes(self) -> PendingWrites:
        if self._pending_writes is None:
            self._pending_writes = PendingWrites(self.store.db, self.store.clock)
        return self._pending_writes

    @property
    def held(self) -> HeldCalls:
        """The families of tool calls that may wait for a ✅ (agent/tools/held.py): the
        memory and reminder writes, and the web calls."""
        if self._held is None:
            held = HeldCalls(self.pending_writes, self.store)
            held.register(write_family(self.tools))
            if self.web is not None:
                held.register(web_family(self.web))
            if self.mcp is not None:
                held.register(mcp_family(self.mcp))
            self._held = held
        return self._held

    def own_tools(self) -> list[dict[str, Any]]:
        """The memory and reminder tools, and the web tools the settings turn on."""
        return [*CHAT_TOOLS, *(self.web.schemas() if self.web is not None else [])]

    def offered_tools(self, user_id: int | None = None) -> list[dict[str, Any]]:
        """The bot's own tools, and the MCP tools this asker may use."""
        mcp = self.mcp.schemas(user_id) if self.mcp is not None else []
        return [*self.own_tools(), *mcp]

    def tool_result_chars(self) -> int:
        """The longest tool result a prompt carries whole: a web_read result at the owner's
        WEB_READ_MAX_CHARS and an MCP result at MCP_MAX_RESULT_CHARS fit (each is cut to
        that already), whatever they are set to."""
        wanted = [MAX_TOOL_RESULT_CHARS]
        if self.web is not None:
            wanted.append(self.web.settings.read_max_chars + WEB_RESULT_OVERHEAD_CHARS)
        if self.mcp is not None:
            wanted.append(self.mcp.hub.max_result_chars + WEB_RESULT_OVERHEAD_CHARS)
        return max(wanted)

    def context_window(self, model_id: str) -> int:
        """The smallest window of the model's fallback chain: a fallback may have to take
        the same prompt."""
        return min((e.context_window for e in self.catalog.chain(model_id)), default=8192)

    def max_tokens(self, model_id: str) -> int | None:
        """What one request may write: MAX_ANSWER_TOKENS, within the reply reserve the prompt
        leaves free (prompt + max_tokens past the window is refused by some providers)."""
        if self.max_answer_tokens is None:
            return None
        return min(self.max_answer_tokens, reply_reserve(self.context_window(model_id)))

    def bounds(self, shown_chars: int) -> AnswerBounds:
        """What the next round may add to an answer that shows `shown_chars` already."""
        return AnswerBounds(
            text_chars=max(0, self.max_answer_chars - shown_chars),
            tool_calls=MAX_KEPT_TOOL_CALLS,
            tool_argument_chars=MAX_KEPT_TOOL_ARGUMENT_CHARS,
        )

    async def run(
        self,
        turn: AgentTurn,
        *,
        receipts: list[Receipt] | None = None,
        pending: list[PendingWrite] | None = None,
    ) -> AsyncGenerator[AgentEvent, None]:
        """One turn. `receipts`, when given, gets each memory write's receipt the moment the
        write is done: a caller sees them however the turn ends (an answer, a /cancel, a
        failure in a later round, a session closed under the turn), not only in AgentDone.
        `pending` gets, the same way, each write held for the asker's ✅: its buttons are shown
        even when the turn ends badly."""
        # Every model call of the turn reports what it cost as it ends (an answer, a tool
        # round, a model that broke after text, a cancel or a stop); all of it is recorded.
        purpose = "task" if turn.task is not None else "chat"
        spending = SpendRecorder(self.store, turn.chat_id, turn.user_id, purpose)
        try:
            rounds = self._rounds(
                turn,
                spending,
                [] if receipts is None else receipts,
                [] if pending is None else pending,
            )
            async for event in rounds:
                yield event
        finally:
            try:
                await spending.flush()
            except Exception:
                log.exception("usage_not_recorded", chat_id=turn.chat_id)

    async def _rounds(
        self,
        turn: AgentTurn,
        spending: SpendRecorder,
        receipts: list[Receipt],
        pending: list[PendingWrite],
    ) -> AsyncGenerator[AgentEvent, None]:
        framing = Framing()
        loop = asyncio.get_running_loop()
        task = turn.task
        seconds = task.seconds if task is not None else self.answer_seconds
        deadline = loop.time() + seconds if seconds else None
        model_id = turn.model_id
        calls_run = 0  # tool calls run this turn, against MAX_TOOL_CALLS_PER_TURN
        total = Usage()
        attempts = 0
        queued_s = 0.0  # waited for turns in gateway queues, all rounds
        steps = 0
        display: list[str] = []  # what the user sees now, across rounds
        shown_rounds: list[str] = []  # the text of each finished round since the last restart
        untrusted = False  # words that are not the user's reached the model (agent/untrusted.py)
        untrusted_result = False  # a tool of this turn returned untrusted content
        searched: set[Origin] = set()  # origins of this turn's search results
        while True:
            entry = self.catalog.get(model_id)
            offer = self.max_steps > 0 and entry.tools
            last_round = steps >= self.max_steps or calls_run >= MAX_TOOL_CALLS_PER_TURN
            tools = self.offered_tools(turn.user_id) if offer else None
            if task is not None:
                tools = [t for t in tools or [] if t["function"]["name"] in task.tools] or None
                stored = await task.round_context()
            else:
                stored = await self.store.round_context(turn.session_id, turn.chat_id)
            prompt = build_prompt(
                stored.messages,
                stored.memory,
                framing=framing,
                now_text=time_text(turn.chat_zone, self.clock()),
                tools=tools,
                context_window=self.context_window(model_id),
                images=1 if turn.image_url is not None else 0,
                tool_result_chars=self.tool_result_chars(),
            )
            if not untrusted and (
                turn.others_words
                or untrusted_result
                or untrusted_in_prompt(stored.messages, prompt.included_ids)
            ):
                untrusted = True
                yield UntrustedContent()  # before any text written with it in view
            messages = prompt.messages
            if turn.image_url is not None:
                messages = with_image(messages, turn.image_url)
            round_text: list[str] = []
            separate = bool(display)
            result: ChatResult | None = None
            answering = model_id
            try:
                options = CallOptions(
                    timeout=self.timeout,
                    tools=tools,
                    tool_choice="none" if tools and last_round else None,
                    # A turn in the gateway's fair queue: one user's many chats do not push
                    # other users back (typing stays on while it waits).
                    user_key=turn.user_id,
                    # A task's run waits behind every chat turn in the gateway's queue.
                    priority=Priority.BACKGROUND if task is not None else Priority.CHAT,
                    on_spend=spending.add,
                    max_tokens=self.max_tokens(model_id),
                    deadline=deadline,
                    bounds=self.bounds(sum(len(piece) for piece in display)),
                )
                stream = self.transport.stream(model_id, messages, options)
                # aclosing: when we are closed at a yield, the transport's stream is closed
                # right away too (its request ends now, not at garbage collection), and it
                # reports what the cut-off attempt cost.
                async with aclosing(stream):
                    async for event in stream:
                        if isinstance(event, TextDelta):
                            if separate:
                                separate = False
                                display.append("\n\n")
                                yield TextDelta("\n\n")
                            round_text.append(event.text)
                            display.append(event.text)
                            yield event
                        elif isinstance(event, StreamRestart):
                            answering = event.to_model
                            round_text.clear()
                            display.clear()
                            shown_rounds.clear()
                            separate = False
                            await spending.flush()  # the broken model's part, at once
                            yield event
                        elif isinstance(event, StreamDone):
                            result = event.result
            except (asyncio.CancelledError, GeneratorExit):
                # Cancelled inside the stream, or closed by the caller (cancelled while it
                # handled a piece we yielded): either way the round ends here.
                partial = "".join(round_text)
                if partial and task is None:
                    # Keep what the user saw, so the next turn's context matches the screen.
                    await self._store_answer(turn, partial, model_id=answering)
                raise
            if result is None:  # the transport always ends with StreamDone; be safe anyway
                raise TransportError("stream ended without a result", [])
            attempts += len(result.attempts)
            queued_s += result.queued_s
            total = total + result.usage
            model_id = result.model_id  # later rounds stay on the model that answered
            out_of_time = result.finish_reason == TIME_LIMIT
            too_big = result.finish_reason == SIZE_LIMIT
            cut = out_of_time or too_big
            calls = result.tool_calls if tools and not last_round and not cut else []
            text = result.text or "".join(round_text)
            shown_rounds.append("".join(round_text).strip())
            if not calls:
                if text.strip() and task is None:  # an empty answer is not stored
                    # The answer and what its attempts cost, in one transaction: one wait for
                    # the writer, and never one without the other.
                    spends = spending.pending()
                    try:
                        await self.store.add_answer(
                            turn.chat_id,
                            turn.user_id,
                            text,
                            model_id=result.model_id,
                            usage=result.usage,
                            session_id=turn.session_id,
                            spends=[(s.model_id, s.usage) for s in spends],
                        )
                        spending.written(len(spends))
                    except SessionClosedError:
                        # See _store_answer; the spend is recorded by the flush below.
                        log.warning(
                            "answer_not_stored_session_closed",
                            chat_id=turn.chat_id,
                            session_id=turn.session_id,
                        )
                await spending.flush()
                yield AgentDone(
                    text="\n\n".join(part for part in shown_rounds if part) or text,
                    model_id=result.model_id,
                    usage=total,
                    attempts=attempts,
                    queued_s=queued_s,
                    steps=steps,
                    time_limit_reached=out_of_time,
                    size_limit_reached=too_big,
                    untrusted=untrusted,
                )
                return
            outcomes: list[ToolOutcome] = []
            # The calls of one round are decided together, on what the round had in view: a
            # write in the same round as a web call waits too, whichever came first.
            view = InView(
                untrusted=untrusted,
                reads_outside=calls_web(calls) or self._calls_mcp(calls),
                origins=frozenset(
                    searched | user_origins(stored.messages, prompt.included_ids)
                    if untrusted and any(call.name == "web_read" for call in calls)
                    else ()
                ),
            )
            after = view
            try:
                yield ToolsStarting(steps + 1, tuple(call.name for call in calls))
                for index, call in enumerate(calls):
                    if turn.stop_requested:
                        outcomes.append(_stopped(call))
                        continue
                    if index >= MAX_TOOL_CALLS_PER_ROUND or calls_run >= MAX_TOOL_CALLS_PER_TURN:
                        outcomes.append(_not_run(call))
                        continue
                    calls_run += 1
                    # A web read is decided on the round's view (its calls are decided together);
                    # anything else listed after a call that brought untrusted words back (a
                    # recall of a document) waits as well.
                    seen = view if call.name in WEB_TOOL_NAMES else after
                    if task is not None and call.name not in task.tools:
                        outcome = _not_offered(call)
                    elif self.held.must_wait(call, seen) or (
                        # In a task's run every write waits: nobody asked for it just now.
                        task is not None and call.name in GATED_TOOLS
                    ):
                        outcome = await self._hold(turn, call)
                    else:
                        outcome = await self._run_tool(turn, call, prompt.included_ids)
                        searched |= link_origins(outcome)
                    outcomes.append(outcome)
                    if outcome.receipt is not None:
                        receipts.append(outcome.receipt)  # written: shown however the turn ends
                    if outcome.pending is not None:
                        pending.append(outcome.pending)  # held: its buttons shown however it ends
                    untrusted_result = untrusted_result or outcome.untrusted
                    if outcome.untrusted:
                        after = dataclasses.replace(after, untrusted=True)
            except (asyncio.CancelledError, GeneratorExit):
                # Cancelled while the tools ran, or closed while the front end showed the
                # round's text: that text was seen, so it is kept, as a cut stream's is.
                partial = "".join(round_text)
                if partial and task is None:
                    await self._store_answer(turn, partial, model_id=result.model_id)
                raise
            closed = False
            try:
                results = [
                    ToolResult(
                        o.call_id,
                        o.content,
                        o.stored_provenance(),
                        o.pending.id if o.pending is not None else None,
                    )
                    for o in outcomes
                ]
                if task is not None:
                    task.add_tool_round(text, list(calls), results, result.model_id)
                else:
                    await self.store.add_tool_round(
                        turn.chat_id,
                        turn.session_id,
                        text=text,
                        calls=list(calls),
                        results=results,
                        model_id=result.model_id,
                        usage=result.usage,
                    )
            except SessionClosedError:
                # /new or /forget closed the session under this turn (see _store_answer): it
                # ends here, with what was shown; the model is not asked again.
                log.warning("tool_round_not_stored_session_closed", chat_id=turn.chat_id)
                closed = True
            await spending.flush()
            if not closed:
                steps += 1
                log.info(
                    "agent_tool_round",
                    chat_id=turn.chat_id,
                    step=steps,
                    model=result.model_id,
                    tools=[f"{o.name}:{'ok' if o.ok else 'refused'}" for o in outcomes],
                    stopped=turn.stop_requested,
                )
            # A stop is checked with no await before the yields below: one that comes later
            # finds the front end out of the tool phase, and it cancels the turn itself.
            if closed or turn.stop_requested:
                yield AgentDone(
                    text="\n\n".join(part for part in shown_rounds if part),
                    model_id=result.model_id,
                    usage=total,
                    attempts=attempts,
                    queued_s=queued_s,
                    steps=steps,
                    untrusted=untrusted,
                    stopped=not closed,
                )
                return
            yield ToolRound(steps, result.model_id, tuple(outcomes))

    def _calls_mcp(self, calls: list[ToolCall]) -> bool:
        """Whether a round calls an MCP tool: its result is a server's words, so a write in
        the same round waits too."""
        return self.mcp is not None and any(self.mcp.covers(call.name) for call in calls)

    async def _run_tool(
        self, turn: AgentTurn, call: ToolCall, included: frozenset[int]
    ) -> ToolOutcome:
        chat_id = turn.chat_id
        size = len(call.arguments.encode("utf-8", errors="replace"))
        if size > MAX_TOOL_ARGUMENT_BYTES:
            return ToolOutcome(
                call.id,
                call.name,
                f"error: the arguments are {size} bytes, over the limit of "
                f"{MAX_TOOL_ARGUMENT_BYTES}; nothing was run. Call again with shorter arguments "
                "(one short fact, a few search words).",
                ok=False,
            )
        try:
            if self.web is not None and call.name in WEB_TOOL_NAMES:
                return await self.web.run(chat_id, turn.user_id, call)
            if self.mcp is not None and self.mcp.covers(call.name):
                return await self.mcp.run(chat_id, turn.user_id, call)
            return await self.tools.run(
                chat_id,
                call,
                exclude_message_ids=included,
                user_id=turn.user_id,
                user_name=turn.user_name,
                topic_id=turn.topic_id,
            )
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("agent_tool_failed", chat_id=chat_id, tool=call.name)
            return ToolOutcome(
                call.id, call.name, "error: the tool failed inside the bot; nothing changed",
                ok=False,
            )  # fmt: skip

    async def _hold(self, turn: AgentTurn, call: ToolCall) -> ToolOutcome:
        """A call that must not run on the model's word alone (a write with untrusted content
        in view, a web call that would carry words out): kept for the asker's ✅
        (agent/tools/held.py), not carried out."""
        try:
            return await self.held.hold(
                call,
                chat_id=turn.chat_id,
                user_id=turn.user_id,
                user_name=turn.user_name,
                topic_id=turn.topic_id,
            )
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("agent_call_not_held", chat_id=turn.chat_id, tool=call.name)
            return ToolOutcome(
                call.id, call.name, "error: the call could not be kept for confirmation; "
                "nothing was done", ok=False,
            )  # fmt: skip

    async def _store_answer(
        self, turn: AgentTurn, text: str, *, model_id: str, usage: Usage | None = None
    ) -> None:
        """Store the answer next to its question, unless that session no longer takes messages.

        That happens only when /new or /forget closed the session while this turn ran and their
        cancel did not reach it in time, and the closed session's consolidation has already
        started (or /forget deleted it). The answer is then not stored: in the closed session it
        would never be consolidated nor forgotten, and in the new one it would be an answer
        without its question. The user has seen it; the spend is recorded by the caller.
        """
        try:
            await self.store.add_message(
                turn.chat_id,
                "assistant",
                text,
                model_id=model_id,
                usage=usage,
                session_id=turn.session_id,
            )
        except SessionClosedError:
            log.warning(
                "answer_not_stored_session_closed",
                chat_id=turn.chat_id,
                session_id=turn.session_id,
            )


def _stopped(call: ToolCall) -> ToolOutcome:
    """The result of a call the user stopped before it ran: nothing was done."""
    return ToolOutcome(
        call.id, call.name, "error: not run: the user stopped the answer; nothing changed.",
        ok=False,
    )  # fmt: skip


def _not_offered(call: ToolCall) -> ToolOutcome:
    """A call of a tool a scheduled task's run is not offered (scheduling, above all)."""
    return ToolOutcome(
        call.id,
        call.name,
        f"error: {call.name!r} is not available in a scheduled task's run; nothing was done. "
        "Answer with what you have.",
        ok=False,
    )


def _not_run(call: ToolCall) -> ToolOutcome:
    """The result of a call past the round's or the turn's cap: nothing was done."""
    return ToolOutcome(
        call.id,
        call.name,
        f"error: not run: at most {MAX_TOOL_CALLS_PER_ROUND} tool calls per round and "
        f"{MAX_TOOL_CALLS_PER_TURN} per answer; nothing changed. Answer with what you have.",
        ok=False,
    )
