"""The operator's MCP tools in a chat turn (README, "Your own tools"): offered, run, or held.

The tools come from the hub (mcp_client/hub.py), named `<server>_<tool>`; an admins-only
server's tools are offered to ADMIN_USER_IDS only. A tool the server marks read-only, or that
the operator's `autoApprove` lists, runs at once; any other call is a held family
(agent/tools/held.py): one ✅ message naming the server, the tool and its arguments, and on ✅
the same call runs once through the same hub (counted and recorded then), its result shown
and kept in the session.

Every outcome is untrusted (`untrusted=True`): a server's words, errors included, are not the
user's. A turn that read one holds its writes, and the memory writer sees a stub naming the
tool (memory/provenance.py), never its text.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from agent.tools.held import CallHooks, Description, HeldFamily, InView, outward_family
from agent.tools.memory import ToolOutcome
from mcp_client.hub import McpHub, McpTool, parse_arguments
from models.types import ToolCall

MCP_HELD_NOTE = (
    "not done yet: this tool of the operator's MCP server acts on something, so the call waits "
    "for the user's confirmation. The user is shown it now (server, tool, arguments) with a ✅ "
    "and a ❌ button; nothing runs unless they press ✅, and then its result is shown to them "
    "and kept in this conversation. Do not say it was done; say it waits for their ✅."
)
# Characters of the arguments the ✅ message shows.
SHOWN_ARGUMENT_CHARS = 400


class McpTools:
    """The hub's tools as one asker may use them."""

    def __init__(self, hub: McpHub, admins: Collection[int]) -> None:
        self.hub = hub
        self.admins = frozenset(admins)

    def reserve(self, names: Collection[str]) -> None:
        """The bot's own tool names, which no MCP tool may take (agent/loop.py)."""
        self.hub.reserve(names)

    def _admin(self, user_id: int | None) -> bool:
        return user_id is not None and user_id in self.admins

    def schemas(self, user_id: int | None) -> list[dict[str, Any]]:
        return [tool.schema() for tool in self.hub.tools(admin=self._admin(user_id))]

    def at_once_names(self, user_id: int | None) -> list[str]:
        """The tools this asker may use that run without a ✅ (read-only, or autoApprove):
        what a scheduled task's run is offered (agent/task_run.py)."""
        return [t.name for t in self.hub.tools(admin=self._admin(user_id)) if t.runs_at_once]

    def covers(self, name: str) -> bool:
        return self.hub.tool(name) is not None

    def runs_at_once(self, name: str) -> bool:
        tool = self.hub.tool(name)
        return tool is not None and tool.runs_at_once

    def _offered(self, name: str, user_id: int | None) -> McpTool | None:
        tool = self.hub.tool(name)
        if tool is None or (tool.admins_only and not self._admin(user_id)):
            return None
        return tool

    async def run(self, chat_id: int, user_id: int | None, call: ToolCall) -> ToolOutcome:
        """One call; never raises for a server's failures: they are the model's to relay."""
        tool = self._offered(call.name, user_id)
        if tool is None:
            return _outcome(call, f"error: {call.name} is not available in this chat", ok=False)
        arguments = parse_arguments(call.arguments)
        if isinstance(arguments, str):
            return _outcome(call, f"error: {arguments}", ok=False)
        result = await self.hub.call(tool, arguments, chat_id=chat_id, user_id=user_id)
        return _outcome(call, result.text, ok=result.ok)


def missing_arguments(tool: McpTool, arguments: dict[str, Any]) -> str | None:
    """Why the server would refuse these arguments before running anything (a required one
    missing), or None: a held call the server can only refuse is not shown as a button."""
    required = tool.parameters.get("required") or []
    missing = [name for name in required if isinstance(name, str) and name not in arguments]
    if missing:
        return f"{tool.name} needs {', '.join(repr(m) for m in missing)}"
    return None


def _outcome(call: ToolCall, content: str, *, ok: bool) -> ToolOutcome:
    return ToolOutcome(call.id, call.name, content, ok=ok, untrusted=True)


def mcp_family(tools: McpTools) -> HeldFamily:
    """The MCP tools with effects as a held family: every call of one waits for the asker's ✅
    (untrusted content in view or not), runs once on ✅, and its result joins the session."""

    def waits(name: str, _args: dict[str, Any], _view: InView) -> bool:
        return not tools.runs_at_once(name)

    def check(name: str, args: dict[str, Any]) -> str | None:
        tool = tools.hub.tool(name)
        if tool is None:
            return f"{name} is not available"
        return missing_arguments(tool, args)

    def describe(name: str, args: dict[str, Any]) -> Description:
        tool = tools.hub.tool(name)
        shown = json.dumps(args, ensure_ascii=False, sort_keys=True)
        if len(shown) > SHOWN_ARGUMENT_CHARS:
            shown = f"{shown[:SHOWN_ARGUMENT_CHARS]}… ({len(shown):,} characters)"
        return "held_mcp_call", {
            "server": tool.server if tool is not None else "?",
            "tool": tool.tool if tool is not None else name,
            "arguments": shown,
        }

    def shown(outcome: ToolOutcome) -> str:
        """The result without the line that frames it for the model."""
        first, _, rest = outcome.content.partition("\n")
        return (
            rest.strip()
            if first.startswith(("Untrusted result", "error:")) and rest
            else (outcome.content)
        )

    hooks = CallHooks(tools.covers, waits, check, MCP_HELD_NOTE, describe, shown)
    return outward_family("mcp", tools, hooks)
