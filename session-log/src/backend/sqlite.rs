//! The SQLite backend of the session log: one file in WAL mode, the default for a single
//! gateway.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::query_builder::Separated;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteRow, SqliteSynchronous,
};
use sqlx::{ConnectOptions, Connection, QueryBuilder, Row, Sqlite};

use super::claims::{PendingClaim, PendingClaims};
use super::plan::{self, InvocationOp};
use super::removal::{Shrunk, Step};
use super::{approvals, archive, feedback, idempotency, listing, outbox, removal, retention, sql};
use crate::event::{Event, EventType, NewEvent, Seq, Session};
use crate::import;
use crate::removal::{give_way, Deletion, Removal, Removed};
use crate::store::{
    Appended, Approval, ApprovalFilter, Attachment, Claim, Claimed, Decision, EventQuery, Fault,
    Feedback, IdempotentRun, Imported, Invocation, Lease, Renewed, SessionFilter, Store,
    StoreError, Usage,
};

/// Rows of one multi-row statement. SQLite allows 32766 bind parameters per statement;
/// 500 rows of 10 columns stays far below that while amortising the round trip.
const INSERT_CHUNK: usize = 500;

/// Readers run beside the writer (WAL lets them); a few connections are plenty.
const POOL_SIZE: u32 = 4;
/// Page cache of the write connection, in KiB (SQLite's default is 2 MiB): the index pages
/// every append walks stay in memory.
const WRITER_CACHE_KIB: i64 = 16 * 1024;
/// The write connection checkpoints the WAL itself only past this many pages (about
/// 40 MiB), a backstop: normally [`keep_wal`] has done it already.
const WRITER_AUTOCHECKPOINT_PAGES: u32 = 10_000;
/// How often the background task looks at the WAL: the most a power loss can take of
/// what was committed (see [`keep_wal`]).
const WAL_SYNC_INTERVAL: Duration = Duration::from_millis(100);
/// The WAL is copied back into the database file once this many writes wait in it...
const CHECKPOINT_WRITES: u64 = 32;
/// ...or once the oldest of them has waited this long.
const CHECKPOINT_AFTER: Duration = Duration::from_secs(1);
/// The live invocations of a session are found through the partial index of open ones,
/// named in the queries: without statistics (the store never runs ANALYZE) SQLite picks
/// the primary key's account prefix instead and reads every invocation of the account, a
/// cost that grows with the log.
const OPEN_BY_SESSION: &str = "INDEXED BY invocations_open_by_session";
/// How long a statement waits for another connection's write lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the checkpoint that empties the WAL after a removal waits for readers (and
/// the background PASSIVE checkpoint), holding up appends meanwhile; if they are not done
/// by then it fails, and is retried at the next look.
const SCRUB_WAIT: Duration = Duration::from_millis(10);
/// The longest the WAL keeps a removal's content while writes never pause (see
/// [`keep_wal`]): one short checkpoint that holds appends back, this often at most.
const SCRUB_WITHIN: Duration = Duration::from_secs(2);

/// The write connection, `None` once closed.
type Writer = Arc<tokio::sync::Mutex<Option<SqliteConnection>>>;

/// A session log in one SQLite database file.
pub struct SqliteStore {
    /// Reads.
    pool: SqlitePool,
    /// The one connection every write goes through (`None` once closed), held by the store
    /// rather than pooled: sqlx pings a pooled connection on release, which would cost
    /// every commit a second round trip to SQLite's thread and hold the next commit until
    /// it came back. A connection's page cache is emptied whenever another connection
    /// commits, so a writer that is alone keeps the pages its appends walk warm. SQLite
    /// has one writer at a time: queueing writes on this lock, first come first served,
    /// is cheaper and fairer than letting them spin in SQLite's busy handler.
    /// Shared with [`keep_wal`], which empties the WAL after removals on it (a TRUNCATE
    /// checkpoint from another connection would invalidate this one's snapshot mid-turn).
    writer: Writer,
    /// Turns taken at the write connection (see [`SqliteStore::write_turn`]), for the
    /// background task that syncs and checkpoints the WAL.
    writes: Arc<AtomicU64>,
    /// Write turns asked for and not yet given: none means the writer is idle.
    waiting: AtomicUsize,
    /// Removals committed whose content the WAL may still hold (see
    /// [`SqliteStore::scrub_wal`]), shared with [`keep_wal`].
    scrubs: Arc<Scrubs>,
    /// Claims granted but not yet written, by (account, invocation): each is checked and
    /// written by the append that opens its invocation (see [`Store::claim`]), so a run
    /// start costs no transaction of its own. Changed only during a write turn, except that
    /// `claim` adds entries (its invocation is not in the database yet).
    pending: PendingClaims,
    /// The background task that syncs and checkpoints the WAL (none for `:memory:`),
    /// stopped with the store: it holds a pool handle, which would otherwise keep the file
    /// open.
    checkpoints: Option<tokio::task::AbortHandle>,
    /// Where webhook events go (see [`Store::route_webhooks`]).
    webhooks: outbox::Routes,
    /// A write failed because the disk was full, and no write has succeeded since: the
    /// first that does empties the WAL (see [`SqliteStore::append_seqs`]).
    full: AtomicBool,
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        self.stop_checkpoints();
    }
}

impl SqliteStore {
    /// Opens the database at `path` (creating the file and its directories if needed) and
    /// applies pending migrations. `:memory:` gives a private in-memory database.
    pub async fn open(path: &str) -> Result<Self, StoreError> {
        configure_sqlite();
        if path == ":memory:" {
            // sqlx names a fresh in-memory database in shared cache: every connection made
            // from these options sees it, for as long as one is open (the writer's).
            let options = SqliteConnectOptions::from_str("sqlite::memory:")?
                .busy_timeout(BUSY_TIMEOUT)
                .foreign_keys(true);
            let mut writer = options.connect().await?;
            sqlx::migrate!("./migrations/sqlite")
                .run(&mut writer)
                .await?;
            let pool = read_pool(options).await?;
            return Ok(Self::with_connections(
                pool,
                Arc::new(tokio::sync::Mutex::new(Some(writer))),
                Arc::default(),
                Arc::default(),
                None,
            ));
        }
        let options = file_options(path)
            .await?
            // In WAL mode NORMAL loses at most the last commits on power loss, never
            // consistency; FULL would fsync every group commit.
            .synchronous(SqliteSynchronous::Normal)
            // A multi-row insert inside a transaction keeps a statement journal (the
            // pages it changed, to undo just that statement). Past 64 KiB SQLite spills
            // it to a temporary file, opened and closed per batch: a sixth of the
            // writer thread's time at 1,000 streams. In memory it is a copy.
            .pragma("temp_store", "memory")
            .foreign_keys(true);
        let mut writer = options
            .clone()
            .pragma("cache_size", (-WRITER_CACHE_KIB).to_string())
            .pragma(
                "wal_autocheckpoint",
                WRITER_AUTOCHECKPOINT_PAGES.to_string(),
            )
            .connect()
            .await?;
        sqlx::migrate!("./migrations/sqlite")
            .run(&mut writer)
            .await?;
        let pool = read_pool(options).await?;
        let (writes, scrubs) = (Arc::default(), Arc::default());
        let writer = Arc::new(tokio::sync::Mutex::new(Some(writer)));
        let wal = PathBuf::from(format!("{path}-wal"));
        let checkpoints = tokio::spawn(keep_wal(
            pool.clone(),
            wal,
            Arc::clone(&writes),
            Wal {
                writer: Arc::clone(&writer),
                scrubs: Arc::clone(&scrubs),
            },
        ))
        .abort_handle();
        Ok(Self::with_connections(
            pool,
            writer,
            writes,
            scrubs,
            Some(checkpoints),
        ))
    }

    fn with_connections(
        pool: SqlitePool,
        writer: Writer,
        writes: Arc<AtomicU64>,
        scrubs: Arc<Scrubs>,
        checkpoints: Option<tokio::task::AbortHandle>,
    ) -> Self {
        SqliteStore {
            pool,
            writer,
            writes,
            waiting: AtomicUsize::new(0),
            scrubs,
            pending: PendingClaims::default(),
            checkpoints,
            webhooks: outbox::Routes::default(),
            full: AtomicBool::new(false),
        }
    }

