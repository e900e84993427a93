-- 0020: a reminder send whose answer was lost after it may have reached Telegram (a 502 or 504,
-- a read timeout) is recorded as 'unknown' and not sent again: a retry gave the chat the same
-- reminder twice whenever the first had landed. SQLite cannot widen a CHECK in place, so the
-- table is rebuilt with the same columns and indexes. Never edit once landed.
CREATE TABLE reminder_deliveries_new (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    reminder_id INTEGER NOT NULL REFERENCES reminders(id),
    chat_id     INTEGER NOT NULL,
    due_at      TEXT NOT NULL,
    claimed_at  TEXT NOT NULL,
    outcome     TEXT CHECK (outcome IN ('sent', 'stopped', 'failed', 'unknown')),
    late        INTEGER,
    message_id  INTEGER,            -- the Telegram message that carried it
    finished_at TEXT,
    UNIQUE (reminder_id, due_at)
);
INSERT INTO reminder_deliveries_new(
    id, reminder_id, chat_id, due_at, claimed_at, outcome, late, message_id, finished_at
)
SELECT id, reminder_id, chat_id, due_at, claimed_at, outcome, late, message_id, finished_at
FROM reminder_deliveries;
DROP TABLE reminder_deliveries;
ALTER TABLE reminder_deliveries_new RENAME TO reminder_deliveries;
CREATE INDEX reminder_deliveries_open ON reminder_deliveries(id) WHERE outcome IS NULL;
CREATE INDEX reminder_deliveries_by_time ON reminder_deliveries(finished_at);
