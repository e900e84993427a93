"""How one MCP call failed, in words the model can pass on (no SDK import: the hub and the agent
read these without loading `mcp`)."""

from __future__ import annotations

from typing import Literal

from mcp_client import McpClientError

CallFailure = Literal["down", "timeout", "closed", "protocol"]


class McpCallError(McpClientError):
    """One call did not return a result. `kind`: the server is not up (`down`), the call ran
    past its timeout (`timeout`), the connection broke under it (`closed`), or the server
    answered with a JSON-RPC error or a malformed result (`protocol`)."""

    def __init__(self, kind: CallFailure, message: str) -> None:
        super().__init__(message)
        self.kind: CallFailure = kind
