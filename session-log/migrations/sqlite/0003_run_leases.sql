-- Run ownership (see the PostgreSQL migration of the same name). The lease expiry is
-- Unix milliseconds: one integer compares correctly whatever sub-second digits the
-- RFC 3339 text of other columns carries.
ALTER TABLE invocations ADD COLUMN owner TEXT;
ALTER TABLE invocations ADD COLUMN lease_expires_ms INTEGER;
ALTER TABLE invocations ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0;

CREATE INDEX invocations_open_by_session ON invocations (account_id, session_id)
    WHERE status = 'in_progress';
