-- 0008: chat turns are idempotent. Never edit once landed; add a new numbered file.
-- A front end may deliver one input twice (a Telegram update replayed from held_updates after a
-- restart and sent again by Telegram because the last confirming getUpdates failed). It passes
-- a key with the user's message; the key is written in the transaction that stores the message,
-- and a message whose key is already here is not stored again. It is answered again only if
-- its first handling left it unanswered (a crash mid-reply): it is then still the last message
-- of the open session; otherwise it is skipped, so it is never answered or billed twice.
CREATE TABLE turn_keys (
    key         TEXT PRIMARY KEY,
    chat_id     INTEGER NOT NULL,
    message_id  INTEGER,            -- the user message stored with the key
    created_at  TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX turn_keys_by_time ON turn_keys(created_at);
