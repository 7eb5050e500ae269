//! The SQL of the webhook outbox (the `webhook_outbox` table, see [`crate::outbox`]),
//! written once for both stores: the insert an append or a backfill runs in its own
//! transaction, a worker's leased claim of due rows and the record of its attempt, and
//! an account's page of deliveries. Times are Unix milliseconds of the writer's clock.

use chrono::{DateTime, TimeZone, Utc};
use sqlx::{
    ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, QueryBuilder, Row, Type,
};

use super::sql::Statement;
use crate::event::NewEvent;
use crate::outbox::{self, Attempt, Claimed, Delivery, DeliveryQuery, Outgoing, Route};
use crate::store::StoreError;

/// The outbox rows of the events an append keeps (`keep` parallel to `batch`), committed
/// at `at`.
pub(crate) fn rows_of(
    routes: &[Route],
    batch: &[NewEvent],
    keep: &[bool],
    at: DateTime<Utc>,
) -> Vec<Outgoing> {
    if routes.is_empty() {
        return Vec::new();
    }
    batch
        .iter()
        .zip(keep)
        .filter(|(e, keep)| **keep && outbox::may_cause(e.event_type, &e.content))
        .flat_map(|(e, _)| outbox::outgoing(routes, e.into(), at))
        .collect()
}

/// Whether an append of `batch` may write outbox rows (then the backend commits it in a
/// transaction that has room for them).
pub(crate) fn touches(routes: &[Route], batch: &[NewEvent]) -> bool {
    !routes.is_empty()
        && batch
            .iter()
            .any(|e| outbox::may_cause(e.event_type, &e.content))
}

/// Appends to `query` the statement (no `;`) that writes `row`, if it is not there yet
/// (a retried backfill) and, for `session.idle`, only if the session has no run in
/// progress once the statements before it in the transaction are applied.
pub(crate) fn push_insert<'a, DB: Database>(query: &mut QueryBuilder<'a, DB>, row: &Outgoing)
where
    String: Encode<'a, DB> + Type<DB>,
    Option<String>: Encode<'a, DB> + Type<DB>,
    i64: Encode<'a, DB> + Type<DB>,
{
    // Owned binds: the statement may outlive the rows (SQLite's append builds it first).
    query.push(
        "INSERT INTO webhook_outbox (endpoint, event_id, event_type, account_id, session_id, \
         run_id, payload, created_ms, next_attempt_ms) SELECT ",
    );
    let mut values = query.separated(", ");
    values
        .push_bind(row.endpoint.clone())
        .push_bind(row.event_id.clone())
        .push_bind(row.kind.as_str().to_owned())
        .push_bind(row.account_id.clone())
        .push_bind(row.session_id.clone())
        .push_bind(row.run_id.clone())
        .push_bind(row.payload.clone())
        .push_bind(row.created_ms)
        .push_bind(row.created_ms);
    if row.if_idle {
        query
            .push(
                " WHERE NOT EXISTS (SELECT 1 FROM invocations WHERE status = 'in_progress' \
                 AND account_id = ",
            )
            .push_bind(row.account_id.clone())
            .push(" AND session_id = ")
            .push_bind(row.session_id.clone());
        for invocation in &row.idle_except {
            query
                .push(" AND invocation_id <> ")
                .push_bind(invocation.clone());
        }
        query.push(")");
    } else {
        query.push(" WHERE 1 = 1");
    }
    query.push(" ON CONFLICT (endpoint, event_id) DO NOTHING");
}

/// One row (`1`) when `endpoint` has a delivery due and unleased at `now_ms`: read first,
/// on a read connection, so that an idle worker's polls take no write turn.
pub(crate) fn due<'q, DB: Database>(endpoint: &'q str, now_ms: i64) -> Statement<'q, DB>
where
    &'q str: Encode<'q, DB> + Type<DB>,
    i64: Encode<'q, DB> + Type<DB>,
{
    sqlx::query(
        "SELECT 1 FROM webhook_outbox WHERE endpoint = $1 AND status = 'pending' \
         AND next_attempt_ms <= $2 AND (lease_expires_ms IS NULL OR lease_expires_ms <= $2) \
         LIMIT 1",
    )
    .bind(endpoint)
    .bind(now_ms)
}

