-- The agent's own handle for an invocation, when its protocol gives one (an A2A task id):
-- a client that only knows that handle (`tasks/get`, `tasks/cancel`, resubscribe) finds
-- the run by it. NULL when the agent gave none. Nullable without a default, so adding it
-- rewrites nothing.
ALTER TABLE invocations ADD COLUMN agent_ref TEXT;

-- "The newest invocation of the account with this handle": only invocations that have a
-- handle are indexed (`agent_ref = $2` implies the predicate), in the lookup's order.
CREATE INDEX invocations_by_agent_ref
    ON invocations (account_id, agent_ref, started_at DESC, invocation_id DESC)
    WHERE agent_ref IS NOT NULL;
