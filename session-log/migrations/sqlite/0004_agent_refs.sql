-- The agent's own handle for an invocation (see the PostgreSQL migration of the same
-- name), and the lookup by it. The index carries the lookup's order, newest first: with
-- only (account_id, agent_ref), SQLite's planner (without ANALYZE statistics) prefers
-- scanning the account's invocations through the primary key and sorting them.
ALTER TABLE invocations ADD COLUMN agent_ref TEXT;

CREATE INDEX invocations_by_agent_ref
    ON invocations (account_id, agent_ref, started_at DESC, invocation_id DESC)
    WHERE agent_ref IS NOT NULL;
