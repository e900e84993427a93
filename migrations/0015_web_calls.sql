-- 0015: web tool calls, counted per user per UTC day for WEB_DAILY_CALLS (and /usage). Never
-- edit once landed; add a new numbered file.
-- Only the count's ingredients are kept: who, which chat, which tool, when — never the URL or
-- the query (they can say more about a person than the count needs). Rows older than two days
-- are deleted as new ones are written.
CREATE TABLE web_calls (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    chat_id     INTEGER NOT NULL,
    user_id     INTEGER,
    kind        TEXT NOT NULL CHECK (kind IN ('read', 'search')),
    created_at  TEXT NOT NULL
);
CREATE INDEX web_calls_by_user ON web_calls(user_id, created_at);
