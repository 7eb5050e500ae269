//! The SQL of hard deletion (see [`crate::removal`]), written once for both stores, in
//! steps each store runs in its own transactions:
//!
//! - [`plan`] finds the sessions a removal takes, refuses forks left behind (and, for
//!   more than one session, runs in progress) and finds the attachments only they refer
//!   to; it changes nothing.
//! - A removal of at most [`CHUNK`] sessions then runs [`drop_files`], [`purge`] and
//!   [`audit`] in the same transaction as its plan: all of it commits or none does.
//! - A larger one (a user's or an account's erasure, or a session of more than
//!   [`rows_per_step`] events) first runs [`mark`] in the plan's transaction: the
//!   attachments go and every session it takes is archived, so from that commit on none
//!   of them is in the default listing and none takes a new run; then it runs the plan's
//!   [`Plan::steps`], each in a transaction of its own: [`purge`] removes up to [`CHUNK`]
//!   sessions whole, and a session of more events is first [`shrink`]ed (hidden from
//!   every reader, then emptied [`rows_per_step`] events per transaction) and then purged
//!   alone; then [`audit`] writes the audit row, last. Interrupted (a crash, a run started
//!   meanwhile), what is left is archived sessions, each whole, hidden, or gone; the same
//!   request again finishes it.
//! - After each step but the last, the store pauses as long as the step took
//!   ([`give_way`](crate::removal::give_way)).

use std::collections::{BTreeSet, HashMap};

use chrono::{DateTime, Utc};
use sqlx::{Database, Decode, Encode, Executor, IntoArguments, Row, Type};

use crate::removal::{rows_per_step, upload_ids, Deletion, Removal, Removed, Scope, UPLOAD_SCHEME};
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
    /// The forks of an account (`$1`): (fork, its first event's content as text).
    pub forks: &'static str,
    /// The runs in progress of a session (`$1` account, `$2` session): (run, invocation).
    pub open_runs: &'static str,
    /// Hides a session (`$1` account, `$2` session) from every reader, as a client's
    /// delete does (`client_deleted`: no listing names it, no read finds it), and archives
    /// it (`$3` the time) if it is not: a session being emptied in steps.
    pub hide: &'static str,
}

pub(crate) const SQLITE: Dialect = Dialect {
    user_id: "json_extract(metadata_json, '$.adk.user_id')",
    event_bytes: "LENGTH(CAST(content_json AS BLOB)) + LENGTH(CAST(metadata_json AS BLOB))",
    lock_session: None,
    // Named: without statistics SQLite would read the account's every event, or every
    // invocation, through the primary key's account prefix.
    forks: "SELECT session_id, CAST(content_json AS TEXT) FROM events INDEXED BY events_forks \
            WHERE account_id = $1 AND seq = 1 AND event_type = 'session_fork'",
    open_runs: "SELECT run_id, invocation_id FROM invocations \
                INDEXED BY invocations_open_by_session \
                WHERE account_id = $1 AND session_id = $2 AND status = 'in_progress' \
                ORDER BY invocation_id",
    hide: "UPDATE sessions SET client_deleted = 1, archived_at = COALESCE(archived_at, $3) \
           WHERE account_id = $1 AND session_id = $2",
};

pub(crate) const POSTGRES: Dialect = Dialect {
    user_id: "(metadata_json -> 'adk' ->> 'user_id')",
    event_bytes: "octet_length(content_json::text) + octet_length(metadata_json::text)",
    // The claim function's own lock (migration 0005).
    lock_session: Some("SELECT pg_advisory_xact_lock(hashtextextended($1 || E'\\n' || $2, 0))"),
    forks: "SELECT session_id, CAST(content_json AS TEXT) FROM events \
            WHERE account_id = $1 AND seq = 1 AND event_type = 'session_fork'",
    open_runs: "SELECT run_id, invocation_id FROM invocations \
                WHERE account_id = $1 AND session_id = $2 AND status = 'in_progress' \
                ORDER BY invocation_id",
    hide: "UPDATE sessions SET client_deleted = TRUE, archived_at = COALESCE(archived_at, $3) \
           WHERE account_id = $1 AND session_id = $2",
};

/// The tables keyed by (account, session) whose rows go with a session, besides
/// `events` and `sessions`, with the count each contributes to the audit row.
const SESSION_TABLES: [&str; 4] = ["invocations", "feedback", "idempotency_keys", "approvals"];

