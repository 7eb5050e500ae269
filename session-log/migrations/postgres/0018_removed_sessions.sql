-- Tombstones of removed sessions (ids and time only, no content), written in the
-- removal's transaction. A replica cut off from PostgreSQL may have journaled events of a
-- session another replica removed meanwhile; its backfill finds the tombstone newer than
-- what it journaled and discards those rows instead of bringing the session back. A
-- session created again under the same id later is unaffected (only backfills read this).
CREATE TABLE removed_sessions (
    account_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    removed_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (account_id, session_id)
);
