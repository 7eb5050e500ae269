-- The audit trail of removals (see the SQLite migration of the same name): one row per hard delete (a session, a user's data, an
-- account's data) or retention sweep, written in the transaction that removes the data,
-- so a delete is never without its record and a record never without its delete. It
-- holds what was removed and how much, when and by whom (a credential id, or
-- `retention`), never content: the session ids are the only identifiers besides the
-- account and, for a user's erasure, the user id asked for.
CREATE TABLE deletions (
    account_id TEXT NOT NULL,
    -- Time-ordered (UUIDv7): the primary key lists an account's removals oldest first.
    deletion_id TEXT NOT NULL,
    -- `session`, `user` or `account`.
    scope TEXT NOT NULL CHECK (scope IN ('session', 'user', 'account')),
    -- The session id or user id named by the request; NULL for a whole account.
    subject TEXT,
    deleted_by TEXT NOT NULL,
    -- JSON array of the session ids removed.
    session_ids TEXT NOT NULL,
    sessions BIGINT NOT NULL,
    events BIGINT NOT NULL,
    -- Bytes of the removed events' JSON (content and metadata).
    event_bytes BIGINT NOT NULL,
    invocations BIGINT NOT NULL,
    feedback BIGINT NOT NULL,
    idempotency_keys BIGINT NOT NULL,
    attachments BIGINT NOT NULL,
    attachment_bytes BIGINT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (account_id, deletion_id)
);
