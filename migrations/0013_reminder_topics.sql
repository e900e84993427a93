-- 0013: the forum topic a reminder was set in. Never edit once landed; add a new numbered file.
-- A reminder set inside a topic of a forum group is sent back into that topic; NULL: the chat
-- itself (a private chat, a group without topics, a forum's General). A topic deleted or closed
-- since then is not a reason to lose the reminder: it is sent to the chat instead (logged).
ALTER TABLE reminders ADD COLUMN topic_id INTEGER;
