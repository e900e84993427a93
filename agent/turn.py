"""One turn of the agent loop (agent/loop.py): what it is asked (`AgentTurn`), what it carries
from round to round, and the results of the tool calls it does not run (every call needs a
result, or the next request is refused)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from agent.events import AgentDone
from agent.prompt import Framing, Prompt
from agent.task_context import TaskContext
from agent.tools.egress import Origin
from agent.tools.memory import Receipt, ToolOutcome
from memory.pending_writes import PendingWrite
from memory.store import RoundContext
from memory.timezones import ChatZone
from memory.usage import SpendRecorder
from models.types import ChatResult, ToolCall, Usage


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
    # turn waits for the user's tap (agent/tools/held.py).
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


# Tool calls run per round and per turn. A model that asks for more gets, for each call past
# the cap, a result saying it was not run (every call needs a result), and once the turn's cap
# is spent the next round allows no tool call: one answer cannot write the memory without end.
MAX_TOOL_CALLS_PER_ROUND = 8
MAX_TOOL_CALLS_PER_TURN = 16


@dataclass
class TurnState:
    """What one turn carries from round to round."""

    turn: AgentTurn
    spending: SpendRecorder
    receipts: list[Receipt]  # the caller's: each write's receipt, the moment it is done
    pending: list[PendingWrite]  # the caller's: each write held for a ✅, the same way
    deadline: float | None  # the event loop's time the answer must end by (all rounds)
    model_id: str  # the model the next round asks: the one that answered the last
    framing: Framing = field(default_factory=Framing)
    calls_run: int = 0  # tool calls run this turn, against MAX_TOOL_CALLS_PER_TURN
    total: Usage = field(default_factory=Usage)
    attempts: int = 0
    queued_s: float = 0.0  # waited for turns in gateway queues, all rounds
    steps: int = 0
    display: list[str] = field(default_factory=list)  # what the user sees now, across rounds
    # The text of each finished round since the last restart.
    shown_rounds: list[str] = field(default_factory=list)
    untrusted: bool = False  # words that are not the user's reached the model
    untrusted_result: bool = False  # a tool of this turn returned untrusted content
    searched: set[Origin] = field(default_factory=set)  # origins of this turn's search results

    def done(self, model_id: str, *, fallback: str = "", **flags: bool) -> AgentDone:
        """The turn's end: what every round since the last restart showed."""
        return AgentDone(
            text="\n\n".join(part for part in self.shown_rounds if part) or fallback,
            model_id=model_id,
            usage=self.total,
            attempts=self.attempts,
            queued_s=self.queued_s,
            steps=self.steps,
            untrusted=self.untrusted,
            **flags,
        )


@dataclass
class Round:
    """One round: what it offers and reads, what it streamed, what its calls came to."""

    tools: list[dict[str, Any]] | None
    last: bool  # no tool call may run: tool_choice none
    stored: RoundContext
    prompt: Prompt
    answering: str  # the model streaming now (a restart moves it on)
    text: list[str] = field(default_factory=list)  # this round's text as shown
    result: ChatResult | None = None
    outcomes: list[ToolOutcome] = field(default_factory=list)

    def shown(self) -> str:
        return "".join(self.text)


def stopped(call: ToolCall) -> ToolOutcome:
    """The result of a call the user stopped before it ran: nothing was done."""
    return ToolOutcome(
        call.id, call.name, "error: not run: the user stopped the answer; nothing changed.",
        ok=False,
    )  # fmt: skip


def not_offered(call: ToolCall) -> ToolOutcome:
    """A call of a tool a scheduled task's run is not offered (scheduling, above all)."""
    return ToolOutcome(
        call.id,
        call.name,
        f"error: {call.name!r} is not available in a scheduled task's run; nothing was done. "
        "Answer with what you have.",
        ok=False,
    )


def not_run(call: ToolCall) -> ToolOutcome:
    """The result of a call past the round's or the turn's cap: nothing was done."""
    return ToolOutcome(
        call.id,
        call.name,
        f"error: not run: at most {MAX_TOOL_CALLS_PER_ROUND} tool calls per round and "
        f"{MAX_TOOL_CALLS_PER_TURN} per answer; nothing changed. Answer with what you have.",
        ok=False,
    )