    /// Waits for the write connection; the turn is counted when it ends. Fails once the
    /// store is closed.
    async fn write_turn(&self) -> Result<WriteTurn<'_>, StoreError> {
        let guard = {
            let _waiting = Waiting::new(&self.waiting);
            self.writer.lock().await
        };
        let conn = tokio::sync::MutexGuard::try_map(guard, Option::as_mut)
            .map_err(|_| sqlx::Error::PoolClosed)?;
        Ok(WriteTurn {
            conn,
            writes: &self.writes,
        })
    }

    /// Closes every connection (after a last checkpoint, so the file stands alone).
    pub async fn close(&self) {
        self.stop_checkpoints();
        if let Some(mut writer) = self.writer.lock().await.take() {
            let _ = sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
                .execute(&mut writer)
                .await;
            let _ = writer.close().await;
        }
        self.pool.close().await;
    }

    /// After a removal commits, on its write turn: empties the WAL, which still holds the
    /// removed content in the frames of earlier writes (and the pages as the delete left
    /// them). Done at once when nobody waits for the write connection: copying the WAL
    /// into the file holds up appends, at most [`SCRUB_WAIT`] for readers plus the
    /// copy. When appends are waiting it is left to [`keep_wal`], which does it once
    /// writes pause; if [`SCRUB_WITHIN`] passes first, the next removal does it on its
    /// turn whatever waits (and `keep_wal` keeps trying meanwhile). A sweep removing one
    /// session after another thus costs the writer one such checkpoint per
    /// [`SCRUB_WITHIN`], not one per session. A reader holding old frames makes it fail;
    /// it is owed still, and retried.
    async fn scrub_wal(&self, mut turn: WriteTurn<'_>) -> Result<(), StoreError> {
        if self.checkpoints.is_none() {
            return Ok(()); // in memory: no file, no WAL
        }
        let owed = self.scrubs.owe();
        let overdue = self
            .scrubs
            .owed()
            .is_some_and(|(_, since)| since.elapsed() >= SCRUB_WITHIN);
        if self.waiting.load(Ordering::Relaxed) > 0 && !overdue {
            return Ok(());
        }
        if truncate_on(&mut turn).await {
            self.scrubs.paid(owed);
        }
        Ok(())
    }

    fn stop_checkpoints(&self) {
        if let Some(task) = &self.checkpoints {
            task.abort();
        }
    }

    /// The connection pool, for operator queries (such as the `session_events_readable`
    /// view) that the `Store` trait does not cover.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// One append, in one transaction on the write connection. A batch of deltas (no run
    /// starts or ends) costs one round trip to SQLite's thread: BEGIN, the sessions'
    /// upsert, the events' insert and COMMIT go as one multi-statement query, each event
    /// taking its seq from the upserted `last_seq` inside SQLite. Run starts and ends are
    /// settled first, in a round trip or a few of their own, because which terminal
    /// statuses are kept decides the seqs.
    async fn append_on<'b>(
        &self,
        conn: &mut SqliteConnection,
        batch: &'b [NewEvent],
        settled: &mut Vec<(&'b str, &'b str, bool)>,
    ) -> Result<Appended, StoreError> {
        let now = plan::commit_time();
        let mut keep = vec![true; batch.len()];
        let ops = plan::invocation_ops(batch);
        // IMMEDIATE takes the write lock up front: a deferred transaction that reads
        // first could not upgrade if another connection wrote in between. The bulk
        // settlement begins it itself, with its first statement.
        let mut tail = QueryBuilder::<Sqlite>::new("");
        if ops.is_empty() {
            tail.push("BEGIN IMMEDIATE; ");
        } else if self.settles_in_bulk(&ops) {
            self.settle_in_bulk(conn, &ops, now, &mut keep, settled, &mut tail)
                .await?;
        } else {
            sqlx::query("BEGIN IMMEDIATE").execute(&mut *conn).await?;
            self.settle_one_by_one(conn, &ops, now, &mut keep, settled)
                .await?;
        }
        // A refused claim drops every event of its invocation in the batch: the run
        // never started, and its caller learns so from the missing `in_progress`.
        for (account_id, invocation_id, _) in settled.iter().filter(|s| !s.2) {
            for (event, keep) in batch.iter().zip(keep.iter_mut()) {
                if event.account_id == *account_id
                    && event.invocation_id.as_deref() == Some(*invocation_id)
                {
                    *keep = false;
                }
            }
        }

        let routes = self.webhooks.get();
        let outgoing = outbox::rows_of(&routes, batch, &keep, now);
        let counts = plan::session_counts(batch, &keep);
        for chunk in counts.chunks(INSERT_CHUNK) {
            tail.push(sql::insert_sessions!());
            tail.push_values(chunk, |mut row, ((account_id, session_id), n)| {
                row.push_bind(*account_id)
                    .push_bind(*session_id)
                    .push_bind(*n)
                    .push_bind(now)
                    .push_bind(now);
            });
            tail.push(concat!(sql::bump_sessions!(), "; "));
        }
        // Where the closed invocations' events end: the sessions' `last_seq`, upserted.
        let closed = closed_invocations(&ops, &keep);
        for chunk in closed.chunks(INSERT_CHUNK) {
            tail.push(
                "UPDATE invocations SET end_seq = (SELECT last_seq FROM sessions AS s \
                 WHERE s.account_id = invocations.account_id \
                 AND s.session_id = invocations.session_id) \
                 WHERE (account_id, invocation_id) IN (",
            );
            tail.push_values(chunk, |mut row, (account_id, invocation_id)| {
                row.push_bind(*account_id).push_bind(*invocation_id);
            });
            tail.push("); ");
        }
        let rows: Vec<(&NewEvent, i64, String, String)> = plan::rows_below(batch, &keep, &counts)?
            .into_iter()
            .map(|(event, below)| {
                let (content, metadata) = (
                    plan::json_text(&event.content),
                    plan::json_text(&event.metadata),
                );
                (event, below, content, metadata)
            })
            .collect();
        for chunk in rows.chunks(INSERT_CHUNK) {
            tail.push(concat!(
                "INSERT INTO events (",
                sql::event_columns!(),
                ") SELECT v.column1, v.column2, s.last_seq - v.column3, v.column4, v.column5, \
                 v.column6, v.column7, v.column8, v.column9, v.column10 FROM ("
            ));
            tail.push_values(chunk, |row, (event, below, content, metadata)| {
                push_event_row(row, event, *below, content, metadata, now)
            });
            tail.push(
                ") AS v JOIN sessions AS s \
                 ON s.account_id = v.column1 AND s.session_id = v.column2; ",
            );
        }
        // The webhook events of what this batch commits, in its transaction (after the
        // closes, which `session.idle` looks past).
        for row in &outgoing {
            outbox::push_insert(&mut tail, row);
            tail.push("; ");
        }
        tail.push("COMMIT");

        let mut last_seqs: Vec<Option<Seq>> = vec![None; counts.len()];
        for row in tail.build().fetch_all(&mut *conn).await? {
            let account_id: &str = row.try_get(0)?;
            let session_id: &str = row.try_get(1)?;
            let i = plan::session_index(&counts, (account_id, session_id)).ok_or_else(|| {
                StoreError::Corrupt("upsert returned a session not in the batch".into())
            })?;
            last_seqs[i] = Some(row.try_get(2)?);
        }
        let seqs = plan::assign_seqs(batch, &keep, &counts, &last_seqs)?;
        Ok(Appended::at(seqs, now))
    }

    /// Whether the batch's invocation operations can be settled with one statement of
    /// each kind: every invocation appears once and no two claims open the same session
    /// (then no operation depends on another's outcome). The rest are settled one by one.
    fn settles_in_bulk(&self, ops: &[(usize, InvocationOp<'_>)]) -> bool {
        if !plan::one_op_per_invocation(ops) {
            return false;
        }
        let mut claimed_sessions = HashSet::new();
        ops.iter().all(|(_, op)| match *op {
            InvocationOp::Open {
                account_id,
                invocation_id,
                session_id,
                ..
            } => {
                !self.pending.contains(account_id, invocation_id)
                    || claimed_sessions.insert((account_id, session_id))
            }
            _ => true,
        })
    }

    /// Settles independent invocation operations (see [`Self::settles_in_bulk`]) in one
    /// round trip before the batch's own: BEGIN, the closes and the claimed sessions'
    /// check go as one query (closes first, so a claim in a session whose run this batch
    /// ends is granted); the new invocations' insert needs no answer and goes first in
    /// `tail`, in the same transaction. Without closes or claims, `tail` begins it.
    async fn settle_in_bulk<'b: 't, 't>(
        &self,
        conn: &mut SqliteConnection,
        ops: &[(usize, InvocationOp<'b>)],
        now: DateTime<Utc>,
        keep: &mut [bool],
        settled: &mut Vec<(&'b str, &'b str, bool)>,
        tail: &mut QueryBuilder<'t, Sqlite>,
    ) -> Result<(), StoreError> {
        let mut closes = Vec::new();
        let mut opens = Vec::new();
        for &(i, op) in ops {
            match op {
                InvocationOp::Close {
                    account_id,
                    invocation_id,
                    session_id,
                    status,
                    if_expired,
                } => closes.push((i, account_id, invocation_id, session_id, status, if_expired)),
                InvocationOp::Open {
                    account_id,
                    invocation_id,
                    session_id,
                    run_id,
                } => {
                    let claim = self
                        .pending
                        .get(account_id, invocation_id, session_id, run_id);
                    opens.push((i, account_id, invocation_id, session_id, run_id, claim));
                }
                InvocationOp::Drop => keep[i] = false,
            }
        }
        // A fresh claim's session was named for its run just now: no other process can
        // have opened a run in it, so only the others are checked (a new session's start
        // is then one round trip).
        let claimed: Vec<_> = opens
            .iter()
            .filter(|o| o.5.as_ref().is_some_and(|c| !c.fresh))
            .collect();

        let mut closed = HashSet::new();
        let mut busy: HashMap<(String, String), Vec<String>> = HashMap::new();
        if closes.is_empty() && claimed.is_empty() {
            tail.push("BEGIN IMMEDIATE; ");
        } else {
            let mut head = QueryBuilder::<Sqlite>::new("BEGIN IMMEDIATE; ");
            for chunk in closes.chunks(INSERT_CHUNK) {
                head.push("UPDATE invocations SET status = v.column3, ended_at = ")
                    .push_bind(now)
                    .push(" FROM (");
                head.push_values(
                    chunk,
                    |mut row, (_, account_id, invocation_id, session_id, status, if_expired)| {
                        row.push_bind(*account_id)
                            .push_bind(*invocation_id)
                            .push_bind(status.as_str())
                            .push_bind(*session_id)
                            .push_bind(*if_expired);
                    },
                );
                head.push(
                    ") AS v WHERE invocations.account_id = v.column1 \
                     AND invocations.invocation_id = v.column2 \
                     AND invocations.session_id = v.column4 \
                     AND invocations.status = 'in_progress' \
                     AND (NOT v.column5 OR invocations.lease_expires_ms <= ",
                )
                .push_bind(now_ms())
                .push(") RETURNING 'closed', account_id, invocation_id; ");
            }
            // The claims' check, in this transaction: another process sharing the file
            // may have opened a live run in one of these sessions since `claim`.
            for chunk in claimed.chunks(INSERT_CHUNK) {
                head.push("SELECT 'busy', i.account_id, i.session_id, i.invocation_id FROM (");
                head.push_values(chunk, |mut row, (_, account_id, _, session_id, ..)| {
                    row.push_bind(*account_id).push_bind(*session_id);
                });
                head.push(") AS v JOIN invocations AS i ")
                    .push(OPEN_BY_SESSION)
                    .push(
                        " ON i.account_id = v.column1 AND i.session_id = v.column2 \
                         WHERE i.status = 'in_progress' AND i.owner IS NOT NULL \
                         AND i.lease_expires_ms > ",
                    )
                    .push_bind(now_ms())
                    .push("; ");
            }
            for row in head.build().fetch_all(&mut *conn).await? {
                if row.try_get::<&str, _>(0)? == "closed" {
                    closed.insert((row.try_get::<String, _>(1)?, row.try_get::<String, _>(2)?));
                } else {
                    busy.entry((row.try_get(1)?, row.try_get(2)?))
                        .or_default()
                        .push(row.try_get(3)?);
                }
            }
        }
        for (i, account_id, invocation_id, ..) in &closes {
            keep[*i] = closed.contains(&((*account_id).to_owned(), (*invocation_id).to_owned()));
        }

        let mut inserts = Vec::with_capacity(opens.len());
        for (i, account_id, invocation_id, session_id, run_id, claim) in opens {
            let Some(claim) = claim else {
                inserts.push((account_id, invocation_id, session_id, run_id, None));
                continue;
            };
            let other = busy
                .get(&(account_id.to_owned(), session_id.to_owned()))
                .and_then(|live| live.iter().find(|other| other.as_str() != invocation_id));
            if let Some(other) = other {
                tracing::info!(account_id, session_id, invocation_id, busy_invocation_id = %other,
                    "claim refused at append: the session has another live run");
                keep[i] = false;
            } else {
                inserts.push((account_id, invocation_id, session_id, run_id, Some(claim)));
            }
            settled.push((account_id, invocation_id, other.is_none()));
        }
        for chunk in inserts.chunks(INSERT_CHUNK) {
            push_opens(tail, chunk, now);
        }
        Ok(())
    }

    /// Settles invocation operations in order, one statement each (see
    /// [`plan::invocation_ops`] for what each does to the events it comes from).
    async fn settle_one_by_one<'b>(
        &self,
        conn: &mut SqliteConnection,
        ops: &[(usize, InvocationOp<'b>)],
        now: DateTime<Utc>,
        keep: &mut [bool],
        settled: &mut Vec<(&'b str, &'b str, bool)>,
    ) -> Result<(), StoreError> {
        for &(i, op) in ops {
            keep[i] = match op {
                InvocationOp::Open {
                    account_id,
                    invocation_id,
                    session_id,
                    run_id,
                } => {
                    let claim = self
                        .pending
                        .get(account_id, invocation_id, session_id, run_id);
                    let granted = if claim.is_some() {
                        // The claim's check, in this transaction: another process sharing
                        // the file may have opened one since `claim`.
                        let busy: Option<String> = sqlx::query_scalar(&format!(
                            "SELECT invocation_id FROM invocations {OPEN_BY_SESSION} \
                             WHERE account_id = ? AND session_id = ? AND status = 'in_progress' \
                             AND owner IS NOT NULL AND lease_expires_ms > ? \
                             AND invocation_id <> ? LIMIT 1",
                        ))
                        .bind(account_id)
                        .bind(session_id)
                        .bind(now_ms())
                        .bind(invocation_id)
                        .fetch_optional(&mut *conn)
                        .await?;
                        if let Some(other) = &busy {
                            tracing::info!(account_id, session_id, invocation_id, busy_invocation_id = %other,
                                    "claim refused at append: the session has another live run");
                        }
                        settled.push((account_id, invocation_id, busy.is_none()));
                        busy.is_none()
                    } else {
                        true
                    };
                    if granted {
                        let open = (account_id, invocation_id, session_id, run_id, claim);
                        let mut insert = QueryBuilder::new("");
                        push_opens(&mut insert, &[open], now);
                        insert.build().execute(&mut *conn).await?;
                    }
                    granted
                }
                InvocationOp::Close {
                    account_id,
                    invocation_id,
                    session_id,
                    status,
                    if_expired,
                } => {
                    let closed = sqlx::query(concat!(
                        sql::close_invocation!(),
                        " AND (NOT $6 OR lease_expires_ms <= $7)"
                    ))
                    .bind(status.as_str())
                    .bind(now)
                    .bind(account_id)
                    .bind(invocation_id)
                    .bind(session_id)
                    .bind(if_expired)
                    .bind(now_ms())
                    .execute(&mut *conn)
                    .await?;
                    closed.rows_affected() == 1
                }
                InvocationOp::Drop => false,
            };
        }
        Ok(())
    }
}

/// A SQLite store as errors and logs name it.
pub(crate) fn name(path: &str) -> String {
    format!("SQLite store {path}")
}

#[async_trait]
impl Store for SqliteStore {
    async fn close(&self) {
        SqliteStore::close(self).await
    }

    fn backend(&self) -> &'static str {
        "sqlite"
    }

    fn describe(&self) -> String {
        name(&self.pool.connect_options().get_filename().to_string_lossy())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn migrated_at(&self, description: &str) -> Result<Option<DateTime<Utc>>, StoreError> {
        // sqlx records it with CURRENT_TIMESTAMP: UTC text to the second.
        let at: Option<String> = sqlx::query_scalar(
            "SELECT CAST(installed_on AS TEXT) FROM _sqlx_migrations \
             WHERE description = $1 AND success",
        )
        .bind(description)
        .fetch_optional(&self.pool)
        .await?;
        at.map(|text| {
            chrono::NaiveDateTime::parse_from_str(&text, "%Y-%m-%d %H:%M:%S")
                .map(|t| t.and_utc())
                .map_err(|e| StoreError::Corrupt(format!("migration time {text:?}: {e}")))
        })
        .transpose()
    }

    async fn append_seqs(&self, batch: &mut [NewEvent]) -> Result<Appended, StoreError> {
        let batch: &[NewEvent] = batch;
        if batch.is_empty() {
            return Ok(Appended::default());
        }
        let mut conn = self.write_turn().await?;
        let mut settled = Vec::new();
        let appended = self.append_on(&mut conn, batch, &mut settled).await;
        match &appended {
            Ok(_) if !settled.is_empty() => {
                self.pending
                    .written(settled.iter().map(|(a, i, _)| (*a, *i)));
            }
            Ok(_) => {}
            // The transaction is ours, not sqlx's (see `append_on`), so is its rollback. An
            // error here means the connection is gone, and the transaction with it.
            Err(error) => {
                let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
                if error.fault() == Fault::Full {
                    self.full.store(true, Ordering::Relaxed);
                }
            }
        }
        // The first commit after the disk was full: the WAL holds every page written while
        // checkpoints could not grow the database file, and the writes queued during the
        // outage would grow it further until the disk is full again, with no room left for
        // the checkpoint that would shrink it (seen: a 6 MB disk stuck full with a 4.3 MB
        // WAL). Copying it into the database and truncating it now, while the freed space
        // lasts, gives the queued writes that room back.
        if appended.is_ok() && self.full.swap(false, Ordering::Relaxed) {
            if truncate_on(&mut conn).await {
                tracing::info!("disk no longer full: the WAL was copied and emptied");
            } else {
                self.full.store(true, Ordering::Relaxed); // the next commit tries again
            }
        }
        appended
    }

    async fn session(
        &self,
        account_id: &str,
        session_id: &str,
    ) -> Result<Option<Session>, StoreError> {
        let row = sql::keyed(sql::SESSION, account_id, session_id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(sql::session_from_row).transpose()
    }

    async fn list_sessions(
        &self,
        account_id: &str,
        filter: &SessionFilter,
        offset: i64,
        limit: i64,
    ) -> Result<(Vec<Session>, i64), StoreError> {
        listing::list(
            &self.pool,
            &listing::SQLITE,
            account_id,
            filter,
            offset,
            limit,
        )
        .await
    }

    async fn events(&self, query: &EventQuery) -> Result<Vec<Event>, StoreError> {
        if query.event_types.as_ref().is_some_and(Vec::is_empty) {
            return Ok(Vec::new()); // and `IN ()` is not valid SQL everywhere
        }
        // The page comes back as ONE row, a JSON array of `[seq, run_id, ...]` arrays
        // built inside SQLite: sqlx runs SQLite on a worker thread and hands each row over
        // a channel with its values copied, so 1,000 rows cost 1,000 hand-offs. Reading
        // 10,000 events in pages this way takes about 13 ms against 33 ms row by row
        // (arrays rather than objects: no key text to build and match, 20 % less again).
        // `json()` checks the stored text, so a corrupt row cannot splice itself into its
        // neighbours. The subquery picks the page; SQL does not promise that the aggregate
        // sees it in that order (an ORDER BY inside the aggregate would, but costs a sort
        // of its own), so `events_from_page` sorts, which is free on sorted input.
        let mut select = QueryBuilder::<Sqlite>::new(concat!(
            "SELECT json_group_array(json_array(seq, run_id, invocation_id, event_type, \
             role, json(content_json), json(metadata_json), created_at)) FROM (SELECT ",
            sql::event_value_columns!()
        ));
        sql::push_events_read(&mut select, query);
        select.push(")");
        let row = select.build().fetch_one(&self.pool).await?;
        events_from_page(&query.account_id, &query.session_id, row.try_get(0)?)
    }

    async fn count_events(&self, account_id: &str, session_id: &str) -> Result<i64, StoreError> {
        let count = sql::keyed(sql::COUNT_EVENTS, account_id, session_id);
        Ok(count.fetch_one(&self.pool).await?.try_get(0)?)
    }

    async fn create_session(&self, first: &NewEvent) -> Result<Option<Event>, StoreError> {
        let now = plan::commit_time();
        let mut turn = self.write_turn().await?;
        // Deferred is enough: the first statement writes, so nothing is read before the
        // write lock is taken. Dropped uncommitted, the transaction rolls back.
        let mut tx = Connection::begin(&mut *turn).await?;
        let created = sql::keyed(sql::CREATE_SESSION, &first.account_id, &first.session_id)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        if created.rows_affected() == 0 {
            return Ok(None);
        }
        let (content, metadata) = (
            plan::json_text(&first.content),
            plan::json_text(&first.metadata),
        );
        insert_event_rows(&mut tx, "events", &[(first, 1, content, metadata)], now).await?;
        tx.commit().await?;
        Ok(Some(Event::committed(first.clone(), 1, now)))
    }

    async fn checkpoint_event(
        &self,
        account_id: &str,
        session_id: &str,
        checkpoint_id: Option<&str>,
        until_seq: Option<Seq>,
    ) -> Result<Option<Event>, StoreError> {
        let until = until_seq.unwrap_or(Seq::MAX);
        // Each through its partial index, named: without statistics the planner could
        // take either one, or the primary key. Checkpoint ids are unique (Tether makes
        // them), so a lookup by id needs no order.
        let row = match checkpoint_id {
            Some(id) => sqlx::query(concat!(
                "SELECT ",
                sql::event_columns!(),
                " FROM events INDEXED BY events_checkpoint_ids \
                 WHERE account_id = $1 AND session_id = $2 AND event_type = 'run_checkpoint' \
                 AND json_extract(content_json, '$.checkpoint_id') = $3 AND seq <= $4 LIMIT 1"
            ))
            .bind(account_id)
            .bind(session_id)
            .bind(id)
            .bind(until),
            None => sqlx::query(concat!(
                "SELECT ",
                sql::event_columns!(),
                " FROM events INDEXED BY events_markers \
                 WHERE account_id = $1 AND session_id = $2 AND ",
                sql::markers_condition!(),
                " AND event_type = 'run_checkpoint' AND seq <= $3 ORDER BY seq DESC LIMIT 1"
            ))
            .bind(account_id)
            .bind(session_id)
            .bind(until),
        }
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(event_from_row).transpose()
    }

    async fn run(&self, account_id: &str, run_id: &str) -> Result<Option<Invocation>, StoreError> {
        let row = sql::keyed(sql::RUN, account_id, run_id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(sql::invocation_from_row).transpose()
    }

    async fn invocation(
        &self,
        account_id: &str,
        invocation_id: &str,
    ) -> Result<Option<Invocation>, StoreError> {
        let row = sql::keyed(sql::INVOCATION, account_id, invocation_id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(sql::invocation_from_row).transpose()
    }

    async fn invocation_known_elsewhere(
        &self,
        account_id: &str,
        invocation_ids: &[String],
    ) -> Result<Option<String>, StoreError> {
        if invocation_ids.is_empty() {
            return Ok(None);
        }
        let row = sql::invocation_known_elsewhere(account_id, invocation_ids)
            .build()
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|r| r.try_get::<String, _>(0)).transpose()?)
    }

    async fn set_agent_ref(
        &self,
        account_id: &str,
        invocation_id: &str,
        agent_ref: &str,
    ) -> Result<(), StoreError> {
        let mut turn = self.write_turn().await?;
        let done = sql::keyed(sql::SET_AGENT_REF, account_id, invocation_id)
            .bind(agent_ref)
            .execute(&mut *turn)
            .await?;
        if done.rows_affected() == 0 {
            // A claim whose `in_progress` is still queued has no row yet: the append that
            // inserts it (which waits for the write lock held here) writes the handle too.
            self.pending
                .set_agent_ref(account_id, invocation_id, agent_ref);
        }
        Ok(())
    }

    async fn invocation_by_agent_ref(
        &self,
        account_id: &str,
        agent_ref: &str,
    ) -> Result<Option<Invocation>, StoreError> {
        let row = sql::keyed(sql::INVOCATION_BY_AGENT_REF, account_id, agent_ref)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(sql::invocation_from_row).transpose()
    }

    async fn open_invocations(&self) -> Result<Vec<Invocation>, StoreError> {
        let rows = sqlx::query(sql::OPEN_INVOCATIONS)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(sql::invocation_from_row).collect()
    }

    async fn claim(&self, claim: &Claim<'_>) -> Result<Claimed, StoreError> {
        // No transaction of its own: the claim is remembered, and the append that opens
        // the invocation checks the session again and inserts the row with its owner and
        // lease in its own transaction (refusing, by dropping the invocation's events, if
        // another process sharing the file opened a live run meanwhile). Here, a read
        // beside the writer and the claims of this process answer early; a fresh session
        // has nothing to read.
        if !claim.fresh {
            let busy = sqlx::query(&format!(
                "SELECT run_id, invocation_id FROM invocations {OPEN_BY_SESSION} \
                 WHERE account_id = ? AND session_id = ? AND status = 'in_progress' \
                 AND owner IS NOT NULL AND lease_expires_ms > ? LIMIT 1",
            ))
            .bind(claim.account_id)
            .bind(claim.session_id)
            .bind(now_ms())
            .fetch_optional(&self.pool)
            .await?;
            if let Some(row) = busy {
                return Ok(Claimed::Busy {
                    run_id: row.try_get(0)?,
                    invocation_id: row.try_get(1)?,
                });
            }
        }
        Ok(self.pending.grant(claim))
    }

    async fn renew_leases(
        &self,
        owner: &str,
        invocation_ids: &[String],
        lease: Duration,
    ) -> Result<Vec<Renewed>, StoreError> {
        if invocation_ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut turn = self.write_turn().await?;
        let mut update = QueryBuilder::<Sqlite>::new("UPDATE invocations SET lease_expires_ms = ");
        update
            .push_bind(now_ms() + millis(lease))
            .push(" WHERE status = 'in_progress' AND owner = ")
            .push_bind(owner)
            .push(" AND invocation_id IN (");
        let mut ids = update.separated(", ");
        for id in invocation_ids {
            ids.push_bind(id);
        }
        update.push(") RETURNING invocation_id, cancel_requested");
        let rows = update.build().fetch_all(&mut *turn).await?;
        let mut renewed = rows
            .iter()
            .map(|r| {
                Ok(Renewed {
                    invocation_id: r.try_get(0)?,
                    cancel_requested: r.try_get::<i64, _>(1)? != 0,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        // Claims whose `in_progress` is still queued are this owner's too (the write lock
        // keeps an append from settling them meanwhile).
        renewed.extend(self.pending.renew(owner, invocation_ids, lease));
        Ok(renewed)
    }

    async fn abandoned_invocations(
        &self,
        restarted_owner: Option<&str>,
    ) -> Result<Vec<Invocation>, StoreError> {
        let rows = sqlx::query(concat!(
            sql::select_open_invocations!(),
            "AND (lease_expires_ms <= ?1 \
             OR (?2 IS NOT NULL AND (owner IS NULL OR owner = ?2))) \
             ORDER BY started_at, account_id, invocation_id"
        ))
        .bind(now_ms())
        .bind(restarted_owner)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(sql::invocation_from_row).collect()
    }

    async fn lease(
        &self,
        account_id: &str,
        invocation_id: &str,
    ) -> Result<Option<Lease>, StoreError> {
        let row = sqlx::query(
            "SELECT owner, COALESCE(lease_expires_ms > ?, 0), cancel_requested \
             FROM invocations WHERE account_id = ? AND invocation_id = ?",
        )
        .bind(now_ms())
        .bind(account_id)
        .bind(invocation_id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| {
            Ok(Lease {
                owner: r.try_get(0)?,
                live: r.try_get::<i64, _>(1)? != 0,
                cancel_requested: r.try_get::<i64, _>(2)? != 0,
            })
        })
        .transpose()
    }

    async fn request_cancel(
        &self,
        account_id: &str,
        invocation_id: &str,
    ) -> Result<bool, StoreError> {
        let mut turn = self.write_turn().await?;
        let done = sql::keyed(sql::REQUEST_CANCEL, account_id, invocation_id)
            .execute(&mut *turn)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn import_session(&self, events: &[Event]) -> Result<Imported, StoreError> {
        let invocations =
            import::invocations(events).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let json = sql::import_json(events);
        let mut turn = self.write_turn().await?;
        let conn = &mut *turn;
        let begin = "BEGIN IMMEDIATE";
        sql::import_in_transaction!(conn, begin, Sqlite, "", events, &json, &invocations).await
    }

    async fn put_attachment(&self, attachment: &Attachment) -> Result<(), StoreError> {
        let mut turn = self.write_turn().await?;
        sql::put_attachment(attachment).execute(&mut *turn).await?;
        Ok(())
    }

    async fn attachment(
        &self,
        account_id: &str,
        file_id: &str,
    ) -> Result<Option<Attachment>, StoreError> {
        let row = sql::keyed(sql::ATTACHMENT, account_id, file_id)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| sql::attachment_from_row(account_id, file_id, &r))
            .transpose()
    }

    async fn claim_idempotency_key(
        &self,
        record: &IdempotentRun,
        since: DateTime<Utc>,
        replacing: Option<&str>,
    ) -> Result<Option<IdempotentRun>, StoreError> {
        let mut turn = self.write_turn().await?;
        let claimed = idempotency::claim(record, since, replacing)
            .execute(&mut *turn)
            .await?;
        if claimed.rows_affected() == 1 {
            return Ok(None);
        }
        let row = idempotency::get(&record.account_id, &record.key)
            .fetch_optional(&mut *turn)
            .await?;
        row.map(|r| idempotency::from_row(&r)).transpose()
    }

    async fn release_idempotency_key(
        &self,
        account_id: &str,
        key: &str,
        run_id: &str,
    ) -> Result<(), StoreError> {
        let mut turn = self.write_turn().await?;
        idempotency::release(account_id, key, run_id)
            .execute(&mut *turn)
            .await?;
        Ok(())
    }

    async fn put_approval(&self, approval: &Approval) -> Result<(), StoreError> {
        let mut turn = self.write_turn().await?;
        approvals::insert::<Sqlite, _>(&mut *turn, approval).await
    }

    async fn list_pending_approvals(
        &self,
        account_id: &str,
        filter: ApprovalFilter<'_>,
        offset: i64,
        limit: i64,
    ) -> Result<(Vec<Approval>, i64), StoreError> {
        approvals::pending(&self.pool, account_id, filter, offset, limit).await
    }

    async fn approval(
        &self,
        account_id: &str,
        session_id: &str,
        request_id: &str,
    ) -> Result<Option<Approval>, StoreError> {
        approvals::get::<Sqlite, _>(&self.pool, account_id, session_id, request_id).await
    }

    async fn resolve_approval(
        &self,
        account_id: &str,
        session_id: &str,
        request_id: &str,
        decision: Decision,
        resolution: &Value,
        at: DateTime<Utc>,
    ) -> Result<Option<Approval>, StoreError> {
        let mut turn = self.write_turn().await?;
        let key = (account_id, session_id, request_id);
        approvals::resolve::<Sqlite, _>(&mut *turn, key, decision, resolution, at).await
    }

    async fn drop_pending_approvals(
        &self,
        account_id: &str,
        session_id: &str,
    ) -> Result<u64, StoreError> {
        let mut turn = self.write_turn().await?;
        approvals::drop_pending::<Sqlite, _>(&mut *turn, account_id, session_id).await
    }

    async fn resolve_expired_approvals(
        &self,
        now: DateTime<Utc>,
        decision: Decision,
    ) -> Result<Vec<Approval>, StoreError> {
        let mut turn = self.write_turn().await?;
        approvals::resolve_expired::<Sqlite, _>(&mut *turn, now, decision).await
    }

    async fn put_feedback(&self, record: &Feedback) -> Result<(), StoreError> {
        let mut turn = self.write_turn().await?;
        feedback::insert(record).execute(&mut *turn).await?;
        Ok(())
    }

    async fn list_feedback(
        &self,
        account_id: &str,
        session_id: Option<&str>,
        offset: i64,
        limit: i64,
    ) -> Result<(Vec<Feedback>, i64), StoreError> {
        feedback::list(&self.pool, account_id, session_id, offset, limit).await
    }

    async fn set_archived(
        &self,
        account_id: &str,
        session_id: &str,
        at: Option<DateTime<Utc>>,
    ) -> Result<bool, StoreError> {
        let mut turn = self.write_turn().await?;
        archive::set::<Sqlite, _>(&mut *turn, account_id, session_id, at).await
    }

    async fn archived_at(
        &self,
        account_id: &str,
        session_id: &str,
    ) -> Result<Option<DateTime<Utc>>, StoreError> {
        archive::archived_at::<Sqlite, _>(&self.pool, account_id, session_id).await
    }

    async fn usage(&self, account_id: &str) -> Result<Usage, StoreError> {
        sql::usage(&self.pool, account_id).await
    }

    async fn claim_sweep(
        &self,
        owner: &str,
        lease: std::time::Duration,
    ) -> Result<bool, StoreError> {
        let now = Utc::now().timestamp_millis();
        let until = now + i64::try_from(lease.as_millis()).unwrap_or(i64::MAX / 2);
        let mut turn = self.write_turn().await?;
        retention::claim::<Sqlite, _>(&mut *turn, owner, now, until).await
    }

    async fn idle_sessions(
        &self,
        before: DateTime<Utc>,
        offset: i64,
        limit: i64,
    ) -> Result<Vec<(String, String, DateTime<Utc>)>, StoreError> {
        retention::idle(&self.pool, before, offset, limit).await
    }

    async fn prune_tombstones(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let mut turn = self.write_turn().await?;
        retention::prune::<Sqlite, _>(&mut *turn, before).await
    }

    fn route_webhooks(&self, routes: Vec<crate::outbox::Route>) {
        self.webhooks.set(routes);
    }

    async fn claim_webhook_deliveries(
        &self,
        endpoint: &str,
        owner: &str,
        lease: std::time::Duration,
        limit: i64,
    ) -> Result<Vec<crate::outbox::Claimed>, StoreError> {
        let now = now_ms();
        if outbox::due::<Sqlite>(endpoint, now)
            .fetch_optional(&self.pool)
            .await?
            .is_none()
        {
            return Ok(Vec::new());
        }
        let mut turn = self.write_turn().await?;
        let rows = outbox::claim::<Sqlite>(endpoint, owner, now, now + millis(lease), limit)
            .fetch_all(&mut *turn)
            .await?;
        rows.iter().map(outbox::claimed_from_row).collect()
    }

    async fn release_webhook_leases(&self, owner: &str) -> Result<(), StoreError> {
        let mut turn = self.write_turn().await?;
        outbox::release::<Sqlite>(owner).execute(&mut *turn).await?;
        Ok(())
    }

    async fn finish_webhook_delivery(
        &self,
        endpoint: &str,
        event_id: &str,
        owner: &str,
        attempt: &crate::outbox::Attempt,
    ) -> Result<bool, StoreError> {
        let mut turn = self.write_turn().await?;
        let done = outbox::finish::<Sqlite>(endpoint, event_id, owner, attempt)
            .execute(&mut *turn)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn list_webhook_deliveries(
        &self,
        query: &crate::outbox::DeliveryQuery,
    ) -> Result<(Vec<crate::outbox::Delivery>, i64), StoreError> {
        outbox::list(&self.pool, query).await
    }

    async fn remove(&self, removal: &Removal) -> Result<Deletion, StoreError> {
        let now = plan::commit_time();
        // The steps are `removal`'s (see there), each a write turn of its own, so the
        // appends queued meanwhile commit between them (the turns are first come, first
        // served), and each followed by a pause as long as its turn (`give_way`). Every
        // turn overwrites what its deletes free with zeros (`secure_delete`).
        let (first, mut started) = {
            let mut turn = self.write_turn().await?;
            let started = Instant::now();
            secure_delete(&mut turn, true).await?;
            let outcome = first_removal_step(&mut turn, removal, now).await;
            let reset = secure_delete(&mut turn, false).await;
            let outcome = outcome?;
            reset?;
            if let RemovalStep::Done(Deletion::Removed(_)) = &outcome {
                self.scrub_wal(turn).await?;
            }
            (outcome, started)
        };
        let (plan, mut removed) = match first {
            RemovalStep::Done(outcome) => return Ok(outcome),
            RemovalStep::Marked(plan, removed) => (plan, removed),
        };
        let account = removal.account_id.as_str();
        for step in plan.steps() {
            loop {
                give_way(started.elapsed()).await;
                let mut turn = self.write_turn().await?;
                started = Instant::now();
                secure_delete(&mut turn, true).await?;
                let done = step_on(&mut turn, account, &step, now, &mut removed).await;
                let reset = secure_delete(&mut turn, false).await;
                let done = done?;
                reset?;
                match done {
                    Shrunk::More => continue,
                    Shrunk::Done => break,
                    Shrunk::Refused(refused) => return Ok(refused),
                }
            }
        }
        give_way(started.elapsed()).await;
        let mut turn = self.write_turn().await?;
        let mut tx = Connection::begin(&mut *turn).await?;
        removal::audit::<Sqlite>(&mut tx, removal, &removed).await?;
        tx.commit().await?;
        self.scrub_wal(turn).await?;
        Ok(Deletion::Removed(removed))
    }
}

/// Where a removal stands after its first transaction.
enum RemovalStep {
    /// Refused, or (at most [`removal::CHUNK`] sessions) done in that transaction.
    Done(Deletion),
    /// Its attachments are gone and its sessions archived: they are purged next.
    Marked(removal::Plan, Removed),
}

/// The first transaction of [`Store::remove`] on the write connection.
async fn first_removal_step(
    conn: &mut SqliteConnection,
    removal: &Removal,
    now: DateTime<Utc>,
) -> Result<RemovalStep, StoreError> {
    let dialect = &removal::SQLITE;
    let account = removal.account_id.as_str();
    // Deferred is enough: every write of this file goes through this connection, so
    // nothing writes between the removal's reads and its deletes.
    let mut tx = Connection::begin(conn).await?;
    let plan = match removal::plan::<Sqlite>(&mut tx, dialect, removal).await? {
        Ok(plan) => plan,
        Err(refused) => return Ok(RemovalStep::Done(refused)),
    };
    let mut removed = plan.removed(removal, now);
    if !plan.is_small() {
        let mark = removal::mark::<Sqlite>(&mut tx, dialect, removal, &plan, now, &mut removed);
        if let Some(refused) = mark.await? {
            return Ok(RemovalStep::Done(refused));
        }
        tx.commit().await?;
        return Ok(RemovalStep::Marked(plan, removed));
    }
    let purge =
        removal::purge::<Sqlite>(&mut tx, dialect, account, &plan.sessions, now, &mut removed);
    if let Some(refused) = purge.await? {
        return Ok(RemovalStep::Done(refused));
    }
    removal::drop_files::<Sqlite>(&mut tx, account, &plan.files, &mut removed).await?;
    removal::audit::<Sqlite>(&mut tx, removal, &removed).await?;
    tx.commit().await?;
    Ok(RemovalStep::Done(Deletion::Removed(removed)))
}

/// One transaction of a step of [`Store::remove`] on the write connection: a purge
/// (`Done` once committed) or a shrink.
async fn step_on(
    conn: &mut SqliteConnection,
    account: &str,
    step: &Step<'_>,
    now: DateTime<Utc>,
    removed: &mut Removed,
) -> Result<Shrunk, StoreError> {
    let dialect = &removal::SQLITE;
    let mut tx = Connection::begin(conn).await?;
    let done = match step {
        Step::Purge(sessions) => {
            match removal::purge::<Sqlite>(&mut tx, dialect, account, sessions, now, removed)
                .await?
            {
                Some(refused) => Shrunk::Refused(refused),
                None => Shrunk::Done,
            }
        }
        Step::Shrink(session) => {
            removal::shrink::<Sqlite>(&mut tx, dialect, account, session, now, removed).await?
        }
    };
    if !matches!(done, Shrunk::Refused(_)) {
        tx.commit().await?;
    }
    Ok(done)
}

/// Turns `secure_delete` on or off on the write connection: on, what a removal's deletes
/// free is overwritten with zeros, so the file keeps none of the content. Only for
/// removals (appends free nothing worth the writes).
async fn secure_delete(conn: &mut SqliteConnection, on: bool) -> Result<(), StoreError> {
    let pragma = if on {
        "PRAGMA secure_delete = ON"
    } else {
        "PRAGMA secure_delete = OFF"
    };
    sqlx::query(pragma).execute(conn).await?;
    Ok(())
}

/// Counts a wait for the write connection while it lasts (see
/// [`SqliteStore::write_turn`]), even if the waiter gives up.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Waiting(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The pool reads go through. A connection to a file in this process does not go stale
/// the way a network connection does: the check sqlx makes before handing one out, a
/// round trip to the connection's thread, is left out.
async fn read_pool(options: SqliteConnectOptions) -> Result<SqlitePool, sqlx::Error> {
    SqlitePoolOptions::new()
        .max_connections(POOL_SIZE)
        .test_before_acquire(false)
        .connect_with(options)
        .await
}

/// Lease times in SQLite: Unix milliseconds from this host's clock (every process sharing
/// the file is on this host).
pub(crate) fn now_ms() -> i64 {
    Utc::now().timestamp_millis()
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 2)
}

fn json(column: &str, text: &str) -> Result<Value, StoreError> {
    serde_json::from_str(text)
        .map_err(|e| StoreError::Corrupt(format!("{column} is not valid JSON: {e}")))
}

/// One element of the JSON array [`Store::events`] reads a page as: an array of the
/// columns in this order (serde reads a struct from an array by position).
#[derive(serde::Deserialize)]
struct PageRow<'a> {
    seq: Seq,
    run_id: Option<String>,
    invocation_id: Option<String>,
    event_type: EventType,
    role: Option<String>,
    content: Value,
    metadata: Value,
    #[serde(borrow)]
    created_at: Cow<'a, str>,
}

/// The events of one page, from the JSON array built by [`Store::events`]'s query. Every
/// event of a page is in the queried session, so the ids come from the query.
fn events_from_page(
    account_id: &str,
    session_id: &str,
    page: &str,
) -> Result<Vec<Event>, StoreError> {
    let mut rows: Vec<PageRow<'_>> = serde_json::from_str(page)
        .map_err(|e| StoreError::Corrupt(format!("events page is not valid: {e}")))?;
    rows.sort_by_key(|row| row.seq);
    rows.into_iter()
        .map(|row| {
            Ok(Event {
                account_id: account_id.to_owned(),
                session_id: session_id.to_owned(),
                seq: row.seq,
                run_id: row.run_id,
                invocation_id: row.invocation_id,
                event_type: row.event_type,
                role: row.role,
                content: row.content,
                metadata: row.metadata,
                created_at: timestamp(&row.created_at)?,
            })
        })
        .collect()
}

/// A timestamp column as sqlx writes it (RFC 3339), or as SQLite's own functions do
/// (`YYYY-MM-DD HH:MM:SS[.fff]`, UTC).
fn timestamp(text: &str) -> Result<DateTime<Utc>, StoreError> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc));
    }
    chrono::NaiveDateTime::parse_from_str(text, "%F %T%.f")
        .map(|t| t.and_utc())
        .map_err(|_| StoreError::Corrupt(format!("invalid timestamp {text:?}")))
}

pub(crate) fn event_from_row(row: &SqliteRow) -> Result<Event, StoreError> {
    Ok(Event {
        account_id: row.try_get("account_id")?,
        session_id: row.try_get("session_id")?,
        seq: row.try_get("seq")?,
        run_id: row.try_get("run_id")?,
        invocation_id: row.try_get("invocation_id")?,
        event_type: sql::parse_event_type(row.try_get("event_type")?)?,
        role: row.try_get("role")?,
        content: json("content_json", row.try_get("content_json")?)?,
        metadata: json("metadata_json", row.try_get("metadata_json")?)?,
        created_at: row.try_get::<DateTime<Utc>, _>("created_at")?,
    })
}

/// A turn at the write connection: holds it, and counts itself when it ends.
struct WriteTurn<'a> {
    conn: tokio::sync::MappedMutexGuard<'a, SqliteConnection>,
    writes: &'a AtomicU64,
}

impl std::ops::Deref for WriteTurn<'_> {
    type Target = SqliteConnection;

    fn deref(&self) -> &SqliteConnection {
        &self.conn
    }
}

impl std::ops::DerefMut for WriteTurn<'_> {
    fn deref_mut(&mut self) -> &mut SqliteConnection {
        &mut self.conn
    }
}

