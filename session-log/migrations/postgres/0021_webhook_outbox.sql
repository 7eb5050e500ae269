-- The webhook outbox (see the SQLite migration of the same name): one row per (webhook event, endpoint), written in the transaction
-- that commits the event causing it, and the state of its delivery. Times are Unix
-- milliseconds; a delivery worker leases a row (`lease_owner` until `lease_expires_ms`)
-- while it posts it.
CREATE TABLE webhook_outbox (
    endpoint TEXT NOT NULL,
    event_id TEXT NOT NULL,
    event_type TEXT NOT NULL,
    account_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    run_id TEXT,
    payload TEXT NOT NULL,
    created_ms BIGINT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',
    attempts BIGINT NOT NULL DEFAULT 0,
    next_attempt_ms BIGINT NOT NULL,
    lease_owner TEXT,
    lease_expires_ms BIGINT,
    last_attempt_ms BIGINT,
    last_status_code BIGINT,
    last_error TEXT,
    delivered_ms BIGINT,
    PRIMARY KEY (endpoint, event_id)
);
CREATE INDEX webhook_outbox_due ON webhook_outbox (endpoint, next_attempt_ms)
    WHERE status = 'pending';
CREATE INDEX webhook_outbox_by_account ON webhook_outbox (account_id, created_ms);
