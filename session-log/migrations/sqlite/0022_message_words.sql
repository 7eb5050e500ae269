-- The text search's word index (replaces the scan of the account's message events that
-- migration `session_search` left it with). One row per distinct word of each message
-- event: the word's key, the session, the event's seq. A key is a 64-bit hash of the
-- account and the word (`tether_word_keys`, registered by the store on every connection:
-- the words as `search_words` reads them, split at every character that is not a letter
-- or digit, lower-cased), so the index holds no text and needs no account column; a
-- search looks its words' keys up and keeps the account's sessions among what they name.
-- Triggers keep it in the transaction of every write of `events` (appends, imports, the
-- outage journal's backfill): a message adds its words; an `item_deleted` (content `seq`:
-- the item's own event) drops that event's words; deleting a message event (a removal,
-- with secure delete on) deletes its rows, which SQLite then zeroes in the file.
CREATE TABLE message_words (
    word INTEGER NOT NULL,
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    PRIMARY KEY (word, session_id, seq)
) WITHOUT ROWID;

INSERT OR IGNORE INTO message_words (word, session_id, seq)
SELECT w.value, e.session_id, e.seq
FROM events AS e, json_each(tether_word_keys(e.account_id, e.content_json ->> '$.text')) AS w
WHERE e.event_type = 'message'
AND NOT EXISTS (SELECT 1 FROM events AS d WHERE d.account_id = e.account_id
    AND d.session_id = e.session_id AND d.event_type = 'item_deleted'
    AND d.content_json ->> '$.seq' = e.seq);

CREATE TRIGGER message_words_add AFTER INSERT ON events
WHEN NEW.event_type = 'message'
BEGIN
    INSERT OR IGNORE INTO message_words (word, session_id, seq)
    SELECT value, NEW.session_id, NEW.seq
    FROM json_each(tether_word_keys(NEW.account_id, NEW.content_json ->> '$.text'));
END;

CREATE TRIGGER message_words_item_deleted AFTER INSERT ON events
WHEN NEW.event_type = 'item_deleted' AND NEW.content_json ->> '$.seq' IS NOT NULL
BEGIN
    DELETE FROM message_words
    WHERE word IN (SELECT value FROM json_each(tether_word_keys(NEW.account_id,
        (SELECT e.content_json ->> '$.text' FROM events AS e
            WHERE e.account_id = NEW.account_id AND e.session_id = NEW.session_id
            AND e.seq = NEW.content_json ->> '$.seq' AND e.event_type = 'message'))))
    AND session_id = NEW.session_id AND seq = NEW.content_json ->> '$.seq';
END;

CREATE TRIGGER message_words_forget AFTER DELETE ON events
WHEN OLD.event_type = 'message'
BEGIN
    DELETE FROM message_words
    WHERE word IN (SELECT value FROM json_each(tether_word_keys(OLD.account_id,
        OLD.content_json ->> '$.text')))
    AND session_id = OLD.session_id AND seq = OLD.seq;
END;
