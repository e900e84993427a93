"""A stored message row, as every reader gets it, and the one INSERT that writes one.

Kept apart from memory/store.py (sessions, turns, usage) so the row's shape, its provenance
(memory/provenance.py) and the write of a row are one small thing that every path shares.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass

from memory.provenance import Provenance, stored
from models.types import ToolCall, Usage

# A session's messages, each with the outcome of the held write it stands for (if any): the
# consolidation transcript shows a held write by what became of it.
SESSION_MESSAGES = (
    "SELECT m.*, p.state AS held_state FROM messages m "
    "LEFT JOIN pending_writes p ON p.id = m.pending_write_id "
    "WHERE m.session_id = ? ORDER BY m.id"
)


# Keys of a user message's `media` JSON: the text it quoted, and a message whose text holds its
# frames already (stored so before the prompt framed quotes and forwards).
QUOTE_KEY = "quote"
STORED_FRAMED_KEY = "stored_framed"


@dataclass(frozen=True)
class StoredMessage:
    id: int
    session_id: int
    chat_id: int
    role: str
    content: str
    created_at: str
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    user_id: int | None = None
    model_id: str | None = None
    # How it was sent, if not as text (file id, kind…); in a group, who sent it ("speaker"); a
    # reply's quoted text ("quote", QUOTE_KEY).
    media: dict[str, object] | None = None
    # A forwarded message: whose words these are ({"type", "name", "date"}, migration 0016).
    forward_origin: dict[str, object] | None = None
    # Where its words came from when they are not the user's own (or the bot's): None for
    # those. The one thing that says a message is untrusted (agent/untrusted.py).
    provenance: Provenance | None = None
    # A tool result standing for a write held for the asker's ✅ (pending_writes), and that
    # write's state when the message was read ('pending', 'kept', 'dropped', 'expired', …).
    pending_write_id: int | None = None
    held_state: str | None = None

    @property
    def forwarded_from(self) -> str | None:
        """The name of whoever first wrote a forwarded message (one line), else None."""
        if not self.forward_origin:
            return None
        name = " ".join(str(self.forward_origin.get("name") or "").split())
        return name or "someone else"

    @property
    def quoted(self) -> str | None:
        """The text this message replied to (the part the user quoted), stored beside it as it
        arrived, in `media`; the prompt frames it (agent/prompt.py)."""
        value = (self.media or {}).get(QUOTE_KEY)
        return value if isinstance(value, str) and value.strip() else None

    @property
    def stored_framed(self) -> bool:
        """Stored with its frames in the text (a quote or a forward stored before the prompt
        drew them, migrations/0026): shown as stored, never framed twice."""
        return bool((self.media or {}).get(STORED_FRAMED_KEY))

    def as_prompt_message(self) -> dict[str, object]:
        """OpenAI-format message for the model's context."""
        message: dict[str, object] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in self.tool_calls
            ]
        if self.tool_call_id:
            message["tool_call_id"] = self.tool_call_id
        return message


@dataclass(frozen=True)
class ToolResult:
    """One result of a tool round as stored: its call, its text, where the text came from
    (None: the bot's own, e.g. a memory write's confirmation) and the held write it stands for."""

    call_id: str
    content: str
    provenance: Provenance | None = None
    pending_write_id: int | None = None


def row_to_message(row: sqlite3.Row) -> StoredMessage:
    calls = None
    if row["tool_calls"]:
        calls = [
            ToolCall(c["id"], c["name"], c["arguments"]) for c in json.loads(row["tool_calls"])
        ]
    keys = row.keys()
    return StoredMessage(
        id=row["id"],
        session_id=row["session_id"],
        chat_id=row["chat_id"],
        role=row["role"],
        content=row["content"],
        created_at=row["created_at"],
        tool_calls=calls,
        tool_call_id=row["tool_call_id"],
        user_id=row["user_id"],
        model_id=row["model_id"],
        media=json.loads(row["media"]) if row["media"] else None,
        forward_origin=json.loads(row["forward_origin"]) if row["forward_origin"] else None,
        provenance=Provenance.from_json(row["provenance"]),
        pending_write_id=row["pending_write_id"],
        held_state=row["held_state"] if "held_state" in keys else None,
    )


def calls_json(calls: list[ToolCall] | None) -> str | None:
    if not calls:
        return None
    return json.dumps(
        [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls],
        ensure_ascii=False,
    )


def insert_row(
    conn: sqlite3.Connection,
    session_id: int,
    chat_id: int,
    role: str,
    content: str,
    calls_json: str | None,
    tool_call_id: str | None,
    user_id: int | None,
    model_id: str | None,
    usage: Usage | None,
    now: str,
    media: dict[str, object] | None = None,
    forward_origin: dict[str, object] | None = None,
    provenance: Provenance | None = None,
    pending_write_id: int | None = None,
) -> StoredMessage:
    """The one INSERT of a message row, for every path that stores messages."""
    row = conn.execute(
        "INSERT INTO messages(session_id, chat_id, role, content, tool_calls, "
        "tool_call_id, user_id, model_id, prompt_tokens, completion_tokens, created_at, "
        "media, forward_origin, provenance, pending_write_id) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING *",
        (
            session_id,
            chat_id,
            role,
            content,
            calls_json,
            tool_call_id,
            user_id,
            model_id,
            usage.prompt_tokens if usage else None,
            usage.completion_tokens if usage else None,
            now,
            json.dumps(media, ensure_ascii=False) if media else None,
            json.dumps(forward_origin, ensure_ascii=False) if forward_origin else None,
            stored(provenance),
            pending_write_id,
        ),
    ).fetchone()
    assert row is not None
    return row_to_message(row)
