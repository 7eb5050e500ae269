-- Run ownership across replicas. The replica driving an invocation holds a lease on its
-- row and renews it while the run lasts; any replica closes an open invocation whose
-- lease ran out (its owner died) as `interrupted`. Times come from the database clock
-- (`now()`), so replicas with skewed clocks still agree on who has expired.
-- `owner` is NULL for invocations opened without a claim (before this migration): nobody
-- renews those, so they count as abandoned.
ALTER TABLE invocations ADD COLUMN owner TEXT;
ALTER TABLE invocations ADD COLUMN lease_expires_at TIMESTAMPTZ;
-- Set by a replica that is asked to cancel a run it does not drive; the owner sees it at
-- its next heartbeat (or at once, through NOTIFY) and stops the run.
ALTER TABLE invocations ADD COLUMN cancel_requested BOOLEAN NOT NULL DEFAULT FALSE;

-- "Is a run open in this session?" at every start, across replicas.
CREATE INDEX invocations_open_by_session ON invocations (account_id, session_id)
    WHERE status = 'in_progress';
