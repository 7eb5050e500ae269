//! The SQL of hard deletion (see [`crate::removal`]), written once for both stores: run
//! inside the caller's transaction, it finds the sessions a removal takes, refuses live
//! runs and forks left behind, deletes every row of those sessions and the attachments
//! only they refer to, and writes the audit row, so all of it commits or none does.

use std::collections::{BTreeSet, HashMap};

use chrono::{DateTime, Utc};
use sqlx::{Database, Decode, Encode, Executor, IntoArguments, Row, Type};

use crate::removal::{upload_ids, Deletion, Removal, Removed, Scope, UPLOAD_SCHEME};
use crate::store::StoreError;

/// What the dialects write differently.
pub(crate) struct Dialect {
    /// The user id an event's metadata records (the ADK surface's), as text.
    pub user_id: &'static str,
    /// The size in bytes of an event row's JSON (content and metadata).
    pub event_bytes: &'static str,
    /// Takes the lock a run's claim takes on a session (`$1` account, `$2` session), so no
    /// run starts in it between the check for live runs and the commit. SQLite has none:
    /// its one write connection runs the removal, so nothing else writes meanwhile.
    pub lock_session: Option<&'static str>,
}

pub(crate) const SQLITE: Dialect = Dialect {
    user_id: "json_extract(metadata_json, '$.adk.user_id')",
    event_bytes: "LENGTH(CAST(content_json AS BLOB)) + LENGTH(CAST(metadata_json AS BLOB))",
    lock_session: None,
};

pub(crate) const POSTGRES: Dialect = Dialect {
    user_id: "(metadata_json -> 'adk' ->> 'user_id')",
    event_bytes: "octet_length(content_json::text) + octet_length(metadata_json::text)",
    // The claim function's own lock (migration 0005).
    lock_session: Some("SELECT pg_advisory_xact_lock(hashtextextended($1 || E'\\n' || $2, 0))"),
};

/// The tables keyed by (account, session) whose rows go with a session, besides
/// `events` and `sessions`, with the count each contributes to the audit row.
const SESSION_TABLES: [&str; 4] = ["invocations", "feedback", "idempotency_keys", "approvals"];

