-- Idempotency keys: the run a client's first request with an `Idempotency-Key` started (see
-- the SQLite migration of the same name). `created_ms` is Unix milliseconds.
CREATE TABLE idempotency_keys (
    account_id TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    session_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    created_ms BIGINT NOT NULL,
    PRIMARY KEY (account_id, idempotency_key)
);
