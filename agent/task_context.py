"""The context of a scheduled task's run: its transcript, kept in memory for the run only.

A run is one model turn whose user message is the task's instruction (README, "Scheduled
tasks"). Its prompt is the system prompt with the chat's long-term memory and nothing of the
chat's session; its tool rounds (pages read, search results) stay here and go with the run.
None of it is stored in the chat's session: the instruction is not something the user said
now, and the pages the run read would otherwise sit in every later prompt of the chat and be
taken for part of the conversation. What the chat keeps is the one message the run sent, as
the bot's own words (bot/tasks/delivery.py); the run's record is its `task_runs` row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memory.db import Database
from memory.longterm import memory_of
from memory.messages import ToolResult
from memory.store import RoundContext, StoredMessage, to_iso
from models.types import ToolCall
from primitives.clock import utc_now


@dataclass
class TaskContext:
    """One run's transcript; the agent loop reads and extends it instead of a session."""

    db: Database
    chat_id: int
    user_id: int | None
    # The run's user message: the task's text after a short prefix (agent/task_run.py).
    message: str
    # The tools the run may call (their names); any other call is refused.
    tools: frozenset[str]
    # The run's wall time, all rounds together.
    seconds: float
    messages: list[StoredMessage] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.messages:
            self.messages.append(self._message("user", self.message, user_id=self.user_id))

    def _message(self, role: str, content: str, **more: Any) -> StoredMessage:
        # Ids below zero: never a stored message's, so nothing can take one for another.
        return StoredMessage(
            id=-(len(self.messages) + 1),
            session_id=0,
            chat_id=self.chat_id,
            role=role,
            content=content,
            created_at=to_iso(utc_now()),
            **more,
        )

    async def round_context(self) -> RoundContext:
        """The run's transcript and the chat's long-term memory as it is now."""
        memory = await self.db.read(lambda conn: memory_of(conn, self.chat_id).content)
        return RoundContext(list(self.messages), memory)

    def add_tool_round(
        self, text: str, calls: list[ToolCall], results: list[ToolResult], model_id: str
    ) -> None:
        """A round's calls and results, each with where its words came from (so a page read
        in one round holds the writes of the next, as in a chat turn)."""
        self.messages.append(self._message("assistant", text, tool_calls=calls, model_id=model_id))
        for result in results:
            self.messages.append(
                self._message(
                    "tool",
                    result.content,
                    tool_call_id=result.call_id,
                    provenance=result.provenance,
                    pending_write_id=result.pending_write_id,
                )
            )
