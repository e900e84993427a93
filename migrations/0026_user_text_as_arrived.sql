-- 0026: a user message is stored as it arrived; the prompt frames it. Never edit once landed;
-- add a new numbered file.
--
-- A forward is framed as its origin's words, and a quote before the reply, where the model
-- reads the message (agent/prompt.py `user_text`), from what is stored with it: its
-- `forward_origin`, and the quoted text in `media` ("quote"). Before this, both frames were
-- written into `content`. A forward stored so is marked "stored_framed" in `media` and shown as
-- stored, never framed twice. An older quote needs no mark: it has no "quote" in `media`, so
-- nothing frames it again.
UPDATE messages SET media = json_set(coalesce(media, '{}'), '$.stored_framed', json('true'))
    WHERE forward_origin IS NOT NULL AND (media IS NULL OR json_valid(media));
