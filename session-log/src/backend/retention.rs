//! The SQL of retention sweeps, written once for both stores: the sweeper's lease (one
//! row, so one replica sweeps at a time), the page of sessions idle since a time, and the
//! pruning of old tombstones.

use chrono::{DateTime, Utc};
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Row, Type};

use crate::store::StoreError;

/// Takes (or renews) the sweeper's lease for `owner` until `until_ms`, unless another
/// owner holds it past `now_ms`; whether `owner` holds it now.
pub(crate) async fn claim<'c, DB, E>(
    conn: E,
    owner: &str,
    now_ms: i64,
    until_ms: i64,
) -> Result<bool, StoreError>
where
    DB: Database,
    E: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
{
    let row = sqlx::query(
        "UPDATE retention_sweeper SET owner = $1, until_ms = $2 \
         WHERE id = 1 AND (until_ms < $3 OR owner = $1) RETURNING id",
    )
    .bind(owner)
    .bind(until_ms)
    .bind(now_ms)
    .fetch_optional(conn)
    .await?;
    Ok(row.is_some())
}

/// Deletes the tombstones (`removed_sessions`) of sessions removed before `before`, on
/// `conn`: how many.
pub(crate) async fn prune<'c, DB, E>(conn: E, before: DateTime<Utc>) -> Result<u64, StoreError>
where
    DB: Database,
    E: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> DateTime<Utc>: Encode<'q, DB> + Type<DB>,
    for<'r> i64: Decode<'r, DB> + Type<DB>,
    usize: ColumnIndex<DB::Row>,
{
    let rows = sqlx::query("DELETE FROM removed_sessions WHERE removed_at < $1 RETURNING 1")
        .bind(before)
        .fetch_all(conn)
        .await?;
    Ok(rows.len() as u64)
}

/// (account, session, last activity) of sessions last active before `before`, oldest
/// first. No index
/// serves it (one on `updated_at` would cost every append): a sweep reads the sessions
/// table, which is small beside the log.
pub(crate) async fn idle<DB>(
    pool: &sqlx::Pool<DB>,
    before: DateTime<Utc>,
    offset: i64,
    limit: i64,
) -> Result<Vec<(String, String, DateTime<Utc>)>, StoreError>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> DateTime<Utc>: Encode<'q, DB> + Type<DB>,
    for<'r> String: Decode<'r, DB> + Type<DB>,
    for<'r> DateTime<Utc>: Decode<'r, DB>,
    usize: ColumnIndex<DB::Row>,
{
    let rows = sqlx::query(
        "SELECT account_id, session_id, updated_at FROM sessions WHERE updated_at < $1 \
         ORDER BY updated_at, account_id, session_id LIMIT $2 OFFSET $3",
    )
    .bind(before)
    .bind(limit.max(0))
    .bind(offset.max(0))
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
        .collect()
}
