//! Outages that lose nothing: the PostgreSQL store behind a local SQLite journal. When
//! PostgreSQL fails an append with a transient error or does not answer in time, the
//! batch is committed to the journal instead (seqs continue per session), so runs go on
//! and persist-before-forward still holds. A probe notices PostgreSQL is back and
//! backfills the journal into it, session by session in seq order, idempotently.
//!
//! Rules that keep seqs from colliding:
//! - A session with rows in the journal is *pending*: every batch touching it goes to the
//!   journal until its backfill is done (the last backfill step and the hand-back happen
//!   under the same lock appends take).
//! - Journal seqs continue after the highest seq known for the session: what PostgreSQL
//!   returned or was read from it, and the journal's own rows.
//! - If another replica used a seq the journal also used (possible only if this replica
//!   did not know the session's newest seq, e.g. another replica's sweeper closed an
//!   expired run of the session), the backfill renumbers the journal's rows after
//!   PostgreSQL's last seq — all of them from the first taken seq on, so their order is
//!   kept; in the journal first, so a retried backfill stays idempotent — instead of
//!   letting `ON CONFLICT DO NOTHING` drop them.
//!
//! Claims while PostgreSQL is down: a claim that PostgreSQL does not answer in time (or
//! any claim while degraded) of a new session, or of any session with
//! [`JournalConfig::local_claims`] (a single replica), is granted locally when it has no
//! live run known to this replica — the invocations it claimed and has not seen end, and the journal's
//! open claims. The claim (owner, lease) is recorded in the journal and makes its
//! session pending, so the run's events commit to the journal too. The backfill inserts
//! the invocation row (owner, the lease's remainder) before the session's events. If
//! another replica opened a run in the session meanwhile, both runs stand: nothing is
//! dropped, the journal's events are renumbered after the other run's (see above), and
//! a warning names the other invocation.
//!
//! Leases: renewals are tried in PostgreSQL even while degraded, and a recovery renews
//! the leases of every run this replica drives or has yet to close (its live claims, the
//! invocations whose terminal status is only journaled) before it backfills anything, so
//! no other replica finds them expired (its sweeper waits a lease period after regaining
//! PostgreSQL itself).
//!
//! Agent handles (`set_agent_ref`) while PostgreSQL is down, or while any session is
//! pending (the invocation may exist only in the journal): the handle is recorded in the
//! journal, and applied to PostgreSQL once every pending session is backfilled (so the
//! invocation row is there). Lookups by handle consult the journal's handles too.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::sqlite::{SqlitePool, SqlitePoolOptions, SqliteSynchronous};
use sqlx::Row;

mod backfill;

use self::backfill::{backfill, Backfilled, JournalClaim};
use super::plan::{self, InvocationOp};
use super::postgres::{self, PgStore};
use super::sql;
use super::sqlite::{self, now_ms};
use crate::event::{Event, EventType, ForkPoint, NewEvent, RunStatus, Seq, Session};
use crate::removal::{Deletion, Removal, Scope};
use crate::store::{
    Appended, Approval, ApprovalFilter, Attachment, Claim, Claimed, Decision, EventQuery, Feedback,
    IdempotentRun, Imported, Invocation, Lease, Renewed, SessionFilter, Store, StoreError, Usage,
};

/// Rows backfilled per PostgreSQL transaction.
const BACKFILL_CHUNK: i64 = 1000;
/// Sessions whose newest seq is remembered; beyond this the cache is cleared (only the
/// pending sessions' entries matter for correctness, and those are kept).
const KNOWN_SESSIONS_MAX: usize = 100_000;

/// Health of the session backend as the journal sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendState {
    /// PostgreSQL takes every commit.
    Healthy = 0,
    /// PostgreSQL is unreachable: commits go to the journal.
    Degraded = 1,
    /// PostgreSQL answers again; the journal is being backfilled.
    Recovering = 2,
}

impl BackendState {
    pub fn as_str(self) -> &'static str {
        match self {
            BackendState::Healthy => "healthy",
            BackendState::Degraded => "degraded",
            BackendState::Recovering => "recovering",
        }
    }

    fn from_u8(v: u8) -> BackendState {
        match v {
            1 => BackendState::Degraded,
            2 => BackendState::Recovering,
            _ => BackendState::Healthy,
        }
    }
}

/// The process's backend state, for the metrics page (one journaled store per process).
static STATE: AtomicU8 = AtomicU8::new(BackendState::Healthy as u8);

pub fn backend_state() -> BackendState {
    BackendState::from_u8(STATE.load(Ordering::Relaxed))
}

#[derive(Clone, Debug)]
pub struct JournalConfig {
    /// How long a PostgreSQL append may take before the batch goes to the journal.
    pub append_timeout: Duration,
    /// How often PostgreSQL is probed while degraded or while the journal holds rows.
    pub probe_every: Duration,
    /// Bound of one backfill transaction.
    pub backfill_timeout: Duration,
    /// How long a PostgreSQL read may take before it fails as unreachable (a frozen
    /// connection would hold it for as long as TCP takes to notice).
    pub read_timeout: Duration,
    /// Whether a claim in an existing session is granted locally while PostgreSQL is
    /// unreachable. Safe only for a single replica: another replica may drive a live run
    /// in the session that this one cannot see, and both would number events from the
    /// same seq (clients would have been sent seqs the backfill must then change). Off,
    /// such a claim fails as unreachable; a new session's claim is granted locally
    /// either way (no other replica knows the session).
    pub local_claims: bool,
}

impl Default for JournalConfig {
    fn default() -> Self {
        JournalConfig {
            append_timeout: Duration::from_secs(2),
            probe_every: Duration::from_secs(2),
            backfill_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(10),
            local_claims: false,
        }
    }
}

type Key = (String, String);

/// A PostgreSQL store that commits to a local journal while PostgreSQL is down.
pub struct JournaledStore {
    inner: Arc<Inner>,
}

struct Inner {
    pg: PgStore,
    journal: SqlitePool,
    config: JournalConfig,
    /// Serialises appends and the backfill's hand-back of a session to PostgreSQL.
    route: tokio::sync::Mutex<()>,
    degraded: AtomicBool,
    /// Sessions with rows in the journal.
    pending: Mutex<HashSet<Key>>,
    /// Highest seq known per session.
    known: Mutex<HashMap<Key, Seq>>,
    /// Invocations this replica saw closed in PostgreSQL, so the journal does not accept
    /// a second terminal status for them (bounded like `known`).
    closed: Mutex<HashSet<Key>>,
    /// Whether an outage was logged and its recovery not yet.
    outage_logged: AtomicBool,
    /// Invocations this store granted (through PostgreSQL or locally) and has not seen
    /// end, per session, with the local deadline of their lease: the in-process part of
    /// "a live run known to this replica" for local claims.
    live: Mutex<HashMap<Key, LiveClaim>>,
    /// Serialises recording agent handles in the journal with applying them to
    /// PostgreSQL, so a handle recorded while a session is pending is never missed.
    refs: tokio::sync::Mutex<()>,
    /// The owner and lease length this replica claims and renews with (the last seen), so
    /// a recovery can renew its leases before anything else.
    renewer: Mutex<Option<(String, Duration)>>,
}

#[derive(Clone, Debug)]
struct LiveClaim {
    run_id: String,
    invocation_id: String,
    expires: std::time::Instant,
}

fn lease_ms(lease: Duration) -> i64 {
    i64::try_from(lease.as_millis()).unwrap_or(i64::MAX / 4)
}

/// Connects to PostgreSQL at `url` and opens (creating) the journal at `journal_path`.
/// Whatever a previous run left in the journal is backfilled before this returns, if
/// PostgreSQL takes it; otherwise by the probe.
pub async fn open(
    url: &str,
    journal_path: &str,
    config: JournalConfig,
) -> Result<Arc<JournaledStore>, StoreError> {
    let pg = PgStore::connect(url).await?;
    JournaledStore::new(pg, journal_path, config).await
}