impl Drop for WriteTurn<'_> {
    fn drop(&mut self) {
        self.writes.fetch_add(1, Ordering::Relaxed);
    }
}

/// What the WAL needs at one look.
#[derive(Debug, PartialEq, Eq)]
enum WalChore {
    Rest,
    /// fsync the WAL: what was committed survives a power loss.
    Sync,
    /// Copy the WAL into the database file (which syncs the WAL first).
    Checkpoint,
}

/// `writes` is the count of write turns now; `synced` and `checkpointed` the counts the
/// last sync and checkpoint covered.
fn wal_chore(writes: u64, synced: u64, checkpointed: u64, since_checkpoint: Duration) -> WalChore {
    let uncopied = writes - checkpointed;
    if uncopied >= CHECKPOINT_WRITES || (uncopied > 0 && since_checkpoint >= CHECKPOINT_AFTER) {
        WalChore::Checkpoint
    } else if writes != synced {
        WalChore::Sync
    } else {
        WalChore::Rest
    }
}

/// Keeps the WAL durable and short, off the write connection, until the store stops it.
///
/// Commits append to the WAL without an fsync (`synchronous = NORMAL`); this task fsyncs
/// the WAL every [`WAL_SYNC_INTERVAL`] after writes, which bounds what a power loss takes.
/// It copies the WAL into the database file (a PASSIVE checkpoint on a read connection,
/// which never blocks the writer) only after [`CHECKPOINT_WRITES`] writes, or
/// [`CHECKPOINT_AFTER`]: the first commit after a checkpoint has emptied the WAL restarts
/// it, and must fsync the new WAL header itself (0.3–0.5 ms), so checkpointing every
/// tick would put that fsync in every other commit of a single slow stream. A checkpoint
/// run by the committing connection (SQLite's default, every 1,000 pages) would hold that
/// commit, and every event waiting on it, through two fsyncs and a copy of every page the
/// WAL touched.
///
/// It also empties the WAL after removals that left it to this task (`scrubs` counts
/// them, see [`SqliteStore::scrub_wal`]): a TRUNCATE checkpoint once a look finds no
/// write since the last, or [`SCRUB_WITHIN`] after the first removal still owed.
async fn keep_wal(pool: SqlitePool, wal: PathBuf, writes: Arc<AtomicU64>, scrubbing: Wal) {
    let mut tick = tokio::time::interval(WAL_SYNC_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut synced, mut checkpointed, mut last_checkpoint) = (0, 0, Instant::now());
    let mut seen = 0;
    loop {
        tick.tick().await;
        let now = writes.load(Ordering::Relaxed);
        if let Some((owed, since)) = scrubbing.scrubs.owed() {
            if now == seen || since.elapsed() >= SCRUB_WITHIN {
                // A turn on the write connection, in line with the appends.
                let mut writer = scrubbing.writer.lock().await;
                let Some(conn) = writer.as_mut() else {
                    return; // closed
                };
                if truncate_on(conn).await {
                    scrubbing.scrubs.paid(owed);
                    (synced, checkpointed, last_checkpoint) = (now, now, Instant::now());
                }
            }
        }
        seen = now;
        let chore = wal_chore(now, synced, checkpointed, last_checkpoint.elapsed());
        if chore == WalChore::Checkpoint {
            match sqlx::query_as::<_, (i64, i64, i64)>("PRAGMA wal_checkpoint(PASSIVE)")
                .fetch_one(&pool)
                .await
            {
                // Everything copied: the checkpoint synced the WAL before copying it.
                Ok((_, frames, copied)) if copied == frames => {
                    (synced, checkpointed, last_checkpoint) = (now, now, Instant::now());
                    continue;
                }
                // A reader held frames back: they are copied at a later look, synced now.
                Ok(_) => {}
                Err(error) => tracing::debug!(%error, "background WAL checkpoint failed"),
            }
        }
        if chore != WalChore::Rest && now != synced {
            let wal = wal.clone();
            match tokio::task::spawn_blocking(move || std::fs::File::open(wal)?.sync_data()).await {
                Ok(Ok(())) => synced = now,
                Ok(Err(error)) => tracing::debug!(%error, "WAL sync failed; retrying"),
                Err(_) => {} // the runtime is shutting down
            }
        }
    }
}

