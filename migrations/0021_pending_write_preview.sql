-- 0021: what the ✅ question of a held write showed, so that the tap carries out exactly that.
-- `preview` (JSON): for forget_fact the memory lines that would be removed, for cancel_reminder
-- the reminder's time and text. `memory_version`: for forget_fact, the version of the
-- long-term memory those lines were read from; a ✅ after the memory changed so that they are
-- no longer the lines that would go (a /forget, a consolidation) removes nothing. Never edit
-- once landed.
ALTER TABLE pending_writes ADD COLUMN preview TEXT;
ALTER TABLE pending_writes ADD COLUMN memory_version INTEGER;
