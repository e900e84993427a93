-- 0005: memory writes made by the chat model's tools (`remember`, `forget_fact`). Never edit once
-- landed; add a new numbered file.
-- A consolidation computes a whole new memory from the version it read. When the chat model
-- remembered or forgot a fact meanwhile, the job's commit replays these edits on top of its
-- result instead of overwriting them (or running the chain again). Rows are kept only while a
-- consolidation that started from an older version may still commit; /forget deletes them.
CREATE TABLE memory_edits (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    chat_id     INTEGER NOT NULL,
    version     INTEGER NOT NULL,   -- the memory version this edit produced
    kind        TEXT NOT NULL CHECK (kind IN ('remember', 'forget')),
    fact        TEXT NOT NULL,      -- the tool's argument
    lines       TEXT NOT NULL,      -- JSON list: the memory lines added or removed
    created_at  TEXT NOT NULL
);
CREATE UNIQUE INDEX memory_edits_by_version ON memory_edits(chat_id, version);
