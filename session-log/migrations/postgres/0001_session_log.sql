-- The session log (PostgreSQL dialect).

-- One row per conversation. `last_seq` is the seq of the newest event: appends bump it
-- and take their seqs from the new value, and the row lock that bump takes serialises
-- concurrent writers of one session, across processes too.
CREATE TABLE sessions (
    account_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    last_seq BIGINT NOT NULL DEFAULT 0,
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (account_id, session_id)
);

-- Listing sessions, most recently updated first.
CREATE INDEX sessions_by_updated ON sessions (account_id, updated_at DESC, session_id);

-- The log itself. No foreign key to `sessions`: `append`, the only writer, creates the
-- session row in the same transaction, and the per-row check cost a third of insert
-- throughput. Deleting a session must delete its events explicitly.
CREATE TABLE events (
    account_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    run_id TEXT,
    invocation_id TEXT,
    event_type TEXT NOT NULL,
    role TEXT,
    content_json JSONB NOT NULL,
    metadata_json JSONB NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
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
    started_at TIMESTAMPTZ NOT NULL,
    ended_at TIMESTAMPTZ,
    PRIMARY KEY (account_id, invocation_id)
);

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
        WHEN 'message' THEN content_json ->> 'text'
        WHEN 'reasoning' THEN content_json ->> 'text'
        WHEN 'tool_result' THEN content_json ->> 'output'
        WHEN 'text_delta' THEN content_json ->> 'delta'
        WHEN 'reasoning_delta' THEN content_json ->> 'delta'
        WHEN 'error' THEN content_json ->> 'message'
    END AS message_text,
    CASE WHEN event_type IN ('tool_call', 'tool_result')
        THEN content_json ->> 'name'
    END AS tool_name,
    CASE WHEN event_type = 'run_status'
        THEN content_json ->> 'status'
    END AS lifecycle_status,
    created_at,
    content_json,
    metadata_json
FROM events;
