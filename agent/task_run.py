"""One run of a scheduled task: one model turn for the user who set it, through the agent loop
(README, "Scheduled tasks"). No Telegram here: the front end sends what this returns.

The run's user message is the task's text after a short prefix that says what it is, that
nobody is waiting for a reply in the chat, and the "nothing to report" convention: a task such
as "tell me if the ferry timetable changed" has nothing to say most days, and a message saying
so every morning is noise the user asked not to get. The prompt is the system prompt with the
chat's long-term memory and none of the session (agent/task_context.py); the tools are
`recall`, the web tools and the operator's read-only tools, never a scheduling tool (a task
that schedules tasks is how other bots ran up hundreds of unwanted runs). Writes (`remember`,
`forget_fact`) are offered but always held for the user's ✅: nobody asked for them just now.
The run's rounds and its wall time are bounded; its spend is billed to the user as a task.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterable
from contextlib import aclosing
from dataclasses import dataclass

from agent.events import AgentDone, UntrustedContent
from agent.loop import AgentLoop, AgentTurn
from agent.task_context import TaskContext
from memory.pending_writes import PendingWrite
from memory.timezones import ChatZone
from models.types import Usage

# The answer a model gives when the task has nothing to tell (the prompt says so).
NOTHING_TO_REPORT = "NOTHING_TO_REPORT"
_NOTHING = re.compile(r"^\W*nothing[ _]to[ _]report\W*$", re.IGNORECASE)
# The tools a run may call: recall, and the writes that are always held. The web tools and
# the operator's read-only tools are added by name (`TaskRunner.tool_names`).
TASK_TOOLS = frozenset({"recall", "remember", "forget_fact"})
DEFAULT_TASK_SECONDS = 180.0

TASK_PREFIX = (
    "[Scheduled task. {who} asked you earlier to do the following at this time{rule}. Nobody "
    "is waiting for a reply: carry it out now, using your tools if it needs them (recall, the "
    "web), and answer with exactly what to tell the user in the chat. You cannot schedule, "
    "change or cancel tasks or reminders here. Anything you would save waits for the user's "
    "confirmation. If the task says to report only something new or changed and there is "
    "nothing, answer exactly {nothing} and nothing is sent. The task, in the user's words:]"
)
_RULES = {
    "none": "",
    "daily": " (it runs every day)",
    "weekdays": " (it runs every weekday)",
    "weekly": " (it runs every week)",
    "monthly": " (it runs every month)",
}


def task_message(text: str, *, repeat: str, user_name: str | None) -> str:
    """The run's user message: the prefix, then the task's text as the user gave it."""
    prefix = TASK_PREFIX.format(
        who=user_name or "The user",
        rule=_RULES.get(repeat, ""),
        nothing=NOTHING_TO_REPORT,
    )
    return f"{prefix}\n{text}"


def nothing_to_report(answer: str) -> bool:
    return bool(_NOTHING.match(answer.strip()))


@dataclass(frozen=True)
class TaskAnswer:
    """What a run came to: the answer to send (None: nothing to report), whether words that
    are not the user's reached the model, the writes held for a tap, what it cost."""

    text: str | None
    model_id: str
    untrusted: bool
    held: tuple[PendingWrite, ...]
    usage: Usage
    time_limit_reached: bool = False


@dataclass(frozen=True)
class TaskRequest:
    """The task to run now, as the front end read it from the book."""

    task_id: int
    chat_id: int
    user_id: int | None
    user_name: str | None
    text: str
    repeat: str
    model_id: str
    chat_zone: ChatZone
    topic_id: int | None = None


class TaskRunner:
    """Runs task turns through the chat's agent loop."""

    def __init__(
        self,
        agent: AgentLoop,
        *,
        seconds: float = DEFAULT_TASK_SECONDS,
        extra_tools: Callable[[int | None], Iterable[str]] | None = None,
    ) -> None:
        self.agent = agent
        self.seconds = seconds
        # Names of the operator's tools a run may use for its user (the MCP tools that run
        # without a tap), asked at each run: servers come and go.
        self.extra_tools = extra_tools

    def tool_names(self, user_id: int | None) -> frozenset[str]:
        web = {t["function"]["name"] for t in (self.agent.web.schemas() if self.agent.web else [])}
        extra = set(self.extra_tools(user_id)) if self.extra_tools is not None else set()
        return TASK_TOOLS | web | extra

    async def run(self, request: TaskRequest) -> TaskAnswer:
        """One turn, bounded by `seconds` (the loop's deadline, and a hard stop a little after
        it for a tool that outstays it). Raises what the turn raises (TransportError when
        every model failed); a cancel (the user's ❌) stops it, and the loop records what was
        spent until then."""
        context = TaskContext(
            self.agent.store.db,
            request.chat_id,
            request.user_id,
            task_message(request.text, repeat=request.repeat, user_name=request.user_name),
            tools=self.tool_names(request.user_id),
            seconds=self.seconds,
        )
        turn = AgentTurn(
            request.chat_id,
            request.user_id,
            0,
            request.model_id,
            request.chat_zone,
            user_name=request.user_name,
            topic_id=request.topic_id,
            task=context,
        )
        done: AgentDone | None = None
        untrusted = False
        held: list[PendingWrite] = []
        async with asyncio.timeout(self.seconds + 30):
            async with aclosing(self.agent.run(turn, pending=held)) as events:
                async for event in events:
                    if isinstance(event, UntrustedContent):
                        untrusted = True
                    elif isinstance(event, AgentDone):
                        done = event
        assert done is not None, "the agent loop ends every turn with AgentDone"
        text = done.text.strip()
        return TaskAnswer(
            text=None if not text or nothing_to_report(text) else text,
            model_id=done.model_id,
            untrusted=untrusted or done.untrusted,
            held=tuple(held),
            usage=done.usage,
            time_limit_reached=done.time_limit_reached,
        )
