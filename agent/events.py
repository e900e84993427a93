"""What the agent loop yields to its front end (the Telegram bot, or any other).

`TextDelta` and `StreamRestart` come straight from the transport: text to show as it is written,
and "the model failed after showing text, clear it, another model continues". `ToolRound` says
tools ran (a front end may show activity). `UntrustedContent` says, once per turn and before
any text written with it in view, that words which are not the user's reached the model (the
front end turns link previews off). `AgentDone` ends every turn that did not raise.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agent.tools.memory import Receipt, ToolOutcome
from memory.pending_writes import PendingWrite
from models.types import StreamRestart, TextDelta, Usage


@dataclass(frozen=True)
class ToolRound:
    """The model called tools and the loop ran them; `step` counts rounds from 1."""

    step: int
    model_id: str
    outcomes: tuple[ToolOutcome, ...]


@dataclass(frozen=True)
class UntrustedContent:
    """From here on the model writes with untrusted content in view (agent/untrusted.py): a
    web page or results, a document, a forwarded or quoted message of someone else."""


@dataclass(frozen=True)
class AgentDone:
    """The turn's end, when it ends with an answer. `text` is what the user was shown (every
    round since the last restart).

    The writes the turn did and held are not here: a turn cut short (a /cancel, a failure in a
    later round) ends without an AgentDone, yet its writes must still be shown, so they reach
    the caller through the lists it hands to `AgentLoop.run` the moment each happens."""

    text: str
    model_id: str  # who wrote the final answer
    usage: Usage = field(default_factory=Usage)
    attempts: int = 0
    queued_s: float = 0.0  # waited for turns in gateway queues (our pacing), all rounds
    steps: int = 0
    # MAX_ANSWER_SECONDS ran out: `text` is what came until then (stored and billed as such).
    time_limit_reached: bool = False
    # The answer grew past its bounds (MAX_ANSWER_CHARS, or too many or too long tool calls):
    # `text` is what it held up to the bound (stored and billed as such), no tool was run.
    size_limit_reached: bool = False
    # Untrusted content reached the model in this turn: no link previews for the answer.
    untrusted: bool = False


AgentEvent = TextDelta | StreamRestart | ToolRound | UntrustedContent | AgentDone

__all__ = [
    "AgentDone",
    "AgentEvent",
    "PendingWrite",
    "Receipt",
    "StreamRestart",
    "TextDelta",
    "ToolRound",
    "UntrustedContent",
]
