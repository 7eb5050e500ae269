-- Tombstones of removed sessions (ids and time only, no content): the PostgreSQL outage
-- journal's backfill reads them there (see the PostgreSQL migration of the same name);
-- SQLite writes them too, since the removal's SQL is written once for both stores.
CREATE TABLE removed_sessions (
    account_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    removed_at TEXT NOT NULL,
    PRIMARY KEY (account_id, session_id)
) WITHOUT ROWID;
