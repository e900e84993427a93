-- 0025: scheduled tasks. Never edit once landed; add a new numbered file.
-- A task is a reminder whose payload is a model turn: it lives in `reminders` (its kind says
-- which), with the same zone, local start, repeat rule, claim and delivery row, so the
-- scheduler's durable claim/deliver cycle and its idempotency key (reminder, occurrence) serve
-- both. `failures` counts a task's failed runs in a row (three pause a repeating one: state
-- 'stopped', stop_reason 'paused'; resuming sets it pending again).
ALTER TABLE reminders ADD COLUMN kind TEXT NOT NULL DEFAULT 'reminder'
    CHECK (kind IN ('reminder', 'task'));
ALTER TABLE reminders ADD COLUMN failures INTEGER NOT NULL DEFAULT 0;
CREATE INDEX reminders_due_by_kind ON reminders(kind, next_at) WHERE state = 'pending';

-- One row per task occurrence that started to run: where the run is between its claim and
-- its delivery row's outcome, so a crash at any point resumes it without a second answer.
--   running  → the model turn is under way (a crash here runs it again: nothing was sent)
--   answered → the answer is stored here, nothing sent yet
--   sending  → the answer's message exists (`message_id`); it is completed by an edit, which
--              Telegram answers "not modified" when it was already done: never twice
--   then a final state, written with the delivery row's outcome: delivered, nothing (the
--   model had nothing to report: nothing sent), skipped_late, skipped_budget, failed,
--   cancelled, stopped (the chat cannot be reached).
CREATE TABLE task_runs (
    delivery_id INTEGER PRIMARY KEY REFERENCES reminder_deliveries(id),
    task_id     INTEGER NOT NULL REFERENCES reminders(id),
    chat_id     INTEGER NOT NULL,
    user_id     INTEGER,
    state       TEXT NOT NULL CHECK (state IN ('running', 'answered', 'sending', 'delivered',
                    'nothing', 'skipped_late', 'skipped_budget', 'failed', 'cancelled',
                    'stopped')),
    answer      TEXT,               -- the final text, once the model gave it
    untrusted   INTEGER NOT NULL DEFAULT 0,  -- words that are not the user's reached the run
    held        TEXT,               -- JSON list of pending_writes ids the run proposed
    message_id  INTEGER,            -- the Telegram message that carries the answer
    reason      TEXT,               -- why it failed or was skipped
    cost_usd    REAL NOT NULL DEFAULT 0,
    started_at  TEXT NOT NULL,
    finished_at TEXT
);
CREATE INDEX task_runs_by_task ON task_runs(task_id, delivery_id);
CREATE INDEX task_runs_by_time ON task_runs(started_at);
-- Their spend goes to the usage ledger with purpose 'task' (checked in code: memory/store.py
-- USAGE_PURPOSES), billed to who set the task.
