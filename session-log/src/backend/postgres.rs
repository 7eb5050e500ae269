//! The PostgreSQL backend of the session log, for deployments where several gateways
//! share one log.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::postgres::{PgArguments, PgConnectOptions, PgConnection, PgPool, PgPoolOptions, PgRow};
use sqlx::query::Query;
use sqlx::types::Json;
use sqlx::{ConnectOptions, Connection, Postgres, QueryBuilder, Row};

use super::claims::{PendingClaim, PendingClaims};
use super::plan::{self, InvocationOp};
use super::removal::{Shrunk, Step};
use super::{approvals, archive, feedback, idempotency, listing, outbox, removal, retention, sql};
use crate::event::{Event, NewEvent, Seq, Session};
use crate::import;
use crate::removal::{give_way, Deletion, Removal};
use crate::store::{
    Appended, Approval, ApprovalFilter, Attachment, Claim, Claimed, Decision, EventQuery, Feedback,
    IdempotentRun, Imported, Invocation, Lease, Renewed, SessionFilter, Store, StoreError, Usage,
};

/// Connections for reads, claims and leases. Appends have a connection of their own.
const POOL_SIZE: u32 = 10;
/// Bounds connecting (the pool's and the write connection's) and waiting for a free
/// pooled connection.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);
/// The write connection is replaced once it is this old, like the pool's connections
/// (sqlx's default `max_lifetime`). A held connection otherwise keeps for good the generic
/// plans PostgreSQL made for its statements when the tables were small: only `ANALYZE`
/// re-plans them, and a database without autovacuum never runs it.
const WRITER_LIFETIME: Duration = Duration::from_secs(30 * 60);
/// Events per INSERT. The statement takes one array per column, so its size does not
/// depend on the chunk; the chunk only bounds one message's size.
const INSERT_CHUNK: usize = 5000;
/// Events appended by this process before the session log's busiest tables are first
/// analyzed (see [`Statistics`]).
const FIRST_ANALYZE: u64 = 1_000;
/// The tables whose plans the run path depends on, analyzed together.
const ANALYZE: &str = "ANALYZE events, sessions, invocations";

/// Creates or bumps every session of a batch (`$1` accounts, `$2` sessions, `$3` event
/// counts, `$4` the commit time) and returns each one's new `last_seq`. A macro, so that
/// `append_plain` can embed it in its statement at compile time.
macro_rules! upsert_sessions {
    () => {
        concat!(
            sql::insert_sessions!(),
            "SELECT a, s, n, $4, $4 FROM UNNEST($1::text[], $2::text[], $3::bigint[]) \
             AS t(a, s, n)",
            sql::bump_sessions!()
        )
    };
}

/// A session log in a PostgreSQL database, safe to share between gateway processes.
pub struct PgStore {
    pool: PgPool,
    /// The one connection appends commit on (`None` from a turn that failed until the
    /// next connects it again). Commits never queue for a connection behind a burst of
    /// reads or claims (at 100 concurrent run starts they did, for milliseconds). It is
    /// held, not pooled: sqlx pings a pooled connection when it hands it out and again
    /// when it comes back, two more round trips to PostgreSQL per commit, and the next
    /// commit waited for the second.
    writer: tokio::sync::Mutex<Option<Held>>,
    writer_options: PgConnectOptions,
    /// [`WRITER_LIFETIME`]; shorter in tests.
    writer_lifetime: Duration,
    /// Fresh claims (see [`Claim::fresh`]): granted without a round trip, and written by
    /// the append that opens their invocation (or by the journal, when it takes the append).
    pub(crate) pending: PendingClaims,
    /// Where webhook events go (see [`Store::route_webhooks`]); the journal's backfill
    /// reads them too.
    pub(crate) webhooks: outbox::Routes,
    statistics: Arc<Statistics>,
}

/// When this process runs `ANALYZE` on the busiest tables. A fresh database's tables have
/// no statistics, and autovacuum, when it is on, first looks at them up to a minute
/// later: meanwhile the planner plans for empty tables, and the write connection keeps
/// those plans (a 1,000-stream burst on a fresh database had its delivery p99 halved by
/// one `ANALYZE`). So the tables are analyzed once `FIRST_ANALYZE` events are in, when
/// they have never been; and, with autovacuum off, again at every tenfold growth since,
/// the statistics nothing else would ever gather. `ANALYZE` samples, and takes no lock
/// that holds up an append.
struct Statistics {
    /// Events this process appended.
    appended: AtomicU64,
    /// The count of `appended` at which to analyze next; `u64::MAX`: never.
    next: AtomicU64,
    /// Analyze again at ten times the count (autovacuum off).
    repeat: bool,
}

impl Statistics {
    /// Counts `n` more events appended; whether it is time to analyze (true once per
    /// threshold, whatever the number of concurrent appends).
    fn appended(&self, n: usize) -> bool {
        let total = self.appended.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
        let next = self.next.load(Ordering::Relaxed);
        if total < next {
            return false;
        }
        let after = if self.repeat {
            total.saturating_mul(10)
        } else {
            u64::MAX
        };
        self.next
            .compare_exchange(next, after, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }
}

/// Analyzes the busiest tables, off the append that asked for it.
fn analyze(pool: &PgPool) {
    let pool = pool.clone();
    tokio::spawn(async move {
        match sqlx::query(ANALYZE).execute(&pool).await {
            Ok(_) => tracing::info!(
                "analyzed the session log's tables (their first rows, or autovacuum is off)"
            ),
            Err(error) => tracing::warn!(%error, "cannot analyze the session log's tables"),
        }
    });
}

/// The write connection, and when it connected.
struct Held {
    conn: PgConnection,
    since: Instant,
}

/// The pending claim each event of a batch opens, by position (empty when the batch opens
/// nothing).
type OpenClaims = Vec<Option<PendingClaim>>;

fn claim_at(claims: &OpenClaims, i: usize) -> Option<&PendingClaim> {
    claims.get(i).and_then(Option::as_ref)
}

/// A turn at the write connection. A turn that ends without [`WriteTurn::finish`] (an
/// error, or a caller that stopped waiting, as the outage journal does after its deadline)
/// drops the connection, and the next turn connects afresh: a query cut off midway may
/// have left it half-answered, or its peer gone.
struct WriteTurn<'a> {
    held: tokio::sync::MutexGuard<'a, Option<Held>>,
    finished: bool,
}

impl WriteTurn<'_> {
    fn conn(&mut self) -> &mut PgConnection {
        &mut self.held.as_mut().expect("a turn begins connected").conn
    }

    fn finish(mut self) {
        self.finished = true;
    }
}

impl Drop for WriteTurn<'_> {
    fn drop(&mut self) {
        if !self.finished {
            *self.held = None;
        }
    }
}

