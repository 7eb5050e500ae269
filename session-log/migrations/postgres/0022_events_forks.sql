-- The forks of an account (see the SQLite migration of the same name): a removal reads
-- them through this index instead of every event of the account.
CREATE INDEX events_forks ON events (account_id, session_id)
    WHERE seq = 1 AND event_type = 'session_fork';
