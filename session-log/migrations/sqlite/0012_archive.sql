-- Archived sessions: read-only (no run starts in one) and left out of the default
-- listing until unarchived. NULL: active.
ALTER TABLE sessions ADD COLUMN archived_at TEXT;
