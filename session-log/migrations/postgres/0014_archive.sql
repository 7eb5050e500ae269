-- Archived sessions (see the SQLite migration of the same name). NULL: active.
ALTER TABLE sessions ADD COLUMN archived_at TIMESTAMPTZ;
