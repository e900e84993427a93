-- 0003: Telegram updates fetched but not handled when the bot stopped. Never edit once landed.
-- Telegram forgets an update once it is confirmed (polling) or answered 200 (webhook), so a
-- chat turn that had not started when a stop began is kept here, with its split-message parts,
-- and handled first on the next start. A row is deleted once its update has been handled.
CREATE TABLE held_updates (
    update_id   INTEGER PRIMARY KEY,
    payload     TEXT NOT NULL,      -- the Update as JSON (Update.to_dict())
    held_at     TEXT NOT NULL
);