impl JournaledStore {
    pub async fn new(
        pg: PgStore,
        journal_path: &str,
        config: JournalConfig,
    ) -> Result<Arc<JournaledStore>, StoreError> {
        let options = sqlite::file_options(journal_path)
            .await?
            // The journal is the only copy of what it holds: every commit is synced.
            .synchronous(SqliteSynchronous::Full);
        let journal = SqlitePoolOptions::new()
            .max_connections(2)
            .connect_with(options)
            .await?;
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS journal_events (
                account_id TEXT NOT NULL,
                session_id TEXT NOT NULL,
                seq INTEGER NOT NULL,
                run_id TEXT,
                invocation_id TEXT,
                event_type TEXT NOT NULL,
                role TEXT,
                content_json TEXT NOT NULL,
                metadata_json TEXT NOT NULL,
                created_at TEXT NOT NULL,
                PRIMARY KEY (account_id, session_id, seq)
            )",
        )
        .execute(&journal)
        .await?;
        sqlx::query(
            "CREATE INDEX IF NOT EXISTS journal_statuses ON journal_events \
             (account_id, invocation_id) WHERE event_type = 'run_status'",
        )
        .execute(&journal)
        .await?;
        // Claims granted while PostgreSQL was down (times are Unix milliseconds).
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS journal_claims (
                account_id TEXT NOT NULL,
                invocation_id TEXT NOT NULL,
                session_id TEXT NOT NULL,
                run_id TEXT NOT NULL,
                owner TEXT NOT NULL,
                claimed_at_ms INTEGER NOT NULL,
                lease_expires_ms INTEGER NOT NULL,
                PRIMARY KEY (account_id, invocation_id)
            )",
        )
        .execute(&journal)
        .await?;

        // Agent handles recorded while PostgreSQL was down or sessions were pending.
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS journal_agent_refs (
                account_id TEXT NOT NULL,
                invocation_id TEXT NOT NULL,
                agent_ref TEXT NOT NULL,
                set_at_ms INTEGER NOT NULL,
                PRIMARY KEY (account_id, invocation_id)
            )",
        )
        .execute(&journal)
        .await?;
        sqlx::query(
            "CREATE INDEX IF NOT EXISTS journal_agent_refs_by_ref ON journal_agent_refs \
             (account_id, agent_ref)",
        )
        .execute(&journal)
        .await?;

        let mut pending = HashSet::new();
        let mut known = HashMap::new();
        for row in sqlx::query(
            "SELECT account_id, session_id, MAX(seq) FROM journal_events \
             GROUP BY account_id, session_id",
        )
        .fetch_all(&journal)
        .await?
        {
            let key: Key = (row.try_get(0)?, row.try_get(1)?);
            known.insert(key.clone(), row.try_get::<i64, _>(2)?);
            pending.insert(key);
        }
        for row in sqlx::query("SELECT DISTINCT account_id, session_id FROM journal_claims")
            .fetch_all(&journal)
            .await?
        {
            pending.insert((row.try_get(0)?, row.try_get(1)?));
        }
        let refs_left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM journal_agent_refs")
            .fetch_one(&journal)
            .await?;
        let left_over = !pending.is_empty() || refs_left > 0;
        let inner = Arc::new(Inner {
            pg,
            journal,
            config,
            route: tokio::sync::Mutex::new(()),
            degraded: AtomicBool::new(false),
            pending: Mutex::new(pending),
            known: Mutex::new(known),
            closed: Mutex::new(HashSet::new()),
            outage_logged: AtomicBool::new(left_over),
            live: Mutex::new(HashMap::new()),
            refs: tokio::sync::Mutex::new(()),
            renewer: Mutex::new(None),
        });
        if left_over {
            tracing::warn!(
                sessions = inner.pending_count(),
                "the session journal holds events from an outage; backfilling"
            );
            set_state(BackendState::Recovering);
            inner.recover().await;
        }
        tokio::spawn(probe(Arc::downgrade(&inner)));
        Ok(Arc::new(JournaledStore { inner }))
    }

    /// The PostgreSQL store underneath.
    pub fn postgres(&self) -> &PgStore {
        &self.inner.pg
    }

    /// Events in the journal (not yet in PostgreSQL).
    pub async fn journal_len(&self) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar("SELECT COUNT(*) FROM journal_events")
            .fetch_one(&self.inner.journal)
            .await?)
    }

    pub fn state(&self) -> BackendState {
        self.inner.state()
    }

    /// Probes PostgreSQL now and backfills if it answers (the probe does this on its own
    /// every `probe_every`).
    pub async fn recover_now(&self) {
        self.inner.recover().await;
    }
}

fn set_state(state: BackendState) {
    STATE.store(state as u8, Ordering::Relaxed);
}

/// Probes PostgreSQL while degraded or while the journal holds rows, and backfills.
async fn probe(inner: std::sync::Weak<Inner>) {
    loop {
        let every = match inner.upgrade() {
            Some(i) => i.config.probe_every,
            None => return,
        };
        tokio::time::sleep(every).await;
        let Some(inner) = inner.upgrade() else { return };
        if inner.degraded.load(Ordering::Relaxed) || inner.pending_count() > 0 {
            inner.recover().await;
        }
    }
}

impl Inner {
    fn state(&self) -> BackendState {
        if self.degraded.load(Ordering::Relaxed) {
            BackendState::Degraded
        } else if self.pending_count() > 0 {
            BackendState::Recovering
        } else {
            BackendState::Healthy
        }
    }

    fn pending_count(&self) -> usize {
        self.pending.lock().map(|p| p.len()).unwrap_or(0)
    }

    fn is_pending(&self, account_id: &str, session_id: &str) -> bool {
        self.pending
            .lock()
            .map(|p| p.contains(&(account_id.to_owned(), session_id.to_owned())))
            .unwrap_or(true)
    }

    fn learn(&self, account_id: &str, session_id: &str, seq: Seq) {
        if let Ok(mut known) = self.known.lock() {
            if known.len() >= KNOWN_SESSIONS_MAX {
                let pending = self.pending.lock().map(|p| p.clone()).unwrap_or_default();
                known.retain(|k, _| pending.contains(k));
            }
            let e = known
                .entry((account_id.to_owned(), session_id.to_owned()))
                .or_insert(seq);
            *e = (*e).max(seq);
        }
    }

    fn known_seq(&self, key: &Key) -> Seq {
        self.known
            .lock()
            .ok()
            .and_then(|k| k.get(key).copied())
            .unwrap_or(0)
    }

    fn learn_events(&self, events: &[Event]) {
        for e in events {
            self.learn(&e.account_id, &e.session_id, e.seq);
        }
    }

    /// Remembers what `appended` says about `batch`: each session's last seq, and which
    /// invocations it closed.
    fn learn_appended(&self, batch: &[NewEvent], appended: &Appended) {
        let committed = || {
            batch
                .iter()
                .zip(&appended.placed)
                .filter_map(|(e, placed)| Some((e, placed.as_ref()?.0)))
        };
        for (e, seq) in committed() {
            self.learn(&e.account_id, &e.session_id, seq);
        }
        let Ok(mut closed) = self.closed.lock() else {
            return;
        };
        for (e, _) in committed() {
            if e.is_terminal() {
                if let Some(inv) = &e.invocation_id {
                    if closed.len() >= KNOWN_SESSIONS_MAX {
                        closed.clear();
                    }
                    closed.insert((e.account_id.clone(), inv.clone()));
                }
            }
        }
    }

    fn enter_degraded(&self, error: &dyn std::fmt::Display) {
        if !self.degraded.swap(true, Ordering::Relaxed) {
            set_state(BackendState::Degraded);
            if !self.outage_logged.swap(true, Ordering::Relaxed) {
                tracing::error!(
                    session_backend_state = "degraded",
                    %error,
                    store = %self.pg.describe(),
                    "PostgreSQL is unreachable; committing session events to the local journal"
                );
            }
        }
    }

    /// Pings PostgreSQL and, if it answers, backfills every pending session.
    async fn recover(&self) {
        match tokio::time::timeout(self.config.append_timeout, self.pg.ping()).await {
            Ok(Ok(())) => {}
            _ => return,
        }
        // Leases first: while PostgreSQL was down this replica could not renew them, and
        // other replicas regaining it would otherwise find them expired. The backfill
        // can take a while; the sweepers wait one lease period after their own recovery.
        if let Err(error) = self.renew_first().await {
            if error.is_transient() {
                self.enter_degraded(&error);
                return;
            }
            tracing::warn!(%error, "could not renew run leases before the backfill");
        }
        if self.degraded.swap(false, Ordering::Relaxed) {
            set_state(BackendState::Recovering);
            tracing::info!("PostgreSQL answers again; backfilling the session journal");
        }
        loop {
            let sessions: Vec<Key> = match self.pending.lock() {
                Ok(p) => p.iter().cloned().collect(),
                Err(_) => return,
            };
            if sessions.is_empty() {
                break;
            }
            for key in sessions {
                loop {
                    match self.backfill_step(&key).await {
                        Ok(true) => break,
                        Ok(false) => continue,
                        Err(error) => {
                            if error.is_transient() {
                                self.enter_degraded(&error);
                            } else {
                                tracing::error!(
                                    %error, account_id = %key.0, session_id = %key.1,
                                    "PostgreSQL refuses the journal's events of this session; they stay journaled"
                                );
                            }
                            return;
                        }
                    }
                }
            }
        }
        // Every session is handed back, so the invocations the journal's agent handles
        // name are in PostgreSQL now.
        if let Err(error) = self.apply_agent_refs().await {
            if error.is_transient() {
                self.enter_degraded(&error);
            } else {
                tracing::error!(%error, "could not apply the journal's agent handles");
            }
            return;
        }
        set_state(BackendState::Healthy);
        if self.outage_logged.swap(false, Ordering::Relaxed) {
            tracing::info!(
                session_backend_state = "recovered",
                "session journal backfilled into PostgreSQL"
            );
        }
    }

