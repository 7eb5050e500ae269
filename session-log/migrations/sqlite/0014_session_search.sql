-- Finding sessions (ListSessions' filters and text search). What a filter reads is kept
-- on the session row by triggers on `events`, so every writer (appends, imports, the
-- outage journal's backfill) keeps it in the transaction that writes the event, and a
-- listing filters one indexed table instead of reading each session's events:
-- - `user_id`, `agent_id`: the ADK surface's `user_id` and `app_name` (the only surface
--   whose requests name a user and an agent), from the latest event whose metadata has
--   them;
-- - `last_run_status`: the latest `run_status` written (`in_progress` while a run runs);
-- - `metadata_json`: the latest `session_metadata` event's `metadata` (the
--   Conversations API's, or PatchSession's);
-- - `client_deleted`: 1 once a client deleted it (a `session_deleted` event: hidden,
--   its log kept), so the listing need not look for that event per session.
ALTER TABLE sessions ADD COLUMN client_deleted INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN user_id TEXT;
ALTER TABLE sessions ADD COLUMN agent_id TEXT;
ALTER TABLE sessions ADD COLUMN last_run_status TEXT;
ALTER TABLE sessions ADD COLUMN metadata_json TEXT;

UPDATE sessions SET
    client_deleted = EXISTS (SELECT 1 FROM events AS e
        WHERE e.account_id = sessions.account_id AND e.session_id = sessions.session_id
        AND e.event_type IN ('session_metadata', 'session_deleted', 'item_deleted')
        AND e.event_type = 'session_deleted'),
    user_id = (SELECT json_extract(e.metadata_json, '$.adk.user_id') FROM events AS e
        WHERE e.account_id = sessions.account_id AND e.session_id = sessions.session_id
        AND json_extract(e.metadata_json, '$.adk.user_id') IS NOT NULL
        ORDER BY e.seq DESC LIMIT 1),
    agent_id = (SELECT json_extract(e.metadata_json, '$.adk.app_name') FROM events AS e
        WHERE e.account_id = sessions.account_id AND e.session_id = sessions.session_id
        AND json_extract(e.metadata_json, '$.adk.app_name') IS NOT NULL
        ORDER BY e.seq DESC LIMIT 1),
    last_run_status = (SELECT json_extract(e.content_json, '$.status') FROM events AS e
        WHERE e.account_id = sessions.account_id AND e.session_id = sessions.session_id
        AND e.event_type = 'run_status' ORDER BY e.seq DESC LIMIT 1),
    metadata_json = (SELECT e.content_json -> '$.metadata' FROM events AS e
        WHERE e.account_id = sessions.account_id AND e.session_id = sessions.session_id
        AND e.event_type IN ('session_metadata', 'session_deleted', 'item_deleted')
        AND e.event_type = 'session_metadata' ORDER BY e.seq DESC LIMIT 1);

-- The default listing (active, not deleted), newest activity first: its page and its
-- count, and the filters on these columns, read this index alone; archived sessions
-- have one of their own.
CREATE INDEX sessions_listed ON sessions
    (account_id, updated_at DESC, session_id, created_at, last_run_status, user_id, agent_id)
    WHERE archived_at IS NULL AND client_deleted = 0;
CREATE INDEX sessions_archived ON sessions (account_id, updated_at DESC, session_id)
    WHERE archived_at IS NOT NULL AND client_deleted = 0;
CREATE INDEX sessions_by_user ON sessions (account_id, user_id, updated_at DESC)
    WHERE user_id IS NOT NULL;
CREATE INDEX sessions_by_agent ON sessions (account_id, agent_id, updated_at DESC)
    WHERE agent_id IS NOT NULL;
CREATE INDEX sessions_by_status ON sessions (account_id, last_run_status, updated_at DESC);

CREATE TRIGGER sessions_keep_run_status AFTER INSERT ON events
WHEN NEW.event_type = 'run_status'
BEGIN
    UPDATE sessions SET last_run_status = json_extract(NEW.content_json, '$.status')
    WHERE account_id = NEW.account_id AND session_id = NEW.session_id;
END;

CREATE TRIGGER sessions_keep_deleted AFTER INSERT ON events
WHEN NEW.event_type = 'session_deleted'
BEGIN
    UPDATE sessions SET client_deleted = 1
    WHERE account_id = NEW.account_id AND session_id = NEW.session_id;
END;

CREATE TRIGGER sessions_keep_metadata AFTER INSERT ON events
WHEN NEW.event_type = 'session_metadata'
BEGIN
    UPDATE sessions SET metadata_json = NEW.content_json -> '$.metadata'
    WHERE account_id = NEW.account_id AND session_id = NEW.session_id;
