//! The SQL of the session log, written once: the statements SQLite and PostgreSQL read
//! alike, the pieces their own statements are built from, and the decoding of the rows
//! both return.
//!
//! Placeholders are `$n` throughout: PostgreSQL's own, and sqlx's SQLite driver binds
//! `$n` to the n-th argument as well. Whole statements are constants or builders; the
//! pieces other statements embed are macros, so that a backend can `concat!` them into
//! its own statements at compile time: nothing is formatted per call. What really
//! differs between the dialects (the append statements, claims and leases, the `ctid`
//! close, NOTIFY, the events page) stays in `sqlite.rs` and `postgres.rs`; the journal's
//! own tables, which only SQLite has, stay in `journal/`.

use chrono::{DateTime, Utc};
use sqlx::query::Query;
use sqlx::{ColumnIndex, Database, Decode, Encode, QueryBuilder, Row, Type};

use super::plan::json_text;
use crate::event::{Event, EventType, ForkPoint, RunStatus, Session};
use crate::import::ImportedInvocation;
use crate::store::{Attachment, EventQuery, Invocation, StoreError};

/// The columns of an event row that are not its key's account and session, in the order
/// both stores read them.
macro_rules! event_value_columns {
    () => {
        "seq, run_id, invocation_id, event_type, role, content_json, metadata_json, created_at"
    };
}
pub(crate) use event_value_columns;

/// Every column of an event row, in the order inserts bind them.
macro_rules! event_columns {
    () => {
        concat!(
            "account_id, session_id, ",
            $crate::backend::sql::event_value_columns!()
        )
    };
}
pub(crate) use event_columns;

macro_rules! invocation_columns {
    () => {
        "account_id, invocation_id, session_id, run_id, status, started_at, ended_at, agent_ref"
    };
}
pub(crate) use invocation_columns;

/// The start of a read of session rows: their columns (those the listing's filters read
/// are kept by triggers, migrations `session_search`), the content of a fork's
/// `session_fork` (its seq 1, a lookup on the events' primary key) as `fork`, and its
/// count of `session_deleted` events as `deleted` (through `events_session_updates`,
/// empty for most sessions), or 1 when its row says it is hidden (`client_deleted`: a
/// removal emptying it in steps sets it without such an event). JSON as text in both dialects (PostgreSQL casts its JSONB),
/// so one decoder reads it.
macro_rules! select_sessions {
    () => {
        concat!(
            "SELECT s.account_id, s.session_id, s.last_seq, s.created_at, s.updated_at, \
             s.user_id, s.agent_id, s.last_run_status, s.archived_at, \
             CAST(s.metadata_json AS TEXT) AS metadata, \
             CAST(f.content_json AS TEXT) AS fork, \
             CASE WHEN s.client_deleted THEN 1 ELSE (SELECT COUNT(*) FROM events AS d \
             WHERE d.account_id = s.account_id AND d.session_id = s.session_id AND ",
            $crate::backend::sql::updates_condition!(),
            " AND d.event_type = 'session_deleted') END AS deleted \
             FROM sessions AS s \
             LEFT JOIN events AS f ON f.account_id = s.account_id AND f.session_id = s.session_id \
             AND f.seq = 1 AND f.event_type = 'session_fork' "
        )
    };
}
pub(crate) use select_sessions;

/// The session updates' condition, as `events_session_updates` (migrations
/// `session_updates`) writes it: a query that repeats it word for word may use that index.
macro_rules! updates_condition {
    () => {
        "event_type IN ('session_metadata', 'session_deleted', 'item_deleted')"
    };
}
pub(crate) use updates_condition;

/// The start of an insert of session rows; the values follow.
macro_rules! insert_sessions {
    () => {
        "INSERT INTO sessions (account_id, session_id, last_seq, created_at, updated_at) "
    };
}
pub(crate) use insert_sessions;

/// The end of the sessions' upsert that every append runs: a session is created on its
/// first event, and otherwise bumped by the batch's count of its events (the value
/// inserted as `last_seq`). The row lock the bump takes serialises the session's writers.
/// Returns each session's new `last_seq`.
macro_rules! bump_sessions {
    () => {
        " ON CONFLICT (account_id, session_id) DO UPDATE SET \
         last_seq = sessions.last_seq + excluded.last_seq, \
         updated_at = excluded.updated_at \
         RETURNING account_id, session_id, last_seq"
    };
}
pub(crate) use bump_sessions;