    /// Renews in PostgreSQL the leases of every run this replica still drives or still
    /// has to close: the live claims, and the invocations whose terminal status is only
    /// in the journal (until it is backfilled the run is open in PostgreSQL). Runs on
    /// every recovery, before the backfill.
    async fn renew_first(&self) -> Result<(), StoreError> {
        let Some((owner, lease)) = self.renewer.lock().ok().and_then(|r| r.clone()) else {
            return Ok(());
        };
        let now = std::time::Instant::now();
        let mut ids: Vec<String> = self
            .live
            .lock()
            .map(|l| {
                l.values()
                    .filter(|c| c.expires > now)
                    .map(|c| c.invocation_id.clone())
                    .collect()
            })
            .unwrap_or_default();
        let closing: Vec<String> = sqlx::query_scalar(
            "SELECT DISTINCT invocation_id FROM journal_events \
             WHERE event_type = 'run_status' AND invocation_id IS NOT NULL \
             AND json_extract(content_json, '$.status') <> 'in_progress'",
        )
        .fetch_all(&self.journal)
        .await?;
        ids.extend(closing);
        ids.sort();
        ids.dedup();
        if ids.is_empty() {
            return Ok(());
        }
        let renewed = tokio::time::timeout(
            self.config.append_timeout,
            self.pg.renew_leases(&owner, &ids, lease),
        )
        .await
        .map_err(|_| unreachable_error())??;
        tracing::info!(
            runs = ids.len(),
            renewed = renewed.len(),
            "renewed this replica's run leases before backfilling the journal"
        );
        Ok(())
    }

    fn note_renewer(&self, owner: &str, lease: Duration) {
        if let Ok(mut r) = self.renewer.lock() {
            if r.as_ref().is_none_or(|(o, l)| o != owner || *l != lease) {
                *r = Some((owner.to_owned(), lease));
            }
        }
    }

    /// Moves the oldest rows of one session from the journal to PostgreSQL. Returns
    /// whether the session is done (its journal is empty and it is handed back).
    async fn backfill_step(&self, key: &Key) -> Result<bool, StoreError> {
        // Appends wait meanwhile, so the check for "nothing left" and the hand-back
        // cannot miss a batch journaled in between.
        let _route = self.route.lock().await;
        let rows = sqlx::query(concat!(
            "SELECT ",
            sql::event_columns!(),
            " FROM journal_events WHERE account_id = ? AND session_id = ? ORDER BY seq LIMIT ?"
        ))
        .bind(&key.0)
        .bind(&key.1)
        .bind(BACKFILL_CHUNK)
        .fetch_all(&self.journal)
        .await?;
        let events: Vec<Event> = rows
            .iter()
            .map(sqlite::event_from_row)
            .collect::<Result<_, _>>()?;
        let claims = self.journal_claims(&key.0, &key.1).await?;
        if events.is_empty() && claims.is_empty() {
            if let Ok(mut p) = self.pending.lock() {
                p.remove(key);
            }
            return Ok(true);
        }
        let outcome = tokio::time::timeout(
            self.config.backfill_timeout,
            backfill(&self.pg, &key.0, &key.1, &events, &claims),
        )
        .await
        .map_err(|_| StoreError::Database(sqlx::Error::PoolTimedOut))??;
        match outcome {
            Backfilled::Committed { dropped } => {
                let last = events.last().map_or(0, |e| e.seq);
                let mut tx = self.journal.begin().await?;
                sqlx::query(
                    "DELETE FROM journal_events WHERE account_id = ? AND session_id = ? AND seq <= ?",
                )
                .bind(&key.0)
                .bind(&key.1)
                .bind(last)
                .execute(&mut *tx)
                .await?;
                for c in &claims {
                    sqlx::query(
                        "DELETE FROM journal_claims WHERE account_id = ? AND invocation_id = ?",
                    )
                    .bind(&key.0)
                    .bind(&c.invocation_id)
                    .execute(&mut *tx)
                    .await?;
                }
                tx.commit().await?;
                self.learn(&key.0, &key.1, last);
                for seq in dropped {
                    tracing::warn!(
                        account_id = %key.0, session_id = %key.1, seq,
                        "a journaled terminal status found its invocation already closed; not backfilled"
                    );
                }
                // Other replicas' followers read the rows (best effort, as after any commit).
                let pointers = crate::tail::commit_pointers(&events);
                if let Err(error) = self.pg.notify(crate::tail::EVENTS_CHANNEL, &pointers).await {
                    tracing::debug!(%error, "could not announce backfilled events");
                }
                Ok(false)
            }
            Backfilled::Removed => {
                let mut tx = self.journal.begin().await?;
                for table in ["journal_events", "journal_claims"] {
                    sqlx::query(&format!(
                        "DELETE FROM {table} WHERE account_id = ? AND session_id = ?"
                    ))
                    .bind(&key.0)
                    .bind(&key.1)
                    .execute(&mut *tx)
                    .await?;
                }
                tx.commit().await?;
                tracing::warn!(
                    account_id = %key.0, session_id = %key.1, events = events.len(),
                    "the session was removed after this replica journaled for it; its journaled rows are discarded, not backfilled"
                );
                Ok(false)
            }
            Backfilled::Late { last_seq, seqs } => {
                let first = seqs.iter().copied().min().unwrap_or(last_seq);
                self.renumber_after(key, last_seq, first, &seqs).await?;
                Ok(false)
            }
            Backfilled::Collides { last_seq, seqs } => {
                // Every row from the first taken seq on moves, not only the taken ones:
                // moving those alone put an event behind the ones that followed it (a
                // sweeper's close of another run, committed by another replica across a
                // restart, took the seq of one journaled delta of a live run).
                let first = seqs.iter().copied().min().unwrap_or(last_seq);
                tracing::warn!(
                    account_id = %key.0, session_id = %key.1, taken = seqs.len(),
                    "journaled seqs are taken in PostgreSQL by other events; renumbering the journal's rows from seq {first} after seq {last_seq}"
                );
                self.renumber_after(key, last_seq, first, &[]).await?;
                Ok(false)
            }
        }
    }

