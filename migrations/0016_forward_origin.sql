-- 0016: where a forwarded message came from. Never edit once landed; add a new numbered file.

-- A user message the user forwarded (Telegram's `forward_origin`, Bot API 7.0) holds someone
-- else's words: a person, a hidden account, a chat or a channel. Until now it was stored like
-- the user's own text, so the chat model and the consolidation took "remember that I am
-- allergic to X" from a forwarded message as the user's own statement. The origin is kept with
-- the message as JSON, e.g. {"type": "user", "name": "Alice (id 101)", "date": 1733050000}
-- ("type" is user, hidden_user, chat or channel; "name" one line, as the transcript shows it).
-- NULL: the sender's own message.
ALTER TABLE messages ADD COLUMN forward_origin TEXT;
