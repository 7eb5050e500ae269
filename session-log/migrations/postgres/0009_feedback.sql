-- Feedback: a person's thumbs up or down (and an optional comment) on one answer (see the
-- SQLite migration of the same name). `feedback_id` is time-ordered (UUIDv7), so the
-- primary key lists an account's feedback newest first.
CREATE TABLE feedback (
    account_id TEXT NOT NULL,
    feedback_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    invocation_id TEXT,
    response_id TEXT,
    rating TEXT NOT NULL CHECK (rating IN ('up', 'down')),
    comment TEXT,
    created_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (account_id, feedback_id)
);

-- One session's feedback, newest first.
CREATE INDEX feedback_by_session ON feedback (account_id, session_id, feedback_id);

-- For operators: each rating with the answer it rates (the run's last assistant message).
CREATE VIEW feedback_readable AS
SELECT
    f.account_id,
    f.session_id,
    f.run_id,
    f.invocation_id,
    f.response_id,
    f.feedback_id,
    f.rating,
    f.comment,
    f.created_at,
    (SELECT e.content_json ->> 'text' FROM events AS e
     WHERE e.account_id = f.account_id AND e.session_id = f.session_id
       AND e.run_id = f.run_id AND e.event_type = 'message' AND e.role = 'assistant'
     ORDER BY e.seq DESC LIMIT 1) AS answer_text
FROM feedback AS f;