    /// Moves the journal's rows of a session from seq `first` on after PostgreSQL's
    /// `last_seq`, keeping their order (in the journal first, so a retried step stays
    /// idempotent): the one place a backfill renumbers. Used when PostgreSQL holds other
    /// events at journaled seqs (another replica wrote to the session meanwhile), and for
    /// fencing after a takeover: the journaled events at `late` belong to invocations
    /// another replica closed in PostgreSQL while this one was cut off; their terminal
    /// statuses are dropped (the takeover's is the run's one), and the late ones are
    /// flagged `late` with their original seq, so nothing is lost and projections leave
    /// them out.
    async fn renumber_after(
        &self,
        key: &Key,
        last_seq: Seq,
        first: Seq,
        late: &[Seq],
    ) -> Result<(), StoreError> {
        let rows = sqlx::query(
            "SELECT seq, event_type, json_extract(content_json, '$.status'), invocation_id \
             FROM journal_events WHERE account_id = ? AND session_id = ? AND seq >= ? ORDER BY seq",
        )
        .bind(&key.0)
        .bind(&key.1)
        .bind(first)
        .fetch_all(&self.journal)
        .await?;
        let mut tx = self.journal.begin().await?;
        // Out of the way first, so the new numbers collide with nothing.
        sqlx::query(
            "UPDATE journal_events SET seq = -seq WHERE account_id = ? AND session_id = ? AND seq >= ?",
        )
        .bind(&key.0)
        .bind(&key.1)
        .bind(first)
        .execute(&mut *tx)
        .await?;
        let mut next = last_seq.max(first - 1);
        for row in &rows {
            let seq: i64 = row.try_get(0)?;
            let event_type: String = row.try_get(1)?;
            let status: Option<String> = row.try_get(2)?;
            let invocation_id: Option<String> = row.try_get(3)?;
            let is_late = late.contains(&seq);
            if is_late
                && event_type == EventType::RunStatus.as_str()
                && status.as_deref() != Some(RunStatus::InProgress.as_str())
            {
                tracing::warn!(
                    account_id = %key.0, session_id = %key.1, seq, ?invocation_id, ?status,
                    "another replica took this run over while PostgreSQL was out of reach; its journaled terminal status is not backfilled"
                );
                sqlx::query(
                    "DELETE FROM journal_events WHERE account_id = ? AND session_id = ? AND seq = ?",
                )
                .bind(&key.0)
                .bind(&key.1)
                .bind(-seq)
                .execute(&mut *tx)
                .await?;
                continue;
            }
            next += 1;
            let flag = if is_late {
                format!("{{\"original_seq\":{seq},\"reason\":\"run_taken_over\"}}")
            } else {
                "null".to_owned()
            };
            sqlx::query(
                "UPDATE journal_events SET seq = ?, metadata_json = CASE WHEN ? = 'null' \
                 THEN metadata_json ELSE json_set(metadata_json, '$.late', json(?)) END \
                 WHERE account_id = ? AND session_id = ? AND seq = ?",
            )
            .bind(next)
            .bind(&flag)
            .bind(&flag)
            .bind(&key.0)
            .bind(&key.1)
            .bind(-seq)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        if !late.is_empty() {
            tracing::warn!(
                account_id = %key.0, session_id = %key.1, late = late.len(),
                "journaled events of runs another replica took over are kept flagged late, numbered after seq {last_seq}"
            );
        }
        // Later journaled rows follow these (the caller holds `route`).
        if let Ok(mut known) = self.known.lock() {
            known.insert(key.clone(), next);
        }
        Ok(())
    }

    /// Records an agent handle in the journal if PostgreSQL is down or a session is
    /// pending (or unconditionally with `always`). Returns whether it did.
    async fn journal_agent_ref(
        &self,
        account_id: &str,
        invocation_id: &str,
        agent_ref: &str,
        always: bool,
    ) -> Result<bool, StoreError> {
        let _refs = self.refs.lock().await;
        if !always && !self.degraded.load(Ordering::Relaxed) && self.pending_count() == 0 {
            return Ok(false);
        }
        sqlx::query(
            "INSERT INTO journal_agent_refs (account_id, invocation_id, agent_ref, set_at_ms) \
             VALUES (?, ?, ?, ?) ON CONFLICT (account_id, invocation_id) DO UPDATE SET \
             agent_ref = excluded.agent_ref, set_at_ms = excluded.set_at_ms",
        )
        .bind(account_id)
        .bind(invocation_id)
        .bind(agent_ref)
        .bind(now_ms())
        .execute(&self.journal)
        .await?;
        Ok(true)
    }

    /// Writes the journal's agent handles to PostgreSQL and forgets them, except those of
    /// invocations still journaled (their rows are not in PostgreSQL yet).
    async fn apply_agent_refs(&self) -> Result<(), StoreError> {
        let _refs = self.refs.lock().await;
        let rows = sqlx::query(
            "SELECT r.account_id, r.invocation_id, r.agent_ref, r.set_at_ms \
             FROM journal_agent_refs r WHERE NOT EXISTS (\
               SELECT 1 FROM journal_claims c \
               WHERE c.account_id = r.account_id AND c.invocation_id = r.invocation_id) \
             AND NOT EXISTS (\
               SELECT 1 FROM journal_events e WHERE e.account_id = r.account_id \
               AND e.invocation_id = r.invocation_id AND e.event_type = 'run_status') \
             ORDER BY r.set_at_ms",
        )
        .fetch_all(&self.journal)
        .await?;
        for row in rows {
            let account_id: String = row.try_get(0)?;
            let invocation_id: String = row.try_get(1)?;
            let agent_ref: String = row.try_get(2)?;
            let set_at_ms: i64 = row.try_get(3)?;
            match tokio::time::timeout(
                self.config.append_timeout,
                self.pg
                    .set_agent_ref(&account_id, &invocation_id, &agent_ref),
            )
            .await
            {
                Ok(Ok(())) => {}
                Ok(Err(error)) if !error.is_transient() => {
                    tracing::error!(
                        %error, %account_id, %invocation_id, %agent_ref,
                        "PostgreSQL refuses a journaled agent handle; dropping it"
                    );
                }
                Ok(Err(error)) => return Err(error),
                Err(_) => return Err(unreachable_error()),
            }
            sqlx::query(
                "DELETE FROM journal_agent_refs \
                 WHERE account_id = ? AND invocation_id = ? AND set_at_ms = ?",
            )
            .bind(&account_id)
            .bind(&invocation_id)
            .bind(set_at_ms)
            .execute(&self.journal)
            .await?;
        }
        Ok(())
    }

    /// The invocations whose handle the journal records as `agent_ref`, newest first.
    async fn journal_agent_ref_invocations(
        &self,
        account_id: &str,
        agent_ref: &str,
    ) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT invocation_id FROM journal_agent_refs \
             WHERE account_id = ? AND agent_ref = ? ORDER BY set_at_ms DESC",
        )
        .bind(account_id)
        .bind(agent_ref)
        .fetch_all(&self.journal)
        .await?)
    }

    /// An invocation known only to the journal (claimed locally, or opened by a journaled
    /// `in_progress`), as PostgreSQL will hold it once backfilled.
    async fn journal_invocation(
        &self,
        account_id: &str,
        invocation_id: &str,
    ) -> Result<Option<Invocation>, StoreError> {
        let claimed = sqlx::query(
            "SELECT session_id, run_id, claimed_at_ms FROM journal_claims \
             WHERE account_id = ? AND invocation_id = ?",
        )
        .bind(account_id)
        .bind(invocation_id)
        .fetch_optional(&self.journal)
        .await?;
        let opened = match claimed {
            Some(r) => Some((
                r.try_get::<String, _>(0)?,
                r.try_get::<String, _>(1)?,
                DateTime::from_timestamp_millis(r.try_get(2)?).unwrap_or_else(Utc::now),
            )),
            None => sqlx::query(
                "SELECT session_id, run_id, created_at FROM journal_events \
                 WHERE account_id = ? AND invocation_id = ? AND event_type = 'run_status' \
                 AND run_id IS NOT NULL \
                 AND json_extract(content_json, '$.status') = 'in_progress' \
                 ORDER BY seq LIMIT 1",
            )
            .bind(account_id)
            .bind(invocation_id)
            .fetch_optional(&self.journal)
            .await?
            .map(|r| Ok::<_, StoreError>((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
            .transpose()?,
        };
        let Some((session_id, run_id, started_at)) = opened else {
            return Ok(None);
        };
        let (status, ended_at) = match self.journal_terminal(account_id, invocation_id).await? {
            Some((status, at)) => (status, Some(at)),
            None => (RunStatus::InProgress, None),
        };
        Ok(Some(Invocation {
            account_id: account_id.to_owned(),
            session_id,
            run_id,
            invocation_id: invocation_id.to_owned(),
            status,
            started_at,
            ended_at,
            agent_ref: None,
        }))
    }

    /// Commits `batch` to the journal (the caller holds `route`).
    async fn journal_append(&self, batch: &[NewEvent]) -> Result<Appended, StoreError> {
        let now = plan::commit_time();
        let mut tx = self.journal.begin().await?;
        let mut keep = vec![true; batch.len()];
        let mut closing: HashSet<(&str, &str)> = HashSet::new();
        let mut taken = Vec::new();
        for (i, op) in plan::invocation_ops(batch) {
            keep[i] = match op {
                InvocationOp::Open {
                    account_id,
                    invocation_id,
                    session_id,
                    run_id,
                } => {
                    // A fresh claim PostgreSQL was to write with this open: the journal
                    // takes it over, and the backfill writes it with the lease's remainder.
                    let claim = self
                        .pg
                        .pending
                        .get(account_id, invocation_id, session_id, run_id);
                    if let Some(c) = claim {
                        let claim = Claim {
                            account_id,
                            session_id,
                            run_id,
                            invocation_id,
                            owner: &c.owner,
                            lease: c.lease,
                            fresh: true,
                        };
                        record_claim(&mut *tx, &claim).await?;
                        taken.push((account_id, invocation_id));
                    }
                    true
                }
                InvocationOp::Close {
                    account_id,
                    invocation_id,
                    ..
                } => {
                    let known_closed = self.closed.lock().is_ok_and(|c| {
                        c.contains(&(account_id.to_owned(), invocation_id.to_owned()))
                    });
                    let journaled: Option<i64> = sqlx::query_scalar(
                        "SELECT 1 FROM journal_events WHERE account_id = ? AND invocation_id = ? \
                         AND event_type = 'run_status' \
                         AND json_extract(content_json, '$.status') <> 'in_progress' LIMIT 1",
                    )
                    .bind(account_id)
                    .bind(invocation_id)
                    .fetch_optional(&mut *tx)
                    .await?;
                    !known_closed
                        && journaled.is_none()
                        && closing.insert((account_id, invocation_id))
                }
                InvocationOp::Drop => false,
            };
        }
        let counts = plan::session_counts(batch, &keep);
        let mut last_seqs = Vec::with_capacity(counts.len());
        for ((account_id, session_id), n) in &counts {
            let key = ((*account_id).to_owned(), (*session_id).to_owned());
            let journal_max: Option<i64> = sqlx::query_scalar(
                "SELECT MAX(seq) FROM journal_events WHERE account_id = ? AND session_id = ?",
            )
            .bind(account_id)
            .bind(session_id)
            .fetch_one(&mut *tx)
            .await?;
            let base = self.known_seq(&key).max(journal_max.unwrap_or(0));
            last_seqs.push(Some(base + n));
        }
        let seqs = plan::assign_seqs(batch, &keep, &counts, &last_seqs)?;
        let rows: Vec<(&NewEvent, Seq, String, String)> = batch
            .iter()
            .zip(&seqs)
            .filter_map(|(e, seq)| {
                Some((
                    e,
                    (*seq)?,
                    plan::json_text(&e.content),
                    plan::json_text(&e.metadata),
                ))
            })
            .collect();
        sqlite::insert_event_rows(&mut tx, "journal_events", &rows, now).await?;
        tx.commit().await?;
        self.pg.pending.written(taken);
        if let Ok(mut pending) = self.pending.lock() {
            for ((a, s), _) in &counts {
                pending.insert(((*a).to_owned(), (*s).to_owned()));
            }
        }
        for (((a, s), _), last) in counts.iter().zip(&last_seqs) {
            self.learn(a, s, last.unwrap_or(0));
        }
        Ok(Appended::at(seqs, now))
    }

    /// The claims the journal holds for a session.
    async fn journal_claims(
        &self,
        account_id: &str,
        session_id: &str,
    ) -> Result<Vec<JournalClaim>, StoreError> {
        let rows = sqlx::query(
            "SELECT invocation_id, run_id, owner, claimed_at_ms, lease_expires_ms \
             FROM journal_claims WHERE account_id = ? AND session_id = ? \
             ORDER BY claimed_at_ms, invocation_id",
        )
        .bind(account_id)
        .bind(session_id)
        .fetch_all(&self.journal)
        .await?;
        rows.iter()
            .map(|r| {
                let at: i64 = r.try_get(3)?;
                Ok(JournalClaim {
                    invocation_id: r.try_get(0)?,
                    run_id: r.try_get(1)?,
                    owner: r.try_get(2)?,
                    claimed_at: DateTime::from_timestamp_millis(at).unwrap_or_else(Utc::now),
                    lease_expires_ms: r.try_get(4)?,
                })
            })
            .collect()
    }

    /// Grants `claim` without PostgreSQL, if no live run of the session is known to this
    /// replica, and records it in the journal (which makes the session pending).
    async fn claim_locally(&self, claim: &Claim<'_>) -> Result<Claimed, StoreError> {
        if !claim.fresh && !self.config.local_claims {
            return Err(unreachable_error());
        }
        // Under the lock appends and the backfill's hand-back take: the session cannot be
        // handed back between the check and the record.
        let _route = self.route.lock().await;
        let key: Key = (claim.account_id.to_owned(), claim.session_id.to_owned());
        let in_process = self.live.lock().ok().and_then(|l| {
            l.get(&key)
                .filter(|c| {
                    c.invocation_id != claim.invocation_id && c.expires > std::time::Instant::now()
                })
                .cloned()
        });
        if let Some(c) = in_process {
            return Ok(Claimed::Busy {
                run_id: c.run_id,
                invocation_id: c.invocation_id,
            });
        }
        let journaled = sqlx::query(
            "SELECT c.run_id, c.invocation_id FROM journal_claims c \
             WHERE c.account_id = ? AND c.session_id = ? AND c.invocation_id <> ? \
             AND c.lease_expires_ms > ? AND NOT EXISTS (\
               SELECT 1 FROM journal_events e WHERE e.account_id = c.account_id \
               AND e.invocation_id = c.invocation_id AND e.event_type = 'run_status' \
               AND json_extract(e.content_json, '$.status') <> 'in_progress') \
             LIMIT 1",
        )
        .bind(claim.account_id)
        .bind(claim.session_id)
        .bind(claim.invocation_id)
        .bind(now_ms())
        .fetch_optional(&self.journal)
        .await?;
        if let Some(row) = journaled {
            return Ok(Claimed::Busy {
                run_id: row.try_get(0)?,
                invocation_id: row.try_get(1)?,
            });
        }
        record_claim(&self.journal, claim).await?;
        if let Ok(mut p) = self.pending.lock() {
            p.insert(key);
        }
        self.note_live(claim);
        tracing::info!(
            account_id = %claim.account_id, session_id = %claim.session_id,
            invocation_id = %claim.invocation_id,
            "run claimed in the local journal while PostgreSQL is unreachable"
        );
        Ok(Claimed::Granted)
    }

    fn note_live(&self, claim: &Claim<'_>) {
        self.note_renewer(claim.owner, claim.lease);
        if let Ok(mut live) = self.live.lock() {
            if live.len() >= KNOWN_SESSIONS_MAX {
                let now = std::time::Instant::now();
                live.retain(|_, c| c.expires > now);
            }
            live.insert(
                (claim.account_id.to_owned(), claim.session_id.to_owned()),
                LiveClaim {
                    run_id: claim.run_id.to_owned(),
                    invocation_id: claim.invocation_id.to_owned(),
                    expires: std::time::Instant::now() + claim.lease,
                },
            );
        }
    }

    /// Forgets the live claims that `batch` ends (a terminal status, committed or not:
    /// either way the invocation is over for its owner).
    fn note_ended(&self, batch: &[NewEvent]) {
        let Ok(mut live) = self.live.lock() else {
            return;
        };
        for e in batch {
            let terminal = e.event_type == EventType::RunStatus
                && e.content
                    .get("status")
                    .and_then(|s| s.as_str())
                    .is_some_and(|s| s != RunStatus::InProgress.as_str());
            if !terminal {
                continue;
            }
            let key = (e.account_id.clone(), e.session_id.clone());
            if live
                .get(&key)
                .is_some_and(|c| Some(&c.invocation_id) == e.invocation_id.as_ref())
            {
                live.remove(&key);
            }
        }
    }

    /// Extends the in-process deadline of the live claims among `ids`.
    fn refresh_live(&self, ids: &[String], lease: Duration) {
        if let Ok(mut live) = self.live.lock() {
            let expires = std::time::Instant::now() + lease;
            for c in live.values_mut() {
                if ids.contains(&c.invocation_id) {
                    c.expires = expires;
                }
            }
        }
    }

    /// The journal's rows of a session after `after_seq`, in seq order.
    async fn journal_events(
        &self,
        account_id: &str,
        session_id: &str,
        after_seq: Seq,
    ) -> Result<Vec<Event>, StoreError> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            sql::event_columns!(),
            " FROM journal_events WHERE account_id = ? AND session_id = ? AND seq > ? ORDER BY seq"
        ))
        .bind(account_id)
        .bind(session_id)
        .bind(after_seq)
        .fetch_all(&self.journal)
        .await?;
        rows.iter().map(sqlite::event_from_row).collect()
    }

    /// The terminal status the journal holds for an invocation, if any.
    async fn journal_terminal(
        &self,
        account_id: &str,
        invocation_id: &str,
    ) -> Result<Option<(RunStatus, DateTime<Utc>)>, StoreError> {
        let row = sqlx::query(
            "SELECT json_extract(content_json, '$.status'), created_at FROM journal_events \
             WHERE account_id = ? AND invocation_id = ? AND event_type = 'run_status' \
             AND json_extract(content_json, '$.status') <> 'in_progress' ORDER BY seq LIMIT 1",
        )
        .bind(account_id)
        .bind(invocation_id)
        .fetch_optional(&self.journal)
        .await?;
        row.map(|r| {
            let status: String = r.try_get(0)?;
            Ok((sql::parse_status(&status)?, r.try_get(1)?))
        })
        .transpose()
    }

    /// Whether the journal may hold anything (rows wait for the backfill).
    fn journal_holds_any(&self) -> bool {
        self.pending.lock().map_or(true, |p| !p.is_empty())
    }

    /// A PostgreSQL read, bounded: a frozen connection (half-open, no reset) fails it as
    /// unreachable after `read_timeout` instead of holding the reader.
    async fn pg_read<T>(
        &self,
        read: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.config.read_timeout, read).await {
            Ok(r) => r,
            Err(_) => Err(unreachable_error()),
        }
    }

    /// The latest invocation of `run_id` the journal opened (by a claim or an
    /// `in_progress`), if any.
    async fn journal_run(
        &self,
        account_id: &str,
        run_id: &str,
    ) -> Result<Option<Invocation>, StoreError> {
        if !self.journal_holds_any() {
            return Ok(None);
        }
        let ids: Vec<String> = sqlx::query_scalar(
            "SELECT invocation_id FROM journal_claims WHERE account_id = ? AND run_id = ? \
             UNION SELECT invocation_id FROM journal_events WHERE account_id = ? AND run_id = ? \
             AND event_type = 'run_status' AND invocation_id IS NOT NULL \
             AND json_extract(content_json, '$.status') = 'in_progress'",
        )
        .bind(account_id)
        .bind(run_id)
        .bind(account_id)
        .bind(run_id)
        .fetch_all(&self.journal)
        .await?;
        let mut newest: Option<Invocation> = None;
        for id in ids {
            let Some(inv) = self.journal_invocation(account_id, &id).await? else {
                continue;
            };
            let newer = newest.as_ref().is_none_or(|n| {
                (inv.started_at, &inv.invocation_id) > (n.started_at, &n.invocation_id)
            });
            if newer {
                newest = Some(inv);
            }
        }
        Ok(newest)
    }

    async fn merge_invocation(
        &self,
        inv: Option<Invocation>,
    ) -> Result<Option<Invocation>, StoreError> {
        let Some(mut inv) = inv else { return Ok(None) };
        if inv.status == RunStatus::InProgress && self.is_pending(&inv.account_id, &inv.session_id)
        {
            if let Some((status, at)) = self
                .journal_terminal(&inv.account_id, &inv.invocation_id)
                .await?
            {
                inv.status = status;
                inv.ended_at = Some(at);
            }
        }
        Ok(Some(inv))
    }
}

