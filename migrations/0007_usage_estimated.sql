-- 0007: usage rows we estimated ourselves. Never edit once landed.
-- A cancelled or broken stream, or a gateway that sends no usage chunk, still cost money: the
-- row is then our token count of the prompt and the text received, and /usage marks it.
ALTER TABLE usage ADD COLUMN estimated INTEGER NOT NULL DEFAULT 0;