/// Closes an open invocation (`$1` status, `$2` end time, `$3` account, `$4` invocation,
/// `$5` session). A close that waited for a racing one re-checks `status` and changes
/// nothing, so an invocation ends once.
macro_rules! close_invocation {
    () => {
        "UPDATE invocations SET status = $1, ended_at = $2 \
         WHERE account_id = $3 AND invocation_id = $4 AND session_id = $5 \
         AND status = 'in_progress'"
    };
}
pub(crate) use close_invocation;

/// A statement with its arguments bound, to run on whichever connection its store uses.
pub(crate) type Statement<'q, DB> = Query<'q, DB, <DB as Database>::Arguments<'q>>;

/// `text`, a statement about one row of an account (`$1` the account, `$2` the row's own
/// id), with both bound; the statement's further arguments, if any, follow.
pub(crate) fn keyed<'q, DB: Database>(
    text: &'q str,
    account_id: &'q str,
    id: &'q str,
) -> Statement<'q, DB>
where
    &'q str: Encode<'q, DB> + Type<DB>,
{
    sqlx::query(text).bind(account_id).bind(id)
}

/// A session, by `keyed` account and session.
pub(crate) const SESSION: &str = concat!(
    select_sessions!(),
    "WHERE s.account_id = $1 AND s.session_id = $2"
);

/// An account's usage (zero for an account with nothing stored).
pub(crate) async fn usage<DB>(
    pool: &sqlx::Pool<DB>,
    account_id: &str,
) -> Result<crate::store::Usage, StoreError>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'r> i64: Decode<'r, DB> + Type<DB>,
    usize: ColumnIndex<DB::Row>,
{
    let row = sqlx::query(
        "SELECT sessions, event_bytes, upload_bytes FROM account_usage WHERE account_id = $1",
    )
    .bind(account_id)
    .fetch_optional(pool)
    .await?;
    Ok(match row {
        Some(row) => crate::store::Usage {
            sessions: row.try_get(0)?,
            event_bytes: row.try_get(1)?,
            upload_bytes: row.try_get(2)?,
        },
        None => crate::store::Usage::default(),
    })
}

/// Creates a session with `last_seq` 1 for the event its creator inserts next (`$1`
/// account, `$2` session, `$3` now), unless the account has it already: then no row is
/// inserted and the creator inserts nothing.
pub(crate) const CREATE_SESSION: &str = concat!(
    insert_sessions!(),
    "VALUES ($1, $2, 1, $3, $3) ON CONFLICT (account_id, session_id) DO NOTHING"
);

/// The history markers' condition, as `events_markers` (migrations `session_history`)
/// writes it: a query that repeats it word for word may use that index.
macro_rules! markers_condition {
    () => {
        "event_type IN ('run_status', 'run_checkpoint', 'session_fork', 'compaction', \
         'compaction_boundary', 'context_checkpoint')"
    };
}
pub(crate) use markers_condition;

/// The events of a `keyed` account and session.
pub(crate) const COUNT_EVENTS: &str =
    "SELECT COUNT(*) FROM events WHERE account_id = $1 AND session_id = $2";

/// The most recent invocation of a `keyed` account and run.
pub(crate) const RUN: &str = concat!(
    "SELECT ",
    invocation_columns!(),
    " FROM invocations WHERE account_id = $1 AND run_id = $2 \
     ORDER BY started_at DESC, invocation_id DESC LIMIT 1"
);

/// An invocation, by `keyed` account and invocation.
pub(crate) const INVOCATION: &str = concat!(
    "SELECT ",
    invocation_columns!(),
    " FROM invocations WHERE account_id = $1 AND invocation_id = $2"
);

/// Which of `ids` an account other than `account_id` holds (one is enough).
pub(crate) fn invocation_known_elsewhere<'q, DB: Database>(
    account_id: &'q str,
    ids: &'q [String],
) -> QueryBuilder<'q, DB>
where
    &'q str: Encode<'q, DB> + Type<DB>,
{
    let mut q = QueryBuilder::new("SELECT invocation_id FROM invocations WHERE account_id <> ");
    q.push_bind(account_id);
    q.push(" AND invocation_id IN (");
    let mut list = q.separated(", ");
    for id in ids {
        list.push_bind(id.as_str());
    }
    q.push(") LIMIT 1");
    q
}

