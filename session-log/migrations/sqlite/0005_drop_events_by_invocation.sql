-- Every index on events costs each append a B-tree insert and, for a batch spread over
-- many sessions, a page per session in the WAL. Reads of one invocation either start at
-- its first seq (the primary key's range) or name its run too (events_by_run), so this
-- index was kept up on every append and served no read.
DROP INDEX IF EXISTS events_by_invocation;
