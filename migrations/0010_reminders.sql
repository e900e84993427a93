-- 0010: reminders and the chat's time zone. Never edit once landed; add a new numbered file.
-- A reminder keeps the zone and the local wall time it was made with, and its repeat rule; the
-- next occurrence is stored in UTC (`next_at`, sortable text) so the scheduler finds the next
-- due one with one index lookup. Repeats are computed on local wall time, so 08:30 stays 08:30
-- across daylight-saving changes.
ALTER TABLE chats ADD COLUMN time_zone TEXT;  -- IANA name set with /timezone; NULL: unknown (UTC)

CREATE TABLE reminders (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    chat_id     INTEGER NOT NULL,
    user_id     INTEGER,            -- who set it (mentioned in a group; must still be allowed)
    user_name   TEXT,
    text        TEXT NOT NULL,
    time_zone   TEXT NOT NULL,      -- the zone `local_start` is in ('UTC' while unknown)
    zone_known  INTEGER NOT NULL,   -- 0: the chat had no time zone, UTC was used
    local_start TEXT NOT NULL,      -- first occurrence, local wall time 'YYYY-MM-DDTHH:MM:SS'
    repeat      TEXT NOT NULL CHECK (repeat IN ('none', 'daily', 'weekdays', 'weekly', 'monthly')),
    next_at     TEXT,               -- next occurrence, UTC; NULL once nothing is left to send
    state       TEXT NOT NULL CHECK (state IN ('pending', 'done', 'cancelled', 'stopped')),
    stop_reason TEXT,               -- why a chat's reminders stopped (blocked, deleted, ...)
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);
CREATE INDEX reminders_due ON reminders(next_at) WHERE state = 'pending';
CREATE INDEX reminders_by_chat ON reminders(chat_id, state);

-- One row per occurrence the scheduler claimed: written (claim) in the transaction that moves
-- the reminder on, before anything is sent; `outcome` and `message_id` written after the send.
-- A row without outcome at start-up is an occurrence whose send may or may not have happened
-- (a crash in between): it is sent again (at least once, see README).
CREATE TABLE reminder_deliveries (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    reminder_id INTEGER NOT NULL REFERENCES reminders(id),
    chat_id     INTEGER NOT NULL,
    due_at      TEXT NOT NULL,
    claimed_at  TEXT NOT NULL,
    outcome     TEXT CHECK (outcome IN ('sent', 'stopped', 'failed')),
    late        INTEGER,
    message_id  INTEGER,            -- the Telegram message that carried it
    finished_at TEXT,
    UNIQUE (reminder_id, due_at)
);
CREATE INDEX reminder_deliveries_open ON reminder_deliveries(id) WHERE outcome IS NULL;
CREATE INDEX reminder_deliveries_by_time ON reminder_deliveries(finished_at);