/// The most recent invocation of a `keyed` account and agent handle.
pub(crate) const INVOCATION_BY_AGENT_REF: &str = concat!(
    "SELECT ",
    invocation_columns!(),
    " FROM invocations WHERE account_id = $1 AND agent_ref = $2 \
     ORDER BY started_at DESC, invocation_id DESC LIMIT 1"
);

/// The start of a read of open invocations; each store adds its own lease conditions to
/// find the abandoned ones.
macro_rules! select_open_invocations {
    () => {
        concat!(
            "SELECT ",
            $crate::backend::sql::invocation_columns!(),
            " FROM invocations WHERE status = 'in_progress' "
        )
    };
}
pub(crate) use select_open_invocations;

pub(crate) const OPEN_INVOCATIONS: &str = concat!(
    select_open_invocations!(),
    "ORDER BY started_at, account_id, invocation_id"
);

/// Sets the agent handle (`$3`) of a `keyed` account and invocation.
pub(crate) const SET_AGENT_REF: &str =
    "UPDATE invocations SET agent_ref = $3 WHERE account_id = $1 AND invocation_id = $2";

/// Flags an open invocation, by `keyed` account and invocation, for cancellation (SQLite
/// stores `TRUE` as 1).
pub(crate) const REQUEST_CANCEL: &str = "UPDATE invocations SET cancel_requested = TRUE \
     WHERE account_id = $1 AND invocation_id = $2 AND status = 'in_progress'";

/// Stores an attachment unless the account has one with its file id.
pub(crate) fn put_attachment<'q, DB: Database>(a: &'q Attachment) -> Statement<'q, DB>
where
    &'q str: Encode<'q, DB> + Type<DB>,
    Option<&'q str>: Encode<'q, DB> + Type<DB>,
    &'q [u8]: Encode<'q, DB> + Type<DB>,
    i64: Encode<'q, DB> + Type<DB>,
    DateTime<Utc>: Encode<'q, DB> + Type<DB>,
{
    sqlx::query(
        "INSERT INTO attachments \
         (account_id, file_id, mime_type, filename, size_bytes, content, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (account_id, file_id) DO NOTHING",
    )
    .bind(a.account_id.as_str())
    .bind(a.file_id.as_str())
    .bind(a.mime_type.as_str())
    .bind(a.filename.as_deref())
    .bind(a.content.len() as i64)
    .bind(a.content.as_slice())
    .bind(Utc::now())
}

/// Creates an imported session (`$1` account, `$2` session, `$3` last seq, `$4` created,
/// `$5` updated); returns a row only if the account did not have it.
pub(crate) const IMPORT_SESSION: &str = concat!(
    insert_sessions!(),
    "VALUES ($1, $2, $3, $4, $5) ON CONFLICT (account_id, session_id) DO NOTHING \
     RETURNING session_id"
);

/// Rows per statement of an import: SQLite's and PostgreSQL's bind limits hold ten
/// columns of this many.
pub(crate) const IMPORT_CHUNK: usize = 1000;

/// Inserts imported events as they are, seqs and times included. `json` holds each
/// event's content and metadata as JSON text; `json_cast` is what turns a text parameter
/// into the column's type (`::jsonb` on PostgreSQL, nothing on SQLite).
pub(crate) fn import_events<'q, DB: Database>(
    events: &'q [Event],
    json: &'q [(String, String)],
    json_cast: &'static str,
) -> QueryBuilder<'q, DB>
where
    &'q str: Encode<'q, DB> + Type<DB>,
    Option<&'q str>: Encode<'q, DB> + Type<DB>,
    i64: Encode<'q, DB> + Type<DB>,
    DateTime<Utc>: Encode<'q, DB> + Type<DB>,
{
    let mut insert = QueryBuilder::new(concat!("INSERT INTO events (", event_columns!(), ") "));
    insert.push_values(
        events.iter().zip(json),
        |mut row, (e, (content, metadata))| {
            row.push_bind(e.account_id.as_str())
                .push_bind(e.session_id.as_str())
                .push_bind(e.seq)
                .push_bind(e.run_id.as_deref())
                .push_bind(e.invocation_id.as_deref())
                .push_bind(e.event_type.as_str())
                .push_bind(e.role.as_deref())
                .push_bind(content.as_str())
                .push_unseparated(json_cast)
                .push_bind(metadata.as_str())
                .push_unseparated(json_cast)
                .push_bind(e.created_at);
        },
    );
    insert
}

