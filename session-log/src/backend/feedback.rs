//! The SQL of feedback records (the `feedback` table), written once for both stores:
//! the insert, the account's (or one session's) page newest first with its count, and
//! the decoding of a row.

use chrono::{DateTime, Utc};
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Pool, Row, Type};

use super::sql::Statement;
use crate::store::{Feedback, Rating, StoreError};

macro_rules! feedback_columns {
    () => {
        "account_id, feedback_id, session_id, run_id, invocation_id, response_id, rating, \
         comment, created_at"
    };
}

pub(crate) fn insert<'q, DB: Database>(f: &'q Feedback) -> Statement<'q, DB>
where
    &'q str: Encode<'q, DB> + Type<DB>,
    Option<&'q str>: Encode<'q, DB> + Type<DB>,
    DateTime<Utc>: Encode<'q, DB> + Type<DB>,
{
    sqlx::query(concat!(
        "INSERT INTO feedback (",
        feedback_columns!(),
        ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
    ))
    .bind(f.account_id.as_str())
    .bind(f.feedback_id.as_str())
    .bind(f.session_id.as_str())
    .bind(f.run_id.as_str())
    .bind(f.invocation_id.as_deref())
    .bind(f.response_id.as_deref())
    .bind(f.rating.as_str())
    .bind(f.comment.as_deref())
    .bind(f.created_at)
}

/// A page of the account's feedback, or of one session's, newest first (ids are
/// time-ordered).
fn page<'q, DB: Database>(
    account_id: &'q str,
    session_id: Option<&'q str>,
    offset: i64,
    limit: i64,
) -> Statement<'q, DB>
where
    &'q str: Encode<'q, DB> + Type<DB>,
    i64: Encode<'q, DB> + Type<DB>,
{
    let (offset, limit) = (offset.max(0), limit.max(0));
    match session_id {
        Some(session_id) => sqlx::query(concat!(
            "SELECT ",
            feedback_columns!(),
            " FROM feedback WHERE account_id = $1 AND session_id = $2 \
             ORDER BY feedback_id DESC LIMIT $3 OFFSET $4"
        ))
        .bind(account_id)
        .bind(session_id)
        .bind(limit)
        .bind(offset),
        None => sqlx::query(concat!(
            "SELECT ",
            feedback_columns!(),
            " FROM feedback WHERE account_id = $1 ORDER BY feedback_id DESC LIMIT $2 OFFSET $3"
        ))
        .bind(account_id)
        .bind(limit)
        .bind(offset),
    }
}

/// How many records `page` chooses from; one row, one `count` column.
fn count<'q, DB: Database>(account_id: &'q str, session_id: Option<&'q str>) -> Statement<'q, DB>
where
    &'q str: Encode<'q, DB> + Type<DB>,
{
    match session_id {
        Some(session_id) => sqlx::query(
            "SELECT COUNT(*) AS count FROM feedback WHERE account_id = $1 AND session_id = $2",
        )
        .bind(account_id)
        .bind(session_id),
        None => sqlx::query("SELECT COUNT(*) AS count FROM feedback WHERE account_id = $1")
            .bind(account_id),
    }
}

/// A record from a row of `page`.
fn from_row<'r, R: Row>(row: &'r R) -> Result<Feedback, StoreError>
where
    &'static str: ColumnIndex<R>,
    String: Decode<'r, R::Database> + Type<R::Database>,
    &'r str: Decode<'r, R::Database> + Type<R::Database>,
    DateTime<Utc>: Decode<'r, R::Database> + Type<R::Database>,
{
    let rating: &str = row.try_get("rating")?;
    Ok(Feedback {
        account_id: row.try_get("account_id")?,
        feedback_id: row.try_get("feedback_id")?,
        session_id: row.try_get("session_id")?,
        run_id: row.try_get("run_id")?,
        invocation_id: row.try_get("invocation_id")?,
        response_id: row.try_get("response_id")?,
        rating: Rating::parse(rating)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown rating {rating:?}")))?,
        comment: row.try_get("comment")?,
        created_at: row.try_get("created_at")?,
    })
}

/// A page of `page` and the count of what it chooses from, read from `pool`.
pub(crate) async fn list<DB>(
    pool: &Pool<DB>,
    account_id: &str,
    session_id: Option<&str>,
    offset: i64,
    limit: i64,
) -> Result<(Vec<Feedback>, i64), StoreError>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB> + Decode<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB> + Decode<'q, DB>,
    for<'r> String: Decode<'r, DB> + Type<DB>,
    for<'r> DateTime<Utc>: Decode<'r, DB> + Type<DB>,
    &'static str: ColumnIndex<DB::Row>,
{
    let rows = page(account_id, session_id, offset, limit)
        .fetch_all(pool)
        .await?;
    let total = count(account_id, session_id)
        .fetch_one(pool)
        .await?
        .try_get("count")?;
    let records = rows.iter().map(from_row).collect::<Result<_, _>>()?;
    Ok((records, total))
}
