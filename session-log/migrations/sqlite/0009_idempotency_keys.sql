-- Idempotency keys: the run a client's first request with an `Idempotency-Key` started, so
-- that a repeat of the key (an SDK's retry) answers with that run instead of starting
-- another. Scoped by account; `created_ms` (Unix milliseconds) bounds the window in which
-- a repeat counts. Kept beside the log, not in it: a key is about a request, not a step of
-- the conversation.
CREATE TABLE idempotency_keys (
    account_id TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    session_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    PRIMARY KEY (account_id, idempotency_key)
) WITHOUT ROWID;
