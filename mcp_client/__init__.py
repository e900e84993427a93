"""The operator's MCP servers: their config, one supervised session each, their tools for the agent.

Below agent/ and free of Telegram. The official SDK (`mcp`) is imported only by
`mcp_client/connection.py`, and that module only once MCP_CONFIG names a file: a bot without MCP
servers never loads it (tests/test_architecture.py). Everything a server sends back is untrusted
data for the agent to frame, never an instruction.
"""

from primitives import MnemobotError


class McpClientError(MnemobotError):
    """Base of every MCP failure: str(error) is one line, fit for the log, /mcp or the model.

    McpClientError
    ├── McpConfigError     MCP_CONFIG is unreadable or invalid (mcp_client/config.py): names the
    │                      server and the field; stops start-up
    └── McpCallError       one call failed (mcp_client/errors.py): `kind` says how (down,
                           timeout, closed, protocol)
    """