/// Inserts an imported session's invocations, unless the account has one of their ids:
/// returns the ids it inserted. No owner or lease (nobody drives them), and no seq bounds
/// (reads of their runs walk the whole session, which is correct).
pub(crate) fn import_invocations<'q, DB: Database>(
    account_id: &'q str,
    session_id: &'q str,
    rows: &'q [ImportedInvocation],
) -> QueryBuilder<'q, DB>
where
    &'q str: Encode<'q, DB> + Type<DB>,
    Option<&'q str>: Encode<'q, DB> + Type<DB>,
    DateTime<Utc>: Encode<'q, DB> + Type<DB>,
    Option<DateTime<Utc>>: Encode<'q, DB> + Type<DB>,
{
    let mut insert = QueryBuilder::new(concat!(
        "INSERT INTO invocations (",
        invocation_columns!(),
        ") "
    ));
    insert.push_values(rows, |mut row, i| {
        row.push_bind(account_id)
            .push_bind(i.invocation_id.as_str())
            .push_bind(session_id)
            .push_bind(i.run_id.as_str())
            .push_bind(i.status.as_str())
            .push_bind(i.started_at)
            .push_bind(i.ended_at)
            .push_bind(i.agent_ref.as_deref());
    });
    insert.push(" ON CONFLICT (account_id, invocation_id) DO NOTHING RETURNING invocation_id");
    insert
}

/// The first of `rows` an import did not insert (`inserted` lists the ids it did).
pub(crate) fn invocation_not_inserted(
    rows: &[ImportedInvocation],
    inserted: &[String],
) -> Option<String> {
    rows.iter()
        .find(|r| !inserted.contains(&r.invocation_id))
        .map(|r| r.invocation_id.clone())
}

/// An import in one transaction on `$conn` (an expression giving `&mut` its connection),
/// opened with `$begin`, for database `$db` with `$json_cast` (see [`import_events`]): the
/// session, its events, its invocations; committed when the session was created, rolled
/// back otherwise. Evaluates to `Result<Imported, StoreError>`. A macro, not a function:
/// generic over the database, sqlx's executor bounds do not hold across the awaits of an
/// async trait method.
macro_rules! import_in_transaction {
    ($conn:expr, $begin:expr, $db:ty, $json_cast:expr, $events:expr, $json:expr, $invocations:expr) => {
        async {
            sqlx::query($begin).execute(&mut *$conn).await?;
            let outcome = $crate::backend::sql::import_in_transaction!(@statements $conn, $db, $json_cast, $events, $json, $invocations).await;
            let end = match outcome {
                Ok($crate::store::Imported::Created) => "COMMIT",
                _ => "ROLLBACK",
            };
            let ended = sqlx::query(end).execute(&mut *$conn).await;
            let outcome = outcome?;
            ended?;
            Ok::<_, $crate::store::StoreError>(outcome)
        }
    };
    (@statements $conn:expr, $db:ty, $json_cast:expr, $events:expr, $json:expr, $invocations:expr) => {
        async {
            use sqlx::Row as _;
            let (events, json, invocations) = ($events, $json, $invocations);
            let (Some(first), Some(last)) = (events.first(), events.last()) else {
                return Ok($crate::store::Imported::Created);
            };
            let created = sqlx::query($crate::backend::sql::IMPORT_SESSION)
                .bind(first.account_id.as_str())
                .bind(first.session_id.as_str())
                .bind(last.seq)
                .bind(first.created_at)
                .bind(last.created_at)
                .fetch_optional(&mut *$conn)
                .await?;
            if created.is_none() {
                return Ok($crate::store::Imported::SessionExists);
            }
            let chunk = $crate::backend::sql::IMPORT_CHUNK;
            for (events, json) in events.chunks(chunk).zip(json.chunks(chunk)) {
                $crate::backend::sql::import_events::<$db>(events, json, $json_cast)
                    .build()
                    .execute(&mut *$conn)
                    .await?;
            }
            for rows in invocations.chunks(chunk) {
                let inserted = $crate::backend::sql::import_invocations::<$db>(
                    &first.account_id,
                    &first.session_id,
                    rows,
                )
                .build()
                .fetch_all(&mut *$conn)
                .await?
                .iter()
                .map(|row| row.try_get::<String, _>(0))
                .collect::<Result<Vec<_>, _>>()?;
                if let Some(id) = $crate::backend::sql::invocation_not_inserted(rows, &inserted) {
                    return Ok($crate::store::Imported::InvocationExists(id));
                }
            }
            Ok::<_, $crate::store::StoreError>($crate::store::Imported::Created)
        }
    };
}
pub(crate) use import_in_transaction;