/// Leases up to `limit` due rows of `endpoint` to `owner` until `lease_until_ms`, oldest
/// due first. A row leased to another worker is left alone until its lease runs out (a
/// worker that died hands its rows over so): each row is attempted by one worker at a
/// time. PostgreSQL re-checks the lease of a row another transaction updated meanwhile,
/// so two replicas claiming at once never both get it.
pub(crate) fn claim<'q, DB: Database>(
    endpoint: &'q str,
    owner: &'q str,
    now_ms: i64,
    lease_until_ms: i64,
    limit: i64,
) -> Statement<'q, DB>
where
    &'q str: Encode<'q, DB> + Type<DB>,
    i64: Encode<'q, DB> + Type<DB>,
{
    sqlx::query(
        "UPDATE webhook_outbox SET lease_owner = $1, lease_expires_ms = $2 \
         WHERE endpoint = $3 AND status = 'pending' AND next_attempt_ms <= $4 \
         AND (lease_expires_ms IS NULL OR lease_expires_ms <= $4) \
         AND event_id IN (SELECT event_id FROM webhook_outbox WHERE endpoint = $3 \
         AND status = 'pending' AND next_attempt_ms <= $4 \
         AND (lease_expires_ms IS NULL OR lease_expires_ms <= $4) \
         ORDER BY next_attempt_ms LIMIT $5) \
         RETURNING event_id, event_type, payload, attempts",
    )
    .bind(owner)
    .bind(lease_until_ms)
    .bind(endpoint)
    .bind(now_ms)
    .bind(limit)
}

/// Gives up `owner`'s leases (see [`crate::Store::release_webhook_leases`]).
pub(crate) fn release<'q, DB: Database>(owner: &'q str) -> Statement<'q, DB>
where
    &'q str: Encode<'q, DB> + Type<DB>,
{
    sqlx::query(
        "UPDATE webhook_outbox SET lease_owner = NULL, lease_expires_ms = NULL \
         WHERE lease_owner = $1",
    )
    .bind(owner)
}

pub(crate) fn claimed_from_row<'r, R: Row>(row: &'r R) -> Result<Claimed, StoreError>
where
    usize: ColumnIndex<R>,
    String: Decode<'r, R::Database> + Type<R::Database>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
{
    Ok(Claimed {
        event_id: row.try_get(0)?,
        kind: row.try_get(1)?,
        payload: row.try_get(2)?,
        attempts: row.try_get(3)?,
    })
}

/// Records `attempt` on a row `owner` holds the lease of (and gives the lease up); a row
/// whose lease another worker took over meanwhile is left to that worker.
pub(crate) fn finish<'q, DB: Database>(
    endpoint: &'q str,
    event_id: &'q str,
    owner: &'q str,
    attempt: &'q Attempt,
) -> Statement<'q, DB>
where
    &'q str: Encode<'q, DB> + Type<DB>,
    Option<&'q str>: Encode<'q, DB> + Type<DB>,
    i64: Encode<'q, DB> + Type<DB>,
    Option<i64>: Encode<'q, DB> + Type<DB>,
{
    let delivered = (attempt.status == outbox::DeliveryStatus::Delivered).then_some(attempt.at_ms);
    sqlx::query(
        "UPDATE webhook_outbox SET status = $1, attempts = attempts + 1, next_attempt_ms = $2, \
         last_attempt_ms = $3, last_status_code = $4, last_error = $5, delivered_ms = $6, \
         lease_owner = NULL, lease_expires_ms = NULL \
         WHERE endpoint = $7 AND event_id = $8 AND lease_owner = $9",
    )
    .bind(attempt.status.as_str())
    .bind(attempt.next_attempt_ms)
    .bind(attempt.at_ms)
    .bind(attempt.status_code)
    .bind(attempt.error.as_deref())
    .bind(delivered)
    .bind(endpoint)
    .bind(event_id)
    .bind(owner)
}