END;

-- Most events' metadata is `{}`: the LIKE keeps the JSON parse off them.
CREATE TRIGGER sessions_keep_user AFTER INSERT ON events
WHEN NEW.metadata_json LIKE '%"adk"%'
BEGIN
    UPDATE sessions SET
        user_id = COALESCE(json_extract(NEW.metadata_json, '$.adk.user_id'), user_id),
        agent_id = COALESCE(json_extract(NEW.metadata_json, '$.adk.app_name'), agent_id)
    WHERE account_id = NEW.account_id AND session_id = NEW.session_id
    AND (json_extract(NEW.metadata_json, '$.adk.user_id') IS NOT NULL
            AND user_id IS NOT json_extract(NEW.metadata_json, '$.adk.user_id')
        OR json_extract(NEW.metadata_json, '$.adk.app_name') IS NOT NULL
            AND agent_id IS NOT json_extract(NEW.metadata_json, '$.adk.app_name'));
END;

-- The text search: an FTS5 index of the message events' text (their first 100,000
-- characters). `message_rows` names the event each index row is of (an explicit INTEGER
-- PRIMARY KEY, which VACUUM keeps, where `events`' own rowids it may renumber). The index
-- is contentless: it holds the terms, not a copy of the text; `contentless_delete` lets
-- a row be deleted, and `secure-delete` removes a deleted row's terms from the index
-- itself instead of recording a tombstone, so removed text is not left in the file (the
-- connection's `secure_delete` zeroes the freed pages). Deleting an event (a hard delete,
-- retention) deletes its rows; an `item_deleted` event deletes those of the item's own
-- event (`seq` in its content).
CREATE TABLE message_rows (
    id INTEGER PRIMARY KEY,
    account_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    UNIQUE (account_id, session_id, seq)
);
CREATE VIRTUAL TABLE message_text USING fts5(text, content='', contentless_delete=1);
INSERT INTO message_text (message_text, rank) VALUES ('secure-delete', 1);

INSERT INTO message_rows (account_id, session_id, seq)
SELECT account_id, session_id, seq FROM events
WHERE event_type = 'message' AND json_extract(content_json, '$.text') IS NOT NULL
-- Items deleted before this migration: their position is their seq outside forks.
AND NOT EXISTS (SELECT 1 FROM events AS d
    WHERE d.account_id = events.account_id AND d.session_id = events.session_id
    AND d.event_type IN ('session_metadata', 'session_deleted', 'item_deleted')
    AND d.event_type = 'item_deleted'
    AND json_extract(d.content_json, '$.position') = events.seq
    AND NOT EXISTS (SELECT 1 FROM events AS f WHERE f.account_id = d.account_id
        AND f.session_id = d.session_id AND f.seq = 1 AND f.event_type = 'session_fork'));
INSERT INTO message_text (rowid, text)
SELECT r.id, substr(json_extract(e.content_json, '$.text'), 1, 100000)
FROM message_rows AS r JOIN events AS e
ON e.account_id = r.account_id AND e.session_id = r.session_id AND e.seq = r.seq;

CREATE TRIGGER message_text_add AFTER INSERT ON events
WHEN NEW.event_type = 'message' AND json_extract(NEW.content_json, '$.text') IS NOT NULL
BEGIN
    INSERT INTO message_rows (account_id, session_id, seq)
    VALUES (NEW.account_id, NEW.session_id, NEW.seq);
    INSERT INTO message_text (rowid, text)
    VALUES (last_insert_rowid(), substr(json_extract(NEW.content_json, '$.text'), 1, 100000));
END;

CREATE TRIGGER message_text_remove AFTER DELETE ON events
WHEN OLD.event_type = 'message'
BEGIN
    DELETE FROM message_text WHERE rowid = (SELECT id FROM message_rows
        WHERE account_id = OLD.account_id AND session_id = OLD.session_id AND seq = OLD.seq);
    DELETE FROM message_rows
    WHERE account_id = OLD.account_id AND session_id = OLD.session_id AND seq = OLD.seq;
END;

CREATE TRIGGER message_text_item_deleted AFTER INSERT ON events
WHEN NEW.event_type = 'item_deleted' AND json_extract(NEW.content_json, '$.seq') IS NOT NULL
BEGIN
    DELETE FROM message_text WHERE rowid = (SELECT id FROM message_rows
        WHERE account_id = NEW.account_id AND session_id = NEW.session_id
        AND seq = json_extract(NEW.content_json, '$.seq'));
    DELETE FROM message_rows WHERE account_id = NEW.account_id
    AND session_id = NEW.session_id AND seq = json_extract(NEW.content_json, '$.seq');
END;