/// Records a claim granted while PostgreSQL could not take it; its lease runs from now.
async fn record_claim(
    journal: impl sqlx::SqliteExecutor<'_>,
    claim: &Claim<'_>,
) -> Result<(), StoreError> {
    let now = now_ms();
    sqlx::query(
        "INSERT INTO journal_claims (account_id, invocation_id, session_id, run_id, owner, \
         claimed_at_ms, lease_expires_ms) VALUES (?, ?, ?, ?, ?, ?, ?) \
         ON CONFLICT (account_id, invocation_id) DO NOTHING",
    )
    .bind(claim.account_id)
    .bind(claim.invocation_id)
    .bind(claim.session_id)
    .bind(claim.run_id)
    .bind(claim.owner)
    .bind(now)
    .bind(now.saturating_add(lease_ms(claim.lease)))
    .execute(journal)
    .await?;
    Ok(())
}

/// Whether `query` selects `event`, beyond its session and `after_seq`.
fn selects(query: &EventQuery, event: &Event) -> bool {
    query.until_seq.is_none_or(|until| event.seq <= until)
        && query
            .run_id
            .as_ref()
            .is_none_or(|r| event.run_id.as_ref() == Some(r))
        && query
            .invocation_id
            .as_ref()
            .is_none_or(|i| event.invocation_id.as_ref() == Some(i))
        && query
            .event_types
            .as_ref()
            .is_none_or(|t: &Vec<EventType>| t.contains(&event.event_type))
}

