-- Attachments: files and images a client sent inline (data URLs) or uploaded, stored per
-- account and referenced from the log by `tether-upload://<file_id>`. Every read names the
-- account, so another account's file id is simply not found.
CREATE TABLE attachments (
    account_id TEXT NOT NULL,
    file_id TEXT NOT NULL,
    mime_type TEXT NOT NULL,
    filename TEXT,
    size_bytes INTEGER NOT NULL,
    content BLOB NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (account_id, file_id)
);
