//! The SQL of approvals (the `approvals` table), written once for both stores: recording
//! a request, the account's pending page oldest first, one approval, and the conditional
//! resolve that exactly one resolver wins (by hand or by timeout).

use chrono::{DateTime, TimeZone, Utc};
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Row, Type};

use crate::store::{Approval, ApprovalFilter, Decision, StoreError};

macro_rules! approval_columns {
    () => {
        "account_id, session_id, request_id, run_id, invocation_id, agent_id, kind, \
         action_json, requested_ms, expires_ms, decision, resolution_json, resolved_ms"
    };
}

fn json_text(v: &serde_json::Value) -> String {
    v.to_string()
}

fn ms(at: DateTime<Utc>) -> i64 {
    at.timestamp_millis()
}

fn time(ms: i64) -> Result<DateTime<Utc>, StoreError> {
    Utc.timestamp_millis_opt(ms)
        .single()
        .ok_or_else(|| StoreError::Corrupt(format!("approval time {ms} out of range")))
}

/// Records `a` unless its (account, session, request) is there already.
pub(crate) async fn insert<'c, DB, E>(conn: E, a: &Approval) -> Result<(), StoreError>
where
    DB: Database,
    E: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> Option<i64>: Encode<'q, DB> + Type<DB>,
{
    sqlx::query(concat!(
        "INSERT INTO approvals (",
        approval_columns!(),
        ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, NULL, NULL, NULL) \
         ON CONFLICT (account_id, session_id, request_id) DO NOTHING"
    ))
    .bind(a.account_id.as_str())
    .bind(a.session_id.as_str())
    .bind(a.request_id.as_str())
    .bind(a.run_id.as_str())
    .bind(a.invocation_id.as_str())
    .bind(a.agent_id.as_deref())
    .bind(a.kind.as_str())
    .bind(json_text(&a.action))
    .bind(ms(a.requested_at))
    .bind(a.expires_at.map(ms))
    .execute(conn)
    .await?;
    Ok(())
}

/// The account's pending approvals matching `filter`, oldest first, and their count.
pub(crate) async fn pending<DB>(
    pool: &sqlx::Pool<DB>,
    account_id: &str,
    filter: ApprovalFilter<'_>,
    offset: i64,
    limit: i64,
) -> Result<(Vec<Approval>, i64), StoreError>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'c> &'c sqlx::Pool<DB>: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB> + Decode<'q, DB>,
    for<'r> String: Decode<'r, DB> + Type<DB>,
    for<'r> Option<String>: Decode<'r, DB>,
    for<'r> Option<i64>: Decode<'r, DB>,
    &'static str: ColumnIndex<DB::Row>,
{
    // A NULL filter matches every row: one statement for every combination.
    const WHERE: &str = " FROM approvals WHERE account_id = $1 AND decision IS NULL \
         AND ($2 IS NULL OR session_id = $2) AND ($3 IS NULL OR agent_id = $3)";
    let page = format!(
        "SELECT {}{WHERE} ORDER BY requested_ms, session_id, request_id LIMIT $4 OFFSET $5",
        approval_columns!()
    );
    let rows = sqlx::query(&page)
        .bind(account_id)
        .bind(filter.session_id)
        .bind(filter.agent_id)
        .bind(limit.max(0))
        .bind(offset.max(0))
        .fetch_all(pool)
        .await?;
    let count = format!("SELECT COUNT(*) AS count{WHERE}");
    let total: i64 = sqlx::query(&count)
        .bind(account_id)
        .bind(filter.session_id)
        .bind(filter.agent_id)
        .fetch_one(pool)
        .await?
        .try_get("count")?;
    let approvals = rows.iter().map(from_row).collect::<Result<_, _>>()?;
    Ok((approvals, total))
}

/// One approval of the account.
pub(crate) async fn get<'c, DB, E>(
    conn: E,
    account_id: &str,
    session_id: &str,
    request_id: &str,
) -> Result<Option<Approval>, StoreError>
where
    DB: Database,
    E: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'r> String: Decode<'r, DB> + Type<DB>,
    for<'r> Option<String>: Decode<'r, DB>,
    for<'r> i64: Decode<'r, DB> + Type<DB>,
    for<'r> Option<i64>: Decode<'r, DB>,
    &'static str: ColumnIndex<DB::Row>,
{
    let row = sqlx::query(concat!(
        "SELECT ",
        approval_columns!(),
        " FROM approvals WHERE account_id = $1 AND session_id = $2 AND request_id = $3"
    ))
    .bind(account_id)
    .bind(session_id)
    .bind(request_id)
    .fetch_optional(conn)
    .await?;
    row.as_ref().map(from_row).transpose()
}