fn unreachable_error() -> StoreError {
    StoreError::Database(sqlx::Error::PoolTimedOut)
}

#[async_trait]
impl Store for JournaledStore {
    async fn close(&self) {
        // The journal's last connection checkpoints its WAL as it closes.
        self.inner.journal.close().await;
        self.inner.pg.close().await;
    }

    fn backend(&self) -> &'static str {
        "postgres"
    }

    fn describe(&self) -> String {
        self.inner.pg.describe()
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.inner.pg.ping().await
    }

    async fn migrated_at(&self, description: &str) -> Result<Option<DateTime<Utc>>, StoreError> {
        self.inner.pg.migrated_at(description).await
    }

    async fn append_seqs(&self, batch: &mut [NewEvent]) -> Result<Appended, StoreError> {
        if batch.is_empty() {
            return Ok(Appended::default());
        }
        let inner = &*self.inner;
        // What PostgreSQL would store, so the journal's copy equals it.
        postgres::replace_nuls(batch);
        let _route = inner.route.lock().await;
        // A batch touching a session that still has journaled rows goes to the journal
        // whole: its seqs must follow the journal's, and one batch stays one commit.
        let any_pending = inner.pending.lock().map_or(true, |p| {
            batch
                .iter()
                .any(|e| p.contains(&(e.account_id.clone(), e.session_id.clone())))
        });
        if !inner.degraded.load(Ordering::Relaxed) && !any_pending {
            let to_pg = inner.pg.append_seqs(batch);
            match tokio::time::timeout(inner.config.append_timeout, to_pg).await {
                Ok(Ok(appended)) => {
                    inner.learn_appended(batch, &appended);
                    inner.note_ended(batch);
                    return Ok(appended);
                }
                Ok(Err(error)) if !error.is_transient() => return Err(error),
                Ok(Err(error)) => inner.enter_degraded(&error),
                Err(_) => inner.enter_degraded(&format!(
                    "no answer within {:?}",
                    inner.config.append_timeout
                )),
            }
        }
        let appended = inner.journal_append(batch).await?;
        inner.note_ended(batch);
        Ok(appended)
    }

    async fn session(
        &self,
        account_id: &str,
        session_id: &str,
    ) -> Result<Option<Session>, StoreError> {
        let inner = &*self.inner;
        let pending = inner.is_pending(account_id, session_id);
        let mut session = match inner
            .pg_read(inner.pg.session(account_id, session_id))
            .await
        {
            Ok(session) => session,
            // PostgreSQL slow or frozen: the journal answers for what it holds.
            Err(error) if error.is_transient() && pending => None,
            Err(error) => return Err(error),
        };
        if let Some(s) = &session {
            inner.learn(account_id, session_id, s.last_seq);
        }
        if pending {
            let journaled = inner.journal_events(account_id, session_id, 0).await?;
            if let (Some(first), Some(last)) = (journaled.first(), journaled.last()) {
                let s = session.get_or_insert_with(|| Session {
                    account_id: account_id.to_owned(),
                    session_id: session_id.to_owned(),
                    last_seq: 0,
                    created_at: first.created_at,
                    updated_at: first.created_at,
                    // A fork made while PostgreSQL was down: its `session_fork` is here.
                    forked_from: (first.seq == 1 && first.event_type == EventType::SessionFork)
                        .then(|| ForkPoint::of(&first.content))
                        .flatten(),
                    metadata: None,
                    deleted: false,
                    user_id: None,
                    agent_id: None,
                    last_run_status: None,
                    // Archiving is not journalled: a session only the journal holds is not.
                    archived_at: None,
                });
                s.last_seq = s.last_seq.max(last.seq);
                s.updated_at = s.updated_at.max(last.created_at);
                // Updates made while PostgreSQL was down.
                for e in &journaled {
                    match e.event_type {
                        EventType::SessionMetadata => {
                            s.metadata = e.content.get("metadata").cloned()
                        }
                        EventType::SessionDeleted => s.deleted = true,
                        EventType::RunStatus => s.last_run_status = e.run_status(),
                        _ => {}
                    }
                }
            }
        }
        Ok(session)
    }

    async fn list_sessions(
        &self,
        account_id: &str,
        filter: &SessionFilter,
        offset: i64,
        limit: i64,
    ) -> Result<(Vec<Session>, i64), StoreError> {
        let inner = &*self.inner;
        inner
            .pg_read(inner.pg.list_sessions(account_id, filter, offset, limit))
            .await
    }

    async fn events(&self, query: &EventQuery) -> Result<Vec<Event>, StoreError> {
        let inner = &*self.inner;
        if !inner.is_pending(&query.account_id, &query.session_id) {
            let events = inner.pg_read(inner.pg.events(query)).await?;
            inner.learn_events(&events[events.len().saturating_sub(1)..]);
            return Ok(events);
        }
        let journaled: Vec<Event> = inner
            .journal_events(&query.account_id, &query.session_id, query.after_seq)
            .await?;
        let first_journaled = journaled.first().map(|e| e.seq);
        let journaled: Vec<Event> = journaled
            .into_iter()
            .filter(|e| selects(query, e))
            .collect();
        // While PostgreSQL is down, a read that starts inside the journal (a reconnect
        // after a cursor it handed out) is answered from the journal alone.
        // A session pending only for a claim granted locally, of which this replica knows
        // no events, counts as new — as a session whose journaled rows start at seq 1.
        let key: Key = (query.account_id.clone(), query.session_id.clone());
        let journal_covers = first_journaled.is_some_and(|first| query.after_seq >= first - 1)
            || (first_journaled.is_none() && inner.known_seq(&key) == 0);
        // A read of one run or invocation whose start the journal holds can be answered
        // by the journal when PostgreSQL is slow or frozen (a run served whole while its
        // commits went to the journal): PostgreSQL gets the commit budget, not the whole
        // read bound.
        let run_scoped = query.run_id.is_some() || query.invocation_id.is_some();
        let started_here = run_scoped
            && journaled
                .first()
                .is_some_and(|e| e.run_status() == Some(RunStatus::InProgress));
        let stored = if inner.degraded.load(Ordering::Relaxed) && journal_covers {
            Vec::new()
        } else {
            let bound = match started_here {
                true => inner.config.append_timeout,
                false => inner.config.read_timeout,
            };
            match tokio::time::timeout(bound, inner.pg.events(query)).await {
                Ok(Ok(stored)) => stored,
                Ok(Err(error)) if !(error.is_transient() && started_here) => return Err(error),
                Err(_) if !started_here => return Err(unreachable_error()),
                _ => Vec::new(),
            }
        };
        let mut merged: Vec<Event> = stored;
        let seen: HashSet<Seq> = merged.iter().map(|e| e.seq).collect();
        merged.extend(journaled.into_iter().filter(|e| !seen.contains(&e.seq)));
        merged.sort_by_key(|e| e.seq);
        merged.truncate(usize::try_from(query.limit.max(0)).unwrap_or(usize::MAX));
        Ok(merged)
    }

    async fn create_session(&self, first: &NewEvent) -> Result<Option<Event>, StoreError> {
        let inner = &*self.inner;
        let key: Key = (first.account_id.clone(), first.session_id.clone());
        // Under the lock appends take: nothing journals the session meanwhile.
        let _route = inner.route.lock().await;
        if !inner.degraded.load(Ordering::Relaxed) && !inner.is_pending(&key.0, &key.1) {
            let to_pg = inner.pg.create_session(first);
            match tokio::time::timeout(inner.config.append_timeout, to_pg).await {
                Ok(Ok(created)) => {
                    if created.is_some() {
                        inner.learn(&key.0, &key.1, 1);
                    }
                    return Ok(created);
                }
                Ok(Err(error)) if !error.is_transient() => return Err(error),
                Ok(Err(error)) => inner.enter_degraded(&error),
                Err(_) => inner.enter_degraded(&format!(
                    "no answer within {:?}",
                    inner.config.append_timeout
                )),
            }
        }
        // PostgreSQL cannot say whether it has the session: what this replica knows and
        // the journal decide. (An id this replica never saw but PostgreSQL has would be
        // renumbered by the backfill; Tether's own ids are fresh UUIDs.)
        let journaled = inner.journal_events(&key.0, &key.1, 0).await?;
        if inner.known_seq(&key) > 0 || !journaled.is_empty() {
            return Ok(None);
        }
        let mut batch = vec![first.clone()];
        let appended = inner.journal_append(&batch).await?;
        Ok(appended.events(batch.drain(..)).pop().flatten())
    }

    async fn checkpoint_event(
        &self,
        account_id: &str,
        session_id: &str,
        checkpoint_id: Option<&str>,
        until_seq: Option<Seq>,
    ) -> Result<Option<Event>, StoreError> {
        let inner = &*self.inner;
        if inner.is_pending(account_id, session_id) {
            // The journal's rows come after PostgreSQL's: its latest match is the answer.
            let journaled = inner
                .journal_events(account_id, session_id, 0)
                .await?
                .into_iter()
                .filter(|e| e.event_type == EventType::RunCheckpoint)
                .filter(|e| until_seq.is_none_or(|u| e.seq <= u))
                .rfind(|e| {
                    checkpoint_id.is_none_or(|id| {
                        e.content.get("checkpoint_id").and_then(|c| c.as_str()) == Some(id)
                    })
                });
            if journaled.is_some() {
                return Ok(journaled);
            }
        }
        let stored = inner
            .pg
            .checkpoint_event(account_id, session_id, checkpoint_id, until_seq);
        match tokio::time::timeout(inner.config.append_timeout, stored).await {
            Ok(r) => r,
            Err(_) => Err(unreachable_error()),
        }
    }

    async fn count_events(&self, account_id: &str, session_id: &str) -> Result<i64, StoreError> {
        let inner = &*self.inner;
        let stored = inner
            .pg_read(inner.pg.count_events(account_id, session_id))
            .await?;
        if !inner.is_pending(account_id, session_id) {
            return Ok(stored);
        }
        let journaled: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM journal_events WHERE account_id = ? AND session_id = ?",
        )
        .bind(account_id)
        .bind(session_id)
        .fetch_one(&inner.journal)
        .await?;
        Ok(stored + journaled)
    }

    // A run or invocation the journal opened is newer than anything PostgreSQL holds of
    // it (journaled rows come after PostgreSQL's), and may be all there is: a run served
    // whole while commits went to the journal. It is the answer, as `events` merges it,
    // with no PostgreSQL round trip that a slow or frozen PostgreSQL would hold.
    async fn run(&self, account_id: &str, run_id: &str) -> Result<Option<Invocation>, StoreError> {
        let inner = &*self.inner;
        if let Some(journaled) = inner.journal_run(account_id, run_id).await? {
            return Ok(Some(journaled));
        }
        let inv = inner.pg_read(inner.pg.run(account_id, run_id)).await?;
        inner.merge_invocation(inv).await
    }

    async fn invocation(
        &self,
        account_id: &str,
        invocation_id: &str,
    ) -> Result<Option<Invocation>, StoreError> {
        let inner = &*self.inner;
        if inner.journal_holds_any() {
            if let Some(journaled) = inner.journal_invocation(account_id, invocation_id).await? {
                return Ok(Some(journaled));
            }
        }
        let inv = inner
            .pg_read(inner.pg.invocation(account_id, invocation_id))
            .await?;
        inner.merge_invocation(inv).await
    }

    async fn invocation_known_elsewhere(
        &self,
        account_id: &str,
        invocation_ids: &[String],
    ) -> Result<Option<String>, StoreError> {
        self.inner
            .pg
            .invocation_known_elsewhere(account_id, invocation_ids)
            .await
    }

    async fn set_agent_ref(
        &self,
        account_id: &str,
        invocation_id: &str,
        agent_ref: &str,
    ) -> Result<(), StoreError> {
        let inner = &*self.inner;
        // While sessions are pending the invocation may exist only in the journal, where
        // PostgreSQL's update would miss it: the journal keeps the handle until the
        // backfill is done, and PostgreSQL gets it then (again, if it had it already).
        let journaled = inner
            .journal_agent_ref(account_id, invocation_id, agent_ref, false)
            .await?;
        if journaled && inner.degraded.load(Ordering::Relaxed) {
            return Ok(());
        }
        let error = match tokio::time::timeout(
            inner.config.append_timeout,
            inner.pg.set_agent_ref(account_id, invocation_id, agent_ref),
        )
        .await
        {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(error)) if !error.is_transient() => return Err(error),
            Ok(Err(error)) => error.to_string(),
            Err(_) => format!("no answer within {:?}", inner.config.append_timeout),
        };
        inner.enter_degraded(&error);
        if !journaled {
            inner
                .journal_agent_ref(account_id, invocation_id, agent_ref, true)
                .await?;
        }
        Ok(())
    }

    async fn invocation_by_agent_ref(
        &self,
        account_id: &str,
        agent_ref: &str,
    ) -> Result<Option<Invocation>, StoreError> {
        let inner = &*self.inner;
        let stored = inner
            .pg
            .invocation_by_agent_ref(account_id, agent_ref)
            .await?;
        let mut newest = inner.merge_invocation(stored).await?;
        // Handles recorded in the journal are not in PostgreSQL until the backfill is done;
        // their invocations may not be either.
        for invocation_id in inner
            .journal_agent_ref_invocations(account_id, agent_ref)
            .await?
        {
            if newest
                .as_ref()
                .is_some_and(|n| n.invocation_id == invocation_id)
            {
                continue;
            }
            let found = match inner.pg.invocation(account_id, &invocation_id).await? {
                Some(inv) => inner.merge_invocation(Some(inv)).await?,
                None => inner.journal_invocation(account_id, &invocation_id).await?,
            };
            let Some(mut inv) = found else { continue };
            inv.agent_ref = Some(agent_ref.to_owned());
            let newer = newest.as_ref().is_none_or(|n| {
                (inv.started_at, &inv.invocation_id) > (n.started_at, &n.invocation_id)
            });
            if newer {
                newest = Some(inv);
            }
        }
        Ok(newest)
    }

    async fn open_invocations(&self) -> Result<Vec<Invocation>, StoreError> {
        self.inner.pg.open_invocations().await
    }

    async fn claim(&self, claim: &Claim<'_>) -> Result<Claimed, StoreError> {
        let inner = &*self.inner;
        if !inner.degraded.load(Ordering::Relaxed) {
            match tokio::time::timeout(inner.config.append_timeout, inner.pg.claim(claim)).await {
                Ok(Ok(claimed)) => {
                    if claimed == Claimed::Granted {
                        inner.note_live(claim);
                    }
                    return Ok(claimed);
                }
                Ok(Err(error)) if !error.is_transient() => return Err(error),
                Ok(Err(error)) => inner.enter_degraded(&error),
                Err(_) => inner.enter_degraded(&format!(
                    "no answer within {:?}",
                    inner.config.append_timeout
                )),
            }
        }
        inner.claim_locally(claim).await
    }

    async fn renew_leases(
        &self,
        owner: &str,
        invocation_ids: &[String],
        lease: Duration,
    ) -> Result<Vec<Renewed>, StoreError> {
        let inner = &*self.inner;
        // The owner renews: its runs are alive, whatever PostgreSQL can be told.
        inner.refresh_live(invocation_ids, lease);
        inner.note_renewer(owner, lease);
        // Claims still in the journal are renewed there (nobody else can cancel them).
        let mut renewed = Vec::new();
        let mut rest = Vec::new();
        let expires = now_ms().saturating_add(lease_ms(lease));
        // A journaled claim keeps its session pending: with none pending there is none.
        let journaled = inner.pending_count() > 0;
        for id in invocation_ids.iter().filter(|_| journaled) {
            let done = sqlx::query(
                "UPDATE journal_claims SET lease_expires_ms = ? WHERE owner = ? AND invocation_id = ?",
            )
            .bind(expires)
            .bind(owner)
            .bind(id)
            .execute(&inner.journal)
            .await?;
            if done.rows_affected() > 0 {
                renewed.push(Renewed {
                    invocation_id: id.clone(),
                    cancel_requested: false,
                });
            } else {
                rest.push(id.clone());
            }
        }
        if !journaled {
            rest = invocation_ids.to_vec();
        }
        if rest.is_empty() {
            return Ok(renewed);
        }
        // Tried even while degraded (the probe may not have noticed PostgreSQL is back
        // yet): a lease is renewed as soon as PostgreSQL can take it. A failure is an
        // error, not a partial answer: a missing id would stop its run.
        match tokio::time::timeout(
            inner.config.append_timeout,
            inner.pg.renew_leases(owner, &rest, lease),
        )
        .await
        {
            Ok(r) => renewed.extend(r?),
            Err(_) => return Err(unreachable_error()),
        }
        Ok(renewed)
    }

    async fn abandoned_invocations(
        &self,
        restarted_owner: Option<&str>,
    ) -> Result<Vec<Invocation>, StoreError> {
        if self.inner.degraded.load(Ordering::Relaxed) {
            return Err(unreachable_error());
        }
        let open = self.inner.pg.abandoned_invocations(restarted_owner).await?;
        let mut still_open = Vec::with_capacity(open.len());
        for inv in open {
            // Closed in the journal, not yet in PostgreSQL: nobody needs to close it.
            if let Some(inv) = self.inner.merge_invocation(Some(inv)).await? {
                if inv.status == RunStatus::InProgress {
                    still_open.push(inv);
                }
            }
        }
        Ok(still_open)
    }

    async fn lease(
        &self,
        account_id: &str,
        invocation_id: &str,
    ) -> Result<Option<Lease>, StoreError> {
        self.inner.pg.lease(account_id, invocation_id).await
    }

    async fn request_cancel(
        &self,
        account_id: &str,
        invocation_id: &str,
    ) -> Result<bool, StoreError> {
        self.inner
            .pg
            .request_cancel(account_id, invocation_id)
            .await
    }

    async fn notify(&self, channel: &str, payloads: &[String]) -> Result<(), StoreError> {
        // While degraded the pointers name journal rows other replicas cannot read; the
        // backfill announces them once they are in PostgreSQL.
        if self.inner.degraded.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.inner.pg.notify(channel, payloads).await
    }

    /// Into PostgreSQL only, and only while it is reachable: a session the journal holds
    /// rows of exists already, whatever PostgreSQL says.
    async fn import_session(&self, events: &[Event]) -> Result<Imported, StoreError> {
        let inner = &*self.inner;
        let _route = inner.route.lock().await;
        let (Some(first), Some(last)) = (events.first(), events.last()) else {
            return inner.pg.import_session(events).await;
        };
        if inner.degraded.load(Ordering::Relaxed) {
            return Err(unreachable_error());
        }
        if inner.is_pending(&first.account_id, &first.session_id) {
            return Ok(Imported::SessionExists);
        }
        let imported = inner.pg.import_session(events).await?;
        if imported == Imported::Created {
            inner.learn(&last.account_id, &last.session_id, last.seq);
        }
        Ok(imported)
    }

    async fn put_attachment(&self, attachment: &Attachment) -> Result<(), StoreError> {
        self.inner.pg.put_attachment(attachment).await
    }

    async fn attachment(
        &self,
        account_id: &str,
        file_id: &str,
    ) -> Result<Option<Attachment>, StoreError> {
        self.inner.pg.attachment(account_id, file_id).await
    }

    // Idempotency keys are not journalled: during an outage a repeat cannot be recognised,
    // and the gateway runs the request as a new one (runs never wait for the database).
    async fn claim_idempotency_key(
        &self,
        record: &IdempotentRun,
        since: DateTime<Utc>,
        replacing: Option<&str>,
    ) -> Result<Option<IdempotentRun>, StoreError> {
        // Not journalled: other replicas could not see a key taken here, so a repeat sent
        // to them would run again. The caller refuses the request instead (and soon, not
        // after a hung connection's timeout).
        let inner = &*self.inner;
        let claimed = inner.pg.claim_idempotency_key(record, since, replacing);
        match tokio::time::timeout(inner.config.append_timeout, claimed).await {
            Ok(r) => r,
            Err(_) => Err(unreachable_error()),
        }
    }

    async fn release_idempotency_key(
        &self,
        account_id: &str,
        key: &str,
        run_id: &str,
    ) -> Result<(), StoreError> {
        self.inner
            .pg
            .release_idempotency_key(account_id, key, run_id)
            .await
    }

    // Approvals are not journalled: during an outage a request waits to be recorded
    // (see the gateway's approvals), and a resolve fails (503) and is tried again.
    async fn put_approval(&self, approval: &Approval) -> Result<(), StoreError> {
        self.inner.pg.put_approval(approval).await
    }

    async fn list_pending_approvals(
        &self,
        account_id: &str,
        filter: ApprovalFilter<'_>,
        offset: i64,
        limit: i64,
    ) -> Result<(Vec<Approval>, i64), StoreError> {
        self.inner
            .pg
            .list_pending_approvals(account_id, filter, offset, limit)
            .await
    }

    async fn approval(
        &self,
        account_id: &str,
        session_id: &str,
        request_id: &str,
    ) -> Result<Option<Approval>, StoreError> {
        self.inner
            .pg
            .approval(account_id, session_id, request_id)
            .await
    }

    async fn resolve_approval(
        &self,
        account_id: &str,
        session_id: &str,
        request_id: &str,
        decision: Decision,
        resolution: &serde_json::Value,
        at: DateTime<Utc>,
    ) -> Result<Option<Approval>, StoreError> {
        self.inner
            .pg
            .resolve_approval(account_id, session_id, request_id, decision, resolution, at)
            .await
    }

    async fn drop_pending_approvals(
        &self,
        account_id: &str,
        session_id: &str,
    ) -> Result<u64, StoreError> {
        self.inner
            .pg
            .drop_pending_approvals(account_id, session_id)
            .await
    }

    async fn resolve_expired_approvals(
        &self,
        now: DateTime<Utc>,
        decision: Decision,
    ) -> Result<Vec<Approval>, StoreError> {
        self.inner.pg.resolve_expired_approvals(now, decision).await
    }

    // Feedback is not journalled: a person can send it again, and during an outage the
    // console says the store is unavailable.
    async fn put_feedback(&self, record: &Feedback) -> Result<(), StoreError> {
        self.inner.pg.put_feedback(record).await
    }

    async fn list_feedback(
        &self,
        account_id: &str,
        session_id: Option<&str>,
        offset: i64,
        limit: i64,
    ) -> Result<(Vec<Feedback>, i64), StoreError> {
        self.inner
            .pg
            .list_feedback(account_id, session_id, offset, limit)
            .await
    }

    // Archiving is not journalled: while PostgreSQL is down it fails (503) and is retried.
    async fn set_archived(
        &self,
        account_id: &str,
        session_id: &str,
        at: Option<DateTime<Utc>>,
    ) -> Result<bool, StoreError> {
        self.inner.pg.set_archived(account_id, session_id, at).await
    }

    async fn archived_at(
        &self,
        account_id: &str,
        session_id: &str,
    ) -> Result<Option<DateTime<Utc>>, StoreError> {
        let inner = &*self.inner;
        match inner
            .pg_read(inner.pg.archived_at(account_id, session_id))
            .await
        {
            // PostgreSQL slow or frozen: a session the journal holds is taking runs through
            // the outage, and archiving is not journalled (it is refused until PostgreSQL
            // answers), so the journal answers that it is not archived, as `session` does.
            Err(error) if error.is_transient() && inner.is_pending(account_id, session_id) => {
                Ok(None)
            }
            other => other,
        }
    }

    async fn usage(&self, account_id: &str) -> Result<Usage, StoreError> {
        // What the journal holds is not counted until it is backfilled: an outage's
        // writes pass the quota by at most what was written during it.
        let inner = &*self.inner;
        inner.pg_read(inner.pg.usage(account_id)).await
    }

    fn route_webhooks(&self, routes: Vec<crate::outbox::Route>) {
        // The journal writes none itself: its backfill writes those of what it held.
        self.inner.pg.route_webhooks(routes);
    }

    async fn claim_webhook_deliveries(
        &self,
        endpoint: &str,
        owner: &str,
        lease: Duration,
        limit: i64,
    ) -> Result<Vec<crate::outbox::Claimed>, StoreError> {
        self.inner
            .pg_read(
                self.inner
                    .pg
                    .claim_webhook_deliveries(endpoint, owner, lease, limit),
            )
            .await
    }

    async fn release_webhook_leases(&self, owner: &str) -> Result<(), StoreError> {
        self.inner
            .pg_read(self.inner.pg.release_webhook_leases(owner))
            .await
    }

    async fn finish_webhook_delivery(
        &self,
        endpoint: &str,
        event_id: &str,
        owner: &str,
        attempt: &crate::outbox::Attempt,
    ) -> Result<bool, StoreError> {
        self.inner
            .pg_read(
                self.inner
                    .pg
                    .finish_webhook_delivery(endpoint, event_id, owner, attempt),
            )
            .await
    }

    async fn list_webhook_deliveries(
        &self,
        query: &crate::outbox::DeliveryQuery,
    ) -> Result<(Vec<crate::outbox::Delivery>, i64), StoreError> {
        self.inner
            .pg_read(self.inner.pg.list_webhook_deliveries(query))
            .await
    }

    async fn claim_sweep(
        &self,
        owner: &str,
        lease: std::time::Duration,
    ) -> Result<bool, StoreError> {
        // No sweep while anything is journalled: a session's activity there is not in
        // PostgreSQL's `updated_at` yet, and its delete would be refused anyway.
        if self.inner.degraded.load(Ordering::Relaxed) || self.inner.pending_count() > 0 {
            return Ok(false);
        }
        self.inner.pg.claim_sweep(owner, lease).await
    }

    async fn idle_sessions(
        &self,
        before: DateTime<Utc>,
        offset: i64,
        limit: i64,
    ) -> Result<Vec<(String, String, DateTime<Utc>)>, StoreError> {
        self.inner.pg.idle_sessions(before, offset, limit).await
    }

    // Only the retention sweep prunes, which runs only with nothing journalled (see
    // `claim_sweep`); a prune is PostgreSQL's alone.
    async fn prune_tombstones(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        self.inner.pg.prune_tombstones(before).await
    }

    // Removals are not journalled: a delete accepted while the journal holds events of a
    // session it takes would be undone when the backfill writes them. So it is refused
    // (the caller answers 503, to be retried) while PostgreSQL is down or the journal
    // holds any such session, and goes to PostgreSQL otherwise.
    async fn remove(&self, removal: &Removal) -> Result<Deletion, StoreError> {
        let inner = &*self.inner;
        if inner.degraded.load(Ordering::Relaxed) {
            return Ok(Deletion::Journaled { session_id: None });
        }
        let journaled = |inner: &Inner| -> Option<String> {
            let pending = inner.pending.lock().map(|p| p.clone()).unwrap_or_default();
            let mut held: Vec<&Key> = pending
                .iter()
                .filter(|(account, session)| {
                    *account == removal.account_id
                        && match &removal.scope {
                            Scope::Session(id) => session == id,
                            // Which sessions a user's removal takes is known only to
                            // PostgreSQL: any journalled session of the account may be one.
                            Scope::User(_) | Scope::Account => true,
                        }
                })
                .collect();
            held.sort();
            held.first().map(|(_, session)| session.clone())
        };
        if let Some(session_id) = journaled(inner) {
            return Ok(Deletion::Journaled {
                session_id: Some(session_id),
            });
        }
        inner.pg.remove(removal).await
    }
}
