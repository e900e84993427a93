"""Every write of a chat turn's session, in one place: the agent stores the whole turn.

The front end hands the agent the user's message as it arrived (`Question`) and shows what the
loop yields; it writes nothing of the turn itself. The writes, in the order a turn makes them:

- the question, before any model is asked, in ONE transaction with its idempotency key and the
  idle-session check (`Store.store_user_turn`), so an outage, a crash or a /cancel never loses
  it, and a replayed update is answered once (a crash before the answer resumes it);
- each tool round: the call and every result, with where its words came from, in one
  transaction (never a call without its results);
- the answer and the usage rows of what its attempts cost, in one transaction;
- a round cut short (a /cancel, a stop, the bot stopping): what the user saw of it, so the next
  turn's context matches the screen; its spend is recorded by the loop's flush.

A session that /new or /forget closed under the turn (its consolidation started) takes none of
the later writes (`SessionClosedError`): in the closed session they would never be consolidated
nor forgotten, and in the new one an answer would have no question. The user has seen the text.

A scheduled task's run keeps its rounds in its own transcript (agent/task_context.py) and
stores nothing here: its one message is sent, and stored, by its delivery.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import structlog

from agent.turn import AgentTurn
from memory.messages import ToolResult
from memory.provenance import Provenance
from memory.store import SessionClosedError, Store, TurnStart
from memory.usage import SpendRecorder
from models.types import ChatResult, ToolCall

log = structlog.get_logger("agent.record")


@dataclass(frozen=True)
class Question:
    """The user's message that starts a turn, as it arrived, and what is known about it."""

    chat_id: int
    user_id: int | None
    # What the model and later turns read as the message.
    text: str
    # Identifies the input across deliveries (a replayed update); stored once per key.
    key: str | None = None
    # How it came if not as text (kind, file id, caption) and who said it in a group.
    media: dict[str, object] | None = None
    # A forwarded message: whose words it holds.
    forward_origin: dict[str, object] | None = None
    # Where its words came from when they are not the user's own (memory/provenance.py).
    provenance: Provenance | None = None


class TurnRecord:
    """The writes of chat turns (see the module docstring); one per agent loop."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def answered(self, key: str) -> bool:
        """Whether the input `key` was handled before and needs no answer now: checked before
        work that costs money (a transcription), not only when the question is stored."""
        return await self.store.turn_answered(key)

    async def question(self, question: Question) -> TurnStart | None:
        """Store the question; None when its key was handled before (nothing to answer)."""
        return await self.store.store_user_turn(
            question.chat_id,
            question.text,
            user_id=question.user_id,
            key=question.key,
            media=question.media,
            forward_origin=question.forward_origin,
            provenance=question.provenance,
        )

    async def tool_round(
        self,
        turn: AgentTurn,
        text: str,
        calls: Sequence[ToolCall],
        results: list[ToolResult],
        result: ChatResult,
    ) -> bool:
        """Store a round's calls and results; False when the session was closed under the
        turn, which then ends with what was shown."""
        if turn.task is not None:
            turn.task.add_tool_round(text, list(calls), results, result.model_id)
            return True
        try:
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
            log.warning("tool_round_not_stored_session_closed", chat_id=turn.chat_id)
            return False
        return True

    async def answer(
        self, turn: AgentTurn, text: str, result: ChatResult, spending: SpendRecorder
    ) -> None:
        """Store the answer and what its attempts cost not yet written, in one transaction:
        one wait for the writer, and never one without the other. An empty answer is not
        stored; the spend is then written by the loop's flush."""
        if not text.strip() or turn.task is not None:
            return
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
        except SessionClosedError:
            self._closed(turn)
            return
        spending.written(len(spends))

    async def shown(self, turn: AgentTurn, text: str, model_id: str) -> None:
        """Store what the user saw of a round cut short."""
        if not text or turn.task is not None:
            return
        try:
            await self.store.add_message(
                turn.chat_id, "assistant", text, model_id=model_id, session_id=turn.session_id
            )
        except SessionClosedError:
            self._closed(turn)

    @staticmethod
    def _closed(turn: AgentTurn) -> None:
        log.warning(
            "answer_not_stored_session_closed", chat_id=turn.chat_id, session_id=turn.session_id
        )
