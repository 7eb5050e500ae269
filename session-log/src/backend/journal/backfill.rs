//! The PostgreSQL side of the outage journal: one transaction per step moves a session's
//! journaled claims and events into PostgreSQL, applying invocation opens and closes as an
//! append does, and reports seqs another replica took meanwhile.

use chrono::{DateTime, Utc};
use sqlx::Row;

use crate::backend::plan;
use crate::backend::postgres::{self, PgStore};
use crate::backend::sql;
use crate::backend::sqlite::now_ms;
use crate::event::{Event, Seq};
use crate::outbox;
use crate::store::StoreError;

/// A claim granted locally and recorded in the journal, not yet in PostgreSQL.
pub(super) struct JournalClaim {
    pub invocation_id: String,
    pub run_id: String,
    pub owner: String,
    pub claimed_at: DateTime<Utc>,
    /// Unix milliseconds (local clock).
    pub lease_expires_ms: i64,
}

/// What one backfill step did.
pub(super) enum Backfilled {
    /// The rows are in PostgreSQL; terminal statuses at `dropped` seqs were not inserted
    /// because their invocation was already closed.
    Committed { dropped: Vec<Seq> },
    /// PostgreSQL holds other events at `seqs`; nothing was written.
    Collides { last_seq: Seq, seqs: Vec<Seq> },
    /// The events at `seqs` belong to invocations someone else closed in PostgreSQL
    /// meanwhile (a lease takeover while this replica was cut off) and are not there yet;
    /// nothing was written.
    Late { last_seq: Seq, seqs: Vec<Seq> },
    /// The session was removed after the journal's first row of it: the journal's rows of
    /// it are to be discarded; nothing was written.
    Removed,
}

