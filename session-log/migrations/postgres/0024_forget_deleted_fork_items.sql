-- The text index's first fill (migration 0016) left out a message whose item a client
-- had deleted by matching the `item_deleted` event's `position` against the message's
-- seq: the only key such events had before 0016 (the `seq` its trigger reads came with
-- it). In a session that is not a fork the two are equal; in a fork a position counts
-- the inherited history first (the fork's base, see `history`), so 0016 skipped forks,
-- and the words of a fork's own message deleted before 0016 stayed findable. This
-- removes those rows: each fork's base is its parent's base plus its fork point (0 for a
-- session that is not a fork, or whose parent is not in the account, as a read takes
-- it), and an item at a position past the base is the fork's own event (position - base).
WITH RECURSIVE forks AS (
    SELECT account_id, session_id, content_json ->> 'parent_session_id' AS parent,
        (content_json ->> 'parent_seq')::bigint AS at
    FROM events WHERE seq = 1 AND event_type = 'session_fork'
), bases (account_id, session_id, base, depth) AS (
    SELECT f.account_id, f.session_id,
        CASE WHEN EXISTS (SELECT 1 FROM sessions AS p
            WHERE p.account_id = f.account_id AND p.session_id = f.parent)
        THEN f.at ELSE 0 END,
        1
    FROM forks AS f
    WHERE NOT EXISTS (SELECT 1 FROM forks AS g
        WHERE g.account_id = f.account_id AND g.session_id = f.parent)
    UNION ALL
    SELECT f.account_id, f.session_id, b.base + f.at, b.depth + 1
    FROM forks AS f
    JOIN bases AS b ON b.account_id = f.account_id AND b.session_id = f.parent
    WHERE b.depth < 10000
)
DELETE FROM message_text AS t
USING events AS d, bases AS b
WHERE d.event_type = 'item_deleted' AND NOT (d.content_json ? 'seq')
AND b.account_id = d.account_id AND b.session_id = d.session_id
AND t.account_id = d.account_id AND t.session_id = d.session_id
AND t.seq = (d.content_json ->> 'position')::bigint - b.base;
