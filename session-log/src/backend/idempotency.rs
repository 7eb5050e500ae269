//! The SQL of idempotency keys (the `idempotency_keys` table), written once for both
//! stores: claiming a key for a run unless a live record of it names another, releasing a
//! claim whose run never started, and reading a key's record.

use chrono::{DateTime, TimeZone, Utc};
use sqlx::{ColumnIndex, Database, Decode, Encode, Row, Type};

use super::sql::Statement;
use crate::store::{IdempotentRun, StoreError};

/// Inserts the record, or takes over the key's row when that one is older than the window
/// (`$6`, Unix ms) or names the run being replaced (`$7`). One row affected: claimed.
pub(crate) fn claim<'q, DB: Database>(
    record: &'q IdempotentRun,
    since: DateTime<Utc>,
    replacing: Option<&'q str>,
) -> Statement<'q, DB>
where
    &'q str: Encode<'q, DB> + Type<DB>,
    Option<&'q str>: Encode<'q, DB> + Type<DB>,
    i64: Encode<'q, DB> + Type<DB>,
{
    sqlx::query(
        "INSERT INTO idempotency_keys \
         (account_id, idempotency_key, session_id, run_id, created_ms) \
         VALUES ($1, $2, $3, $4, $5) \
         ON CONFLICT (account_id, idempotency_key) DO UPDATE SET \
         session_id = excluded.session_id, run_id = excluded.run_id, \
         created_ms = excluded.created_ms \
         WHERE idempotency_keys.created_ms < $6 OR idempotency_keys.run_id = $7",
    )
    .bind(record.account_id.as_str())
    .bind(record.key.as_str())
    .bind(record.session_id.as_str())
    .bind(record.run_id.as_str())
    .bind(record.created_at.timestamp_millis())
    .bind(since.timestamp_millis())
    .bind(replacing)
}

/// Drops the key's row while it still names `run_id` (a later claim is left alone).
pub(crate) fn release<'q, DB: Database>(
    account_id: &'q str,
    key: &'q str,
    run_id: &'q str,
) -> Statement<'q, DB>
where
    &'q str: Encode<'q, DB> + Type<DB>,
{
    sqlx::query(
        "DELETE FROM idempotency_keys \
         WHERE account_id = $1 AND idempotency_key = $2 AND run_id = $3",
    )
    .bind(account_id)
    .bind(key)
    .bind(run_id)
}

/// The key's record, whatever its age.
pub(crate) fn get<'q, DB: Database>(account_id: &'q str, key: &'q str) -> Statement<'q, DB>
where
    &'q str: Encode<'q, DB> + Type<DB>,
{
    sqlx::query(
        "SELECT account_id, idempotency_key, session_id, run_id, created_ms \
         FROM idempotency_keys WHERE account_id = $1 AND idempotency_key = $2",
    )
    .bind(account_id)
    .bind(key)
}

/// A record from a row of `get`.
pub(crate) fn from_row<'r, R: Row>(row: &'r R) -> Result<IdempotentRun, StoreError>
where
    &'static str: ColumnIndex<R>,
    String: Decode<'r, R::Database> + Type<R::Database>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
{
    let ms: i64 = row.try_get("created_ms")?;
    Ok(IdempotentRun {
        account_id: row.try_get("account_id")?,
        key: row.try_get("idempotency_key")?,
        session_id: row.try_get("session_id")?,
        run_id: row.try_get("run_id")?,
        created_at: Utc
            .timestamp_millis_opt(ms)
            .single()
            .ok_or_else(|| StoreError::Corrupt(format!("bad idempotency key time {ms}")))?,
    })
}
