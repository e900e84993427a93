-- 0005: chat turns are idempotent. Never edit once landed; add a new numbered file.
-- A front end may deliver one input twice (a Telegram update replayed from held_updates after a
-- restart and sent again by Telegram because the last confirming getUpdates failed). It passes
-- a key with the user's message; the key is written in the transaction that stores the message,
-- and a message whose key is already here is not stored, so it is not answered or billed again.
CREATE TABLE turn_keys (
    key         TEXT PRIMARY KEY,
    chat_id     INTEGER NOT NULL,
    created_at  TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX turn_keys_by_time ON turn_keys(created_at);