/// Resolves one pending approval; the row as resolved when this statement did it.
pub(crate) async fn resolve<'c, DB, E>(
    conn: E,
    (account_id, session_id, request_id): (&str, &str, &str),
    decision: Decision,
    resolution: &serde_json::Value,
    at: DateTime<Utc>,
) -> Result<Option<Approval>, StoreError>
where
    DB: Database,
    E: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'r> Option<String>: Decode<'r, DB>,
    for<'r> Option<i64>: Decode<'r, DB>,
    &'static str: ColumnIndex<DB::Row>,
{
    let row = sqlx::query(concat!(
        "UPDATE approvals SET decision = $4, resolution_json = $5, resolved_ms = $6 \
         WHERE account_id = $1 AND session_id = $2 AND request_id = $3 AND decision IS NULL \
         RETURNING ",
        approval_columns!()
    ))
    .bind(account_id)
    .bind(session_id)
    .bind(request_id)
    .bind(decision.as_str())
    .bind(json_text(resolution))
    .bind(ms(at))
    .fetch_optional(conn)
    .await?;
    row.as_ref().map(from_row).transpose()
}

/// Deletes the session's pending approvals; how many.
pub(crate) async fn drop_pending<'c, DB, E>(
    conn: E,
    account_id: &str,
    session_id: &str,
) -> Result<u64, StoreError>
where
    DB: Database,
    E: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'r> i64: Decode<'r, DB> + Type<DB>,
    &'static str: ColumnIndex<DB::Row>,
{
    let dropped = sqlx::query(
        "DELETE FROM approvals WHERE account_id = $1 AND session_id = $2 AND decision IS NULL \
         RETURNING requested_ms",
    )
    .bind(account_id)
    .bind(session_id)
    .fetch_all(conn)
    .await?;
    Ok(dropped.len() as u64)
}

/// Resolves every pending approval whose time ran out by `now`; the rows this statement
/// resolved. A row another statement resolves first is skipped (PostgreSQL re-checks
/// `decision IS NULL` once the other's row lock is released).
pub(crate) async fn resolve_expired<'c, DB, E>(
    conn: E,
    now: DateTime<Utc>,
    decision: Decision,
) -> Result<Vec<Approval>, StoreError>
where
    DB: Database,
    E: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'r> Option<String>: Decode<'r, DB>,
    for<'r> Option<i64>: Decode<'r, DB>,
    &'static str: ColumnIndex<DB::Row>,
{
    let rows = sqlx::query(concat!(
        "UPDATE approvals SET decision = $1, resolution_json = $2, resolved_ms = $3 \
         WHERE decision IS NULL AND expires_ms IS NOT NULL AND expires_ms <= $3 \
         RETURNING ",
        approval_columns!()
    ))
    .bind(decision.as_str())
    .bind(json_text(&serde_json::json!({ "timeout": true })))
    .bind(ms(now))
    .fetch_all(conn)
    .await?;
    rows.iter().map(from_row).collect()
}

fn from_row<'r, R: Row>(row: &'r R) -> Result<Approval, StoreError>
where
    &'static str: ColumnIndex<R>,
    String: Decode<'r, R::Database> + Type<R::Database>,
    Option<String>: Decode<'r, R::Database>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
    Option<i64>: Decode<'r, R::Database>,
{
    let json = |text: String| {
        serde_json::from_str::<serde_json::Value>(&text)
            .map_err(|e| StoreError::Corrupt(format!("approval JSON: {e}")))
    };
    let decision: Option<String> = row.try_get("decision")?;
    let decision = match decision {
        None => None,
        Some(d) => Some(
            Decision::parse(&d)
                .ok_or_else(|| StoreError::Corrupt(format!("unknown decision {d:?}")))?,
        ),
    };
    let resolution: Option<String> = row.try_get("resolution_json")?;
    let expires: Option<i64> = row.try_get("expires_ms")?;
    let resolved: Option<i64> = row.try_get("resolved_ms")?;
    Ok(Approval {
        account_id: row.try_get("account_id")?,
        session_id: row.try_get("session_id")?,
        request_id: row.try_get("request_id")?,
        run_id: row.try_get("run_id")?,
        invocation_id: row.try_get("invocation_id")?,
        agent_id: row.try_get("agent_id")?,
        kind: row.try_get("kind")?,
        action: json(row.try_get("action_json")?)?,
        requested_at: time(row.try_get("requested_ms")?)?,
        expires_at: expires.map(time).transpose()?,
        decision,
        resolution: resolution.map(json).transpose()?,
        resolved_at: resolved.map(time).transpose()?,
    })
}