impl PgStore {
    /// Connects to `url` (`postgres://…`) and applies pending migrations. Migrations take
    /// an advisory lock, so gateways starting together do not race.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let options = PgConnectOptions::from_str(url)
            .map_err(|e| StoreError::Url {
                url: redact(url),
                reason: e.to_string(),
            })?
            .application_name("tether");
        let pool = PgPoolOptions::new()
            .max_connections(POOL_SIZE)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(options.clone())
            .await?;
        sqlx::migrate!("./migrations/postgres").run(&pool).await?;
        let autovacuum: bool = sqlx::query_scalar(
            "SELECT current_setting('autovacuum')::bool AND current_setting('track_counts')::bool",
        )
        .fetch_one(&pool)
        .await?;
        if !autovacuum {
            tracing::warn!(
                "autovacuum is off on this PostgreSQL database: the planner gets no statistics \
                 on the session log's tables but those Tether gathers as the events table \
                 grows tenfold; turn autovacuum on, or run ANALYZE regularly"
            );
        }
        let analyzed: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_user_tables WHERE relid = 'events'::regclass \
             AND (last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL))",
        )
        .fetch_one(&pool)
        .await?;
        let statistics = Arc::new(Statistics {
            appended: AtomicU64::new(0),
            next: AtomicU64::new(if analyzed && autovacuum {
                u64::MAX
            } else {
                FIRST_ANALYZE
            }),
            repeat: !autovacuum,
        });
        let writer_options = options.application_name("tether-writer");
        // Connected now, so the first commit does not connect first.
        let writer = Held {
            conn: writer_options.connect().await?,
            since: Instant::now(),
        };
        Ok(PgStore {
            pool,
            writer: tokio::sync::Mutex::new(Some(writer)),
            writer_options,
            writer_lifetime: WRITER_LIFETIME,
            pending: PendingClaims::default(),
            webhooks: outbox::Routes::default(),
            statistics,
        })
    }

    /// Waits for the write connection, connecting it if the last turn dropped it or
    /// replacing it if it is too old.
    async fn write_turn(&self) -> Result<WriteTurn<'_>, StoreError> {
        let mut held = self.writer.lock().await;
        if let Some(old) = held.take_if(|h| h.since.elapsed() >= self.writer_lifetime) {
            // Said goodbye off the turn: nothing waits for the answer.
            tokio::spawn(old.conn.close());
        }
        if held.is_none() {
            let connect = self.writer_options.connect();
            let timed_out = || {
                let error = std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "connecting the write connection to PostgreSQL timed out",
                );
                sqlx::Error::Io(error)
            };
            let conn = tokio::time::timeout(ACQUIRE_TIMEOUT, connect)
                .await
                .map_err(|_| timed_out())??;
            *held = Some(Held {
                conn,
                since: Instant::now(),
            });
        }
        Ok(WriteTurn {
            held,
            finished: false,
        })
    }

    /// A batch that starts or ends no run, as one statement: the sessions' upsert in a
    /// `WITH` clause, and the events taking their seqs from the `last_seq`s it returns.
    /// PostgreSQL runs a lone statement as its own transaction, so this is one round trip
    /// where BEGIN, two statements and COMMIT are four. The upsert's row locks serialise
    /// writers of a session as in `append_seqs` (taken in key order: `counts` is sorted).
    async fn append_plain(
        &self,
        conn: &mut PgConnection,
        batch: &[NewEvent],
        now: DateTime<Utc>,
    ) -> Result<Appended, StoreError> {
        let keep = vec![true; batch.len()];
        let counts = plan::session_counts(batch, &keep);
        let (accounts, sessions, ns) = session_columns(&counts);
        let mut columns = EventColumns::with_capacity(batch.len());
        for (event, below) in plan::rows_below(batch, &keep, &counts)? {
            columns.push(event, below);
        }
        let query = sqlx::query(concat!(
            "WITH s AS (",
            upsert_sessions!(),
            "), e AS (INSERT INTO events (",
            sql::event_columns!(),
            ") SELECT u.a, u.s, s.last_seq - u.below, u.r, u.i, u.t, u.ro, u.c::jsonb, \
             u.m::jsonb, $4 FROM UNNEST($5::text[], $6::text[], $7::bigint[], $8::text[], \
             $9::text[], $10::text[], $11::text[], $12::text[], $13::text[]) \
             AS u(a, s, below, r, i, t, ro, c, m) \
             JOIN s ON s.account_id = u.a AND s.session_id = u.s) \
             SELECT account_id, session_id, last_seq FROM s"
        ))
        .bind(&accounts)
        .bind(&sessions)
        .bind(&ns)
        .bind(now);
        let rows = columns.bind(query).fetch_all(conn).await?;
        let last_seqs = returned_last_seqs(&rows, &counts)?;
        let seqs = plan::assign_seqs(batch, &keep, &counts, &last_seqs)?;
        Ok(Appended::at(seqs, now))
    }

    /// A batch that starts or ends runs, each invocation once (a round of runs starting
    /// and ending), as one statement: the closes, the opens, the sessions' upsert and the
    /// events' insert are clauses of one `WITH`. One round trip where the transaction of
    /// `append_seqs` takes five or six, and a run's start waits for this commit. (A batch
    /// with no run in it takes `append_plain`: this statement's window functions cost a
    /// fourth of its throughput.)
    ///
    /// As in the transaction of `append_seqs`: a close re-checks `status` after waiting
    /// for a racing closer, and its terminal event is kept only if it closed the row
    /// (locked and still open, the row is closed by this statement for sure); the events
    /// kept take each session's top seqs, in batch order, and a closed invocation's
    /// `end_seq` is its session's upserted `last_seq`. The close's UPDATE finds its row by
    /// key, never by the `ctid` that `closing` locked: when the lock waited for another
    /// update of the row (a lease renewal, a cancel request), the version it locked was
    /// committed after this statement's snapshot, and a lookup by its `ctid` finds
    /// nothing (a row lookup by key reaches the newest version, which this statement
    /// holds). That once inserted a terminal status and left its row open, for another
    /// replica's lease sweep to close a second time. Locks are taken in one order,
    /// invocations then sessions (each in key order), because the sessions' counts need
    /// the closes' outcome first.
    async fn append_in_one(
        &self,
        conn: &mut PgConnection,
        batch: &[NewEvent],
        ops: &[(usize, InvocationOp<'_>)],
        claims: &OpenClaims,
        now: DateTime<Utc>,
    ) -> Result<Appended, StoreError> {
        let mut keep = vec![true; batch.len()];
        // What each event does to its invocation: `open`, a terminal status, or nothing.
        let mut op: Vec<Option<&str>> = vec![None; batch.len()];
        let mut if_expired = vec![false; batch.len()];
        for &(i, o) in ops {
            match o {
                InvocationOp::Open { .. } => op[i] = Some("open"),
                InvocationOp::Close {
                    status,
                    if_expired: sweep,
                    ..
                } => {
                    op[i] = Some(status.as_str());
                    if_expired[i] = sweep;
                }
                InvocationOp::Drop => keep[i] = false,
            }
        }
        let mut columns = EventColumns::with_capacity(batch.len());
        let mut op_column = Vec::with_capacity(batch.len());
        let mut expired_column = Vec::with_capacity(batch.len());
        let mut opened = OpenedColumns::default();
        for (i, event) in batch.iter().enumerate().filter(|(i, _)| keep[*i]) {
            columns.push(event, i as Seq);
            op_column.push(op[i]);
            expired_column.push(if_expired[i]);
            opened.push(claim_at(claims, i));
        }
        if op_column.is_empty() {
            return Ok(Appended::at(vec![None; batch.len()], now));
        }
        let query = sqlx::query(concat!(
            "WITH u AS (SELECT * FROM UNNEST($2::text[], $3::text[], $4::bigint[], \
             $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], \
             $11::text[], $12::text[], $13::float8[], $14::text[], $15::bool[]) \
             AS u(a, s, ord, r, i, t, ro, c, m, op, owner, lease, agent_ref, x)), \
             closing AS (SELECT v.account_id, v.invocation_id, v.session_id, c.op \
             FROM (SELECT a, i, s, op, x FROM u WHERE op <> 'open' ORDER BY a, i) AS c \
             CROSS JOIN LATERAL (SELECT account_id, invocation_id, session_id \
             FROM invocations \
             WHERE account_id = c.a AND invocation_id = c.i AND session_id = c.s \
             AND status = 'in_progress' AND (NOT c.x OR lease_expires_at <= now()) \
             FOR UPDATE) AS v), \
             opened AS (INSERT INTO invocations \
             (account_id, invocation_id, session_id, run_id, status, started_at, owner, \
             lease_expires_at, agent_ref, after_seq) \
             SELECT a, i, s, r, 'in_progress', $1, owner, \
             now() + make_interval(secs => lease), agent_ref, coalesce((SELECT last_seq \
             FROM sessions WHERE account_id = u.a AND session_id = u.s), 0) \
             FROM u WHERE op = 'open' \
             ON CONFLICT (account_id, invocation_id) DO NOTHING), \
             kept AS (SELECT * FROM u WHERE op IS NULL OR op = 'open' UNION ALL \
             SELECT u.* FROM u JOIN closing \
             ON closing.account_id = u.a AND closing.invocation_id = u.i WHERE u.op <> 'open'), \
             counted AS (SELECT a, s, count(*) AS n FROM kept GROUP BY a, s), \
             upserted AS (",
            sql::insert_sessions!(),
            "SELECT a, s, n, $1, $1 FROM counted ORDER BY a, s",
            sql::bump_sessions!(),
            "), closed AS (UPDATE invocations AS v SET status = closing.op, ended_at = $1, \
             end_seq = n.last_seq FROM closing JOIN upserted AS n \
             ON n.account_id = closing.account_id AND n.session_id = closing.session_id \
             WHERE v.account_id = closing.account_id AND v.invocation_id = closing.invocation_id \
             RETURNING v.account_id, v.invocation_id), \
             e AS (INSERT INTO events (",
            sql::event_columns!(),
            ") SELECT k.a, k.s, n.last_seq - count(*) OVER w + row_number() OVER (w ORDER BY k.ord), \
             k.r, k.i, k.t, k.ro, k.c::jsonb, k.m::jsonb, $1 \
             FROM kept AS k JOIN upserted AS n ON n.account_id = k.a AND n.session_id = k.s \
             WINDOW w AS (PARTITION BY k.a, k.s) ORDER BY k.a, k.s, k.ord) \
             SELECT account_id, session_id, last_seq FROM upserted \
             UNION ALL SELECT account_id, invocation_id, NULL FROM closed"
        ))
        .bind(now);
        let rows = opened
            .bind(columns.bind(query).bind(&op_column))
            .bind(&expired_column)
            .fetch_all(conn)
            .await?;
        // Sessions come back with their `last_seq`, closed invocations without one.
        let mut sessions = Vec::with_capacity(rows.len());
        let mut closed = std::collections::HashSet::new();
        for row in &rows {
            match row.try_get::<Option<Seq>, _>(2)? {
                Some(_) => sessions.push(row),
                None => {
                    closed.insert((row.try_get::<&str, _>(0)?, row.try_get::<&str, _>(1)?));
                }
            }
        }
        for &(i, o) in ops {
            if let InvocationOp::Close {
                account_id,
                invocation_id,
                ..
            } = o
            {
                keep[i] = closed.contains(&(account_id, invocation_id));
            }
        }
        let counts = plan::session_counts(batch, &keep);
        let last_seqs = returned_last_seqs(sessions, &counts)?;
        let seqs = plan::assign_seqs(batch, &keep, &counts, &last_seqs)?;
        Ok(Appended::at(seqs, now))
    }

    /// Commits `batch` by the shortest way it allows.
    async fn append_with(
        &self,
        conn: &mut PgConnection,
        batch: &[NewEvent],
        ops: &[(usize, InvocationOp<'_>)],
        claims: &OpenClaims,
    ) -> Result<Appended, StoreError> {
        let now = plan::commit_time();
        // A batch with webhook events takes the transaction below: its outbox rows depend
        // on which terminal statuses are kept, known only once the closes are settled.
        let routes = self.webhooks.get();
        if batch.len() <= INSERT_CHUNK && !outbox::touches(&routes, batch) {
            if ops.is_empty() {
                return self.append_plain(conn, batch, now).await;
            }
            if plan::one_op_per_invocation(ops) {
                return self.append_in_one(conn, batch, ops, claims, now).await;
            }
        }
        // An invocation touched twice (the outcome depends on the order), or more events
        // than one insert takes: a transaction, one statement per step.
        let mut tx = conn.begin().await?;

        // Invocations first: which terminal events survive decides the seqs. Under READ
        // COMMITTED a close that waited for another transaction's close re-checks
        // `status` after it commits, finds it no longer open and updates nothing, so
        // racing closers (across gateways too) end an invocation once.
        let mut keep = vec![true; batch.len()];
        let closed = if plan::one_op_per_invocation(ops) {
            settle_in_bulk(&mut tx, ops, claims, now, &mut keep).await?
        } else {
            settle_one_by_one(&mut tx, ops, claims, now, &mut keep).await?
        };

        // One statement creates or bumps every session of the batch. The row lock each
        // bump takes is held to commit, so concurrent writers of a session (in any
        // process) get disjoint seq ranges; rows are locked in key order (`counts` is
        // sorted) so two writers never wait on each other in a cycle.
        let counts = plan::session_counts(batch, &keep);
        let mut last_seqs = vec![None; counts.len()];
        if !counts.is_empty() {
            let (accounts, sessions, ns) = session_columns(&counts);
            let rows = sqlx::query(upsert_sessions!())
                .bind(&accounts)
                .bind(&sessions)
                .bind(&ns)
                .bind(now)
                .fetch_all(&mut *tx)
                .await?;
            last_seqs = returned_last_seqs(&rows, &counts)?;
        }
        if !closed.is_empty() {
            // Where the closed invocations' events end: their sessions' new `last_seq`,
            // written to the rows the closes updated, found by `ctid` (see `append_in_one`).
            let mut ends = Vec::with_capacity(closed.len());
            let mut rows = Vec::with_capacity(closed.len());
            for (key, row) in closed {
                let end = plan::session_index(&counts, key).and_then(|i| last_seqs[i]);
                ends.push(end.ok_or_else(|| {
                    StoreError::Corrupt("a closed invocation's session was not upserted".into())
                })?);
                rows.push(row);
            }
            sqlx::query(
                "UPDATE invocations SET end_seq = c.e \
                 FROM UNNEST($1::text[], $2::bigint[]) AS c(row_id, e) \
                 WHERE invocations.ctid = c.row_id::tid",
            )
            .bind(&rows)
            .bind(&ends)
            .execute(&mut *tx)
            .await?;
        }
        let seqs = plan::assign_seqs(batch, &keep, &counts, &last_seqs)?;

        // Column arrays through UNNEST: one prepared statement whatever the batch size,
        // and far fewer bind parameters than a multi-row VALUES list.
        let mut rows: Vec<(&NewEvent, Seq)> = batch
            .iter()
            .zip(&seqs)
            .filter_map(|(event, seq)| Some((event, (*seq)?)))
            .collect();
        // Seqs are assigned already, so the insert order is free: session by session, each
        // index takes its entries at one spot at a time instead of hopping between pages.
        rows.sort_by(|(a, a_seq), (b, b_seq)| {
            (&a.account_id, &a.session_id, a_seq).cmp(&(&b.account_id, &b.session_id, b_seq))
        });
        for chunk in rows.chunks(INSERT_CHUNK) {
            let mut columns = EventColumns::with_capacity(chunk.len());
            for (event, seq) in chunk {
                columns.push(event, *seq);
            }
            let query = sqlx::query(concat!(
                "INSERT INTO events (",
                sql::event_columns!(),
                ") SELECT a, s, q, r, i, t, ro, c::jsonb, m::jsonb, $10 FROM UNNEST(\
                 $1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[], \
                 $7::text[], $8::text[], $9::text[]) AS u(a, s, q, r, i, t, ro, c, m)"
            ));
            columns.bind(query).bind(now).execute(&mut *tx).await?;
        }
        insert_outgoing(&mut tx, &outbox::rows_of(&routes, batch, &keep, now)).await?;
        tx.commit().await?;
        Ok(Appended::at(seqs, now))
    }

    /// The fresh claims `ops` open, by the position of the event that opens each.
    fn claims_opened(&self, len: usize, ops: &[(usize, InvocationOp<'_>)]) -> OpenClaims {
        let mut claims = OpenClaims::new();
        for &(i, op) in ops {
            if let InvocationOp::Open {
                account_id,
                invocation_id,
                session_id,
                run_id,
            } = op
            {
                if let Some(claim) = self
                    .pending
                    .get(account_id, invocation_id, session_id, run_id)
                {
                    claims.resize(len, None);
                    claims[i] = Some(claim);
                }
            }
        }
        claims
    }

    /// The connection pool, for operator queries (such as the `session_events_readable`
    /// view) that the `Store` trait does not cover.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

/// A PostgreSQL store as errors and logs name it: host, port and database, never the
/// credentials.
/// Writes webhook outbox rows in the caller's transaction (see [`outbox::push_insert`]).
pub(crate) async fn insert_outgoing(
    tx: &mut sqlx::Transaction<'_, Postgres>,
    rows: &[crate::outbox::Outgoing],
) -> Result<(), StoreError> {
    for row in rows {
        let mut insert = QueryBuilder::<Postgres>::new("");
        outbox::push_insert(&mut insert, row);
        insert.build().execute(&mut **tx).await?;
    }
    Ok(())
}

pub(crate) fn name(host_port: &str, database: Option<&str>) -> String {
    match database {
        Some(db) => format!("PostgreSQL store at {host_port} (database {db})"),
        None => format!("PostgreSQL store at {host_port}"),
    }
}

#[async_trait]
impl Store for PgStore {
    async fn close(&self) {
        self.pool.close().await
    }

    fn backend(&self) -> &'static str {
        "postgres"
    }

    fn describe(&self) -> String {
        let options = self.pool.connect_options();
        let host = match options.get_host() {
            h if h.contains(':') => format!("[{h}]"),
            h => h.to_owned(),
        };
        name(
            &format!("{host}:{}", options.get_port()),
            options.get_database(),
        )
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn migrated_at(&self, description: &str) -> Result<Option<DateTime<Utc>>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT installed_on FROM _sqlx_migrations WHERE description = $1 AND success",
        )
        .bind(description)
        .fetch_optional(&self.pool)
        .await?)
    }

    async fn append_seqs(&self, batch: &mut [NewEvent]) -> Result<Appended, StoreError> {
        replace_nuls(batch);
        let batch: &[NewEvent] = batch;
        if batch.is_empty() {
            return Ok(Appended::default());
        }
        let ops = plan::invocation_ops(batch);
        let claims = self.claims_opened(batch.len(), &ops);
        let mut turn = self.write_turn().await?;
        let appended = self.append_with(turn.conn(), batch, &ops, &claims).await?;
        turn.finish();
        if self.statistics.appended(batch.len()) {
            analyze(&self.pool);
        }
        if claims.is_empty() {
            return Ok(appended);
        }
        self.pending
            .written(ops.iter().filter_map(|&(i, op)| match op {
                InvocationOp::Open {
                    account_id,
                    invocation_id,
                    ..
                } if claim_at(&claims, i).is_some() => Some((account_id, invocation_id)),
                _ => None,
            }));
        Ok(appended)
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
            &listing::POSTGRES,
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
        // The account and session are the query's own: neither sent nor decoded per row.
        let mut select =
            QueryBuilder::<Postgres>::new(concat!("SELECT ", sql::event_value_columns!()));
        sql::push_events_read(&mut select, query);
        let rows = select.build().fetch_all(&self.pool).await?;
        rows.iter()
            .map(|row| event_from_row(&query.account_id, &query.session_id, row))
            .collect()
    }

    async fn count_events(&self, account_id: &str, session_id: &str) -> Result<i64, StoreError> {
        let count = sql::keyed(sql::COUNT_EVENTS, account_id, session_id);
        Ok(count.fetch_one(&self.pool).await?.try_get(0)?)
    }

    async fn create_session(&self, first: &NewEvent) -> Result<Option<Event>, StoreError> {
        let mut first = first.clone();
        replace_nuls(std::slice::from_mut(&mut first));
        let now = plan::commit_time();
        // A pooled connection: a session's creation is rare, and the write connection's
        // turns belong to the stream of commits.
        let mut tx = self.pool.begin().await?;
        let created = sql::keyed(sql::CREATE_SESSION, &first.account_id, &first.session_id)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        if created.rows_affected() == 0 {
            return Ok(None);
        }
        sqlx::query(concat!(
            "INSERT INTO events (",
            sql::event_columns!(),
            ") VALUES ($1, $2, 1, $3, $4, $5, $6, $7::jsonb, $8::jsonb, $9)"
        ))
        .bind(&first.account_id)
        .bind(&first.session_id)
        .bind(first.run_id.as_deref())
        .bind(first.invocation_id.as_deref())
        .bind(first.event_type.as_str())
        .bind(first.role.as_deref())
        .bind(plan::json_text(&first.content))
        .bind(plan::json_text(&first.metadata))
        .bind(now)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Some(Event::committed(first, 1, now)))
    }

    async fn checkpoint_event(
        &self,
        account_id: &str,
        session_id: &str,
        checkpoint_id: Option<&str>,
        until_seq: Option<Seq>,
    ) -> Result<Option<Event>, StoreError> {
        let until = until_seq.unwrap_or(Seq::MAX);
        // A lookup by id has no order: checkpoint ids are unique (Tether makes them), and
        // without one the planner walks `events_checkpoint_ids` instead of the markers.
        let row = match checkpoint_id {
            Some(id) => sqlx::query(concat!(
                "SELECT ",
                sql::event_value_columns!(),
                " FROM events WHERE account_id = $1 AND session_id = $2 \
                 AND event_type = 'run_checkpoint' AND (content_json ->> 'checkpoint_id') = $3 \
                 AND seq <= $4 LIMIT 1"
            ))
            .bind(account_id)
            .bind(session_id)
            .bind(id)
            .bind(until),
            None => sqlx::query(concat!(
                "SELECT ",
                sql::event_value_columns!(),
                " FROM events WHERE account_id = $1 AND session_id = $2 AND ",
                sql::markers_condition!(),
                " AND event_type = 'run_checkpoint' AND seq <= $3 ORDER BY seq DESC LIMIT 1"
            ))
            .bind(account_id)
            .bind(session_id)
            .bind(until),
        }
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| event_from_row(account_id, session_id, &r))
            .transpose()
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
        let done = sql::keyed(sql::SET_AGENT_REF, account_id, invocation_id)
            .bind(agent_ref)
            .execute(&self.pool)
            .await?;
        if done.rows_affected() == 0 {
            // A fresh claim whose `in_progress` is not committed yet: its append writes it.
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
        if claim.fresh {
            return Ok(self.pending.grant(claim));
        }
        // Serialised per session across replicas by an advisory lock, inside the function
        // (migration 0005): one round trip.
        let busy = sqlx::query(
            "SELECT busy_run_id, busy_invocation_id \
             FROM tether_claim($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(claim.account_id)
        .bind(claim.session_id)
        .bind(claim.run_id)
        .bind(claim.invocation_id)
        .bind(claim.owner)
        .bind(claim.lease.as_secs_f64())
        .bind(plan::commit_time())
        .fetch_optional(&self.pool)
        .await?;
        Ok(match busy {
            Some(row) => Claimed::Busy {
                run_id: row.try_get(0)?,
                invocation_id: row.try_get(1)?,
            },
            None => Claimed::Granted,
        })
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
        // Claims not written yet first: one written between the two looks is found by the
        // update, since its claim is forgotten only once its row is committed.
        let mut renewed = self.pending.renew(owner, invocation_ids, lease);
        let rows = sqlx::query(
            "UPDATE invocations SET lease_expires_at = now() + make_interval(secs => $3) \
             WHERE owner = $1 AND invocation_id = ANY($2) AND status = 'in_progress' \
             RETURNING invocation_id, cancel_requested",
        )
        .bind(owner)
        .bind(invocation_ids)
        .bind(lease.as_secs_f64())
        .fetch_all(&self.pool)
        .await?;
        for r in &rows {
            let invocation_id: String = r.try_get(0)?;
            if !renewed.iter().any(|p| p.invocation_id == invocation_id) {
                renewed.push(Renewed {
                    invocation_id,
                    cancel_requested: r.try_get(1)?,
                });
            }
        }
        Ok(renewed)
    }

    async fn abandoned_invocations(
        &self,
        restarted_owner: Option<&str>,
    ) -> Result<Vec<Invocation>, StoreError> {
        let rows = sqlx::query(concat!(
            sql::select_open_invocations!(),
            "AND (lease_expires_at <= now() \
             OR ($1::text IS NOT NULL AND (owner IS NULL OR owner = $1))) \
             ORDER BY started_at, account_id, invocation_id"
        ))
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
            "SELECT owner, COALESCE(lease_expires_at > now(), FALSE), cancel_requested \
             FROM invocations WHERE account_id = $1 AND invocation_id = $2",
        )
        .bind(account_id)
        .bind(invocation_id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| {
            Ok(Lease {
                owner: r.try_get(0)?,
                live: r.try_get(1)?,
                cancel_requested: r.try_get(2)?,
            })
        })
        .transpose()
    }

    async fn request_cancel(
        &self,
        account_id: &str,
        invocation_id: &str,
    ) -> Result<bool, StoreError> {
        let done = sql::keyed(sql::REQUEST_CANCEL, account_id, invocation_id)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn notify(&self, channel: &str, payloads: &[String]) -> Result<(), StoreError> {
        if payloads.is_empty() {
            return Ok(());
        }
        // A pooled connection with no transaction open: the notifications go out at once
        // and never hold a lock a commit waits for.
        sqlx::query("SELECT pg_notify($1, p) FROM UNNEST($2::text[]) AS t(p)")
            .bind(channel)
            .bind(payloads)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn import_session(&self, events: &[Event]) -> Result<Imported, StoreError> {
        let invocations =
            import::invocations(events).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        // What jsonb can hold, as appends store it (see `replace_nuls`).
        let mut events = std::borrow::Cow::Borrowed(events);
        if events
            .iter()
            .any(|e| has_nul(&e.content) || has_nul(&e.metadata))
        {
            for e in events.to_mut() {
                replace_nul(&mut e.content);
                replace_nul(&mut e.metadata);
            }
        }
        let json = sql::import_json(&events);
        let mut turn = self.write_turn().await?;
        let conn = turn.conn();
        let cast = "::jsonb";
        let imported = sql::import_in_transaction!(
            conn,
            "BEGIN",
            Postgres,
            cast,
            &events,
            &json,
            &invocations
        )
        .await?;
        // Failed, the turn drops the connection: its transaction may be left open.
        turn.finish();
        Ok(imported)
    }

    async fn put_attachment(&self, attachment: &Attachment) -> Result<(), StoreError> {
        sql::put_attachment(attachment).execute(&self.pool).await?;
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
        let claimed = idempotency::claim(record, since, replacing)
            .execute(&self.pool)
            .await?;
        if claimed.rows_affected() == 1 {
            return Ok(None);
        }
        let row = idempotency::get(&record.account_id, &record.key)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| idempotency::from_row(&r)).transpose()
    }

    async fn release_idempotency_key(
        &self,
        account_id: &str,
        key: &str,
        run_id: &str,
    ) -> Result<(), StoreError> {
        idempotency::release(account_id, key, run_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn put_approval(&self, approval: &Approval) -> Result<(), StoreError> {
        approvals::insert::<Postgres, _>(&self.pool, approval).await
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
        approvals::get::<Postgres, _>(&self.pool, account_id, session_id, request_id).await
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
        let key = (account_id, session_id, request_id);
        approvals::resolve::<Postgres, _>(&self.pool, key, decision, resolution, at).await
    }

    async fn drop_pending_approvals(
        &self,
        account_id: &str,
        session_id: &str,
    ) -> Result<u64, StoreError> {
        approvals::drop_pending::<Postgres, _>(&self.pool, account_id, session_id).await
    }

    async fn resolve_expired_approvals(
        &self,
        now: DateTime<Utc>,
        decision: Decision,
    ) -> Result<Vec<Approval>, StoreError> {
        approvals::resolve_expired::<Postgres, _>(&self.pool, now, decision).await
    }

    async fn put_feedback(&self, record: &Feedback) -> Result<(), StoreError> {
        feedback::insert(record).execute(&self.pool).await?;
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
        archive::set::<Postgres, _>(&self.pool, account_id, session_id, at).await
    }

    async fn archived_at(
        &self,
        account_id: &str,
        session_id: &str,
    ) -> Result<Option<DateTime<Utc>>, StoreError> {
        archive::archived_at::<Postgres, _>(&self.pool, account_id, session_id).await
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
        retention::claim::<Postgres, _>(&self.pool, owner, now, until).await
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
        retention::prune::<Postgres, _>(&self.pool, before).await
    }

    fn route_webhooks(&self, routes: Vec<crate::outbox::Route>) {
        self.webhooks.set(routes);
    }

    async fn claim_webhook_deliveries(
        &self,
        endpoint: &str,
        owner: &str,
        lease: Duration,
        limit: i64,
    ) -> Result<Vec<crate::outbox::Claimed>, StoreError> {
        let now = Utc::now().timestamp_millis();
        let until = now + i64::try_from(lease.as_millis()).unwrap_or(i64::MAX / 2);
        // An idle worker's poll is a read; only a due row takes row locks.
        if outbox::due::<Postgres>(endpoint, now)
            .fetch_optional(&self.pool)
            .await?
            .is_none()
        {
            return Ok(Vec::new());
        }
        let rows = outbox::claim::<Postgres>(endpoint, owner, now, until, limit)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(outbox::claimed_from_row).collect()
    }

    async fn release_webhook_leases(&self, owner: &str) -> Result<(), StoreError> {
        outbox::release::<Postgres>(owner)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn finish_webhook_delivery(
        &self,
        endpoint: &str,
        event_id: &str,
        owner: &str,
        attempt: &crate::outbox::Attempt,
    ) -> Result<bool, StoreError> {
        let done = outbox::finish::<Postgres>(endpoint, event_id, owner, attempt)
            .execute(&self.pool)
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
        // Pooled connections: removals are rare, and the write connection's turns
        // belong to the stream of commits. The steps are `removal`'s (see there).
        let dialect = &removal::POSTGRES;
        let account = removal.account_id.as_str();
        let mut started = Instant::now();
        let mut tx = self.pool.begin().await?;
        let plan = match removal::plan::<Postgres>(&mut tx, dialect, removal).await? {
            Ok(plan) => plan,
            Err(refused) => return Ok(refused),
        };
        let mut removed = plan.removed(removal, now);
        if plan.is_small() {
            let purge = removal::purge::<Postgres>(
                &mut tx,
                dialect,
                account,
                &plan.sessions,
                now,
                &mut removed,
            );
            if let Some(refused) = purge.await? {
                return Ok(refused);
            }
            removal::drop_files::<Postgres>(&mut tx, account, &plan.files, &mut removed).await?;
        } else {
            let mark =
                removal::mark::<Postgres>(&mut tx, dialect, removal, &plan, now, &mut removed);
            if let Some(refused) = mark.await? {
                return Ok(refused);
            }
            tx.commit().await?;
            // Each step in a transaction of its own, after a pause as long as the last.
            for step in plan.steps() {
                loop {
                    give_way(started.elapsed()).await;
                    started = Instant::now();
                    let mut tx = self.pool.begin().await?;
                    let done = match step {
                        Step::Purge(sessions) => {
                            let purge = removal::purge::<Postgres>(
                                &mut tx,
                                dialect,
                                account,
                                sessions,
                                now,
                                &mut removed,
                            );
                            purge.await?.map_or(Shrunk::Done, Shrunk::Refused)
                        }
                        Step::Shrink(session) => {
                            let shrink = removal::shrink::<Postgres>(
                                &mut tx,
                                dialect,
                                account,
                                session,
                                now,
                                &mut removed,
                            );
                            shrink.await?
                        }
                    };
                    match done {
                        Shrunk::Refused(refused) => return Ok(refused),
                        Shrunk::More => tx.commit().await?,
                        Shrunk::Done => {
                            tx.commit().await?;
                            break;
                        }
                    }
                }
            }
            give_way(started.elapsed()).await;
            tx = self.pool.begin().await?;
        }
        removal::audit::<Postgres>(&mut tx, removal, &removed).await?;
        tx.commit().await?;
        Ok(Deletion::Removed(removed))
    }
}

/// One chunk of events, column by column, as the UNNEST insert binds them.
struct EventColumns<'a> {
    account_id: Vec<&'a str>,
    session_id: Vec<&'a str>,
    /// The seq; in `append_plain` its distance below the session's new `last_seq`, in
    /// `append_in_one` the event's place in its batch.
    seq: Vec<i64>,
    run_id: Vec<Option<&'a str>>,
    invocation_id: Vec<Option<&'a str>>,
    event_type: Vec<&'static str>,
    role: Vec<Option<&'a str>>,
    /// JSON text; the server parses it into jsonb.
    content: Vec<String>,
    metadata: Vec<String>,
}

impl<'a> EventColumns<'a> {
    fn with_capacity(n: usize) -> Self {
        EventColumns {
            account_id: Vec::with_capacity(n),
            session_id: Vec::with_capacity(n),
            seq: Vec::with_capacity(n),
            run_id: Vec::with_capacity(n),
            invocation_id: Vec::with_capacity(n),
            event_type: Vec::with_capacity(n),
            role: Vec::with_capacity(n),
            content: Vec::with_capacity(n),
            metadata: Vec::with_capacity(n),
        }
    }

    /// Binds the nine arrays, in this order, as the query's next parameters.
    fn bind<'q>(
        &'q self,
        query: Query<'q, Postgres, PgArguments>,
    ) -> Query<'q, Postgres, PgArguments> {
        query
            .bind(&self.account_id)
            .bind(&self.session_id)
            .bind(&self.seq)
            .bind(&self.run_id)
            .bind(&self.invocation_id)
            .bind(&self.event_type)
            .bind(&self.role)
            .bind(&self.content)
            .bind(&self.metadata)
    }

    fn push(&mut self, event: &'a NewEvent, seq: Seq) {
        self.account_id.push(&event.account_id);
        self.session_id.push(&event.session_id);
        self.seq.push(seq);
        self.run_id.push(event.run_id.as_deref());
        self.invocation_id.push(event.invocation_id.as_deref());
        self.event_type.push(event.event_type.as_str());
        self.role.push(event.role.as_deref());
        self.content.push(plan::json_text(&event.content));
        self.metadata.push(plan::json_text(&event.metadata));
    }
}

/// What a fresh claim writes into its invocation's row when the append opens it, one entry
/// per opened row (all `None` for an open without one).
#[derive(Default)]
struct OpenedColumns<'a> {
    owner: Vec<Option<&'a str>>,
    lease_seconds: Vec<Option<f64>>,
    agent_ref: Vec<Option<&'a str>>,
}

impl<'a> OpenedColumns<'a> {
    fn push(&mut self, claim: Option<&'a PendingClaim>) {
        self.owner.push(claim.map(|c| c.owner.as_str()));
        self.lease_seconds
            .push(claim.map(|c| c.lease.as_secs_f64()));
        self.agent_ref
            .push(claim.and_then(|c| c.agent_ref.as_deref()));
    }

    /// Binds the three arrays, in this order, as the query's next parameters.
    fn bind<'q>(
        &'q self,
        query: Query<'q, Postgres, PgArguments>,
    ) -> Query<'q, Postgres, PgArguments> {
        query
            .bind(&self.owner)
            .bind(&self.lease_seconds)
            .bind(&self.agent_ref)
    }
}

