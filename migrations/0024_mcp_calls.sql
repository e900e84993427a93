-- 0024: calls of the operator's MCP tools in the usage ledger. Never edit once landed; add a
-- new numbered file.
-- Each call is one usage row (purpose 'mcp', model_id '<server>/<tool>', no tokens, no cost),
-- written when the call starts with outcome 'running' (so calls in flight count against
-- MCP_USER_DAILY_CALLS) and settled with how it ended and how long it took. Other rows leave
-- both columns NULL. Neither the arguments nor the result are kept.
ALTER TABLE usage ADD COLUMN outcome TEXT;
ALTER TABLE usage ADD COLUMN duration_ms INTEGER;
