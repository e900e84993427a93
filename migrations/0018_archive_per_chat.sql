-- 0018: the archive's index and term counts, per chat. Never edit once landed.
-- Before, one FTS5 index and one set of term counts (archive_terms) served every chat: a term's
-- rarity, the longer words a query word begins, and which turns became candidates (the best
-- matches of all chats, then filtered) all depended on what OTHER chats had said. A user could
-- plant words in their own chat and tell from the order of their results whether another chat
-- ever said a name (issue 23, item 2). Now nothing a search reads belongs to another chat:
-- - the index holds each term qualified by its chat, `<chat>` U+E000 `<term>` (`<chat>` is the
--   chat id with its minus sign written `n`). U+E000 is a private-use character: the tokenizer
--   keeps it inside a token (category Co) and no search term ever holds one, so the token is
--   unambiguous. A chat's query only matches its own turns' tokens, and reads only their
--   posting lists, whatever the other chats hold. The qualified text is computed by the view
--   `archive_fts_rows` (the index's external content), so the triggers and a 'rebuild' agree;
--   a turn whose chat_id changes (a chat move) is indexed again under its new chat.
-- - archive_terms counts the turns holding a term per chat; the row of the empty term ''
--   counts the chat's searched turns (those with terms), the N of the chat's rarity.
DROP TRIGGER archive_fts_insert;
DROP TRIGGER archive_fts_delete;
DROP TABLE archive_vocab;
DROP TABLE archive_fts;

CREATE VIEW archive_fts_rows(id, terms) AS
    SELECT id, CASE WHEN terms = '' THEN '' ELSE
        replace(chat_id, '-', 'n') || char(57344)
        || replace(terms, ' ', ' ' || replace(chat_id, '-', 'n') || char(57344)) END
    FROM archived_messages;

CREATE VIRTUAL TABLE archive_fts USING fts5(
    terms, content='archive_fts_rows', content_rowid='id',
    tokenize="unicode61 remove_diacritics 0 categories 'L* N* Co M*'"
);
CREATE TRIGGER archive_fts_insert AFTER INSERT ON archived_messages BEGIN
    INSERT INTO archive_fts(rowid, terms) SELECT id, terms FROM archive_fts_rows WHERE id = new.id;
END;
-- BEFORE: the 'delete' must name the tokens the row was indexed with, read while it is there.
CREATE TRIGGER archive_fts_delete BEFORE DELETE ON archived_messages BEGIN
    INSERT INTO archive_fts(archive_fts, rowid, terms)
        SELECT 'delete', id, terms FROM archive_fts_rows WHERE id = old.id;
END;
CREATE TRIGGER archive_fts_unindex BEFORE UPDATE OF chat_id, terms ON archived_messages BEGIN
    INSERT INTO archive_fts(archive_fts, rowid, terms)
        SELECT 'delete', id, terms FROM archive_fts_rows WHERE id = old.id;
END;
CREATE TRIGGER archive_fts_reindex AFTER UPDATE OF chat_id, terms ON archived_messages BEGIN
    INSERT INTO archive_fts(rowid, terms) SELECT id, terms FROM archive_fts_rows WHERE id = new.id;
END;
INSERT INTO archive_fts(archive_fts) VALUES ('rebuild');
-- How many turns hold each qualified token, as the index counts them (tests compare it with
-- archive_terms; recall reads archive_terms, one lookup per term).
CREATE VIRTUAL TABLE archive_vocab USING fts5vocab(archive_fts, 'row');

DROP TABLE archive_terms;
CREATE TABLE archive_terms (
    chat_id INTEGER NOT NULL,
    term    TEXT NOT NULL,
    docs    INTEGER NOT NULL,
    PRIMARY KEY (chat_id, term)
) WITHOUT ROWID;
INSERT INTO archive_terms(chat_id, term, docs)
    SELECT CAST(replace(substr(term, 1, instr(term, char(57344)) - 1), 'n', '-') AS INTEGER),
        substr(term, instr(term, char(57344)) + 1), doc
    FROM archive_vocab WHERE doc > 0;
INSERT INTO archive_terms(chat_id, term, docs)
    SELECT chat_id, '', COUNT(*) FROM archived_messages WHERE terms != '' GROUP BY chat_id;