/// The JSON text of each event's content and metadata, as an import binds them.
pub(crate) fn import_json(events: &[Event]) -> Vec<(String, String)> {
    events
        .iter()
        .map(|e| (json_text(&e.content), json_text(&e.metadata)))
        .collect()
}

/// An attachment, by `keyed` account and file id.
pub(crate) const ATTACHMENT: &str = "SELECT mime_type, filename, content FROM attachments \
     WHERE account_id = $1 AND file_id = $2";

/// From ` FROM events` to the end of a read of `query`'s events: the session, the seqs
/// after `after_seq`, the optional filters, the order and the limit. The optional
/// filters are added only when set, so each combination is its own cached statement,
/// with a plan that can use the matching index.
pub(crate) fn push_events_read<'a, DB>(select: &mut QueryBuilder<'a, DB>, query: &'a EventQuery)
where
    DB: Database,
    &'a String: Encode<'a, DB> + Type<DB>,
    &'a str: Encode<'a, DB> + Type<DB>,
    i64: Encode<'a, DB> + Type<DB>,
{
    select
        .push(" FROM events WHERE account_id = ")
        .push_bind(&query.account_id)
        .push(" AND session_id = ")
        .push_bind(&query.session_id)
        .push(" AND seq > ")
        .push_bind(query.after_seq);
    if let Some(until) = query.until_seq {
        select.push(" AND seq <= ").push_bind(until);
    }
    push_run_filter(select, query);
    if let Some(types) = &query.event_types {
        // Literals, not binds: the names come from the `EventType` enum. A read of history
        // markers only also repeats the partial index's condition word for word, which is
        // how SQLite recognises it can use the index.
        if types.iter().all(|t| EventType::MARKERS.contains(t)) {
            select.push(concat!(" AND ", markers_condition!()));
        } else if types.iter().all(|t| EventType::UPDATES.contains(t)) {
            select.push(concat!(" AND ", updates_condition!()));
        }
        select.push(" AND event_type IN (");
        for (i, t) in types.iter().enumerate() {
            if i > 0 {
                select.push(", ");
            }
            select.push("'").push(t.as_str()).push("'");
        }
        select.push(")");
    }
    select
        .push(" ORDER BY seq LIMIT ")
        .push_bind(non_negative(query.limit));
}

/// The conditions that narrow a read to one run or invocation (`query` names one): its
/// id, and the stretch of the session's seqs that the matching invocations recorded,
/// after the earliest one's `after_seq` and up to the latest one's `end_seq` (see the
/// `run_bounds` migration). The read then walks the primary key's range instead of
/// needing an index on run ids. A bound any matching invocation does not know (an open
/// one's end, a backfilled row's start) is left open, and so is everything when none
/// matches.
fn push_run_filter<'a, DB>(select: &mut QueryBuilder<'a, DB>, query: &'a EventQuery)
where
    DB: Database,
    &'a String: Encode<'a, DB> + Type<DB>,
{
    if query.run_id.is_none() && query.invocation_id.is_none() {
        return;
    }
    let ids = |select: &mut QueryBuilder<'a, DB>| {
        if let Some(run_id) = &query.run_id {
            select.push(" AND run_id = ").push_bind(run_id);
        }
        if let Some(invocation_id) = &query.invocation_id {
            select
                .push(" AND invocation_id = ")
                .push_bind(invocation_id);
        }
    };
    ids(select);
    for bound in [
        " AND seq > (SELECT CASE WHEN count(*) = count(after_seq) \
         THEN coalesce(min(after_seq), 0) ELSE 0 END",
        " AND seq <= (SELECT CASE WHEN count(*) > 0 AND count(*) = count(end_seq) \
         THEN max(end_seq) ELSE 9223372036854775807 END",
    ] {
        select
            .push(bound)
            .push(" FROM invocations WHERE account_id = ")
            .push_bind(&query.account_id)
            .push(" AND session_id = ")
            .push_bind(&query.session_id);
        ids(select);
        select.push(")");
    }
}