/// Sessions purged per transaction: what bounds how long a removal holds SQLite's write
/// connection at a time, and how many locks a PostgreSQL transaction of it takes (one per
/// session: an account's erasure in one transaction ran out of `max_locks_per_transaction`
/// at 100,000 sessions).
pub(crate) const CHUNK: usize = 100;

/// What a removal takes, found before anything is removed.
#[derive(Debug)]
pub(crate) struct Plan {
    /// The sessions, forks before the sessions they fork (so an interrupted removal never
    /// leaves a fork whose parent is gone), then in key order.
    pub sessions: Vec<String>,
    /// The attachments that go with them.
    pub files: Vec<String>,
    /// Those of the sessions that may hold more than [`rows_per_step`] events (their
    /// `last_seq` is more): each is [`shrink`]ed before it is purged.
    pub large: BTreeSet<String>,
}

/// One transaction of a removal after its [`mark`] (see [`Plan::steps`]).
#[derive(Debug, PartialEq)]
pub(crate) enum Step<'a> {
    /// [`purge`] these sessions.
    Purge(&'a [String]),
    /// [`shrink`] this session: as many transactions as it takes.
    Shrink(&'a str),
}

impl Plan {
    /// The audit row's start: the sessions, no counts yet.
    pub fn removed(&self, removal: &Removal, now: DateTime<Utc>) -> Removed {
        let mut session_ids = self.sessions.clone();
        session_ids.sort();
        Removed {
            deletion_id: removal.deletion_id.clone(),
            session_ids,
            at: now,
            ..Removed::default()
        }
    }

    /// Whether the removal runs in one transaction.
    pub fn is_small(&self) -> bool {
        self.sessions.len() <= CHUNK && self.large.is_empty()
    }

    /// The transactions of a removal that is not small, after its [`mark`], in the
    /// sessions' order (forks first): runs of up to [`CHUNK`] sessions purged together,
    /// and each large session shrunk and then purged alone (its forks are gone by then).
    pub fn steps(&self) -> Vec<Step<'_>> {
        let mut steps = Vec::new();
        let mut start = 0;
        for (at, session) in self.sessions.iter().enumerate() {
            if self.large.contains(session) {
                steps.extend(self.sessions[start..at].chunks(CHUNK).map(Step::Purge));
                steps.push(Step::Shrink(session));
                steps.push(Step::Purge(&self.sessions[at..=at]));
                start = at + 1;
            }
        }
        steps.extend(self.sessions[start..].chunks(CHUNK).map(Step::Purge));
        steps
    }
}

