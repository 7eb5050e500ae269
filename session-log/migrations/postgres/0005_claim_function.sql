-- A run start's claim in one round trip instead of five (BEGIN, lock, check, insert,
-- COMMIT): take the session's advisory lock, look for a live run, and insert the claimed
-- invocation unless there is one. Each statement of a volatile PL/pgSQL function takes a
-- fresh snapshot, so the check after the lock sees every claim committed before it, as
-- in the transaction it replaces; the lock is held until the calling statement commits.
-- Replicas still running the statements take the same lock, so both kinds can mix.
-- The claim's commit does not wait for its WAL flush: the run's first events, committed
-- next and synchronously, flush it with them (WAL is flushed in order), and a claim lost
-- in a database crash belongs to a run that never got to start.
CREATE FUNCTION tether_claim(
    p_account TEXT, p_session TEXT, p_run TEXT, p_invocation TEXT, p_owner TEXT,
    p_lease_seconds DOUBLE PRECISION, p_started_at TIMESTAMPTZ)
RETURNS TABLE (busy_run_id TEXT, busy_invocation_id TEXT)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    PERFORM pg_advisory_xact_lock(hashtextextended(p_account || E'\n' || p_session, 0));
    RETURN QUERY
        SELECT i.run_id, i.invocation_id FROM invocations AS i
        WHERE i.account_id = p_account AND i.session_id = p_session
        AND i.status = 'in_progress' AND i.owner IS NOT NULL AND i.lease_expires_at > now()
        LIMIT 1;
    IF NOT FOUND THEN
        INSERT INTO invocations (account_id, invocation_id, session_id, run_id, status,
            started_at, owner, lease_expires_at)
        VALUES (p_account, p_invocation, p_session, p_run, 'in_progress', p_started_at,
            p_owner, now() + make_interval(secs => p_lease_seconds))
        ON CONFLICT (account_id, invocation_id) DO NOTHING;
    END IF;
END
$$;
