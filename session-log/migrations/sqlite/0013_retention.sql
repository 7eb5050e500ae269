-- Retention sweeps: one row whose lease names the replica sweeping now, so that exactly
-- one replica sweeps at a time (`until_ms`: Unix milliseconds the lease runs to).
CREATE TABLE retention_sweeper (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    owner TEXT,
    until_ms BIGINT NOT NULL
);
INSERT INTO retention_sweeper (id, owner, until_ms) VALUES (1, NULL, 0);
