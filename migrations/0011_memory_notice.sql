-- Lines a consolidation added to and removed from a chat's long-term memory that the user has
-- not been told about yet: the next reply says "🧠 Memory updated: +N −M (/memory)" and zeroes
-- them, so no write to the memory is silent. Counts only, no text (/forget zeroes them too).
ALTER TABLE long_term_memory ADD COLUMN unreported_added INTEGER NOT NULL DEFAULT 0;
ALTER TABLE long_term_memory ADD COLUMN unreported_removed INTEGER NOT NULL DEFAULT 0;