/// A session from a row of `select_sessions!()`.
pub(crate) fn session_from_row<'r, R: Row>(row: &'r R) -> Result<Session, StoreError>
where
    &'static str: ColumnIndex<R>,
    String: Decode<'r, R::Database> + Type<R::Database>,
    &'r str: Decode<'r, R::Database> + Type<R::Database>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
    DateTime<Utc>: Decode<'r, R::Database> + Type<R::Database>,
{
    let fork: Option<&str> = row.try_get("fork")?;
    let forked_from = fork
        .map(|text| {
            serde_json::from_str(text)
                .ok()
                .as_ref()
                .and_then(ForkPoint::of)
                .ok_or_else(|| StoreError::Corrupt(format!("session_fork is not valid: {text}")))
        })
        .transpose()?;
    let metadata: Option<&str> = row.try_get("metadata")?;
    let metadata = metadata
        .map(|text| {
            serde_json::from_str::<serde_json::Value>(text)
                .map_err(|_| StoreError::Corrupt(format!("session metadata is not valid: {text}")))
        })
        .transpose()?;
    let last_run_status: Option<&str> = row.try_get("last_run_status")?;
    let deleted: i64 = row.try_get("deleted")?;
    Ok(Session {
        account_id: row.try_get("account_id")?,
        session_id: row.try_get("session_id")?,
        last_seq: row.try_get("last_seq")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        forked_from,
        metadata,
        deleted: deleted > 0,
        user_id: row.try_get("user_id")?,
        agent_id: row.try_get("agent_id")?,
        last_run_status: last_run_status.and_then(RunStatus::parse),
        archived_at: row.try_get("archived_at")?,
    })
}

/// An invocation from a row of `invocation_columns!()`.
pub(crate) fn invocation_from_row<'r, R: Row>(row: &'r R) -> Result<Invocation, StoreError>
where
    &'static str: ColumnIndex<R>,
    String: Decode<'r, R::Database> + Type<R::Database>,
    &'r str: Decode<'r, R::Database> + Type<R::Database>,
    DateTime<Utc>: Decode<'r, R::Database> + Type<R::Database>,
{
    Ok(Invocation {
        account_id: row.try_get("account_id")?,
        session_id: row.try_get("session_id")?,
        run_id: row.try_get("run_id")?,
        invocation_id: row.try_get("invocation_id")?,
        status: parse_status(row.try_get("status")?)?,
        started_at: row.try_get("started_at")?,
        ended_at: row.try_get("ended_at")?,
        agent_ref: row.try_get("agent_ref")?,
    })
}

/// An attachment of the account from a row of [`attachment`].
pub(crate) fn attachment_from_row<'r, R: Row>(
    account_id: &str,
    file_id: &str,
    row: &'r R,
) -> Result<Attachment, StoreError>
where
    &'static str: ColumnIndex<R>,
    String: Decode<'r, R::Database> + Type<R::Database>,
    Vec<u8>: Decode<'r, R::Database> + Type<R::Database>,
{
    Ok(Attachment {
        account_id: account_id.to_owned(),
        file_id: file_id.to_owned(),
        mime_type: row.try_get("mime_type")?,
        filename: row.try_get("filename")?,
        content: row.try_get("content")?,
    })
}

pub(crate) fn parse_event_type(s: &str) -> Result<EventType, StoreError> {
    EventType::parse(s).ok_or_else(|| StoreError::Corrupt(format!("unknown event type {s:?}")))
}

pub(crate) fn parse_status(s: &str) -> Result<RunStatus, StoreError> {
    RunStatus::parse(s).ok_or_else(|| StoreError::Corrupt(format!("unknown run status {s:?}")))
}

/// SQL LIMIT/OFFSET values: PostgreSQL rejects negative ones, SQLite reads them as "none".
fn non_negative(n: i64) -> i64 {
    n.max(0)
}
