-- 0002: long-term memory, history entries (+ FTS5 trigram index), the durable consolidation queue
-- and one row per model attempt. Never edit once landed; add a new numbered file.

-- One long-term memory per chat. `version` grows on every write (consolidation or /forget), so a
-- consolidation that read version N can only commit while the memory is still at version N.
CREATE TABLE long_term_memory (
    chat_id         INTEGER PRIMARY KEY REFERENCES chats(chat_id),
    content         TEXT NOT NULL DEFAULT '',
    version         INTEGER NOT NULL DEFAULT 0,
    over_budget     INTEGER NOT NULL DEFAULT 0,   -- 1: the next consolidation is asked to compress
    updated_at      TEXT NOT NULL
);

-- The rolling, searchable history (the seed's HISTORY.md), one row per consolidated chunk.
CREATE TABLE history_entries (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    chat_id             INTEGER NOT NULL,
    session_id          INTEGER,
    job_id              INTEGER,
    entry               TEXT NOT NULL,
    model_id            TEXT NOT NULL,
    first_message_id    INTEGER,
    last_message_id     INTEGER,
    first_message_at    TEXT,
    last_message_at     TEXT,
    message_count       INTEGER NOT NULL DEFAULT 0,
    created_at          TEXT NOT NULL
);
CREATE INDEX history_by_chat ON history_entries(chat_id, id);
-- Belt and braces for "never applied twice": one entry per (job, first consolidated message).
CREATE UNIQUE INDEX history_once_per_chunk ON history_entries(job_id, first_message_id)
    WHERE job_id IS NOT NULL;

-- Trigram tokenizer: substring search that works for CJK and mixed-language text.
CREATE VIRTUAL TABLE history_fts USING fts5(
    entry, content='history_entries', content_rowid='id', tokenize='trigram'
);
CREATE TRIGGER history_fts_insert AFTER INSERT ON history_entries BEGIN
    INSERT INTO history_fts(rowid, entry) VALUES (new.id, new.entry);
END;
CREATE TRIGGER history_fts_delete AFTER DELETE ON history_entries BEGIN
    INSERT INTO history_fts(history_fts, rowid, entry) VALUES ('delete', old.id, old.entry);
END;

-- The durable queue. A job consolidates the messages of `session_id` (all of them, or those with
-- id <= upto_message_id for an automatic window job) that still exist when it runs.
CREATE TABLE consolidation_jobs (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    chat_id             INTEGER NOT NULL,
    session_id          INTEGER NOT NULL,
    kind                TEXT NOT NULL CHECK (kind IN ('session_closed', 'window')),
    upto_message_id     INTEGER,            -- NULL: every message of the session
    state               TEXT NOT NULL DEFAULT 'pending'
                        CHECK (state IN ('pending', 'running', 'done')),
    attempts            INTEGER NOT NULL DEFAULT 0,   -- whole-chain runs that failed in a row
    chunks_done         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at     TEXT NOT NULL,
    last_error          TEXT,
    saved_by_model      TEXT,
    created_at          TEXT NOT NULL,
    started_at          TEXT,
    finished_at         TEXT,
    updated_at          TEXT NOT NULL
);
CREATE INDEX jobs_open_by_chat ON consolidation_jobs(chat_id, id) WHERE state != 'done';
CREATE INDEX jobs_by_state ON consolidation_jobs(state, next_attempt_at);

-- One row per model tried, for logs and /stats: which model failed how, which one saved.
CREATE TABLE consolidation_attempts (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id      INTEGER NOT NULL,
    chat_id     INTEGER NOT NULL,
    model_id    TEXT NOT NULL,
    outcome     TEXT NOT NULL,      -- saved, invalid_call, no_tool_call, timeout, rate_limit, ...
    detail      TEXT NOT NULL DEFAULT '',
    latency_ms  INTEGER NOT NULL DEFAULT 0,
    created_at  TEXT NOT NULL
);
CREATE INDEX attempts_by_model ON consolidation_attempts(model_id, outcome);
CREATE INDEX attempts_by_job ON consolidation_attempts(job_id);