/// The filter of a page of deliveries, and its bindings in order (`$1` the account).
const FILTER: &str = "WHERE account_id = $1 AND ($2 IS NULL OR event_type = $2) \
     AND ($3 IS NULL OR status = $3) AND ($4 IS NULL OR session_id = $4)";

fn ms_time(ms: i64) -> Result<DateTime<Utc>, StoreError> {
    Utc.timestamp_millis_opt(ms)
        .single()
        .ok_or_else(|| StoreError::Corrupt(format!("webhook time {ms} out of range")))
}

/// An account's deliveries matching `query`, newest first, and how many match.
pub(crate) async fn list<DB>(
    pool: &sqlx::Pool<DB>,
    query: &DeliveryQuery,
) -> Result<(Vec<Delivery>, i64), StoreError>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB> + Decode<'q, DB>,
    for<'r> Option<i64>: Decode<'r, DB>,
    for<'r> String: Decode<'r, DB> + Type<DB>,
    for<'r> Option<String>: Decode<'r, DB>,
    usize: ColumnIndex<DB::Row>,
{
    let page = format!(
        "SELECT endpoint, event_id, event_type, account_id, session_id, run_id, status, \
         attempts, created_ms, next_attempt_ms, last_attempt_ms, last_status_code, \
         last_error, delivered_ms FROM webhook_outbox {FILTER} \
         ORDER BY created_ms DESC, event_id, endpoint LIMIT $5 OFFSET $6"
    );
    let rows = sqlx::query(&page)
        .bind(query.account_id.as_str())
        .bind(query.kind.as_deref())
        .bind(query.status.as_deref())
        .bind(query.session_id.as_deref())
        .bind(query.limit.max(0))
        .bind(query.offset.max(0))
        .fetch_all(pool)
        .await?;
    let count = format!("SELECT COUNT(*) FROM webhook_outbox {FILTER}");
    let total: i64 = sqlx::query(&count)
        .bind(query.account_id.as_str())
        .bind(query.kind.as_deref())
        .bind(query.status.as_deref())
        .bind(query.session_id.as_deref())
        .fetch_one(pool)
        .await?
        .try_get(0)?;
    let mut deliveries = Vec::with_capacity(rows.len());
    for row in &rows {
        let status: String = row.try_get(6)?;
        let opt_time = |i: usize| -> Result<Option<DateTime<Utc>>, StoreError> {
            row.try_get::<Option<i64>, _>(i)?.map(ms_time).transpose()
        };
        deliveries.push(Delivery {
            endpoint: row.try_get(0)?,
            event_id: row.try_get(1)?,
            kind: row.try_get(2)?,
            account_id: row.try_get(3)?,
            session_id: row.try_get(4)?,
            run_id: row.try_get(5)?,
            attempts: row.try_get(7)?,
            created_at: ms_time(row.try_get(8)?)?,
            next_attempt_at: if status == "pending" {
                opt_time(9)?
            } else {
                None
            },
            last_attempt_at: opt_time(10)?,
            last_status_code: row.try_get(11)?,
            last_error: row.try_get(12)?,
            delivered_at: opt_time(13)?,
            status,
        });
    }
    Ok((deliveries, total))
}

/// The routes a store writes outbox rows for (none until the gateway sets them).
#[derive(Default)]
pub(crate) struct Routes(std::sync::RwLock<std::sync::Arc<Vec<Route>>>);

impl Routes {
    pub(crate) fn set(&self, routes: Vec<Route>) {
        if let Ok(mut r) = self.0.write() {
            *r = std::sync::Arc::new(routes);
        }
    }

    pub(crate) fn get(&self) -> std::sync::Arc<Vec<Route>> {
        self.0.read().map(|r| r.clone()).unwrap_or_default()
    }
}