/// Finds what `removal` takes, or why it is refused; writes nothing.
pub(crate) async fn plan<DB>(
    conn: &mut DB::Connection,
    dialect: &Dialect,
    removal: &Removal,
) -> Result<Result<Plan, Deletion>, StoreError>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    let account = removal.account_id.as_str();
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
                return Ok(Err(Deletion::NotFound));
            }
            strings::<DB>(rows)?.into_iter().collect()
        }
        // The session row's `user_id` too: a session shrunk by an interrupted erasure may
        // have lost the events that named the user.
        Scope::User(user) => {
            let select = format!(
                "SELECT DISTINCT session_id FROM events WHERE account_id = $1 AND {} = $2 \
                 UNION SELECT session_id FROM sessions WHERE account_id = $1 AND user_id = $2",
                dialect.user_id
            );
            let rows = sqlx::query(&select)
                .bind(account)
                .bind(user.as_str())
                .fetch_all(&mut *conn)
                .await?;
            strings::<DB>(rows)?.into_iter().collect()
        }
        Scope::Account => {
            let rows = sqlx::query("SELECT session_id FROM sessions WHERE account_id = $1")
                .bind(account)
                .fetch_all(&mut *conn)
                .await?;
            strings::<DB>(rows)?.into_iter().collect()
        }
    };

    // Forks: a fork's seq 1 is its `session_fork`, naming its parent.
    let forks = sqlx::query(dialect.forks)
        .bind(account)
        .fetch_all(&mut *conn)
        .await?;
    let mut children: HashMap<String, Vec<String>> = HashMap::new();
    let mut parent_of: HashMap<String, String> = HashMap::new();
    for row in &forks {
        let child: String = row.try_get(0)?;
        let content: String = row.try_get(1)?;
        let parent = serde_json::from_str::<serde_json::Value>(&content)
            .ok()
            .and_then(|c| c["parent_session_id"].as_str().map(str::to_owned));
        if let Some(parent) = parent {
            children
                .entry(parent.clone())
                .or_default()
                .push(child.clone());
            parent_of.insert(child, parent);
        }
    }
    match &removal.scope {
        Scope::Session(id) => {
            if let Some(forks) = children.get(id.as_str()) {
                let mut forks = forks.clone();
                forks.sort();
                return Ok(Err(Deletion::Forked {
                    session_id: id.clone(),
                    forks,
                }));
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

    // A run in progress in any of them refuses the whole removal before it changes
    // anything. (Each purge checks its own sessions again, under the claims' lock.)
    if !matches!(removal.scope, Scope::Session(_)) {
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
                return Ok(Err(Deletion::LiveRun {
                    session_id,
                    run_id: row.try_get(1)?,
                    invocation_id: row.try_get(2)?,
                }));
            }
        }
    }

    // Attachments: all of the account's, or those the sessions refer to and no other
    // session does.
    let files: Vec<String> = match removal.scope {
        Scope::Account => {
            let rows = sqlx::query("SELECT file_id FROM attachments WHERE account_id = $1")
                .bind(account)
                .fetch_all(&mut *conn)
                .await?;
            strings::<DB>(rows)?
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
                for text in strings::<DB>(rows)? {
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
                if strings::<DB>(rows)?.iter().all(|s| targets.contains(s)) {
                    only_ours.push(file);
                }
            }
            only_ours
        }
    };

    // Forks first: deepest first, then in key order.
    let depth = |session: &str| {
        let (mut d, mut at) = (0usize, session);
        while let Some(parent) = parent_of.get(at) {
            d += 1;
            at = parent.as_str();
            if d > parent_of.len() {
                break; // a cycle cannot happen; bounded all the same
            }
        }
        d
    };
    // The sessions that may have more events than a step deletes (`last_seq` counts them,
    // and more where some were skipped).
    let large = match &removal.scope {
        Scope::Session(id) => sqlx::query(
            "SELECT session_id FROM sessions \
             WHERE account_id = $1 AND last_seq > $2 AND session_id = $3",
        )
        .bind(account)
        .bind(rows_per_step())
        .bind(id.as_str()),
        _ => sqlx::query("SELECT session_id FROM sessions WHERE account_id = $1 AND last_seq > $2")
            .bind(account)
            .bind(rows_per_step()),
    };
    let large = strings::<DB>(large.fetch_all(&mut *conn).await?)?
        .into_iter()
        .filter(|s| targets.contains(s))
        .collect();

    let mut sessions: Vec<(usize, String)> = targets.into_iter().map(|s| (depth(&s), s)).collect();
    sessions.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    Ok(Ok(Plan {
        sessions: sessions.into_iter().map(|(_, s)| s).collect(),
        files,
        large,
    }))
}

/// The first transaction of a removal that is not small, after its plan: the
/// attachments go and every session it takes is archived (hidden from the default
/// listing, runs refused), so a half-done removal shows nothing half-removed; or, with
/// nothing changed, the run in progress in the one session asked for that refuses it
/// (the caller rolls back).
pub(crate) async fn mark<DB>(
    conn: &mut DB::Connection,
    dialect: &Dialect,
    removal: &Removal,
    plan: &Plan,
    now: DateTime<Utc>,
    removed: &mut Removed,
) -> Result<Option<Deletion>, StoreError>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> String: Decode<'q, DB> + Type<DB>,
    for<'q> i64: Decode<'q, DB> + Type<DB>,
    for<'q> DateTime<Utc>: Encode<'q, DB> + Type<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    let account = removal.account_id.as_str();
    // The plan checked the runs of a user's or an account's sessions; one session asked
    // for is checked here, under the claims' lock.
    if let Scope::Session(id) = &removal.scope {
        if let Some(refused) =
            live_run::<DB>(conn, dialect, account, std::slice::from_ref(id)).await?
        {
            return Ok(Some(refused));
        }
    }
    match removal.scope {
        Scope::Account => {
            sqlx::query(
                "UPDATE sessions SET archived_at = $2 WHERE account_id = $1 AND archived_at IS NULL",
            )
            .bind(account)
            .bind(now)
            .execute(&mut *conn)
            .await?;
        }
        _ => {
            for chunk in plan.sessions.chunks(CHUNK) {
                let list = (0..chunk.len())
                    .map(|i| format!("${}", i + 3))
                    .collect::<Vec<_>>()
                    .join(", ");
                let update = format!(
                    "UPDATE sessions SET archived_at = $2 WHERE account_id = $1 \
                     AND archived_at IS NULL AND session_id IN ({list})"
                );
                let mut query = sqlx::query(&update).bind(account).bind(now);
                for session in chunk {
                    query = query.bind(session.as_str());
                }
                query.execute(&mut *conn).await?;
            }
        }
    }
    drop_files::<DB>(conn, account, &plan.files, removed).await?;
    Ok(None)
}

