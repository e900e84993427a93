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
from datetime import datetime
from typing import Any, Protocol

import structlog

from agent.events import AgentDone, AgentEvent, ToolRound, ToolsStarting, UntrustedContent
from agent.prompt import (
    MAX_TOOL_RESULT_CHARS,
    WEB_RESULT_OVERHEAD_CHARS,
    build_prompt,
    reply_reserve,
    time_text,
    with_image,
)
from agent.record import Question, TurnRecord
from agent.tools.egress import link_origins, user_origins, web_family
from agent.tools.held import HeldCalls, InView, write_family
from agent.tools.mcp import McpTools, mcp_family
from agent.tools.memory import CHAT_TOOLS, ChatTools, Receipt, ToolOutcome
from agent.tools.web import WEB_TOOL_NAMES, WebTools
from agent.turn import (
    MAX_TOOL_CALLS_PER_ROUND,
    MAX_TOOL_CALLS_PER_TURN,
    AgentTurn,
    Round,
    TurnState,
    not_offered,
    not_run,
    stopped,
)
from agent.untrusted import calls_web, untrusted_in_prompt
from memory.messages import ToolResult
from memory.pending_writes import GATED_TOOLS, PendingWrite, PendingWrites
from memory.store import Store, TurnStart
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
)
from primitives.clock import Clock, utc_now

log = structlog.get_logger("agent.loop")

