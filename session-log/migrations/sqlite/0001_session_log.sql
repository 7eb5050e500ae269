-- The session log (SQLite dialect). Timestamps are RFC 3339 text in UTC as sqlx encodes
-- chrono's DateTime<Utc>; JSON is stored as text.

-- One row per conversation. `last_seq` is the seq of the newest event: appends bump it
-- and take their seqs from the new value.
CREATE TABLE sessions (
    account_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    last_seq INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (account_id, session_id)
) WITHOUT ROWID;

-- Listing sessions, most recently updated first.
CREATE INDEX sessions_by_updated ON sessions (account_id, updated_at DESC, session_id);

-- The log itself. A rowid table (not WITHOUT ROWID) because content can be large.
-- No foreign key to `sessions`: `append`, the only writer, creates the session row in the
-- same transaction, and PostgreSQL's per-row check cost a third of insert throughput (the
-- dialects keep one shape). Deleting a session must delete its events explicitly.
CREATE TABLE events (
    account_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    run_id TEXT,
    invocation_id TEXT,
    event_type TEXT NOT NULL,
    role TEXT,
    content_json TEXT NOT NULL,
    metadata_json TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (account_id, session_id, seq)
);

-- Reading one run or one invocation of a session in seq order.
CREATE INDEX events_by_run ON events (account_id, session_id, run_id, seq)
    WHERE run_id IS NOT NULL;
CREATE INDEX events_by_invocation ON events (account_id, session_id, invocation_id, seq)
    WHERE invocation_id IS NOT NULL;

-- One row per execution of a run, kept by `append` from `run_status` events. Keyed per
-- account so that one account can never open or close another account's invocation.
CREATE TABLE invocations (
    account_id TEXT NOT NULL,
    invocation_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    status TEXT NOT NULL,
    started_at TEXT NOT NULL,
    ended_at TEXT,
    PRIMARY KEY (account_id, invocation_id)
) WITHOUT ROWID;

CREATE INDEX invocations_by_run ON invocations (account_id, run_id, started_at DESC);
-- Open invocations are few; only they are indexed for the scan at start.
CREATE INDEX invocations_open ON invocations (started_at) WHERE status = 'in_progress';

-- For operators: the log with the interesting parts of `content_json` pulled out.
CREATE VIEW session_events_readable AS
SELECT
    account_id,
    session_id,
    seq,
    run_id,
    invocation_id,
    event_type,
    role AS message_role,
    CASE event_type
        WHEN 'message' THEN json_extract(content_json, '$.text')
        WHEN 'reasoning' THEN json_extract(content_json, '$.text')
        WHEN 'tool_result' THEN json_extract(content_json, '$.output')
        WHEN 'text_delta' THEN json_extract(content_json, '$.delta')
        WHEN 'reasoning_delta' THEN json_extract(content_json, '$.delta')
        WHEN 'error' THEN json_extract(content_json, '$.message')
    END AS message_text,
    CASE WHEN event_type IN ('tool_call', 'tool_result')
        THEN json_extract(content_json, '$.name')
    END AS tool_name,
    CASE WHEN event_type = 'run_status'
        THEN json_extract(content_json, '$.status')
    END AS lifecycle_status,
    created_at,
    content_json,
    metadata_json
FROM events;
