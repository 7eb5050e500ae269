-- The forks of an account, which a removal reads to refuse deleting a session that has
-- forks (or to take them along): only forks' first events are in it, so a removal no
-- longer reads every event of the account (a retention sweep did, once per session).
CREATE INDEX events_forks ON events (account_id, session_id)
    WHERE seq = 1 AND event_type = 'session_fork';
