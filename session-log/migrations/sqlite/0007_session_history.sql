-- Session history: forks, branches and compaction (see the PostgreSQL migration of the
-- same name).
--
-- The events that tell a session's history apart from its transcript (run statuses,
-- checkpoints, a fork's `session_fork`, compaction markers) are a few per turn, while a
-- turn writes dozens of deltas. Reading them through this partial index costs a read in
-- proportion to them, not to the log: a fork, a compaction or a resume is found without
-- walking every delta. Only these rows pay for the index on append. The list is written
-- exactly as the queries write it: SQLite uses a partial index only for a query that
-- repeats its condition.
CREATE INDEX events_markers ON events (account_id, session_id, seq)
    WHERE event_type IN ('run_status', 'run_checkpoint', 'session_fork', 'compaction',
                         'compaction_boundary', 'context_checkpoint');

-- A checkpoint by its id (ForkSession names one): a lookup, whatever the session's size.
CREATE INDEX events_checkpoint_ids
    ON events (account_id, session_id, json_extract(content_json, '$.checkpoint_id'))
    WHERE event_type = 'run_checkpoint';

-- The readable view shows what the new rows hold: a compaction's summary and the range
-- of the history it covers, its boundary's reason, and a fork's parent.
DROP VIEW session_events_readable;
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
        WHEN 'context_checkpoint' THEN json_extract(content_json, '$.summary')
        WHEN 'compaction' THEN json_extract(content_json, '$.summary')
        WHEN 'compaction_boundary' THEN json_extract(content_json, '$.reason')
        WHEN 'session_fork' THEN json_extract(content_json, '$.parent_session_id')
    END AS message_text,
    CASE WHEN event_type IN ('tool_call', 'tool_result')
        THEN json_extract(content_json, '$.name')
    END AS tool_name,
    CASE WHEN event_type = 'run_status'
        THEN json_extract(content_json, '$.status')
    END AS lifecycle_status,
    created_at,
    content_json,
    metadata_json,
    CASE event_type
        WHEN 'context_checkpoint' THEN json_extract(content_json, '$.seq_start')
    END AS seq_start,
    CASE event_type
        WHEN 'context_checkpoint' THEN json_extract(content_json, '$.seq_end')
        WHEN 'session_fork' THEN json_extract(content_json, '$.parent_seq')
    END AS seq_end
FROM events;
