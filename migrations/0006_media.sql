-- 0006: media (voice notes, photos, documents). Never edit once landed; add a new numbered file.

-- What a user message was sent as, when it was not plain text: JSON such as
-- {"kind": "voice", "file_id": ..., "file_unique_id": ..., "duration": 7} or
-- {"kind": "photo", "file_id": ..., "caption": ...}. The content column holds the text the
-- model and consolidation read (the transcript, "[photo: caption]", the document's text);
-- the file id lets the bot fetch the file again. Never the bytes.
ALTER TABLE messages ADD COLUMN media TEXT;

-- Voice notes (and audio, video notes) waiting for a transcript. A row is written before any
-- download or model call, so a note whose transcription failed is not lost: the user can
-- retry it (the retry button names the row), and it stays here until it is transcribed.
CREATE TABLE media_inbox (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    chat_id         INTEGER NOT NULL,
    user_id         INTEGER NOT NULL,
    kind            TEXT NOT NULL CHECK (kind IN ('voice', 'audio', 'video_note')),
    file_id         TEXT NOT NULL,
    file_unique_id  TEXT NOT NULL,
    duration        INTEGER NOT NULL DEFAULT 0,
    file_size       INTEGER,
    mime_type       TEXT,
    file_name       TEXT,
    caption         TEXT,
    state           TEXT NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'failed', 'done')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    message_id      INTEGER,            -- the stored user message once transcribed
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL
);
CREATE INDEX media_inbox_by_chat ON media_inbox(chat_id, state);

-- Usage gains the 'transcription' purpose and the seconds of audio billed. SQLite cannot
-- change a CHECK constraint in place, so the table is rebuilt with its indexes.
CREATE TABLE usage_new (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    chat_id             INTEGER NOT NULL,
    user_id             INTEGER,
    model_id            TEXT NOT NULL,
    purpose             TEXT NOT NULL
                        CHECK (purpose IN ('chat', 'consolidation', 'transcription')),
    prompt_tokens       INTEGER NOT NULL,
    completion_tokens   INTEGER NOT NULL,
    cost_usd            REAL NOT NULL,
    created_at          TEXT NOT NULL,
    audio_seconds       REAL NOT NULL DEFAULT 0
);
INSERT INTO usage_new(id, chat_id, user_id, model_id, purpose, prompt_tokens,
                      completion_tokens, cost_usd, created_at)
    SELECT id, chat_id, user_id, model_id, purpose, prompt_tokens, completion_tokens,
           cost_usd, created_at FROM usage;
DROP TABLE usage;
ALTER TABLE usage_new RENAME TO usage;
CREATE INDEX usage_by_chat ON usage(chat_id, created_at);
CREATE INDEX usage_by_user ON usage(user_id, created_at);
CREATE INDEX usage_by_time ON usage(created_at);
CREATE INDEX usage_spend_by_time ON usage(created_at, cost_usd);
CREATE INDEX usage_spend_by_user ON usage(user_id, created_at, cost_usd);
