-- The text search's index (migration `session_search` left SQLite scanning the account's
-- message events: 2.7-3.1 s at 100,000 sessions). Per block of a session's messages, a
-- signature: a 2,048-bit Bloom filter of their words (the store's `tether_signature*`
-- functions, registered on every connection; `backend/signatures.rs` says why not a word
-- index). A search reads the account's signatures, then checks word for word only the
-- messages of the blocks whose signature has every bit of its words (`first_seq` to
-- `last_seq`). Bits, not words: the table holds no text.
CREATE TABLE message_signatures (
    account_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    first_seq INTEGER NOT NULL,
    last_seq INTEGER NOT NULL,
    signature BLOB NOT NULL,
    PRIMARY KEY (account_id, session_id, first_seq)
) WITHOUT ROWID;

-- Where a message enters the index, for the trigger below and for this migration's
-- backfill alike: the session's last block takes it while its words fit (at most 30 % of
-- the bits set), else a new block starts with it. The row itself is never stored
-- (RAISE(IGNORE) drops it, and only it: the statements before it stand).
CREATE TABLE message_signature_feed (
    account_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    text TEXT
);

CREATE TRIGGER message_signature_feed_take BEFORE INSERT ON message_signature_feed
BEGIN
    INSERT INTO message_signatures (account_id, session_id, first_seq, last_seq, signature)
    SELECT NEW.account_id, NEW.session_id, NEW.seq, NEW.seq, tether_signature(NULL, NEW.text)
    WHERE NOT EXISTS (SELECT 1 FROM message_signatures AS b
        WHERE b.account_id = NEW.account_id AND b.session_id = NEW.session_id
        AND b.first_seq < NEW.seq AND tether_signature_fits(b.signature, NEW.text)
        AND b.first_seq = (SELECT MAX(l.first_seq) FROM message_signatures AS l
            WHERE l.account_id = NEW.account_id AND l.session_id = NEW.session_id))
    ON CONFLICT DO UPDATE SET signature = tether_signature(signature, NEW.text);
    UPDATE message_signatures
    SET signature = tether_signature(signature, NEW.text), last_seq = MAX(last_seq, NEW.seq)
    WHERE account_id = NEW.account_id AND session_id = NEW.session_id
    AND first_seq < NEW.seq AND tether_signature_fits(signature, NEW.text)
    AND first_seq = (SELECT MAX(l.first_seq) FROM message_signatures AS l
        WHERE l.account_id = NEW.account_id AND l.session_id = NEW.session_id);
    SELECT RAISE(IGNORE);
END;

-- Every writer of `events` (appends, imports) feeds its messages in the same transaction.
CREATE TRIGGER message_signatures_add AFTER INSERT ON events
WHEN NEW.event_type = 'message'
BEGIN
    INSERT INTO message_signature_feed (account_id, session_id, seq, text)
    VALUES (NEW.account_id, NEW.session_id, NEW.seq, NEW.content_json ->> '$.text');
END;

-- A removed session's blocks go with it (a deleted item's bits stay until then: the
-- search's word-for-word check skips deleted items).
CREATE TRIGGER message_signatures_forget AFTER DELETE ON sessions
BEGIN
    DELETE FROM message_signatures
    WHERE account_id = OLD.account_id AND session_id = OLD.session_id;
END;

INSERT INTO message_signature_feed (account_id, session_id, seq, text)
SELECT account_id, session_id, seq, content_json ->> '$.text'
FROM events WHERE event_type = 'message'
ORDER BY account_id, session_id, seq;
