-- Reading a run without an index on the log. `events_by_run` cost every event of a run an
-- index entry (every delta carries its run id): without it the writer commits 1.3 to 2
-- times the events per second, on both stores (bench/findings.md, eleventh round).
-- Instead each invocation records where its events lie in its session's seqs:
-- `after_seq`, the session's last seq when it opened (its events come after), and
-- `end_seq`, the session's last seq once the batch that closed it committed (its events
-- come no later). A read of a run or an invocation then walks that stretch of the
-- primary key. NULL means not known (rows from before this migration, rows a backfill
-- wrote): the read walks the whole session, which is slower and as correct.
ALTER TABLE invocations ADD COLUMN after_seq INTEGER;
ALTER TABLE invocations ADD COLUMN end_seq INTEGER;

DROP INDEX IF EXISTS events_by_run;

-- The bounds' lookup, covered: without ANALYZE statistics SQLite's planner otherwise
-- walks all of the account's invocations through the primary key.
CREATE INDEX invocations_run_bounds
    ON invocations (account_id, session_id, run_id, after_seq, end_seq);

-- `Store::run` (the latest invocation of a run) for the same reason: with the lookup's
-- whole order in the index the planner takes it, instead of walking the account's
-- invocations and sorting them.
DROP INDEX invocations_by_run;
CREATE INDEX invocations_by_run
    ON invocations (account_id, run_id, started_at DESC, invocation_id DESC);