/// One backfill transaction: the session's journaled `events` (in seq order) into
/// PostgreSQL, applying invocation opens and closes as `append` does. Rows already there
/// (a retried backfill, or an append that committed after it timed out) are skipped.
pub(super) async fn backfill(
    pg: &PgStore,
    account_id: &str,
    session_id: &str,
    events: &[Event],
    claims: &[JournalClaim],
) -> Result<Backfilled, StoreError> {
    let first_at = events.first().map_or_else(Utc::now, |e| e.created_at);
    let mut tx = pg.pool().begin().await?;
    // A session removed (by any replica) after this replica journaled for it: what was
    // journaled is part of what the delete took, and must not bring the session back.
    let journaled_at = claims
        .iter()
        .map(|c| c.claimed_at)
        .fold(first_at, DateTime::min);
    let removed_at: Option<DateTime<Utc>> = sqlx::query_scalar(
        "SELECT removed_at FROM removed_sessions WHERE account_id = $1 AND session_id = $2",
    )
    .bind(account_id)
    .bind(session_id)
    .fetch_optional(&mut *tx)
    .await?;
    if removed_at.is_some_and(|at| journaled_at <= at) {
        tx.rollback().await?;
        return Ok(Backfilled::Removed);
    }
    if !claims.is_empty() {
        backfill_claims(&mut tx, account_id, session_id, claims).await?;
        if events.is_empty() {
            tx.commit().await?;
            return Ok(Backfilled::Committed {
                dropped: Vec::new(),
            });
        }
    }
    // The session row lock serialises this with every other writer of the session.
    sqlx::query(concat!(
        sql::insert_sessions!(),
        "VALUES ($1, $2, 0, $3, $3) ON CONFLICT (account_id, session_id) DO NOTHING"
    ))
    .bind(account_id)
    .bind(session_id)
    .bind(first_at)
    .execute(&mut *tx)
    .await?;
    let last_seq: i64 = sqlx::query_scalar(
        "SELECT last_seq FROM sessions WHERE account_id = $1 AND session_id = $2 FOR UPDATE",
    )
    .bind(account_id)
    .bind(session_id)
    .fetch_one(&mut *tx)
    .await?;

    let seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
    let types: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
    let contents: Vec<String> = events.iter().map(|e| plan::json_text(&e.content)).collect();
    let metadata: Vec<String> = events
        .iter()
        .map(|e| plan::json_text(&e.metadata))
        .collect();

    // Fencing: events of an invocation another replica closed while this one was cut off
    // are late. Rows already there identically (a retried step after our own terminal
    // status committed) are not; rows the journal already flagged late are written as is.
    let mut invocations: Vec<String> = events
        .iter()
        .filter(|e| !e.is_late())
        .filter_map(|e| e.invocation_id.clone())
        .collect();
    invocations.sort();
    invocations.dedup();
    let taken: Vec<String> = sqlx::query_scalar(
        "SELECT invocation_id FROM invocations WHERE account_id = $1 AND session_id = $2 \
         AND invocation_id = ANY($3) AND status <> 'in_progress'",
    )
    .bind(account_id)
    .bind(session_id)
    .bind(&invocations)
    .fetch_all(&mut *tx)
    .await?;
    // Which journaled seqs PostgreSQL already holds, and whether each holds the same
    // event there: one comparison serves both the fencing and the collision checks.
    let existing: Vec<(i64, bool)> = sqlx::query_as(
        "SELECT u.q, (e.event_type = u.t AND e.content_json = u.c::jsonb \
                      AND e.metadata_json = u.m::jsonb) \
         FROM UNNEST($3::bigint[], $4::text[], $5::text[], $6::text[]) AS u(q, t, c, m) \
         JOIN events e ON e.account_id = $1 AND e.session_id = $2 AND e.seq = u.q \
         ORDER BY u.q",
    )
    .bind(account_id)
    .bind(session_id)
    .bind(&seqs)
    .bind(&types)
    .bind(&contents)
    .bind(&metadata)
    .fetch_all(&mut *tx)
    .await?;
    if !taken.is_empty() {
        let present = |seq: Seq| existing.iter().any(|&(q, same)| same && q == seq);
        let late: Vec<Seq> = events
            .iter()
            .filter(|e| {
                !e.is_late()
                    && e.invocation_id.as_ref().is_some_and(|i| taken.contains(i))
                    && !present(e.seq)
            })
            .map(|e| e.seq)
            .collect();
        if !late.is_empty() {
            tx.rollback().await?;
            return Ok(Backfilled::Late {
                last_seq,
                seqs: late,
            });
        }
    }
    let collides: Vec<i64> = existing
        .iter()
        .filter(|&&(_, same)| !same)
        .map(|&(q, _)| q)
        .collect();
    if !collides.is_empty() {
        tx.rollback().await?;
        return Ok(Backfilled::Collides {
            last_seq,
            seqs: collides,
        });
    }

    let mut keep = vec![true; events.len()];
    let mut dropped = Vec::new();
    for (i, e) in events.iter().enumerate() {
        let (Some(status), Some(invocation_id)) = (e.run_status(), e.invocation_id.as_deref())
        else {
            continue;
        };
        if status.is_terminal() {
            let closed = sqlx::query(sql::close_invocation!())
                .bind(status.as_str())
                .bind(e.created_at)
                .bind(account_id)
                .bind(invocation_id)
                .bind(session_id)
                .execute(&mut *tx)
                .await?;
            if closed.rows_affected() == 0 {
                // Already closed: by this very event in an earlier try (then the row is
                // there and the insert skips it), or by someone else (then a second
                // terminal status must not enter the log).
                keep[i] = false;
                let present: Option<i32> = sqlx::query_scalar(
                    "SELECT 1 FROM events WHERE account_id = $1 AND session_id = $2 AND seq = $3",
                )
                .bind(account_id)
                .bind(session_id)
                .bind(e.seq)
                .fetch_optional(&mut *tx)
                .await?;
                if present.is_none() {
                    dropped.push(e.seq);
                }
            }
        } else if let Some(run_id) = e.run_id.as_deref() {
            sqlx::query(
                "INSERT INTO invocations \
                 (account_id, invocation_id, session_id, run_id, status, started_at) \
                 VALUES ($1, $2, $3, $4, 'in_progress', $5) \
                 ON CONFLICT (account_id, invocation_id) DO NOTHING",
            )
            .bind(account_id)
            .bind(invocation_id)
            .bind(session_id)
            .bind(run_id)
            .bind(e.created_at)
            .execute(&mut *tx)
            .await?;
        }
    }

    let kept: Vec<usize> = (0..events.len()).filter(|i| keep[*i]).collect();
    let col = |f: &dyn Fn(&Event) -> Option<String>| -> Vec<Option<String>> {
        kept.iter().map(|&i| f(&events[i])).collect()
    };
    let k_seqs: Vec<i64> = kept.iter().map(|&i| events[i].seq).collect();
    let k_at: Vec<DateTime<Utc>> = kept.iter().map(|&i| events[i].created_at).collect();
    sqlx::query(concat!(
        "INSERT INTO events (",
        sql::event_columns!(),
        ") SELECT $1, $2, q, r, i, t, ro, c::jsonb, m::jsonb, at FROM UNNEST(\
         $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], \
         $9::text[], $10::timestamptz[]) AS u(q, r, i, t, ro, c, m, at) \
         ON CONFLICT (account_id, session_id, seq) DO NOTHING"
    ))
    .bind(account_id)
    .bind(session_id)
    .bind(&k_seqs)
    .bind(col(&|e| e.run_id.clone()))
    .bind(col(&|e| e.invocation_id.clone()))
    .bind(col(&|e| Some(e.event_type.as_str().to_owned())))
    .bind(col(&|e| e.role.clone()))
    .bind(col(&|e| Some(plan::json_text(&e.content))))
    .bind(col(&|e| Some(plan::json_text(&e.metadata))))
    .bind(&k_at)
    .execute(&mut *tx)
    .await?;
    let max_seq = events.iter().map(|e| e.seq).max().unwrap_or(0);
    let max_at = events
        .iter()
        .map(|e| e.created_at)
        .max()
        .unwrap_or(first_at);
    sqlx::query(
        "UPDATE sessions SET last_seq = GREATEST(last_seq, $3), \
         updated_at = GREATEST(updated_at, $4) WHERE account_id = $1 AND session_id = $2",
    )
    .bind(account_id)
    .bind(session_id)
    .bind(max_seq)
    .bind(max_at)
    .execute(&mut *tx)
    .await?;
    // The webhook events of what the journal committed, as the append would have written
    // them (their ids are the same, so a retried step writes nothing twice).
    // A run's end is checked for `session.idle` as of that end, not of the chunk's.
    let routes = pg.webhooks.get();
    let mut outgoing = Vec::new();
    for &i in &kept {
        let e = &events[i];
        if !outbox::may_cause(e.event_type, &e.content) {
            continue;
        }
        let idle = idle_after(events, &keep, i);
        for mut row in outbox::outgoing(&routes, e.into(), e.created_at) {
            match (&idle, row.if_idle) {
                (None, true) => continue,
                (Some(opened), true) => row.idle_except.clone_from(opened),
                _ => {}
            }
            outgoing.push(row);
        }
    }
    postgres::insert_outgoing(&mut tx, &outgoing).await?;
    tx.commit().await?;
    Ok(Backfilled::Committed { dropped })
}

