-- 0012: how many archived turns hold each search term. Never edit once landed.
-- Recall reads these counts (a term's rarity) for every query. Read from the FTS5 index
-- (archive_vocab), each count walks the term's whole posting list: with 100,000 archived turns
-- a query's counts took 3 ms (7 ms at p99), a third of the search. Here they are one lookup
-- each. Kept in the transactions that write and delete archived turns (memory/archive.py:
-- the consolidation commit, /forget, ARCHIVE_DAYS); a term no turn holds any more is deleted.
CREATE TABLE archive_terms (
    term    TEXT PRIMARY KEY,
    docs    INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO archive_terms(term, docs) SELECT term, doc FROM archive_vocab;
