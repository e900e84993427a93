-- 0022: where words that are not the user's came from, kept as data. Never edit once landed;
-- add a new numbered file.
--
-- `provenance` (messages and archived_messages): NULL for the user's own words (a typed
-- message, a voice note) and the bot's own; otherwise JSON {"kind", "source"} with optional
-- "chars" (how long the untrusted text is) and "own" (the user's own words that came with it:
-- a caption, the reply to a quote). Kinds: web_search, web_read, document, audio, photo,
-- forward, quote, mcp, recall (memory/provenance.py). Whether a message is untrusted is read
-- from this column only; the memory writer sees such a part as a one-line stub, never its text.
ALTER TABLE messages ADD COLUMN provenance TEXT;
ALTER TABLE archived_messages ADD COLUMN provenance TEXT;
-- The held write (pending_writes) a tool result stands for: the consolidation transcript shows
-- such a write by its outcome (kept, dropped, expired), never as the model's proposal.
ALTER TABLE messages ADD COLUMN pending_write_id INTEGER;
-- 1: the entry was written from a chunk that held untrusted parts; recall frames it as such.
ALTER TABLE history_entries ADD COLUMN untrusted INTEGER NOT NULL DEFAULT 0;
-- A forwarded voice note's origin, so a retried transcription is stored as that origin's words.
ALTER TABLE media_inbox ADD COLUMN forward_origin TEXT;

-- Existing rows, from what they recorded: a forward's origin, the media kind, a quote of
-- someone else (media "untrusted"), and the results of web tool calls.
UPDATE messages SET provenance = json_object(
        'kind', 'forward',
        'source', coalesce(nullif(trim(json_extract(forward_origin, '$.name')), ''), 'someone else'))
    WHERE forward_origin IS NOT NULL AND json_valid(forward_origin);
UPDATE messages SET provenance = json_object(
        'kind', json_extract(media, '$.kind'),
        'source', coalesce(nullif(trim(json_extract(media, '$.file_name')), ''),
                           json_extract(media, '$.kind')),
        'chars', length(content),
        'own', json_extract(media, '$.caption'))
    WHERE provenance IS NULL AND media IS NOT NULL AND json_valid(media)
      AND json_extract(media, '$.kind') IN ('document', 'audio', 'photo');
UPDATE messages SET provenance = json_object('kind', 'quote', 'source', 'someone else')
    WHERE provenance IS NULL AND media IS NOT NULL AND json_valid(media)
      AND json_extract(media, '$.untrusted') = 1;

-- A web tool's result: the call it answers is in the same session's assistant message.
UPDATE messages AS r SET provenance = (
    SELECT json_object(
        'kind', json_extract(c.value, '$.name'),
        'source', 'the web',
        'chars', length(r.content))
    FROM messages a, json_each(a.tool_calls) c
    WHERE a.session_id = r.session_id AND a.tool_calls IS NOT NULL AND json_valid(a.tool_calls)
      AND json_extract(c.value, '$.id') = r.tool_call_id
      AND json_extract(c.value, '$.name') IN ('web_search', 'web_read')
    LIMIT 1)
    WHERE r.role = 'tool' AND r.provenance IS NULL;

-- The archive kept neither media nor forward origins: its rows are recognised by what the bot
-- itself wrote around such words (a document's note, a forward's frame), and its web results
-- by their calls, as above. Marking a row untrusted that was not only frames it on recall.
UPDATE archived_messages SET provenance = json_object(
        'kind', 'document', 'source', 'an earlier document', 'chars', length(content))
    WHERE role = 'user'
      AND instr(content, '[The document''s text is between the pair of tags named ') > 0;
UPDATE archived_messages SET provenance = json_object(
        'kind', 'forward', 'source', 'someone else')
    WHERE role = 'user' AND provenance IS NULL
      AND instr(content, '[The user forwarded a message written by ') > 0;
UPDATE archived_messages AS r SET provenance = (
    SELECT json_object('kind', json_extract(c.value, '$.name'),
                       'source', 'the web',
                       'chars', length(r.content))
    FROM archived_messages a, json_each(a.tool_calls) c
    WHERE a.session_id = r.session_id AND a.tool_calls IS NOT NULL AND json_valid(a.tool_calls)
      AND json_extract(c.value, '$.id') = r.tool_call_id
      AND json_extract(c.value, '$.name') IN ('web_search', 'web_read')
    LIMIT 1)
    WHERE r.role = 'tool' AND r.provenance IS NULL;

-- A summary written from such a chunk.
UPDATE history_entries SET untrusted = 1 WHERE EXISTS (
    SELECT 1 FROM archived_messages a
    WHERE a.session_id = history_entries.session_id AND a.provenance IS NOT NULL
      AND a.id BETWEEN history_entries.first_message_id AND history_entries.last_message_id);
