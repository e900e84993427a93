-- 0023: the archive's search index is written after the consolidation commit, in small
-- transactions of its own. Never edit once landed; add a new numbered file.
--
-- The commit that saves a session's memory and history entry also moves its messages into
-- archived_messages (every word is kept, in the same transaction as before). Indexing those
-- rows (the FTS5 index and the per-chat term counts in archive_terms) was most of that
-- transaction's time (about 90% of it for a 100-message session), and a user's /new waited
-- behind it. Now a row arrives with indexed = 0 and memory/recall/archive.py `index_pending_in`
-- indexes the waiting rows a few at a time right after the commit, and again at every start
-- (a crash in between leaves them waiting, never lost, never indexed twice: the flag flips in
-- the transaction that indexes the row). Rows archived before this migration are indexed.
ALTER TABLE archived_messages ADD COLUMN indexed INTEGER NOT NULL DEFAULT 1;
CREATE INDEX archived_messages_unindexed ON archived_messages(id) WHERE indexed = 0;

DROP TRIGGER archive_fts_insert;
DROP TRIGGER archive_fts_delete;
DROP TRIGGER archive_fts_unindex;
DROP TRIGGER archive_fts_reindex;

-- A row enters the index when its flag flips; only an indexed row leaves it (an FTS5 'delete'
-- of a row the index never held would corrupt it).
CREATE TRIGGER archive_fts_index AFTER UPDATE OF indexed ON archived_messages
    WHEN old.indexed = 0 AND new.indexed = 1 BEGIN
    INSERT INTO archive_fts(rowid, terms) SELECT id, terms FROM archive_fts_rows WHERE id = new.id;
END;
CREATE TRIGGER archive_fts_delete BEFORE DELETE ON archived_messages WHEN old.indexed = 1 BEGIN
    INSERT INTO archive_fts(archive_fts, rowid, terms)
        SELECT 'delete', id, terms FROM archive_fts_rows WHERE id = old.id;
END;
CREATE TRIGGER archive_fts_unindex BEFORE UPDATE OF chat_id, terms ON archived_messages
    WHEN old.indexed = 1 BEGIN
    INSERT INTO archive_fts(archive_fts, rowid, terms)
        SELECT 'delete', id, terms FROM archive_fts_rows WHERE id = old.id;
END;
CREATE TRIGGER archive_fts_reindex AFTER UPDATE OF chat_id, terms ON archived_messages
    WHEN new.indexed = 1 BEGIN
    INSERT INTO archive_fts(rowid, terms) SELECT id, terms FROM archive_fts_rows WHERE id = new.id;
END;
