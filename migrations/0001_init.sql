-- 0001: chats, sessions, messages, usage. Never edit once landed; add a new numbered file.
CREATE TABLE chats (
    chat_id     INTEGER PRIMARY KEY,
    model_id    TEXT,               -- NULL: the default model
    language    TEXT,               -- last seen Telegram language_code of the chat's user
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);

CREATE TABLE sessions (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    chat_id     INTEGER NOT NULL REFERENCES chats(chat_id),
    opened_at   TEXT NOT NULL,
    closed_at   TEXT                -- NULL while active
);
-- At most one active session per chat.
CREATE UNIQUE INDEX sessions_one_active ON sessions(chat_id) WHERE closed_at IS NULL;

CREATE TABLE messages (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id          INTEGER NOT NULL REFERENCES sessions(id),
    chat_id             INTEGER NOT NULL,
    role                TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'tool', 'system')),
    content             TEXT NOT NULL,
    tool_calls          TEXT,       -- JSON list of {id, name, arguments} or NULL
    tool_call_id        TEXT,
    user_id             INTEGER,
    model_id            TEXT,       -- the model that really answered (assistant rows)
    prompt_tokens       INTEGER,
    completion_tokens   INTEGER,
    created_at          TEXT NOT NULL
);
CREATE INDEX messages_by_session ON messages(session_id, id);

CREATE TABLE usage (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    chat_id             INTEGER NOT NULL,
    user_id             INTEGER,
    model_id            TEXT NOT NULL,
    purpose             TEXT NOT NULL CHECK (purpose IN ('chat', 'consolidation')),
    prompt_tokens       INTEGER NOT NULL,
    completion_tokens   INTEGER NOT NULL,
    cost_usd            REAL NOT NULL,
    created_at          TEXT NOT NULL
);
CREATE INDEX usage_by_chat ON usage(chat_id, created_at);
CREATE INDEX usage_by_user ON usage(user_id, created_at);
CREATE INDEX usage_by_time ON usage(created_at);
