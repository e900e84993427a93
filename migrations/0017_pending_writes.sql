-- 0017: memory and reminder writes the model proposed in a turn that read untrusted content
-- (web pages and results, documents, forwarded or quoted messages of others). They wait here
-- for the asker's ✅ (kept: the write is carried out then) or ❌ (dropped); one not settled
-- within its time expires. In the database, not in memory, so a restart keeps the buttons
-- working. Never edit once landed; add a new numbered file.
CREATE TABLE pending_writes (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    chat_id     INTEGER NOT NULL,
    user_id     INTEGER,            -- the asker: only they may keep it
    user_name   TEXT,               -- for a reminder set in a group (it mentions them)
    topic_id    INTEGER,            -- the forum topic a reminder would be sent to
    tool        TEXT NOT NULL CHECK (tool IN
                    ('remember', 'forget_fact', 'schedule_reminder', 'cancel_reminder')),
    arguments   TEXT NOT NULL,      -- the model's call, JSON, exactly as it would have run
    state       TEXT NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'running', 'kept', 'dropped', 'failed', 'expired')),
    created_at  TEXT NOT NULL,
    expires_at  TEXT NOT NULL,
    settled_at  TEXT
);
CREATE INDEX pending_writes_by_chat ON pending_writes(chat_id, state);