/// Removals whose content the WAL may still hold: how many were owed a TRUNCATE
/// checkpoint, and since when the oldest still owed waits.
#[derive(Default)]
struct Scrubs(std::sync::Mutex<(u64, Option<Instant>)>);

impl Scrubs {
    /// One more removal owed; the count owed now.
    fn owe(&self) -> u64 {
        let mut owed = self.0.lock().unwrap_or_else(|e| e.into_inner());
        owed.0 += 1;
        owed.1.get_or_insert_with(Instant::now);
        owed.0
    }

    /// The count owed and since when, if any is.
    fn owed(&self) -> Option<(u64, Instant)> {
        let owed = self.0.lock().unwrap_or_else(|e| e.into_inner());
        owed.1.map(|since| (owed.0, since))
    }

    /// A checkpoint begun when `count` were owed emptied the WAL: those are paid; any owed
    /// since wait from now.
    fn paid(&self, count: u64) {
        let mut owed = self.0.lock().unwrap_or_else(|e| e.into_inner());
        owed.1 = (owed.0 != count).then(Instant::now);
    }
}

/// What [`keep_wal`] needs to empty the WAL after removals.
struct Wal {
    writer: Writer,
    scrubs: Arc<Scrubs>,
}

/// A TRUNCATE checkpoint on the write connection: copies the WAL into the file and
/// empties it, waiting at most [`SCRUB_WAIT`] for readers; whether it did. After a
/// removal (see [`SqliteStore::scrub_wal`]) and after a full disk (see
/// [`SqliteStore::append_seqs`]).
async fn truncate_on(conn: &mut SqliteConnection) -> bool {
    let wait = format!("PRAGMA busy_timeout = {}", SCRUB_WAIT.as_millis());
    let restore = format!("PRAGMA busy_timeout = {}", BUSY_TIMEOUT.as_millis());
    if sqlx::query(&wait).execute(&mut *conn).await.is_err() {
        return false;
    }
    let checkpoint = sqlx::query_as::<_, (i64, i64, i64)>("PRAGMA wal_checkpoint(TRUNCATE)")
        .fetch_one(&mut *conn)
        .await;
    if let Err(error) = sqlx::query(&restore).execute(&mut *conn).await {
        tracing::warn!(%error, "restoring the write connection's busy timeout failed");
    }
    match checkpoint {
        Ok((0, _, _)) => true,
        Ok(_) => {
            tracing::debug!("WAL not emptied (a reader held it); retrying");
            false
        }
        Err(error) => {
            tracing::debug!(%error, "WAL checkpoint failed; retrying");
            false
        }
    }
}

