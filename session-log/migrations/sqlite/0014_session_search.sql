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

-- The text search reads the account's message events themselves, with no index of their
-- words: an FTS5 index kept a deleted message's words in the file (its segments' term
-- keys stay until a merge, and FTS5's merge corrupted the index under concurrent writes
-- in SQLite 3.46.0), and a removal must leave no trace of what it removed. PostgreSQL
-- keeps a tsvector index (its dead tuples go with vacuum, as the rest of a removal's).
