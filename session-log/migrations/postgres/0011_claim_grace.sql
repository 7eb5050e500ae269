-- A run whose lease expired less than one lease ago still holds its session: after a
-- PostgreSQL outage its owner renews it first thing, and no replica may start a second
-- run in the session meanwhile (both would number events from the same seq). The lease
-- sweeper closes a run whose owner is really gone, which frees the session.
CREATE OR REPLACE FUNCTION tether_claim(
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
        AND i.status = 'in_progress' AND i.owner IS NOT NULL
        AND i.lease_expires_at > now() - make_interval(secs => p_lease_seconds)
        LIMIT 1;
    IF NOT FOUND THEN
        INSERT INTO invocations (account_id, invocation_id, session_id, run_id, status,
            started_at, owner, lease_expires_at, after_seq)
        VALUES (p_account, p_invocation, p_session, p_run, 'in_progress', p_started_at,
            p_owner, now() + make_interval(secs => p_lease_seconds),
            coalesce((SELECT s.last_seq FROM sessions AS s
                      WHERE s.account_id = p_account AND s.session_id = p_session), 0))
        ON CONFLICT (account_id, invocation_id) DO NOTHING;
    END IF;
END
$$;