/// How a chunk's later events bear on `session.idle` for the run that `events[i]` ends:
/// `None` when another run was still in progress then (it ends later in the chunk, and
/// did not open after `i`); otherwise the runs opened after `i`, which the store's check
/// (no run of the session in progress) must pass over.
fn idle_after(events: &[Event], keep: &[bool], i: usize) -> Option<Vec<String>> {
    let ended = events[i].invocation_id.as_deref();
    let mut opened = Vec::new();
    for (e, kept) in events.iter().zip(keep).skip(i + 1) {
        let (Some(status), Some(invocation)) = (e.run_status(), e.invocation_id.as_deref()) else {
            continue;
        };
        if !status.is_terminal() {
            opened.push(invocation.to_owned());
        } else if *kept && Some(invocation) != ended && !opened.iter().any(|o| o == invocation) {
            return None;
        }
    }
    Some(opened)
}

/// The invocation rows of claims granted locally, with their owner and what is left of
/// their lease, in the backfill's transaction (before the session's events, whose
/// `in_progress` then finds the row there). Another replica's run opened in the session
/// meanwhile is logged; both runs stand.
async fn backfill_claims(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    account_id: &str,
    session_id: &str,
    claims: &[JournalClaim],
) -> Result<(), StoreError> {
    // The lock `PgStore::claim` takes: claims of the session wait for this transaction.
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1 || E'\\n' || $2, 0))")
        .bind(account_id)
        .bind(session_id)
        .execute(&mut **tx)
        .await?;
    let ours: Vec<String> = claims.iter().map(|c| c.invocation_id.clone()).collect();
    let first_claimed = claims
        .iter()
        .map(|c| c.claimed_at)
        .min()
        .unwrap_or_else(Utc::now);
    let others = sqlx::query(
        "SELECT invocation_id, run_id, owner, status FROM invocations \
         WHERE account_id = $1 AND session_id = $2 AND invocation_id <> ALL($3) \
         AND ((status = 'in_progress' AND owner IS NOT NULL AND lease_expires_at > now()) \
              OR started_at >= $4)",
    )
    .bind(account_id)
    .bind(session_id)
    .bind(&ours)
    .bind(first_claimed)
    .fetch_all(&mut **tx)
    .await?;
    for row in &others {
        let other: String = row.try_get(0)?;
        let other_run: String = row.try_get(1)?;
        let owner: Option<String> = row.try_get(2)?;
        let status: String = row.try_get(3)?;
        tracing::warn!(
            account_id, session_id, journaled_invocations = ?ours,
            other_invocation_id = %other, other_run_id = %other_run, other_owner = ?owner,
            other_status = %status,
            "a run claimed locally during the outage overlaps another replica's run in the same session; both are kept, the journaled events follow the other run's"
        );
    }
    let now = now_ms();
    for c in claims {
        let remaining = (c.lease_expires_ms - now).max(0) as f64 / 1000.0;
        sqlx::query(
            "INSERT INTO invocations (account_id, invocation_id, session_id, run_id, status, \
             started_at, owner, lease_expires_at) \
             VALUES ($1, $2, $3, $4, 'in_progress', $5, $6, now() + make_interval(secs => $7)) \
             ON CONFLICT (account_id, invocation_id) DO NOTHING",
        )
        .bind(account_id)
        .bind(&c.invocation_id)
        .bind(session_id)
        .bind(&c.run_id)
        .bind(c.claimed_at)
        .bind(&c.owner)
        .bind(remaining)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}