/// How every SQLite file of this crate is opened (the store's, and the outage journal's):
/// SQLite configured first, the file and its directories created if missing, in WAL mode,
/// with a busy timeout. Each adds its own durability setting.
pub(crate) async fn file_options(path: &str) -> Result<SqliteConnectOptions, StoreError> {
    configure_sqlite();
    if let Some(dir) = Path::new(path).parent() {
        if !dir.as_os_str().is_empty() {
            tokio::fs::create_dir_all(dir)
                .await
                .map_err(sqlx::Error::Io)?;
        }
    }
    Ok(SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(BUSY_TIMEOUT))
}

/// Multi-row inserts of committed event rows (event, seq, content JSON, metadata JSON) into
/// `table`: the store's `events`, or the outage journal's `journal_events`, which share
/// their columns.
pub(crate) async fn insert_event_rows(
    tx: &mut sqlx::Transaction<'_, Sqlite>,
    table: &str,
    rows: &[(&NewEvent, Seq, String, String)],
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    for chunk in rows.chunks(INSERT_CHUNK) {
        let mut insert = QueryBuilder::<Sqlite>::new(format!("INSERT INTO {table} ("));
        insert.push(sql::event_columns!()).push(") ");
        insert.push_values(chunk, |row, (event, seq, content, metadata)| {
            push_event_row(row, event, *seq, content, metadata, now)
        });
        insert.build().execute(&mut **tx).await?;
    }
    Ok(())
}

