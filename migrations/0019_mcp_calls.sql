-- 0019: calls of the operator's MCP tools, one row per call, for MCP_USER_DAILY_CALLS, /usage
-- and /mcp. Never edit once landed; add a new numbered file.
-- What is kept: who, which chat, which server and tool, how long, how it ended — never the
-- arguments or the result (they can say more about a person than the count needs). A row is
-- written when the call starts ('running'), so calls in flight count against the cap, and
-- settled when it ends. Rows older than 40 days are deleted as new ones are written.
CREATE TABLE mcp_calls (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    chat_id      INTEGER NOT NULL,
    user_id      INTEGER,
    server       TEXT NOT NULL,
    tool         TEXT NOT NULL,
    outcome      TEXT NOT NULL DEFAULT 'running'
                     CHECK (outcome IN ('running', 'ok', 'error', 'timeout', 'down', 'closed',
                                        'protocol')),
    duration_ms  INTEGER,
    created_at   TEXT NOT NULL
);
CREATE INDEX mcp_calls_by_user ON mcp_calls(user_id, created_at);
CREATE INDEX mcp_calls_by_time ON mcp_calls(created_at);
