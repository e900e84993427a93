-- 0019: held tool calls of any family, and web calls in the usage ledger. Never edit once
-- landed; add a new numbered file.
-- pending_writes held only the four memory and reminder writes; a web read or search asked for
-- with untrusted content in view (and next an MCP tool with effects) waits for the same ✅.
-- Which tools may wait is decided in code (agent/tools/held.py registers each family), so a
-- new family needs no table rebuild: the tool column loses its CHECK. SQLite cannot change a
-- CHECK in place, so the table is rebuilt with its index; its AUTOINCREMENT counter is carried
-- over, so a button of a forgotten row can never name a new one.
CREATE TABLE pending_writes_new (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    chat_id     INTEGER NOT NULL,
    user_id     INTEGER,            -- the asker: only they may keep it
    user_name   TEXT,               -- for a reminder set in a group (it mentions them)
    topic_id    INTEGER,            -- the forum topic a reminder would be sent to
    tool        TEXT NOT NULL,      -- the tool called; its family is checked in code
    arguments   TEXT NOT NULL,      -- the model's call, JSON, exactly as it would have run
    state       TEXT NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'running', 'kept', 'dropped', 'failed', 'expired')),
    created_at  TEXT NOT NULL,
    expires_at  TEXT NOT NULL,
    settled_at  TEXT
);
INSERT INTO pending_writes_new(id, chat_id, user_id, user_name, topic_id, tool, arguments, state,
                               created_at, expires_at, settled_at)
    SELECT id, chat_id, user_id, user_name, topic_id, tool, arguments, state, created_at,
           expires_at, settled_at FROM pending_writes;
INSERT INTO sqlite_sequence(name, seq)
    SELECT 'pending_writes_new', 0
    WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'pending_writes_new');
UPDATE sqlite_sequence
    SET seq = MAX(seq, COALESCE(
        (SELECT seq FROM sqlite_sequence WHERE name = 'pending_writes'), 0))
    WHERE name = 'pending_writes_new';
DROP TABLE pending_writes;
ALTER TABLE pending_writes_new RENAME TO pending_writes;
CREATE INDEX pending_writes_by_chat ON pending_writes(chat_id, state);

-- The usage ledger records every web call (purpose 'web', model_id the tool: 'web_read' or
-- 'web_search', no tokens, no cost), and WEB_DAILY_CALLS counts those rows: one record of what
-- a user's turns used, shown by /usage. Its purposes are checked in code for the same reason
-- as above (memory/store.py USAGE_PURPOSES). The day's counted calls move over, so the cap
-- holds across the upgrade; web_calls is dropped (it kept no URL or query, nor does usage).
CREATE TABLE usage_new (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    chat_id             INTEGER NOT NULL,
    user_id             INTEGER,
    model_id            TEXT NOT NULL,
    purpose             TEXT NOT NULL,
    prompt_tokens       INTEGER NOT NULL,
    completion_tokens   INTEGER NOT NULL,
    cost_usd            REAL NOT NULL,
    created_at          TEXT NOT NULL,
    audio_seconds       REAL NOT NULL DEFAULT 0,
    estimated           INTEGER NOT NULL DEFAULT 0
);
INSERT INTO usage_new(id, chat_id, user_id, model_id, purpose, prompt_tokens, completion_tokens,
                      cost_usd, created_at, audio_seconds, estimated)
    SELECT id, chat_id, user_id, model_id, purpose, prompt_tokens, completion_tokens, cost_usd,
           created_at, audio_seconds, estimated FROM usage;
INSERT INTO usage_new(chat_id, user_id, model_id, purpose, prompt_tokens, completion_tokens,
                      cost_usd, created_at)
    SELECT chat_id, user_id, 'web_' || kind, 'web', 0, 0, 0.0, created_at FROM web_calls
    ORDER BY id;
DROP TABLE usage;
ALTER TABLE usage_new RENAME TO usage;
CREATE INDEX usage_by_chat ON usage(chat_id, created_at);
CREATE INDEX usage_by_user ON usage(user_id, created_at);
CREATE INDEX usage_by_time ON usage(created_at);
CREATE INDEX usage_spend_by_time ON usage(created_at, cost_usd);
CREATE INDEX usage_spend_by_user ON usage(user_id, created_at, cost_usd);
DROP TABLE web_calls;
