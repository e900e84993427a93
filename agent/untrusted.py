"""Whether words that are not the user's reached the model in this round.

One rule, read from what the round's prompt holds, so it covers a page read three turns ago as
well as one read a moment ago: web results and pages stay in the session as tool results, a
document's text, a photo, an audio file's transcript and a forwarded or quoted message of
someone else stay as the user message they came with. Any of them in the prompt, or a web tool
called in the same round (its result is not stored yet), and a memory or reminder write waits
for the asker's ✅ (memory/pending_writes.py).

How a stored message says so is decided once, when it is stored: its `provenance`
(memory/provenance.py). Nothing else of the message is read here. The turn's own message counts
from the first round (`AgentTurn.others_words`), even before it is read back.
"""

from __future__ import annotations

from collections.abc import Iterable

from agent.tools.web import WEB_TOOL_NAMES
from memory.store import StoredMessage
from models.types import ToolCall


def untrusted_message(message: StoredMessage) -> bool:
    """Whether this stored message carries words that are not the user's (or the bot's)."""
    return message.provenance is not None


def untrusted_in_prompt(messages: Iterable[StoredMessage], included: frozenset[int]) -> bool:
    """Whether any message the prompt includes is untrusted."""
    return any(m.id in included and untrusted_message(m) for m in messages)


def own_words(messages: Iterable[StoredMessage], included: frozenset[int]) -> list[str]:
    """The texts of the user's own messages the prompt includes: what a link must appear in
    for a web read to go there at once with untrusted content in view (agent/tools/egress.py)."""
    return [
        m.content
        for m in messages
        if m.id in included and m.role == "user" and not untrusted_message(m)
    ]


def calls_web(calls: Iterable[ToolCall]) -> bool:
    """Whether a round's calls read the web: a write in the same round waits too, whatever
    the order the model listed them in."""
    return any(call.name in WEB_TOOL_NAMES for call in calls)