/// `(account_id, invocation_id)` of each invocation `ops` closed: its terminal event is
/// kept (see [`InvocationOp::Close`]).
fn closed_invocations<'a>(
    ops: &[(usize, InvocationOp<'a>)],
    keep: &[bool],
) -> Vec<(&'a str, &'a str)> {
    ops.iter()
        .filter_map(|&(i, op)| match op {
            InvocationOp::Close {
                account_id,
                invocation_id,
                ..
            } if keep[i] => Some((account_id, invocation_id)),
            _ => None,
        })
        .collect()
}

/// SQLite's process-wide settings, before its first connection (every SQLite database
/// this crate opens calls it first). Memory statistics off: with them on, every
/// allocation SQLite makes takes a global mutex to count itself, which cost the writer
/// 5-12 % of its throughput in `append_throughput`.
pub(crate) fn configure_sqlite() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: `sqlite3_config` before `sqlite3_initialize`; once SQLite is
        // initialised (another connection came first) it refuses with SQLITE_MISUSE and
        // changes nothing.
        let rc = unsafe {
            libsqlite3_sys::sqlite3_config(
                libsqlite3_sys::SQLITE_CONFIG_MEMSTATUS,
                0 as std::ffi::c_int,
            )
        };
        if rc != libsqlite3_sys::SQLITE_OK {
            tracing::debug!(
                rc,
                "SQLite was initialised already; memory statistics stay on"
            );
        }
    });
}

