"""Real sessions from ../shared/testdata loaded into a Store, for the memory tests and benchmark.

Each loader stores messages with their original timestamps (the store's clock is set to each
message's time before it is written), so transcripts carry real dates.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from dateutil import parser as date_parser

from memory.consolidation.transcript import TOOL_RESULT_LABEL, timestamp_label
from memory.store import Store, StoredMessage
from models.types import ToolCall
from tests.support.clocks import SettableClock
from tests.support.paths import TESTDATA


@dataclass
class SessionMessage:
    role: str
    content: str
    at: datetime
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None


def _parse_time(text: str) -> datetime:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def telegram_export(slug: str = "coorporate-speak", limit: int = 150) -> list[SessionMessage]:
    """A real Telegram Desktop export (Indonesian/English dev group); senders named inline."""
    data = json.loads((TESTDATA / "tg-export-tgif" / f"{slug}.exported.json").read_text("utf-8"))
    out: list[SessionMessage] = []
    for raw in data["messages"]:
        if raw.get("type") != "message":
            continue
        text = raw.get("text")
        if isinstance(text, list):
            text = "".join(p if isinstance(p, str) else p.get("text", "") for p in text)
        if not text:
            text = "(photo)" if raw.get("photo") else "(sticker or media)"
        sender = raw.get("from") or "someone"
        out.append(SessionMessage("user", f"{sender}: {text}", _parse_time(raw["date"])))
        if len(out) == limit:
            break
    return out


def telegram_message(slug: str, message_id: int) -> SessionMessage:
    """One message of a real Telegram Desktop export, its text flattened from its entities."""
    data = json.loads((TESTDATA / "tg-export-tgif" / f"{slug}.exported.json").read_text("utf-8"))
    for raw in data["messages"]:
        if raw.get("id") == message_id:
            text = raw.get("text")
            if isinstance(text, list):
                text = "".join(p if isinstance(p, str) else p.get("text", "") for p in text)
            return SessionMessage("user", text, _parse_time(raw["date"]))
    raise KeyError(f"{slug}: no message {message_id}")


def oasst_messages(lang: str, contains: str = "") -> Iterator[SessionMessage]:
    """Real OpenAssistant messages in `lang` (prompts and replies, file order), optionally
    only those containing `contains`."""
    with (TESTDATA / "oasst2" / "oasst2_filtered.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            stack = [json.loads(line)["prompt"]]
            while stack:
                node = stack.pop(0)
                stack.extend(node.get("replies") or [])
                if node.get("lang") == lang and contains in node["text"]:
                    role = "user" if node["role"] == "prompter" else "assistant"
                    yield SessionMessage(role, node["text"], _parse_time(node["created_date"]))


def _oasst_path(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    while node:
        yield node
        replies = node.get("replies") or []
        node = replies[0] if replies else {}


def _oasst_paths() -> Iterator[tuple[str, list[SessionMessage]]]:
    """Each oasst2 tree's language and its first reply path, with the messages' own times."""
    with (TESTDATA / "oasst2" / "oasst2_filtered.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            prompt = json.loads(line)["prompt"]
            path = [
                SessionMessage(
                    "user" if node["role"] == "prompter" else "assistant",
                    node["text"],
                    _parse_time(node["created_date"]),
                )
                for node in _oasst_path(prompt)
            ]
            yield prompt.get("lang", "?"), path


def oasst_multilingual(limit: int = 120) -> list[SessionMessage]:
    """Real human-written conversations in many languages, with their own timestamps."""
    wanted = ["zh", "ja", "ko", "ru", "de", "pt-BR", "es", "fr", "th", "ar", "it", "en"]
    by_lang: dict[str, list[list[SessionMessage]]] = {}
    for lang, path in _oasst_paths():
        by_lang.setdefault(lang, []).append(path)
    out: list[SessionMessage] = []
    round_index = 0
    while len(out) < limit and round_index < 50:
        for lang in wanted:
            trees = by_lang.get(lang, [])
            if round_index < len(trees):
                out.extend(trees[round_index])
        round_index += 1
    return out[:limit]


def oasst_conversations(
    langs: tuple[str, ...] | None = None, limit: int = 100, *, min_messages: int = 2
) -> list[list[SessionMessage]]:
    """Whole real conversations (one per oasst2 tree, its first reply path), each with its own
    timestamps: one session each. `langs` picks languages, in turn, so a short list mixes them."""
    by_lang: dict[str, list[list[SessionMessage]]] = {}
    for lang, path in _oasst_paths():
        if len(path) >= min_messages:
            by_lang.setdefault(lang, []).append(path)
    order = list(langs) if langs else sorted(by_lang, key=lambda k: -len(by_lang[k]))
    out: list[list[SessionMessage]] = []
    index = 0
    while len(out) < limit and any(index < len(by_lang.get(lang, [])) for lang in order):
        for lang in order:
            trees = by_lang.get(lang, [])
            if index < len(trees) and len(out) < limit:
                out.append(trees[index])
        index += 1
    return out


def claude_code_session(limit: int = 150) -> list[SessionMessage]:
    """A real tool-heavy agent session: tool calls, tool results, code."""
    path = TESTDATA / "claude-code-transcripts" / "ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl"
    out: list[SessionMessage] = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            event = json.loads(line)
            if event.get("type") not in ("user", "assistant"):
                continue
            at = _parse_time(event["timestamp"])
            content = event["message"].get("content")
            if isinstance(content, str):
                out.append(SessionMessage(event["type"], content, at))
            else:
                for block in content:
                    kind = block.get("type")
                    if kind == "text" and block.get("text", "").strip():
                        out.append(SessionMessage(event["type"], block["text"], at))
                    elif kind == "tool_use":
                        call = ToolCall(block["id"], block["name"], json.dumps(block["input"]))
                        out.append(SessionMessage("assistant", "", at, tool_calls=[call]))
                    elif kind == "tool_result":
                        result = block.get("content")
                        if isinstance(result, list):
                            result = "\n".join(p.get("text", "") for p in result)
                        out.append(
                            SessionMessage(
                                "tool", str(result or ""), at, tool_call_id=block["tool_use_id"]
                            )
                        )
            if len(out) >= limit:
                break
    return out[:limit]


async def store_session(
    store: Store, clock: SettableClock, chat_id: int, messages: list[SessionMessage]
) -> list[StoredMessage]:
    stored = []
    for message in messages:
        clock.now = message.at
        stored.append(
            await store.add_message(
                chat_id,
                message.role,
                message.content,
                user_id=chat_id if message.role == "user" else None,
                tool_calls=message.tool_calls,
                tool_call_id=message.tool_call_id,
            )
        )
    return stored


# The real sessions, by name, for tests parametrized over all of them.
REAL_SESSIONS: dict[str, Callable[[], list[SessionMessage]]] = {
    "telegram_export": telegram_export,
    "oasst_multilingual": oasst_multilingual,
    "claude_code": claude_code_session,
}


def needles(message: StoredMessage) -> list[str]:
    """Substrings that must appear, in this order, in a transcript holding `message`."""
    stamp = timestamp_label(message.created_at)
    role = message.role
    if message.tool_call_id:
        role = f"tool result ({message.tool_call_id}; {TOOL_RESULT_LABEL})"
    # Its first line: the transcript indents the further ones (no line of text can pose as a
    # speaker line).
    first_line = (message.content.splitlines() or [""])[0]
    found = [f"[{stamp}] {role}: {first_line[:30]}"]
    found += [f"called tool {c.name} ({c.id})" for c in message.tool_calls or []]
    return found


def assert_in_order(transcript: str, messages: list[StoredMessage]) -> None:
    """Every message present, in storage order, with its timestamp."""
    position = 0
    for message in messages:
        for needle in needles(message):
            found = transcript.find(needle, position)
            assert found >= 0, f"message {message.id} missing or out of order: {needle[:80]!r}"
            position = found + len(needle)


# --- a consolidation model that really reads the transcript -----------------------------------

_TRANSCRIPT_LINE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d)\] (user|assistant): ?(.*)$")


def framed(text: str, name: str) -> str:
    """The body of the one frame named `name` (its tag carries a nonce: `<name_3f9c…>`)."""
    found = re.findall(rf"<({name}_[0-9a-f]{{16}})>\n(.*?)\n</\1>", text, re.S)
    assert len(found) == 1, f"{len(found)} frames named {name}"
    return found[0][1]


def _between(text: str, tag: str) -> str:
    return framed(text, tag).strip()


def transcript_messages(transcript: str) -> list[tuple[str, str, str]]:
    """(stamp, role, text) of each user/assistant block of a consolidation transcript."""
    found: list[tuple[str, str, str]] = []
    current: list[str] | None = None
    for line in transcript.splitlines():
        match = _TRANSCRIPT_LINE.match(line)
        if match:
            found.append((match.group(1), match.group(2), match.group(3)))
            current = [match.group(3)]
        elif current is not None and found and " called tool " not in line:
            stamp, role, text = found[-1]
            found[-1] = (stamp, role, f"{text} {line}".strip())
    return found


def extractive_summary(transcript: str, max_chars: int = 700) -> str:
    """What a summarising model keeps of a session: its date, what the user asked first and
    how it was answered, then further user messages while room is left (real words only)."""
    messages = transcript_messages(transcript)
    if not messages:
        return "[1970-01-01 00:00] (empty conversation)"
    users = [" ".join(text.split()) for _, role, text in messages if role == "user"]
    answers = [" ".join(text.split()) for _, role, text in messages if role == "assistant"]
    parts = [users[0][:300]] if users else []
    if answers:
        parts.append(answers[0][:250])
    for text in users[1:]:
        parts.append(text[:150])
    body = " — ".join(p for p in parts if p)
    return f"[{messages[0][0]}] {body}"[:max_chars]


def summarising_call(request: Any) -> Any:
    """Respond(...) body for the fake consolidation chain: a valid save_memory call whose
    history entry is `extractive_summary` of the transcript it was sent, and whose memory keeps
    the current memory plus one line about the session."""
    from tests.fakes.providers import ToolCallReply

    user = "\n".join(
        m.get("content") if isinstance(m.get("content"), str) else ""
        for m in request.body.get("messages") or []
        if m.get("role") == "user"
    )
    transcript = _between(user, "transcript")
    current = _between(user, "current_memory")
    if current.startswith("(empty"):
        current = ""
    entry = extractive_summary(transcript)
    topic = " ".join(entry.split("] ", 1)[-1].split()[:8])
    memory = "\n".join(x for x in (current, f"- Talked about: {topic}") if x)
    return ToolCallReply(
        arguments={"history_entry": entry, "memory_update": memory[-5000:]},
        prompt_tokens=500,
        completion_tokens=120,
    )


# --- LoCoMo (ACL 2024): months-long conversations with questions; see locomo/SOURCE.txt ----------

LOCOMO = TESTDATA / "locomo"


@dataclass(frozen=True)
class LocomoSession:
    number: int
    at: datetime
    turns: list[str]  # "Name: text"
    summary: str


def locomo_conversations() -> list[tuple[str, list[LocomoSession], list[dict[str, Any]]]]:
    conversations = []
    for path in sorted(LOCOMO.glob("conv-*.json")):
        data = json.loads(path.read_text("utf-8"))
        talk = data
        sessions = []
        number = 1
        while f"session_{number}" in talk:
            at = date_parser.parse(  # "1:56 pm on 8 May, 2023"
                talk[f"session_{number}_date_time"]
            ).replace(tzinfo=UTC)
            turns = [f"{t['speaker']}: {t['text']}" for t in talk[f"session_{number}"]]
            summary = data.get(f"session_{number}_summary", "")
            sessions.append(LocomoSession(number, at, turns, summary))
            number += 1
        questions = [
            q for q in data["qa"] if q.get("category") in (1, 2, 3, 4) and q.get("evidence")
        ]
        conversations.append((path.stem, sessions, questions))
    return conversations


def evidence_sessions(question: dict[str, Any]) -> set[int]:
    found = set()
    for ref in question["evidence"]:
        for part in re.findall(r"D(\d+):", str(ref)):
            found.add(int(part))
    return found


def locomo_summary_call(summaries: dict[str, str]) -> Callable[[Any], Any]:
    """The fake consolidation model: LoCoMo's summary of the session it is sent, dated."""
    from tests.fakes.providers import ToolCallReply

    def respond(request: Any) -> Any:
        user = "\n".join(
            m.get("content") if isinstance(m.get("content"), str) else ""
            for m in request.body.get("messages") or []
            if m.get("role") == "user"
        )
        stamp = re.search(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d)\]", user)
        entry = next((text for first, text in summaries.items() if first in user), "")
        entry = f"[{stamp.group(1) if stamp else '1970-01-01 00:00'}] {entry}"
        return ToolCallReply(
            arguments={"history_entry": entry, "memory_update": "- LoCoMo"},
            prompt_tokens=500,
            completion_tokens=120,
        )

    return respond