/// Inserts the invocations of `opens` (account, invocation, session, run), with their
/// claims' owner and lease where `opened` has one: a row a claim inserted already stays.
/// Each records its session's `last_seq` as where its events begin: the insert runs
/// before the sessions' upsert, and a `last_seq` read from an older snapshot is lower,
/// which is still a bound.
async fn insert_opens(
    conn: &mut PgConnection,
    opens: &[[&str; 4]],
    opened: &OpenedColumns<'_>,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let column = |k: usize| opens.iter().map(|o| o[k]).collect::<Vec<_>>();
    let query = sqlx::query(
        "INSERT INTO invocations (account_id, invocation_id, session_id, run_id, status, \
         started_at, owner, lease_expires_at, agent_ref, after_seq) \
         SELECT a, i, s, r, 'in_progress', $1, o, now() + make_interval(secs => l), g, \
         coalesce((SELECT last_seq FROM sessions WHERE account_id = a AND session_id = s), 0) \
         FROM UNNEST($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], \
         $7::float8[], $8::text[]) AS t(a, i, s, r, o, l, g) \
         ON CONFLICT (account_id, invocation_id) DO NOTHING",
    )
    .bind(now)
    .bind(column(0))
    .bind(column(1))
    .bind(column(2))
    .bind(column(3));
    opened.bind(query).execute(conn).await?;
    Ok(())
}

