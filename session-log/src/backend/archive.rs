//! The SQL of archiving (a session read-only and out of the default listing, until
//! unarchived), written once for both stores: setting and reading `archived_at` (the
//! listing's filter is in `listing`).

use chrono::{DateTime, Utc};
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Row, Type};

use crate::store::StoreError;

/// Sets (or, with `None`, clears) a session's `archived_at` on `conn`; whether the account
/// has the session.
pub(crate) async fn set<'c, DB, E>(
    conn: E,
    account_id: &str,
    session_id: &str,
    at: Option<DateTime<Utc>>,
) -> Result<bool, StoreError>
where
    DB: Database,
    E: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> Option<DateTime<Utc>>: Encode<'q, DB> + Type<DB>,
{
    let row = sqlx::query(
        "UPDATE sessions SET archived_at = $3 WHERE account_id = $1 AND session_id = $2 \
         RETURNING session_id",
    )
    .bind(account_id)
    .bind(session_id)
    .bind(at)
    .fetch_optional(conn)
    .await?;
    Ok(row.is_some())
}

/// When the session was archived; `None` when it is active or the account has no such
/// session.
pub(crate) async fn archived_at<'c, DB, E>(
    conn: E,
    account_id: &str,
    session_id: &str,
) -> Result<Option<DateTime<Utc>>, StoreError>
where
    DB: Database,
    E: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'r> Option<DateTime<Utc>>: Decode<'r, DB> + Type<DB>,
    usize: ColumnIndex<DB::Row>,
{
    let row =
        sqlx::query("SELECT archived_at FROM sessions WHERE account_id = $1 AND session_id = $2")
            .bind(account_id)
            .bind(session_id)
            .fetch_optional(conn)
            .await?;
    Ok(match row {
        Some(row) => row.try_get(0)?,
        None => None,
    })
}