/// Removes what `removal` names, on `conn` inside the caller's transaction (which the
/// caller commits only on `Deletion::Removed`).
pub(crate) async fn remove<DB>(
    conn: &mut DB::Connection,
    dialect: &Dialect,
    removal: &Removal,
    now: DateTime<Utc>,
) -> Result<Deletion, StoreError>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB> + Decode<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> Option<i64>: Decode<'q, DB>,
    for<'q> DateTime<Utc>: Encode<'q, DB> + Type<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    let account = removal.account_id.as_str();
    let strings = |rows: Vec<DB::Row>| -> Result<Vec<String>, StoreError> {
        rows.iter()
            .map(|r| r.try_get::<String, _>(0).map_err(StoreError::from))
            .collect()
    };
    // The sessions asked for.
    let mut targets: BTreeSet<String> = match &removal.scope {
        Scope::Session(id) => {
            let rows = sqlx::query(
                "SELECT session_id FROM sessions WHERE account_id = $1 AND session_id = $2",
            )
            .bind(account)
            .bind(id.as_str())
            .fetch_all(&mut *conn)
            .await?;
            if rows.is_empty() {
                return Ok(Deletion::NotFound);
            }
            strings(rows)?.into_iter().collect()
        }
        Scope::User(user) => {
            let select = format!(
                "SELECT DISTINCT session_id FROM events WHERE account_id = $1 AND {} = $2",
                dialect.user_id
            );
            let rows = sqlx::query(&select)
                .bind(account)
                .bind(user.as_str())
                .fetch_all(&mut *conn)
                .await?;
            strings(rows)?.into_iter().collect()
        }
        Scope::Account => {
            let rows = sqlx::query("SELECT session_id FROM sessions WHERE account_id = $1")
                .bind(account)
                .fetch_all(&mut *conn)
                .await?;
            strings(rows)?.into_iter().collect()
        }
    };

    // Forks: a fork's seq 1 is its `session_fork`, naming its parent.
    let forks = sqlx::query(
        "SELECT session_id, CAST(content_json AS TEXT) FROM events \
         WHERE account_id = $1 AND seq = 1 AND event_type = 'session_fork'",
    )
    .bind(account)
    .fetch_all(&mut *conn)
    .await?;
    let mut children: HashMap<String, Vec<String>> = HashMap::new();
    for row in &forks {
        let child: String = row.try_get(0)?;
        let content: String = row.try_get(1)?;
        let parent = serde_json::from_str::<serde_json::Value>(&content)
            .ok()
            .and_then(|c| c["parent_session_id"].as_str().map(str::to_owned));
        if let Some(parent) = parent {
            children.entry(parent).or_default().push(child);
        }
    }
    match &removal.scope {
        Scope::Session(id) => {
            if let Some(forks) = children.get(id.as_str()) {
                let mut forks = forks.clone();
                forks.sort();
                return Ok(Deletion::Forked {
                    session_id: id.clone(),
                    forks,
                });
            }
        }
        // A fork of a user's session holds that user's words: it goes with them.
        Scope::User(_) => {
            let mut todo: Vec<String> = targets.iter().cloned().collect();
            while let Some(parent) = todo.pop() {
                for child in children.get(&parent).into_iter().flatten() {
                    if targets.insert(child.clone()) {
                        todo.push(child.clone());
                    }
                }
            }
        }
        Scope::Account => {}
    }

    // A run in progress in any of them refuses the whole removal. Locked in key order
    // (the set's), as claims lock one session each: no deadlock.
    if let Some(lock) = dialect.lock_session {
        for session in &targets {
            sqlx::query(lock)
                .bind(account)
                .bind(session.as_str())
                .execute(&mut *conn)
                .await?;
        }
    }
    let open = sqlx::query(
        "SELECT session_id, run_id, invocation_id FROM invocations \
         WHERE account_id = $1 AND status = 'in_progress' ORDER BY session_id, invocation_id",
    )
    .bind(account)
    .fetch_all(&mut *conn)
    .await?;
    for row in &open {
        let session_id: String = row.try_get(0)?;
        if targets.contains(&session_id) {
            return Ok(Deletion::LiveRun {
                session_id,
                run_id: row.try_get(1)?,
                invocation_id: row.try_get(2)?,
            });
        }
    }

    let mut removed = Removed {
        deletion_id: removal.deletion_id.clone(),
        session_ids: targets.iter().cloned().collect(),
        at: now,
        ..Removed::default()
    };

    // Attachments: all of the account's, or those the sessions refer to and no other
    // session does.
    let files: Vec<String> = match removal.scope {
        Scope::Account => {
            let rows = sqlx::query("SELECT file_id FROM attachments WHERE account_id = $1")
                .bind(account)
                .fetch_all(&mut *conn)
                .await?;
            strings(rows)?
        }
        _ => {
            let mut referred = BTreeSet::new();
            let like = format!("%{UPLOAD_SCHEME}%");
            for session in &targets {
                let rows = sqlx::query(
                    "SELECT CAST(content_json AS TEXT) FROM events \
                     WHERE account_id = $1 AND session_id = $2 \
                     AND CAST(content_json AS TEXT) LIKE $3",
                )
                .bind(account)
                .bind(session.as_str())
                .bind(like.as_str())
                .fetch_all(&mut *conn)
                .await?;
                for text in strings(rows)? {
                    referred.extend(upload_ids(&text).map(str::to_owned));
                }
            }
            let mut only_ours = Vec::new();
            for file in referred {
                // `_` in a file id matches any character: the pattern can only find more
                // referrers than there are, which keeps a file, never loses one in use.
                let rows = sqlx::query(
                    "SELECT DISTINCT session_id FROM events \
                     WHERE account_id = $1 AND CAST(content_json AS TEXT) LIKE $2",
                )
                .bind(account)
                .bind(format!("%{UPLOAD_SCHEME}{file}%"))
                .fetch_all(&mut *conn)
                .await?;
                if strings(rows)?.iter().all(|s| targets.contains(s)) {
                    only_ours.push(file);
                }
            }
            only_ours
        }
    };
    for file in &files {
        let size: Option<i64> = sqlx::query(
            "SELECT size_bytes FROM attachments WHERE account_id = $1 AND file_id = $2",
        )
        .bind(account)
        .bind(file.as_str())
        .fetch_optional(&mut *conn)
        .await?
        .map(|r| r.try_get(0))
        .transpose()?;
        if let Some(size) = size {
            sqlx::query("DELETE FROM attachments WHERE account_id = $1 AND file_id = $2")
                .bind(account)
                .bind(file.as_str())
                .execute(&mut *conn)
                .await?;
            removed.attachments += 1;
            removed.attachment_bytes += size;
        }
    }

    let bytes = format!(
        "SELECT COUNT(*), SUM({}) FROM events WHERE account_id = $1 AND session_id = $2",
        dialect.event_bytes
    );
    for session in &targets {
        let row = sqlx::query(&bytes)
            .bind(account)
            .bind(session.as_str())
            .fetch_one(&mut *conn)
            .await?;
        removed.events += row.try_get::<i64, _>(0)?;
        removed.event_bytes += row.try_get::<Option<i64>, _>(1)?.unwrap_or(0);
        sqlx::query("DELETE FROM events WHERE account_id = $1 AND session_id = $2")
            .bind(account)
            .bind(session.as_str())
            .execute(&mut *conn)
            .await?;
        for table in SESSION_TABLES {
            // Counted, then deleted: a generic query result has no row count.
            let count =
                format!("SELECT COUNT(*) FROM {table} WHERE account_id = $1 AND session_id = $2");
            let n: i64 = sqlx::query(&count)
                .bind(account)
                .bind(session.as_str())
                .fetch_one(&mut *conn)
                .await?
                .try_get(0)?;
            let delete = format!("DELETE FROM {table} WHERE account_id = $1 AND session_id = $2");
            sqlx::query(&delete)
                .bind(account)
                .bind(session.as_str())
                .execute(&mut *conn)
                .await?;
            match table {
                "invocations" => removed.invocations += n,
                "feedback" => removed.feedback += n,
                "idempotency_keys" => removed.idempotency_keys += n,
                // Approvals repeat what the session's events hold: gone with them, uncounted.
                _ => {}
            }
        }
        // Webhook deliveries of the session, sent or not (no count in the audit row).
        sqlx::query("DELETE FROM webhook_outbox WHERE account_id = $1 AND session_id = $2")
            .bind(account)
            .bind(session.as_str())
            .execute(&mut *conn)
            .await?;
        sqlx::query("DELETE FROM sessions WHERE account_id = $1 AND session_id = $2")
            .bind(account)
            .bind(session.as_str())
            .execute(&mut *conn)
            .await?;
        // The tombstone another replica's outage-journal backfill checks (see
        // `journal::backfill`), so what it journaled before this does not come back.
        sqlx::query(
            "INSERT INTO removed_sessions (account_id, session_id, removed_at) \
             VALUES ($1, $2, $3) ON CONFLICT (account_id, session_id) \
             DO UPDATE SET removed_at = excluded.removed_at",
        )
        .bind(account)
        .bind(session.as_str())
        .bind(now)
        .execute(&mut *conn)
        .await?;
    }

    let session_ids = serde_json::to_string(&removed.session_ids)
        .map_err(|e| StoreError::Corrupt(e.to_string()))?;
    sqlx::query(
        "INSERT INTO deletions (account_id, deletion_id, scope, subject, deleted_by, \
         session_ids, sessions, events, event_bytes, invocations, feedback, idempotency_keys, \
         attachments, attachment_bytes, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)",
    )
    .bind(account)
    .bind(removal.deletion_id.as_str())
    .bind(removal.scope.as_str())
    .bind(removal.scope.subject().map(str::to_owned))
    .bind(removal.by.as_str())
    .bind(session_ids)
    .bind(removed.session_ids.len() as i64)
    .bind(removed.events)
    .bind(removed.event_bytes)
    .bind(removed.invocations)
    .bind(removed.feedback)
    .bind(removed.idempotency_keys)
    .bind(removed.attachments)
    .bind(removed.attachment_bytes)
    .bind(now)
    .execute(&mut *conn)
    .await?;
    Ok(Deletion::Removed(removed))
}
