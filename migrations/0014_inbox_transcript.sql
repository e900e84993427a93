-- 0014: a voice note's transcript is kept with its inbox row the moment the provider returns it.
-- Never edit once landed; add a new numbered file.

-- The transcription is paid for once it returns. A stop (or a /cancel) that cuts in after that
-- and before the user message is stored used to throw the transcript away: the held update (or
-- the Retry button) then transcribed the same note again and paid twice. The row now keeps the
-- words, and the next start (or the Retry) answers from them without another upload. /forget
-- deletes the rows with everything else of the chat.
ALTER TABLE media_inbox ADD COLUMN transcript TEXT;
