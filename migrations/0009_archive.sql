-- 0009: the archive. Never edit once landed; add a new numbered file.
-- When a consolidation commits, its messages leave the session (and every prompt) but are kept
-- here, searchable by /recall and the `recall` tool, until /forget or ARCHIVE_DAYS removes them.
-- `id` is the message's own id (so a session's turns keep their order); `terms` holds the
-- text's search terms (stems, CJK pairs) written by Python at archive time, because SQLite
-- cannot stem. Tool rounds are kept with empty terms: part of the record, not searched.
-- Messages deleted by consolidations before this migration are gone; nothing else changes.
CREATE TABLE archived_messages (
    id              INTEGER PRIMARY KEY,
    chat_id         INTEGER NOT NULL,
    session_id      INTEGER NOT NULL,
    role            TEXT NOT NULL,
    content         TEXT NOT NULL,
    tool_calls      TEXT,
    tool_call_id    TEXT,
    user_id         INTEGER,
    model_id        TEXT,
    terms           TEXT NOT NULL DEFAULT '',
    created_at      TEXT NOT NULL,
    archived_at     TEXT NOT NULL
);
CREATE INDEX archive_by_session ON archived_messages(session_id, id);
CREATE INDEX archive_by_chat_time ON archived_messages(chat_id, created_at);

-- The terms are already folded and stemmed: the tokenizer only splits them at spaces (marks
-- stay inside a term, as in Devanagari or Thai words).
CREATE VIRTUAL TABLE archive_fts USING fts5(
    terms, content='archived_messages', content_rowid='id',
    tokenize="unicode61 remove_diacritics 0 categories 'L* N* Co M*'"
);
CREATE TRIGGER archive_fts_insert AFTER INSERT ON archived_messages BEGIN
    INSERT INTO archive_fts(rowid, terms) VALUES (new.id, new.terms);
END;
CREATE TRIGGER archive_fts_delete AFTER DELETE ON archived_messages BEGIN
    INSERT INTO archive_fts(archive_fts, rowid, terms) VALUES ('delete', old.id, old.terms);
END;
-- How many archived turns hold each term (the rarity of a query's words, read per query).
CREATE VIRTUAL TABLE archive_vocab USING fts5vocab(archive_fts, 'row');
