-- Session updates: what a client changed about a session other than by a turn (the
-- Conversations API's metadata, a deleted conversation, a deleted item). The log is
-- append-only, so each is an event; they are rare, and every read of a session (its
-- metadata, whether it is deleted) and of a history (which items are deleted) looks them
-- up through this partial index, which costs nothing for the sessions that have none.
CREATE INDEX events_session_updates ON events (account_id, session_id, seq)
    WHERE event_type IN ('session_metadata', 'session_deleted', 'item_deleted');
