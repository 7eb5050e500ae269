-- Quotas: what each account stores, kept by triggers in the transaction of every write
-- and delete (appends, imports, the outage journal's backfill, hard deletes, retention),
-- so a quota check reads one row instead of counting an account's sessions and events.
-- `event_bytes` counts the events' JSON (content and metadata) as the audit trail does;
-- `upload_bytes` the attachments' sizes.
CREATE TABLE account_usage (
    account_id TEXT PRIMARY KEY,
    sessions INTEGER NOT NULL DEFAULT 0,
    event_bytes INTEGER NOT NULL DEFAULT 0,
    upload_bytes INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

INSERT INTO account_usage (account_id, sessions, event_bytes, upload_bytes)
SELECT account_id, SUM(sessions), SUM(event_bytes), SUM(upload_bytes) FROM (
    SELECT account_id, COUNT(*) AS sessions, 0 AS event_bytes, 0 AS upload_bytes
    FROM sessions GROUP BY account_id
    UNION ALL
    SELECT account_id, 0, SUM(LENGTH(CAST(content_json AS BLOB))
        + LENGTH(CAST(metadata_json AS BLOB))), 0
    FROM events GROUP BY account_id
    UNION ALL
    SELECT account_id, 0, 0, SUM(size_bytes) FROM attachments GROUP BY account_id
) GROUP BY account_id;

-- A session row is inserted before its events (in the same transaction), so the events'
-- triggers find the account's row.
CREATE TRIGGER usage_session_added AFTER INSERT ON sessions
BEGIN
    INSERT OR IGNORE INTO account_usage (account_id) VALUES (NEW.account_id);
    UPDATE account_usage SET sessions = sessions + 1 WHERE account_id = NEW.account_id;
END;

CREATE TRIGGER usage_session_removed AFTER DELETE ON sessions
BEGIN
    UPDATE account_usage SET sessions = sessions - 1 WHERE account_id = OLD.account_id;
END;

CREATE TRIGGER usage_event_added AFTER INSERT ON events
BEGIN
    UPDATE account_usage SET event_bytes = event_bytes
        + LENGTH(CAST(NEW.content_json AS BLOB)) + LENGTH(CAST(NEW.metadata_json AS BLOB))
    WHERE account_id = NEW.account_id;
END;

CREATE TRIGGER usage_event_removed AFTER DELETE ON events
BEGIN
    UPDATE account_usage SET event_bytes = event_bytes
        - LENGTH(CAST(OLD.content_json AS BLOB)) - LENGTH(CAST(OLD.metadata_json AS BLOB))
    WHERE account_id = OLD.account_id;
END;

CREATE TRIGGER usage_upload_added AFTER INSERT ON attachments
BEGIN
    INSERT OR IGNORE INTO account_usage (account_id) VALUES (NEW.account_id);
    UPDATE account_usage SET upload_bytes = upload_bytes + NEW.size_bytes
    WHERE account_id = NEW.account_id;
END;

CREATE TRIGGER usage_upload_removed AFTER DELETE ON attachments
BEGIN
    UPDATE account_usage SET upload_bytes = upload_bytes - OLD.size_bytes
    WHERE account_id = OLD.account_id;
END;
