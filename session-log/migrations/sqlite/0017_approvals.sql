-- Approvals: requests a run ended waiting on (a tool call to approve, a question for the
-- user), one row each, beside the log. A pending row has no decision; resolving it is one
-- conditional UPDATE (`decision IS NULL`), so exactly one resolver wins a request, across
-- replicas and against the timeout sweeper. The request, its resolution and the answer's
-- run are also in the session log (`run_status` `requires_action`, `approval_resolved`).
-- Times are Unix milliseconds.
CREATE TABLE approvals (
    account_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    -- The agent's own id for the request (a Responses `mcpr_…`, an A2A task id, …).
    request_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    invocation_id TEXT NOT NULL,
    agent_id TEXT,
    -- `approval`, `input` or `auth`.
    kind TEXT NOT NULL,
    -- The `action` of the run's `requires_action` status.
    action_json TEXT NOT NULL,
    requested_ms BIGINT NOT NULL,
    -- When the timeout sweeper resolves it; NULL: never.
    expires_ms BIGINT,
    decision TEXT CHECK (decision IN ('approve', 'reject')),
    -- `{"by": …}` or `{"timeout": true}`, with `arguments` and `comment` when given.
    resolution_json TEXT,
    resolved_ms BIGINT,
    PRIMARY KEY (account_id, session_id, request_id)
);

-- The account's pending requests, oldest first.
CREATE INDEX approvals_pending ON approvals (account_id, requested_ms) WHERE decision IS NULL;

-- What the timeout sweeper looks at.
CREATE INDEX approvals_expiring ON approvals (expires_ms)
    WHERE decision IS NULL AND expires_ms IS NOT NULL;