/// An invocation a batch opens: account, invocation, session, run, and the claim that
/// granted it, if any.
type Open<'a> = (&'a str, &'a str, &'a str, &'a str, Option<PendingClaim>);

/// The insert of invocations `opens` starts, each recording the session's `last_seq`
/// before the batch as where its events begin (the insert runs before the sessions'
/// upsert). An invocation that exists already is left as it is.
fn push_opens<'a>(insert: &mut QueryBuilder<'a, Sqlite>, opens: &[Open<'a>], now: DateTime<Utc>) {
    let now_ms = now_ms();
    insert.push(
        "INSERT INTO invocations (account_id, invocation_id, session_id, run_id, status, \
         started_at, owner, lease_expires_ms, agent_ref, after_seq) \
         SELECT v.*, coalesce((SELECT last_seq FROM sessions AS s \
         WHERE s.account_id = v.column1 AND s.session_id = v.column3), 0) FROM (",
    );
    insert.push_values(
        opens,
        |mut row, (account_id, invocation_id, session_id, run_id, claim)| {
            row.push_bind(*account_id)
                .push_bind(*invocation_id)
                .push_bind(*session_id)
                .push_bind(*run_id)
                .push_bind("in_progress")
                .push_bind(now)
                .push_bind(claim.as_ref().map(|c| c.owner.clone()))
                .push_bind(claim.as_ref().map(|c| now_ms + millis(c.lease)))
                .push_bind(claim.as_ref().and_then(|c| c.agent_ref.clone()));
        },
    );
    // `WHERE true` tells SQLite's parser the `ON` starts the upsert clause, not a join's.
    insert.push(") AS v WHERE true ON CONFLICT (account_id, invocation_id) DO NOTHING; ");
}