/// Deletes the plan's attachments, counting them into `removed`.
pub(crate) async fn drop_files<DB>(
    conn: &mut DB::Connection,
    account: &str,
    files: &[String],
    removed: &mut Removed,
) -> Result<(), StoreError>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Decode<'q, DB> + Type<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    for file in files {
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
    Ok(())
}

/// Removes `sessions` (at most [`CHUNK`]) whole, each with its tombstone, counting what
/// went into `removed`; or, with nothing removed, the run in progress that refuses it
/// (the caller rolls back).
pub(crate) async fn purge<DB>(
    conn: &mut DB::Connection,
    dialect: &Dialect,
    account: &str,
    sessions: &[String],
    now: DateTime<Utc>,
    removed: &mut Removed,
) -> Result<Option<Deletion>, StoreError>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> String: Decode<'q, DB> + Type<DB>,
    for<'q> i64: Decode<'q, DB> + Type<DB>,
    for<'q> Option<i64>: Decode<'q, DB>,
    for<'q> DateTime<Utc>: Encode<'q, DB> + Type<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    if let Some(refused) = live_run::<DB>(conn, dialect, account, sessions).await? {
        return Ok(Some(refused));
    }
    let bytes = format!(
        "SELECT COUNT(*), SUM({}) FROM events WHERE account_id = $1 AND session_id = $2",
        dialect.event_bytes
    );
    for session in sessions {
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
    Ok(None)
}

/// Locks `sessions` as a run's claim does and finds a run in progress in one of them:
/// the run that refuses a step of a removal. The locks are held to the commit, so no run
/// starts in them between this check and the step's deletes.
async fn live_run<DB>(
    conn: &mut DB::Connection,
    dialect: &Dialect,
    account: &str,
    sessions: &[String],
) -> Result<Option<Deletion>, StoreError>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> String: Decode<'q, DB> + Type<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    // Locked in key order, as claims lock one session each: no deadlock.
    let mut locked: Vec<&String> = sessions.iter().collect();
    locked.sort();
    if let Some(lock) = dialect.lock_session {
        for session in &locked {
            sqlx::query(lock)
                .bind(account)
                .bind(session.as_str())
                .execute(&mut *conn)
                .await?;
        }
    }
    for session in &locked {
        let open = sqlx::query(dialect.open_runs)
            .bind(account)
            .bind(session.as_str())
            .fetch_optional(&mut *conn)
            .await?;
        if let Some(row) = open {
            return Ok(Some(Deletion::LiveRun {
                session_id: (*session).clone(),
                run_id: row.try_get(0)?,
                invocation_id: row.try_get(1)?,
            }));
        }
    }
    Ok(None)
}

/// What one [`shrink`] transaction did.
#[derive(Debug)]
pub(crate) enum Shrunk {
    /// Deleted a step's events: more are left.
    More,
    /// At most [`rows_per_step`] events are left, for [`purge`]; nothing changed.
    Done,
    /// A run in progress refuses it; nothing changed (the caller rolls back).
    Refused(Deletion),
}

