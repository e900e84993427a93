"""Tool calls out of a stream of deltas, and tool exchanges for models that take no tools.

litellm hands every protocol's streamed tool calls to us in the OpenAI delta shape
(`delta.tool_calls[i]` with an `index`, the `id` and function `name` on the first piece and the
JSON `arguments` spread over the following ones): OpenAI and Groq send it that way, and litellm
turns Anthropic's `tool_use` content blocks and `input_json_delta` pieces into the same shape.
What differs is the detail: Anthropic's pieces may carry no index of their own (litellm counts
blocks), a provider may repeat the id on every piece, or send the whole call in one delta. The
assembler keys calls by index when there is one, else by id, else appends to the last call.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from models.types import Message, ToolCall


@dataclass
class _Partial:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    chars: int = 0  # of the arguments so far


class ToolCallAssembler:
    """Feed every `delta.tool_calls` list of a stream; `calls()` at the end."""

    def __init__(self) -> None:
        self._calls: list[_Partial] = []
        self._by_index: dict[int, _Partial] = {}
        self._by_id: dict[str, _Partial] = {}

    def feed(self, deltas: Any) -> None:
        for delta in deltas or []:
            index = _get(delta, "index")
            call_id = _get(delta, "id") or ""
            function = _get(delta, "function")
            name = (_get(function, "name") or "") if function is not None else ""
            arguments = (_get(function, "arguments") or "") if function is not None else ""
            partial = self._find(index, call_id, starts_new=bool(name))
            if call_id and not partial.id:
                partial.id = call_id
                self._by_id[call_id] = partial
            if name and not partial.name:
                partial.name = name
            if arguments:
                piece = arguments if isinstance(arguments, str) else json.dumps(arguments)
                partial.arguments.append(piece)
                partial.chars += len(piece)

    @property
    def started(self) -> int:
        """Calls begun so far (named or not yet)."""
        return len(self._calls)

    @property
    def longest_arguments(self) -> int:
        """Characters of the longest call's arguments so far."""
        return max((p.chars for p in self._calls), default=0)

    def _find(self, index: Any, call_id: str, *, starts_new: bool) -> _Partial:
        if isinstance(index, int):
            found = self._by_index.get(index)
            if found is None:
                found = self._by_id.get(call_id) if call_id else None
                if found is None:
                    found = self._new()
                self._by_index[index] = found
            return found
        if call_id and call_id in self._by_id:
            return self._by_id[call_id]
        if starts_new or not self._calls:
            return self._new()
        return self._calls[-1]

    def _new(self) -> _Partial:
        partial = _Partial()
        self._calls.append(partial)
        return partial

    def calls(self) -> list[ToolCall]:
        """The assembled calls in the order they started; nameless fragments are dropped."""
        return [
            ToolCall(p.id or f"call_{n}", p.name, "".join(p.arguments))
            for n, p in enumerate(self._calls)
            if p.name
        ]

    def __bool__(self) -> bool:
        return any(p.name for p in self._calls)


def _get(obj: Any, name: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


def flatten_tool_messages(messages: list[Message]) -> list[Message]:
    """The same conversation without tool structure, for a model that takes no tools.

    A fallback without tool support may have to continue a turn in which tools were used: the
    calls and their results become plain text (results stay framed as they were), so nothing of
    what the first model learnt is lost and the provider sees no tool fields it would refuse.
    """
    out: list[Message] = []
    for message in messages:
        role = message.get("role")
        if role == "tool":
            out.append(
                {
                    "role": "user",
                    "content": f"[tool result {message.get('tool_call_id', '')}]\n"
                    f"{message.get('content') or ''}",
                }
            )
            continue
        calls = message.get("tool_calls")
        if role == "assistant" and calls:
            lines = [str(message.get("content") or "").strip()]
            for call in calls:
                function = call.get("function", {})
                lines.append(
                    f"[called tool {function.get('name')} ({call.get('id')}) with "
                    f"{function.get('arguments')}]"
                )
            out.append({"role": "assistant", "content": "\n".join(x for x in lines if x)})
            continue
        out.append(message)
    return _merge_same_role(out)


def _merge_same_role(messages: list[Message]) -> list[Message]:
    """Providers refuse two user messages in a row on some gateways: join neighbours."""
    merged: list[Message] = []
    for message in messages:
        if (
            merged
            and message.get("role") in ("user", "assistant")
            and merged[-1].get("role") == message.get("role")
            and isinstance(merged[-1].get("content"), str)
            and isinstance(message.get("content"), str)
            and set(merged[-1]) <= {"role", "content"}
            and set(message) <= {"role", "content"}
        ):
            merged[-1] = {
                "role": message["role"],
                "content": f"{merged[-1]['content']}\n\n{message['content']}",
            }
        else:
            merged.append(message)
    return merged
