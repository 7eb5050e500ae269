-- Finding sessions (see the SQLite migration of the same name): what ListSessions'
-- filters read, kept on the session row by triggers on `events`, and a full-text index
-- of the message events' text.
ALTER TABLE sessions ADD COLUMN client_deleted BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE sessions ADD COLUMN user_id TEXT;
ALTER TABLE sessions ADD COLUMN agent_id TEXT;
ALTER TABLE sessions ADD COLUMN last_run_status TEXT;
ALTER TABLE sessions ADD COLUMN metadata_json JSONB;

UPDATE sessions SET
    client_deleted = EXISTS (SELECT 1 FROM events AS e
        WHERE e.account_id = sessions.account_id AND e.session_id = sessions.session_id
        AND e.event_type IN ('session_metadata', 'session_deleted', 'item_deleted')
        AND e.event_type = 'session_deleted'),
    user_id = (SELECT e.metadata_json -> 'adk' ->> 'user_id' FROM events AS e
        WHERE e.account_id = sessions.account_id AND e.session_id = sessions.session_id
        AND e.metadata_json -> 'adk' ->> 'user_id' IS NOT NULL
        ORDER BY e.seq DESC LIMIT 1),
    agent_id = (SELECT e.metadata_json -> 'adk' ->> 'app_name' FROM events AS e
        WHERE e.account_id = sessions.account_id AND e.session_id = sessions.session_id
        AND e.metadata_json -> 'adk' ->> 'app_name' IS NOT NULL
        ORDER BY e.seq DESC LIMIT 1),
    last_run_status = (SELECT e.content_json ->> 'status' FROM events AS e
        WHERE e.account_id = sessions.account_id AND e.session_id = sessions.session_id
        AND e.event_type = 'run_status' ORDER BY e.seq DESC LIMIT 1),
    metadata_json = (SELECT e.content_json -> 'metadata' FROM events AS e
        WHERE e.account_id = sessions.account_id AND e.session_id = sessions.session_id
        AND e.event_type IN ('session_metadata', 'session_deleted', 'item_deleted')
        AND e.event_type = 'session_metadata' ORDER BY e.seq DESC LIMIT 1);

CREATE INDEX sessions_listed ON sessions
    (account_id, updated_at DESC, session_id, created_at, last_run_status, user_id, agent_id)
    WHERE archived_at IS NULL AND NOT client_deleted;
CREATE INDEX sessions_archived ON sessions (account_id, updated_at DESC, session_id)
    WHERE archived_at IS NOT NULL AND NOT client_deleted;
CREATE INDEX sessions_by_user ON sessions (account_id, user_id, updated_at DESC)
    WHERE user_id IS NOT NULL;
CREATE INDEX sessions_by_agent ON sessions (account_id, agent_id, updated_at DESC)
    WHERE agent_id IS NOT NULL;
CREATE INDEX sessions_by_status ON sessions (account_id, last_run_status, updated_at DESC);

-- The text search: one row per message event (its first 100,000 characters, as a
-- tsvector of the `simple` configuration: words as written, lower-cased, no stemming,
-- as SQLite's FTS5 tokenizer reads them), with a GIN index. Deleting an event deletes
-- its row; an `item_deleted` event deletes the row of the item's own event (`seq`).
CREATE TABLE message_text (
    account_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    terms TSVECTOR NOT NULL,
    PRIMARY KEY (account_id, session_id, seq)
);
CREATE INDEX message_text_terms ON message_text USING GIN (terms);

INSERT INTO message_text (account_id, session_id, seq, terms)
SELECT account_id, session_id, seq,
    to_tsvector('simple', left(content_json ->> 'text', 100000))
FROM events AS e
WHERE event_type = 'message' AND content_json ->> 'text' IS NOT NULL
AND NOT EXISTS (SELECT 1 FROM events AS d
    WHERE d.account_id = e.account_id AND d.session_id = e.session_id
    AND d.event_type IN ('session_metadata', 'session_deleted', 'item_deleted')
    AND d.event_type = 'item_deleted'
    AND (d.content_json ->> 'position')::bigint = e.seq
    AND NOT EXISTS (SELECT 1 FROM events AS f WHERE f.account_id = d.account_id
        AND f.session_id = d.session_id AND f.seq = 1 AND f.event_type = 'session_fork'));

CREATE FUNCTION events_keep_sessions() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    new_user TEXT;
    new_agent TEXT;
BEGIN
    IF TG_OP = 'DELETE' THEN
        DELETE FROM message_text WHERE account_id = OLD.account_id
        AND session_id = OLD.session_id AND seq = OLD.seq;
        RETURN NULL;
    END IF;
    CASE NEW.event_type
    WHEN 'run_status' THEN
        UPDATE sessions SET last_run_status = NEW.content_json ->> 'status'
        WHERE account_id = NEW.account_id AND session_id = NEW.session_id;
    WHEN 'session_deleted' THEN
        UPDATE sessions SET client_deleted = TRUE
        WHERE account_id = NEW.account_id AND session_id = NEW.session_id;
    WHEN 'session_metadata' THEN
        UPDATE sessions SET metadata_json = NEW.content_json -> 'metadata'
        WHERE account_id = NEW.account_id AND session_id = NEW.session_id;
    WHEN 'message' THEN
        IF NEW.content_json ->> 'text' IS NOT NULL THEN
            INSERT INTO message_text (account_id, session_id, seq, terms)
            VALUES (NEW.account_id, NEW.session_id, NEW.seq,
                to_tsvector('simple', left(NEW.content_json ->> 'text', 100000)))
            ON CONFLICT DO NOTHING;
        END IF;
    WHEN 'item_deleted' THEN
        DELETE FROM message_text WHERE account_id = NEW.account_id
        AND session_id = NEW.session_id AND seq = (NEW.content_json ->> 'seq')::bigint;
    ELSE
    END CASE;
    IF NEW.metadata_json ? 'adk' THEN
        new_user := NEW.metadata_json -> 'adk' ->> 'user_id';
        new_agent := NEW.metadata_json -> 'adk' ->> 'app_name';
        UPDATE sessions SET
            user_id = COALESCE(new_user, user_id), agent_id = COALESCE(new_agent, agent_id)
        WHERE account_id = NEW.account_id AND session_id = NEW.session_id
        AND (new_user IS NOT NULL AND user_id IS DISTINCT FROM new_user
            OR new_agent IS NOT NULL AND agent_id IS DISTINCT FROM new_agent);
    END IF;
    RETURN NULL;
END $$;

-- The WHEN clauses keep the trigger off most events (text deltas): PostgreSQL queues no
-- call for a row they refuse.
CREATE TRIGGER events_keep_sessions AFTER INSERT ON events FOR EACH ROW
WHEN (NEW.event_type IN ('run_status', 'session_metadata', 'session_deleted', 'message',
        'item_deleted')
    OR NEW.metadata_json ? 'adk')
EXECUTE FUNCTION events_keep_sessions();
CREATE TRIGGER events_forget_text AFTER DELETE ON events FOR EACH ROW
WHEN (OLD.event_type = 'message')
EXECUTE FUNCTION events_keep_sessions();
