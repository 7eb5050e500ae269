-- Quotas: what each account stores (see the SQLite migration of the same name). The
-- events' triggers are per statement, over the statement's rows (transition tables):
-- an append's one INSERT updates each account's row once, not once per event, and holds
-- its row lock only to the end of its transaction, like the session rows it bumps.
CREATE TABLE account_usage (
    account_id TEXT PRIMARY KEY,
    sessions BIGINT NOT NULL DEFAULT 0,
    event_bytes BIGINT NOT NULL DEFAULT 0,
    upload_bytes BIGINT NOT NULL DEFAULT 0
);

INSERT INTO account_usage (account_id, sessions, event_bytes, upload_bytes)
SELECT account_id, SUM(sessions), SUM(event_bytes), SUM(upload_bytes) FROM (
    SELECT account_id, COUNT(*) AS sessions, 0 AS event_bytes, 0 AS upload_bytes
    FROM sessions GROUP BY account_id
    UNION ALL
    SELECT account_id, 0, SUM(octet_length(content_json::text)
        + octet_length(metadata_json::text)), 0
    FROM events GROUP BY account_id
    UNION ALL
    SELECT account_id, 0, 0, SUM(size_bytes) FROM attachments GROUP BY account_id
) AS u GROUP BY account_id;

CREATE FUNCTION usage_add(account TEXT, sessions_delta BIGINT, events_delta BIGINT,
    uploads_delta BIGINT) RETURNS void LANGUAGE sql AS $$
    INSERT INTO account_usage AS u (account_id, sessions, event_bytes, upload_bytes)
    VALUES (account, sessions_delta, events_delta, uploads_delta)
    ON CONFLICT (account_id) DO UPDATE SET sessions = u.sessions + sessions_delta,
        event_bytes = u.event_bytes + events_delta, upload_bytes = u.upload_bytes + uploads_delta
$$;

CREATE FUNCTION usage_of_statement() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    sign BIGINT := CASE TG_OP WHEN 'INSERT' THEN 1 ELSE -1 END;
BEGIN
    IF TG_TABLE_NAME = 'sessions' THEN
        IF TG_OP = 'INSERT' THEN
            PERFORM usage_add(account_id, COUNT(*), 0, 0) FROM added GROUP BY account_id;
        ELSE
            PERFORM usage_add(account_id, -COUNT(*), 0, 0) FROM removed GROUP BY account_id;
        END IF;
    ELSIF TG_TABLE_NAME = 'events' THEN
        IF TG_OP = 'INSERT' THEN
            PERFORM usage_add(account_id, 0, SUM(octet_length(content_json::text)
                + octet_length(metadata_json::text))::bigint, 0) FROM added GROUP BY account_id;
        ELSE
            PERFORM usage_add(account_id, 0, -SUM(octet_length(content_json::text)
                + octet_length(metadata_json::text))::bigint, 0) FROM removed GROUP BY account_id;
        END IF;
    ELSE
        IF TG_OP = 'INSERT' THEN
            PERFORM usage_add(account_id, 0, 0, SUM(size_bytes)::bigint) FROM added GROUP BY account_id;
        ELSE
            PERFORM usage_add(account_id, 0, 0, -SUM(size_bytes)::bigint) FROM removed GROUP BY account_id;
        END IF;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER usage_sessions_added AFTER INSERT ON sessions
REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION usage_of_statement();
CREATE TRIGGER usage_sessions_removed AFTER DELETE ON sessions
REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION usage_of_statement();
CREATE TRIGGER usage_events_added AFTER INSERT ON events
REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION usage_of_statement();
CREATE TRIGGER usage_events_removed AFTER DELETE ON events
REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION usage_of_statement();
CREATE TRIGGER usage_uploads_added AFTER INSERT ON attachments
REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION usage_of_statement();
CREATE TRIGGER usage_uploads_removed AFTER DELETE ON attachments
REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION usage_of_statement();