/// Binds one event row in `sql::event_columns!()` order. `seq` is the seq itself, or, in the
/// store's append, how far below its session's new `last_seq` it is.
fn push_event_row<'a>(
    mut row: Separated<'_, 'a, Sqlite, &'static str>,
    event: &'a NewEvent,
    seq: Seq,
    content: &'a str,
    metadata: &'a str,
    now: DateTime<Utc>,
) {
    row.push_bind(event.account_id.as_str())
        .push_bind(event.session_id.as_str())
        .push_bind(seq)
        .push_bind(event.run_id.as_deref())
        .push_bind(event.invocation_id.as_deref())
        .push_bind(event.event_type.as_str())
        .push_bind(event.role.as_deref())
        .push_bind(content)
        .push_bind(metadata)
        .push_bind(now);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Commits reach the database file itself shortly after they land in the WAL, with no
    /// checkpoint by the write connection (whose threshold a small append never reaches):
    /// a copy of the `.sqlite` file alone holds them.
    #[tokio::test]
    async fn commits_are_checkpointed_into_the_file_in_the_background() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sqlite");
        let store = SqliteStore::open(path.to_str().unwrap()).await.unwrap();
        let mut batch: Vec<NewEvent> = (0..100)
            .map(|i| {
                NewEvent::new(
                    "acct",
                    "sess",
                    EventType::Message,
                    serde_json::json!({ "text": i }),
                )
            })
            .collect();
        store.append_seqs(&mut batch).await.unwrap();

        let copy = dir.path().join("copy.sqlite");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let in_file = loop {
            std::fs::copy(&path, &copy).unwrap();
            let _ = std::fs::remove_file(dir.path().join("copy.sqlite-wal"));
            let options = SqliteConnectOptions::new().filename(&copy).read_only(true);
            let mut conn: SqliteConnection =
                sqlx::Connection::connect_with(&options).await.unwrap();
            let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM events")
                .fetch_one(&mut conn)
                .await
                .unwrap_or(0);
            if n == 100 || std::time::Instant::now() > deadline {
                break n;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(in_file, 100, "the database file alone holds the commit");
    }

    /// The WAL's header counts its restarts (bytes 12..16, the checkpoint sequence).
    fn wal_restarts(path: &Path) -> u32 {
        let wal = std::fs::read(format!("{}-wal", path.display())).unwrap();
        u32::from_be_bytes(wal[12..16].try_into().unwrap())
    }

    /// A slow stream's commits (one every 50 ms) do not each restart the WAL, which would
    /// fsync its header inside the commit: the WAL is only synced until enough waits in
    /// it to copy.
    #[tokio::test]
    async fn a_slow_writer_does_not_restart_the_wal_at_every_commit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sqlite");
        let store = SqliteStore::open(path.to_str().unwrap()).await.unwrap();
        let append = |i: i64| {
            let store = &store;
            async move {
                let mut batch = vec![NewEvent::new(
                    "acct",
                    "sess",
                    EventType::TextDelta,
                    serde_json::json!({ "delta": i }),
                )];
                store.append_seqs(&mut batch).await.unwrap();
            }
        };
        append(0).await;
        let first = wal_restarts(&path);
        for i in 1..12 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            append(i).await;
        }
        assert_eq!(
            wal_restarts(&path),
            first,
            "twelve commits in 0.6 s restarted the WAL"
        );
    }

    #[test]
    fn the_wal_is_synced_after_writes_and_copied_after_enough_of_them() {
        let soon = Duration::from_millis(100);
        assert_eq!(wal_chore(0, 0, 0, soon), WalChore::Rest);
        assert_eq!(wal_chore(3, 0, 0, soon), WalChore::Sync);
        assert_eq!(wal_chore(3, 3, 0, soon), WalChore::Rest);
        assert_eq!(wal_chore(40, 3, 8, soon), WalChore::Checkpoint);
        assert_eq!(wal_chore(3, 3, 0, CHECKPOINT_AFTER), WalChore::Checkpoint);
        assert_eq!(wal_chore(3, 3, 3, CHECKPOINT_AFTER), WalChore::Rest);
    }

    /// Handles this process holds open on `path`.
    #[cfg(target_os = "linux")]
    fn open_handles(path: &Path) -> usize {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
            .filter(|target| target == path)
            .count()
    }

    /// Waits up to 5 s for every handle on `path` to close; returns how many are left.
    #[cfg(target_os = "linux")]
    async fn handles_left(path: &Path) -> usize {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while open_handles(path) > 0 && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        open_handles(path)
    }

    /// SQLite counts nothing: its memory statistics stay off, so allocations take no lock.
    #[tokio::test]
    async fn sqlite_keeps_no_memory_statistics() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.sqlite");
        let store = SqliteStore::open(path.to_str().unwrap()).await.unwrap();
        let event = NewEvent::new(
            "a",
            "s",
            EventType::Message,
            serde_json::json!({"text": "hi"}),
        );
        store.append(&[event]).await.unwrap();
        // SAFETY: reads a counter; SQLite is initialised by the open above.
        assert_eq!(unsafe { libsqlite3_sys::sqlite3_memory_used() }, 0);
    }

    /// A store dropped without `close` stops its checkpoint task, whose pool handle would
    /// otherwise keep the database file open for the life of the runtime.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_dropped_store_releases_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sqlite");
        let store = SqliteStore::open(path.to_str().unwrap()).await.unwrap();
        assert!(open_handles(&path) > 0);
        drop(store);
        assert_eq!(
            handles_left(&path).await,
            0,
            "the file is still open after the store was dropped"
        );
    }

    /// `close` closes the write connection the store holds, not only its pool: the file is
    /// free while the store still exists, and a later write fails as a closed pool's would.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_closed_store_releases_its_file_and_refuses_writes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sqlite");
        let store = SqliteStore::open(path.to_str().unwrap()).await.unwrap();
        let event = || {
            NewEvent::new(
                "acct",
                "s",
                EventType::TextDelta,
                serde_json::json!({"delta": "x"}),
            )
        };
        store.append_seqs(&mut [event()]).await.unwrap();
        store.close().await;
        assert_eq!(
            handles_left(&path).await,
            0,
            "the file is still open after close"
        );
        let refused = store.append_seqs(&mut [event()]).await.unwrap_err();
        assert!(refused.is_transient(), "{refused}");
    }
}