/// One transaction of a large session's removal: hides the session (see
/// [`Dialect::hide`]) and deletes its newest [`rows_per_step`] events, counting them into
/// `removed`, while it has more than that. A reader finds the session whole, or not at
/// all; [`purge`] removes the rest, and the row, last.
pub(crate) async fn shrink<DB>(
    conn: &mut DB::Connection,
    dialect: &Dialect,
    account: &str,
    session: &str,
    now: DateTime<Utc>,
    removed: &mut Removed,
) -> Result<Shrunk, StoreError>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> String: Decode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> Option<i64>: Decode<'q, DB>,
    for<'q> DateTime<Utc>: Encode<'q, DB> + Type<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    let owned = [session.to_owned()];
    if let Some(refused) = live_run::<DB>(conn, dialect, account, &owned).await? {
        return Ok(Shrunk::Refused(refused));
    }
    // The seq below the newest step's worth of events, if there are more than a step.
    let below: Option<i64> = sqlx::query(
        "SELECT seq FROM events WHERE account_id = $1 AND session_id = $2 \
         ORDER BY seq DESC LIMIT 1 OFFSET $3",
    )
    .bind(account)
    .bind(session)
    .bind(rows_per_step())
    .fetch_optional(&mut *conn)
    .await?
    .map(|r| r.try_get(0))
    .transpose()?;
    let Some(below) = below else {
        return Ok(Shrunk::Done);
    };
    sqlx::query(dialect.hide)
        .bind(account)
        .bind(session)
        .bind(now)
        .execute(&mut *conn)
        .await?;
    let bytes = format!(
        "SELECT COUNT(*), SUM({}) FROM events \
         WHERE account_id = $1 AND session_id = $2 AND seq > $3",
        dialect.event_bytes
    );
    let row = sqlx::query(&bytes)
        .bind(account)
        .bind(session)
        .bind(below)
        .fetch_one(&mut *conn)
        .await?;
    removed.events += row.try_get::<i64, _>(0)?;
    removed.event_bytes += row.try_get::<Option<i64>, _>(1)?.unwrap_or(0);
    sqlx::query("DELETE FROM events WHERE account_id = $1 AND session_id = $2 AND seq > $3")
        .bind(account)
        .bind(session)
        .bind(below)
        .execute(&mut *conn)
        .await?;
    Ok(Shrunk::More)
}

/// Writes the audit row of a removal whose sessions and attachments are all gone.
pub(crate) async fn audit<DB>(
    conn: &mut DB::Connection,
    removal: &Removal,
    removed: &Removed,
) -> Result<(), StoreError>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> DateTime<Utc>: Encode<'q, DB> + Type<DB>,
{
    let session_ids = serde_json::to_string(&removed.session_ids)
        .map_err(|e| StoreError::Corrupt(e.to_string()))?;
    sqlx::query(
        "INSERT INTO deletions (account_id, deletion_id, scope, subject, deleted_by, \
         session_ids, sessions, events, event_bytes, invocations, feedback, idempotency_keys, \
         attachments, attachment_bytes, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)",
    )
    .bind(removal.account_id.as_str())
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
    .bind(removed.at)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

fn strings<DB>(rows: Vec<DB::Row>) -> Result<Vec<String>, StoreError>
where
    DB: Database,
    for<'q> String: Decode<'q, DB> + Type<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    rows.iter()
        .map(|r| r.try_get::<String, _>(0).map_err(StoreError::from))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{Plan, Step, CHUNK};

    /// A large session is shrunk and purged alone, between the runs of the others, which
    /// are purged up to `CHUNK` at a time in the plan's order (forks first).
    #[test]
    fn a_large_session_is_a_step_of_its_own_in_the_plans_order() {
        let sessions: Vec<String> = (0..CHUNK + 5).map(|i| format!("s{i:03}")).collect();
        let plan = Plan {
            sessions: sessions.clone(),
            files: Vec::new(),
            large: ["s003".to_owned()].into(),
        };
        assert!(!plan.is_small());
        assert_eq!(
            plan.steps(),
            [
                Step::Purge(&sessions[0..3]),
                Step::Shrink("s003"),
                Step::Purge(&sessions[3..4]),
                Step::Purge(&sessions[4..4 + CHUNK]),
                Step::Purge(&sessions[4 + CHUNK..]),
            ]
        );
        let small = Plan {
            sessions: sessions[..2].to_vec(),
            files: Vec::new(),
            large: Default::default(),
        };
        assert!(small.is_small());
        assert_eq!(small.steps(), [Step::Purge(&sessions[..2])]);
    }
}