DEFAULT_MAX_STEPS = 4
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
        # Every write of a chat turn: its question, rounds, answer and what a cut left shown.
        self.record = TurnRecord(store)
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

    async def ask(self, question: Question) -> TurnStart | None:
        """Store the user's message that starts a turn, before any model is asked (see
        agent/record.py); None when its key was handled before and nothing is to be answered.
        The turn is then `run` on the stored message's session."""
        return await self.record.question(question)

    async def answered(self, key: str) -> bool:
        """Whether the input `key` was handled before and needs no answer (TurnRecord)."""
        return await self.record.answered(key)

    async def run(
        self,
        turn: AgentTurn,
        *,
        receipts: list[Receipt] | None = None,
        pending: list[PendingWrite] | None = None,
    ) -> AsyncGenerator[AgentEvent, None]:
        """One turn. `receipts`, when given, gets each memory write's receipt the moment the
        write is done: a caller sees them however the turn ends (an answer, a /cancel, a
        failure in a later round, a session closed under the turn); AgentDone cannot carry
        them, since a turn cut short ends without one.
        `pending` gets, the same way, each write held for the asker's ✅: its buttons are shown
        even when the turn ends badly."""
        # Every model call of the turn reports what it cost as it ends (an answer, a tool
        # round, a model that broke after text, a cancel or a stop); all of it is recorded.
        purpose = "task" if turn.task is not None else "chat"
        spending = SpendRecorder(self.store, turn.chat_id, turn.user_id, purpose)
        seconds = turn.task.seconds if turn.task is not None else self.answer_seconds
        state = TurnState(
            turn,
            spending,
            [] if receipts is None else receipts,
            [] if pending is None else pending,
            deadline=asyncio.get_running_loop().time() + seconds if seconds else None,
            model_id=turn.model_id,
        )
        try:
            async with aclosing(self._rounds(state)) as events:
                async for event in events:
                    yield event
        finally:
            try:
                await spending.flush()
            except Exception:
                log.exception("usage_not_recorded", chat_id=turn.chat_id)

    async def _rounds(self, state: TurnState) -> AsyncGenerator[AgentEvent, None]:
        """Round after round until one ends the turn: an answer, a stop while tools ran, or a
        session closed under the turn. Each step below is one method."""
        while True:
            now = await self._prepare_round(state)
            if self._first_sees_untrusted(state, now):
                yield UntrustedContent()  # before any text written with it in view
            async with aclosing(self._stream_round(state, now)) as events:
                async for event in events:
                    yield event
            result = self._account(state, now)
            cut = result.finish_reason in (TIME_LIMIT, SIZE_LIMIT)
            calls = result.tool_calls if now.tools and not now.last and not cut else []
            text = result.text or now.shown()
            state.shown_rounds.append(now.shown().strip())
            if not calls:
                yield await self._answer(state, result, text)
                return
            async with aclosing(self._run_calls(state, now, result, calls)) as events:
                async for event in events:
                    yield event
            stored = await self._store_round(state, now, result, calls, text)
            # A stop is checked with no await before the yields below: one that comes later
            # finds the front end out of the tool phase, and it cancels the turn itself.
            if not stored or state.turn.stop_requested:
                yield state.done(result.model_id, stopped=stored)
                return
            yield ToolRound(state.steps, result.model_id, tuple(now.outcomes))

    async def _prepare_round(self, state: TurnState) -> Round:
        """What the round offers and reads: the tools (none on the last round), the stored
        context and the prompt built from it."""
        turn, task = state.turn, state.turn.task
        entry = self.catalog.get(state.model_id)
        offer = self.max_steps > 0 and entry.tools
        last = state.steps >= self.max_steps or state.calls_run >= MAX_TOOL_CALLS_PER_TURN
        tools = self.offered_tools(turn.user_id) if offer else None
        if task is not None:
            tools = [t for t in tools or [] if t["function"]["name"] in task.tools] or None
            stored = await task.round_context()
        else:
            stored = await self.store.round_context(turn.session_id, turn.chat_id)
        prompt = build_prompt(
            stored.messages,
            stored.memory,
            framing=state.framing,
            now_text=time_text(turn.chat_zone, self.clock()),
            tools=tools,
            context_window=self.context_window(state.model_id),
            images=1 if turn.image_url is not None else 0,
            tool_result_chars=self.tool_result_chars(),
        )
        return Round(tools, last, stored, prompt, answering=state.model_id)

    def _first_sees_untrusted(self, state: TurnState, now: Round) -> bool:
        """Whether this round is the turn's first with words that are not the user's in the
        model's view (agent/untrusted.py): the turn's own message, a tool result of this turn,
        or a stored message the prompt holds. From here on the turn counts as untrusted."""
        if state.untrusted:
            return False
        state.untrusted = (
            state.turn.others_words
            or state.untrusted_result
            or untrusted_in_prompt(now.stored.messages, now.prompt.included_ids)
        )
        return state.untrusted

    def _options(self, state: TurnState, now: Round) -> CallOptions:
        """The round's call: its tools, the answer's bounds so far, the turn's deadline."""
        turn = state.turn
        return CallOptions(
            timeout=self.timeout,
            tools=now.tools,
            tool_choice="none" if now.tools and now.last else None,
            # A turn in the gateway's fair queue: one user's many chats do not push
            # other users back (typing stays on while it waits).
            user_key=turn.user_id,
            # A task's run waits behind every chat turn in the gateway's queue.
            priority=Priority.BACKGROUND if turn.task is not None else Priority.CHAT,
            on_spend=state.spending.add,
            max_tokens=self.max_tokens(state.model_id),
            deadline=state.deadline,
            bounds=self.bounds(sum(len(piece) for piece in state.display)),
        )

    async def _stream_round(self, state: TurnState, now: Round) -> AsyncGenerator[AgentEvent, None]:
        """Stream the model: its text as it comes (after a blank line if earlier rounds
        showed text), a restart that clears what was shown, and the round's result."""
        messages = now.prompt.messages
        if state.turn.image_url is not None:
            messages = with_image(messages, state.turn.image_url)
        separate = bool(state.display)
        try:
            stream = self.transport.stream(state.model_id, messages, self._options(state, now))
            # aclosing: when we are closed at a yield, the transport's stream is closed
            # right away too (its request ends now, not at garbage collection), and it
            # reports what the cut-off attempt cost.
            async with aclosing(stream):
                async for event in stream:
                    if isinstance(event, TextDelta):
                        if separate:
                            separate = False
                            state.display.append("\n\n")
                            yield TextDelta("\n\n")
                        now.text.append(event.text)
                        state.display.append(event.text)
                        yield event
                    elif isinstance(event, StreamRestart):
                        now.answering = event.to_model
                        now.text.clear()
                        state.display.clear()
                        state.shown_rounds.clear()
                        separate = False
                        await state.spending.flush()  # the broken model's part, at once
                        yield event
                    elif isinstance(event, StreamDone):
                        now.result = event.result
        except (asyncio.CancelledError, GeneratorExit):
            # Cancelled inside the stream, or closed by the caller (cancelled while it
            # handled a piece we yielded): either way the round ends here.
            await self.record.shown(state.turn, now.shown(), now.answering)
            raise

    @staticmethod
    def _account(state: TurnState, now: Round) -> ChatResult:
        """The round's result, added to the turn's attempts, queue time and usage; later
        rounds stay on the model that answered."""
        result = now.result
        if result is None:  # the transport always ends with StreamDone; be safe anyway
            raise TransportError("stream ended without a result", [])
        state.attempts += len(result.attempts)
        state.queued_s += result.queued_s
        state.total = state.total + result.usage
        state.model_id = result.model_id
        return result

    async def _answer(self, state: TurnState, result: ChatResult, text: str) -> AgentDone:
        """The round answered in words: store the answer with its spend, end the turn."""
        turn, spending = state.turn, state.spending
        await self.record.answer(turn, text, result, spending)
        await spending.flush()
        return state.done(
            result.model_id,
            fallback=text,
            time_limit_reached=result.finish_reason == TIME_LIMIT,
            size_limit_reached=result.finish_reason == SIZE_LIMIT,
        )

    def _in_view(self, state: TurnState, now: Round, calls: list[ToolCall]) -> InView:
        """What the round's calls are decided on, together: a write in the same round as a
        web call waits too, whichever came first."""
        reads = state.untrusted and any(call.name == "web_read" for call in calls)
        return InView(
            untrusted=state.untrusted,
            reads_outside=calls_web(calls) or self._calls_mcp(calls),
            origins=frozenset(
                state.searched | user_origins(now.stored.messages, now.prompt.included_ids)
                if reads
                else ()
            ),
        )

    async def _run_calls(
        self, state: TurnState, now: Round, result: ChatResult, calls: list[ToolCall]
    ) -> AsyncGenerator[AgentEvent, None]:
        """Run (or hold, or refuse) the round's calls one by one into `now.outcomes`; each
        receipt and held write reaches the caller's lists at once."""
        view = after = self._in_view(state, now, calls)
        try:
            yield ToolsStarting(state.steps + 1, tuple(call.name for call in calls))
            for index, call in enumerate(calls):
                # A web read is decided on the round's view (its calls are decided together);
                # anything else listed after a call that brought untrusted words back (a
                # recall of a document) waits as well.
                seen = view if call.name in WEB_TOOL_NAMES else after
                outcome = await self._outcome(state, now, index, call, seen)
                now.outcomes.append(outcome)
                if outcome.receipt is not None:
                    state.receipts.append(outcome.receipt)  # written: shown however it ends
                if outcome.pending is not None:
                    state.pending.append(outcome.pending)  # held: its buttons shown however
                state.untrusted_result = state.untrusted_result or outcome.untrusted
                if outcome.untrusted:
                    after = dataclasses.replace(after, untrusted=True)
        except (asyncio.CancelledError, GeneratorExit):
            # Cancelled while the tools ran, or closed while the front end showed the
            # round's text: that text was seen, so it is kept, as a cut stream's is.
            await self.record.shown(state.turn, now.shown(), result.model_id)
            raise

    async def _outcome(
        self, state: TurnState, now: Round, index: int, call: ToolCall, seen: InView
    ) -> ToolOutcome:
        """One call's fate: not run (a stop, a cap, a tool a task is not offered), held for
        the asker's ✅, or run."""
        turn, task = state.turn, state.turn.task
        if turn.stop_requested:
            return stopped(call)
        if index >= MAX_TOOL_CALLS_PER_ROUND or state.calls_run >= MAX_TOOL_CALLS_PER_TURN:
            return not_run(call)
        state.calls_run += 1
        if task is not None and call.name not in task.tools:
            return not_offered(call)
        if self.held.must_wait(call, seen) or (
            # In a task's run every write waits: nobody asked for it just now.
            task is not None and call.name in GATED_TOOLS
        ):
            return await self._hold(turn, call)
        outcome = await self._run_tool(turn, call, now.prompt.included_ids)
        state.searched |= link_origins(outcome)
        return outcome

    async def _store_round(
        self,
        state: TurnState,
        now: Round,
        result: ChatResult,
        calls: list[ToolCall],
        text: str,
    ) -> bool:
        """Store the round's calls and results (agent/record.py); False when /new or /forget
        closed the session under the turn, which then ends with what was shown: the model is
        not asked again."""
        turn = state.turn
        results = [
            ToolResult(
                o.call_id,
                o.content,
                o.stored_provenance(),
                o.pending.id if o.pending is not None else None,
            )
            for o in now.outcomes
        ]
        stored = await self.record.tool_round(turn, text, calls, results, result)
        await state.spending.flush()
        if stored:
            state.steps += 1
            log.info(
                "agent_tool_round",
                chat_id=turn.chat_id,
                step=state.steps,
                model=result.model_id,
                tools=[f"{o.name}:{'ok' if o.ok else 'refused'}" for o in now.outcomes],
                stopped=turn.stop_requested,
            )
        return stored

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