/// `counts` as the upsert's three column arrays: accounts, sessions, event counts.
fn session_columns<'a>(
    counts: &[(plan::SessionKey<'a>, i64)],
) -> (Vec<&'a str>, Vec<&'a str>, Vec<i64>) {
    let accounts = counts.iter().map(|((a, _), _)| *a).collect();
    let sessions = counts.iter().map(|((_, s), _)| *s).collect();
    let ns = counts.iter().map(|(_, n)| *n).collect();
    (accounts, sessions, ns)
}

/// Each session's `last_seq` from the rows an upsert returned, parallel to `counts`.
fn returned_last_seqs<'r>(
    rows: impl IntoIterator<Item = &'r PgRow>,
    counts: &[(plan::SessionKey<'_>, i64)],
) -> Result<Vec<Option<Seq>>, StoreError> {
    let mut last_seqs = vec![None; counts.len()];
    for row in rows {
        let account_id: &str = row.try_get(0)?;
        let session_id: &str = row.try_get(1)?;
        let i = plan::session_index(counts, (account_id, session_id)).ok_or_else(|| {
            StoreError::Corrupt("upsert returned a session not in the batch".into())
        })?;
        last_seqs[i] = Some(row.try_get(2)?);
    }
    Ok(last_seqs)
}

/// `jsonb` cannot hold U+0000, and one such character (in a tool's output, say) would
/// fail the whole batch again on every retry. It becomes U+FFFD instead, in the caller's
/// events, so they still equal what is stored.
pub(crate) fn replace_nuls(batch: &mut [NewEvent]) {
    for event in batch {
        if has_nul(&event.content) {
            replace_nul(&mut event.content);
        }
        if has_nul(&event.metadata) {
            replace_nul(&mut event.metadata);
        }
    }
}

fn has_nul(value: &Value) -> bool {
    match value {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(has_nul),
        Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

fn replace_nul(value: &mut Value) {
    match value {
        Value::String(s) => {
            if s.contains('\0') {
                *s = s.replace('\0', "\u{FFFD}");
            }
        }
        Value::Array(items) => items.iter_mut().for_each(replace_nul),
        Value::Object(map) => {
            *map = std::mem::take(map)
                .into_iter()
                .map(|(k, mut v)| {
                    replace_nul(&mut v);
                    (k.replace('\0', "\u{FFFD}"), v)
                })
                .collect();
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// `url` with any password masked, fit for error messages and logs.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => {
            let userinfo = &rest[..at];
            let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
            format!("{scheme}://{user}:***{}", &rest[at..])
        }
        None => url.to_owned(),
    }
}

/// An event of the given session from a row of `sql::event_value_columns!()`, read by position: by name,
/// each column costs a hash lookup on every row of a replay.
fn event_from_row(account_id: &str, session_id: &str, row: &PgRow) -> Result<Event, StoreError> {
    Ok(Event {
        account_id: account_id.to_owned(),
        session_id: session_id.to_owned(),
        seq: row.try_get(0)?,
        run_id: row.try_get(1)?,
        invocation_id: row.try_get(2)?,
        event_type: sql::parse_event_type(row.try_get(3)?)?,
        role: row.try_get(4)?,
        content: row.try_get::<Json<Value>, _>(5)?.0,
        metadata: row.try_get::<Json<Value>, _>(6)?.0,
        created_at: row.try_get(7)?,
    })
}

/// The invocations a transaction closed: each one's session and the `ctid` of its row.
type Closed<'a> = Vec<(plan::SessionKey<'a>, String)>;

/// Settles invocation operations in order, one statement each (see
/// [`plan::invocation_ops`]); each keeps or drops the event it comes from.
async fn settle_one_by_one<'a>(
    conn: &mut PgConnection,
    ops: &[(usize, InvocationOp<'a>)],
    claims: &OpenClaims,
    now: DateTime<Utc>,
    keep: &mut [bool],
) -> Result<Closed<'a>, StoreError> {
    let mut closed = Vec::new();
    for &(i, op) in ops {
        keep[i] = match op {
            InvocationOp::Open {
                account_id,
                invocation_id,
                session_id,
                run_id,
            } => {
                let mut opened = OpenedColumns::default();
                opened.push(claim_at(claims, i));
                let open = [account_id, invocation_id, session_id, run_id];
                insert_opens(&mut *conn, &[open], &opened, now).await?;
                true
            }
            InvocationOp::Close {
                account_id,
                invocation_id,
                session_id,
                status,
                if_expired,
            } => {
                let row: Option<String> = sqlx::query_scalar(concat!(
                    sql::close_invocation!(),
                    " AND (NOT $6 OR lease_expires_at <= now()) RETURNING ctid::text"
                ))
                .bind(status.as_str())
                .bind(now)
                .bind(account_id)
                .bind(invocation_id)
                .bind(session_id)
                .bind(if_expired)
                .fetch_optional(&mut *conn)
                .await?;
                let kept = row.is_some();
                closed.extend(row.map(|row| ((account_id, session_id), row)));
                kept
            }
            InvocationOp::Drop => false,
        };
    }
    Ok(closed)
}

/// Settles operations on distinct invocations (see [`plan::one_op_per_invocation`]) with
/// one statement for every close and one for every open.
async fn settle_in_bulk<'a>(
    conn: &mut PgConnection,
    ops: &[(usize, InvocationOp<'a>)],
    claims: &OpenClaims,
    now: DateTime<Utc>,
    keep: &mut [bool],
) -> Result<Closed<'a>, StoreError> {
    let mut closed = Vec::new();
    let mut closes: [Vec<&str>; 4] = Default::default();
    let mut closes_if_expired = Vec::new();
    let mut opens = Vec::new();
    let mut opened = OpenedColumns::default();
    for &(i, op) in ops {
        match op {
            InvocationOp::Close {
                account_id,
                invocation_id,
                session_id,
                status,
                if_expired,
            } => {
                for (column, value) in
                    closes
                        .iter_mut()
                        .zip([account_id, invocation_id, session_id, status.as_str()])
                {
                    column.push(value);
                }
                closes_if_expired.push(if_expired);
            }
            InvocationOp::Open {
                account_id,
                invocation_id,
                session_id,
                run_id,
            } => {
                opens.push([account_id, invocation_id, session_id, run_id]);
                opened.push(claim_at(claims, i));
            }
            InvocationOp::Drop => keep[i] = false,
        }
    }
    if !closes[0].is_empty() {
        // Rows are locked in key order (the ORDER BY before FOR UPDATE), as one by one, so
        // two writers closing the same invocations cannot wait on each other in a cycle.
        // A row another transaction closed meanwhile fails the re-checked `status` and is
        // left out: racing closers still end an invocation once.
        let rows = sqlx::query(
            "WITH open AS (\
                SELECT i.account_id, i.invocation_id, t.status \
                FROM (SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], \
                $6::bool[]) AS t(account_id, invocation_id, session_id, status, if_expired) \
                ORDER BY account_id, invocation_id) AS t \
                CROSS JOIN LATERAL (SELECT account_id, invocation_id FROM invocations \
                WHERE account_id = t.account_id AND invocation_id = t.invocation_id \
                AND session_id = t.session_id AND status = 'in_progress' \
                AND (NOT t.if_expired OR lease_expires_at <= now()) FOR UPDATE) AS i) \
             UPDATE invocations AS i SET status = open.status, ended_at = $5 FROM open \
             WHERE i.account_id = open.account_id AND i.invocation_id = open.invocation_id \
             RETURNING i.account_id, i.invocation_id, i.ctid::text",
        )
        .bind(&closes[0])
        .bind(&closes[1])
        .bind(&closes[2])
        .bind(&closes[3])
        .bind(now)
        .bind(&closes_if_expired)
        .fetch_all(&mut *conn)
        .await?;
        let mut rows_of = HashMap::new();
        for row in &rows {
            let key: (String, String) = (row.try_get(0)?, row.try_get(1)?);
            rows_of.insert(key, row.try_get::<String, _>(2)?);
        }
        for &(i, op) in ops {
            if let InvocationOp::Close {
                account_id,
                invocation_id,
                session_id,
                ..
            } = op
            {
                let row = rows_of.remove(&(account_id.to_owned(), invocation_id.to_owned()));
                keep[i] = row.is_some();
                closed.extend(row.map(|row| ((account_id, session_id), row)));
            }
        }
    }
    if !opens.is_empty() {
        insert_opens(conn, &opens, &opened, now).await?;
    }
    Ok(closed)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::event::EventType;

    /// `TEST_DATABASE_URL`; `None` (skip) without it, except in CI, which needs it.
    fn test_url() -> Option<String> {
        match std::env::var("TEST_DATABASE_URL") {
            Ok(url) if !url.is_empty() => Some(url),
            _ if std::env::var_os("CI").is_some() => panic!("TEST_DATABASE_URL must be set in CI"),
            _ => {
                eprintln!("TEST_DATABASE_URL is not set: skipping");
                None
            }
        }
    }

    /// The backend process of the connection the next write turn gets.
    async fn writer_pid(store: &PgStore) -> i32 {
        let mut turn = store.write_turn().await.unwrap();
        let pid = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(turn.conn())
            .await
            .unwrap();
        turn.finish();
        pid
    }

    /// The write connection is replaced once it is older than its lifetime (and the old
    /// one is closed), and kept while it is younger.
    #[tokio::test]
    async fn the_write_connection_is_replaced_when_it_is_old() {
        let Some(url) = test_url() else {
            return;
        };
        let mut store = PgStore::connect(&url).await.unwrap();
        let first = writer_pid(&store).await;
        assert_eq!(
            writer_pid(&store).await,
            first,
            "a young connection is kept"
        );
        store.writer_lifetime = Duration::ZERO;
        let second = writer_pid(&store).await;
        assert_ne!(second, first, "an old connection is replaced");
        let gone = async {
            loop {
                let alive: bool = sqlx::query_scalar(
                    "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)",
                )
                .bind(first)
                .fetch_one(store.pool())
                .await
                .unwrap();
                if !alive {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(5), gone)
            .await
            .expect("the replaced connection was closed");
    }

    #[test]
    fn redact_masks_the_password_only() {
        assert_eq!(
            redact("postgres://tether:s3cret@db:5432/log?sslmode=require"),
            "postgres://tether:***@db:5432/log?sslmode=require"
        );
        assert_eq!(redact("postgres://db/log"), "postgres://db/log");
        assert_eq!(redact("not a url"), "not a url");
    }

    #[test]
    fn nul_characters_are_replaced_keys_included() {
        let clean = vec![NewEvent::new(
            "a",
            "s",
            EventType::Message,
            json!({"text": "ok"}),
        )];
        let mut fixed = clean.clone();
        replace_nuls(&mut fixed);
        assert_eq!(fixed, clean);
        let mut fixed = vec![NewEvent::new(
            "a",
            "s",
            EventType::ToolResult,
            json!({"output": "a\u{0}b", "k\u{0}": [1, "\u{0}"]}),
        )];
        replace_nuls(&mut fixed);
        assert_eq!(
            fixed[0].content,
            json!({"output": "a\u{FFFD}b", "k\u{FFFD}": [1, "\u{FFFD}"]})
        );
    }

    /// Analyzed once at the first threshold, whatever the batches that cross it; with
    /// autovacuum off, again at every tenfold growth.
    #[test]
    fn statistics_are_gathered_once_per_threshold() {
        let stats = |repeat| Statistics {
            appended: AtomicU64::new(0),
            next: AtomicU64::new(FIRST_ANALYZE),
            repeat,
        };
        let once = stats(false);
        assert!(!once.appended(999));
        assert!(once.appended(1));
        assert!(!once.appended(1));
        assert!(!once.appended(1_000_000));
        let growing = stats(true);
        assert!(growing.appended(1_500));
        assert!(!growing.appended(13_000), "next at 15,000");
        assert!(growing.appended(500));
        assert!(!growing.appended(1));
    }

    /// A fresh database's tables are analyzed once its first thousand events are in, and
    /// a store that finds them analyzed (and autovacuum on) does not analyze them again.
    #[tokio::test]
    async fn a_fresh_databases_tables_are_analyzed_after_its_first_events() {
        let Some(url) = test_url() else {
            return;
        };
        let admin = PgPool::connect(&url).await.unwrap();
        let name = format!("tether_analyze_{}", std::process::id());
        let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name}"))
            .execute(&admin)
            .await;
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&admin)
            .await
            .unwrap();
        let fresh = match url.rsplit_once('/') {
            Some((server, _)) => format!("{server}/{name}"),
            None => panic!("TEST_DATABASE_URL names no database: {url}"),
        };
        let store = PgStore::connect(&fresh).await.unwrap();
        let analyzed = || async {
            sqlx::query_scalar::<_, bool>(
                "SELECT last_analyze IS NOT NULL FROM pg_stat_user_tables \
                 WHERE relid = 'events'::regclass",
            )
            .fetch_one(store.pool())
            .await
            .unwrap()
        };
        let batch = |n: usize| -> Vec<NewEvent> {
            (0..n)
                .map(|i| {
                    NewEvent::new(
                        "a",
                        &format!("s{}", i % 10),
                        EventType::Message,
                        json!({"text": "x"}),
                    )
                })
                .collect()
        };
        store
            .append(&batch(FIRST_ANALYZE as usize - 1))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!analyzed().await, "not before the first thousand events");
        store.append(&batch(1)).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !analyzed().await {
            assert!(Instant::now() < deadline, "the events table is analyzed");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let autovacuum: bool = sqlx::query_scalar("SELECT current_setting('autovacuum')::bool")
            .fetch_one(store.pool())
            .await
            .unwrap();
        let again = PgStore::connect(&fresh).await.unwrap();
        assert_eq!(
            again.statistics.next.load(Ordering::Relaxed),
            if autovacuum { u64::MAX } else { FIRST_ANALYZE },
            "analyzed tables are left to autovacuum when it is on"
        );
        drop((store, again));
        sqlx::query(&format!("DROP DATABASE {name} WITH (FORCE)"))
            .execute(&admin)
            .await
            .unwrap();
    }
}
