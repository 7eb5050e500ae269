//! The `Store` trait every backend implements and the types of what it stores and
//! answers. It names no backend: [`open`](crate::open) builds one from a URL.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::event::{Event, EventType, NewEvent, RunStatus, Seq, Session};
use crate::outbox;
use crate::removal::{Deletion, Removal};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("invalid store URL {url:?}: {reason}")]
    Url { url: String, reason: String },
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// The store has not been able to write for a while (see [`crate::health`]).
    #[error("the session store cannot write ({})", .0.as_str())]
    Outage(Fault),
}

/// What a store error means, whatever the backend said it with: the one classification
/// every caller (the writer, the journal, leases, readiness) acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The database could not be reached, or its pool or connection broke.
    Unreachable,
    /// Locked or busy (another writer, a serialization conflict, a deadlock).
    Busy,
    /// The disk (or the database's quota) is full.
    Full,
    /// The disk failed a read or write.
    Io,
    /// The database or its file is read-only.
    ReadOnly,
    /// The database reports its own storage as corrupt.
    Corrupt,
    /// A constraint refused the row: this event, not the store, is the problem.
    Constraint,
    /// Anything else the store refused (bad SQL, bad data, a bug): the statement, not the
    /// store, is the problem.
    Refused,
}

impl Fault {
    /// Whether the store cannot write at all for now (an outage): what is waiting must wait
    /// for it to come back, never be dropped. The other faults refuse one statement.
    pub fn is_outage(self) -> bool {
        !matches!(self, Fault::Constraint | Fault::Refused)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Fault::Unreachable => "unreachable",
            Fault::Busy => "busy",
            Fault::Full => "full",
            Fault::Io => "io_error",
            Fault::ReadOnly => "read_only",
            Fault::Corrupt => "corrupt",
            Fault::Constraint => "constraint",
            Fault::Refused => "refused",
        }
    }
}

impl StoreError {
    /// What this error means (see [`Fault`]).
    pub fn fault(&self) -> Fault {
        match self {
            StoreError::Database(e) => match e {
                sqlx::Error::Io(_)
                | sqlx::Error::PoolTimedOut
                | sqlx::Error::PoolClosed
                | sqlx::Error::WorkerCrashed
                | sqlx::Error::Protocol(_)
                | sqlx::Error::Tls(_) => Fault::Unreachable,
                sqlx::Error::Database(db) => {
                    let sqlite = db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some();
                    match db.code() {
                        Some(code) if sqlite => fault_of_sqlite_code(&code),
                        Some(code) => fault_of_sqlstate(&code),
                        None => Fault::Refused,
                    }
                }
                _ => Fault::Refused,
            },
            // Rows Tether cannot read back (not the database's own corruption): a bug or a
            // bad row, refused like one.
            StoreError::Migrate(_) | StoreError::Url { .. } | StoreError::Corrupt(_) => {
                Fault::Refused
            }
            StoreError::Outage(fault) => *fault,
        }
    }

    /// Whether the same statement may well succeed on a later try: the store is out (see
    /// [`Fault::is_outage`]), as opposed to refusing what it was given.
    pub fn is_transient(&self) -> bool {
        self.fault().is_outage()
    }
}

/// The meaning of a SQLite (extended) result code, whose low byte is the primary code.
fn fault_of_sqlite_code(code: &str) -> Fault {
    match code.parse::<u32>().map(|n| n & 0xff) {
        Ok(5 | 6) => Fault::Busy,      // SQLITE_BUSY, SQLITE_LOCKED
        Ok(13) => Fault::Full,         // SQLITE_FULL
        Ok(10 | 14 | 15) => Fault::Io, // SQLITE_IOERR, SQLITE_CANTOPEN, SQLITE_PROTOCOL
        Ok(8) => Fault::ReadOnly,      // SQLITE_READONLY
        Ok(11 | 26) => Fault::Corrupt, // SQLITE_CORRUPT, SQLITE_NOTADB
        Ok(19) => Fault::Constraint,   // SQLITE_CONSTRAINT
        _ => Fault::Refused,
    }
}

/// The meaning of a PostgreSQL SQLSTATE, by class where the class says it.
fn fault_of_sqlstate(code: &str) -> Fault {
    match code {
        "40001" | "40P01" | "55P03" => Fault::Busy,
        "25006" => Fault::ReadOnly,
        "58030" => Fault::Io,
        "XX001" | "XX002" => Fault::Corrupt,
        c if c.starts_with("53") => Fault::Full, // insufficient resources: disk full, out of memory
        c if c.starts_with("08") || c.starts_with("57P") => Fault::Unreachable,
        c if c.starts_with("23") => Fault::Constraint,
        _ => Fault::Refused,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_read_by_their_backend() {
        assert_eq!(fault_of_sqlite_code("13"), Fault::Full);
        assert_eq!(fault_of_sqlite_code("778"), Fault::Io); // SQLITE_IOERR_WRITE
        assert_eq!(fault_of_sqlite_code("1032"), Fault::ReadOnly); // SQLITE_READONLY_DBMOVED
        assert_eq!(fault_of_sqlite_code("2067"), Fault::Constraint); // SQLITE_CONSTRAINT_UNIQUE
        assert_eq!(fault_of_sqlite_code("517"), Fault::Busy); // SQLITE_BUSY_SNAPSHOT
                                                              // A SQLSTATE of digits only is not a SQLite code: 22021 is a refused byte.
        assert_eq!(fault_of_sqlstate("22021"), Fault::Refused);
        assert_eq!(fault_of_sqlstate("53100"), Fault::Full);
        assert_eq!(fault_of_sqlstate("57P01"), Fault::Unreachable);
        assert_eq!(fault_of_sqlstate("23505"), Fault::Constraint);
        assert!(Fault::Full.is_outage() && !Fault::Constraint.is_outage());
    }
}

/// What an account stores, as its quotas count it (kept by the store in the transaction
/// of every write and delete, so reading it costs one row).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub sessions: i64,
    /// Bytes of the events' JSON (content and metadata).
    pub event_bytes: i64,
    pub upload_bytes: i64,
}

/// Which of an account's sessions [`Store::list_sessions`] returns: every field set
/// narrows the listing (all must hold).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SessionFilter {
    /// The ADK surface's `user_id` the session's events recorded.
    pub user_id: Option<String>,
    /// The ADK surface's `app_name` (the agent) the session's events recorded.
    pub agent_id: Option<String>,
    /// Created at or after / before this time.
    pub created_after: Option<DateTime<Utc>>,
    pub created_before: Option<DateTime<Utc>>,
    /// Last active (its latest event) at or after / before this time.
    pub active_after: Option<DateTime<Utc>>,
    pub active_before: Option<DateTime<Utc>>,
    /// The status of the session's latest run.
    pub last_run_status: Option<RunStatus>,
    /// Metadata entries (key, value) the session's metadata must have, as strings.
    pub metadata: Vec<(String, String)>,
    pub archived: ArchivedFilter,
    /// Words that must all appear in one message of the session (see [`search_words`]).
    pub text: Option<String>,
}

/// Whether a listing shows archived sessions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ArchivedFilter {
    /// Active sessions only (the default listing).
    #[default]
    Exclude,
    /// Active and archived sessions.
    Include,
    /// Archived sessions only.
    Only,
}

/// Whether a metadata key can be filtered on: any text but an empty one or one with a
/// double quote (which SQLite's JSON path would read as the end of the key).
pub fn metadata_key_is_valid(key: &str) -> bool {
    !key.is_empty() && !key.contains('"')
}

/// The words a text search looks for: `text` split at every character that is not a
/// letter or digit, lower-cased (both stores' indexes read message text so: SQLite's
/// FTS5 `unicode61` tokenizer and PostgreSQL's `simple` configuration).
pub fn search_words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Which events of one session to read, in seq order.
#[derive(Clone, Debug)]
pub struct EventQuery {
    pub account_id: String,
    pub session_id: String,
    /// Only events with `seq > after_seq` (0 reads from the start).
    pub after_seq: Seq,
    /// Only events with `seq <= until_seq`, when set (a fork's parent is read up to the
    /// fork point and no further).
    pub until_seq: Option<Seq>,
    /// Only events of this run, when set: those tagged with it from the start of its
    /// first invocation in the session to the end of its last (an event tagged with a
    /// run before it started or after it ended is not part of it).
    pub run_id: Option<String>,
    /// Only events of this invocation, when set, likewise within its start and end.
    pub invocation_id: Option<String>,
    /// Only events of these types, when set.
    pub event_types: Option<Vec<EventType>>,
    /// At most this many events.
    pub limit: i64,
}

impl EventQuery {
    pub fn session(account_id: &str, session_id: &str) -> Self {
        EventQuery {
            account_id: account_id.to_owned(),
            session_id: session_id.to_owned(),
            after_seq: 0,
            until_seq: None,
            run_id: None,
            invocation_id: None,
            event_types: None,
            limit: i64::MAX,
        }
    }
}

/// One execution of a run, as tracked by the store from the run's `run_status` events.
#[derive(Clone, Debug, PartialEq)]
pub struct Invocation {
    pub account_id: String,
    pub session_id: String,
    pub run_id: String,
    pub invocation_id: String,
    pub status: RunStatus,
    pub started_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
    /// The agent's own handle for this execution (an A2A task id), once recorded with
    /// [`Store::set_agent_ref`].
    pub agent_ref: Option<String>,
}

/// A replica's request to drive a new invocation of a session (see [`Store::claim`]).
#[derive(Clone, Debug)]
pub struct Claim<'a> {
    pub account_id: &'a str,
    pub session_id: &'a str,
    pub run_id: &'a str,
    pub invocation_id: &'a str,
    /// The replica that will drive it and renew its lease.
    pub owner: &'a str,
    pub lease: std::time::Duration,
    /// The session was named for this run just now (a new conversation): no run can hold
    /// it, so the store grants without asking the database, and the append that opens
    /// the invocation writes its owner and lease.
    pub fresh: bool,
}

/// The answer to a [`Claim`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claimed {
    /// The invocation is open, owned by the claimant, with a fresh lease.
    Granted,
    /// Another invocation of the session is open with a live lease (on any replica).
    Busy {
        run_id: String,
        invocation_id: String,
    },
}

/// Who drives an open invocation, as far as the store knows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// `None` for an invocation opened without a claim: nobody renews it.
    pub owner: Option<String>,
    /// Whether the lease has not run out yet.
    pub live: bool,
    pub cancel_requested: bool,
}

/// An invocation whose lease a heartbeat renewed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Renewed {
    pub invocation_id: String,
    /// Another replica asked for this run to be cancelled.
    pub cancel_requested: bool,
}

/// A stored attachment (a file or image a client sent), owned by one account.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attachment {
    pub account_id: String,
    pub file_id: String,
    pub mime_type: String,
    pub filename: Option<String>,
    pub content: Vec<u8>,
}

/// A person's rating of an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rating {
    Up,
    Down,
}

impl Rating {
    pub fn as_str(self) -> &'static str {
        match self {
            Rating::Up => "up",
            Rating::Down => "down",
        }
    }

    pub fn parse(s: &str) -> Option<Rating> {
        match s {
            "up" => Some(Rating::Up),
            "down" => Some(Rating::Down),
            _ => None,
        }
    }
}

/// Feedback on one answer (a run of a session), owned by one account. Stored beside the
/// log, not in it: it takes no seq and wakes no subscriber.
#[derive(Clone, Debug, PartialEq)]
pub struct Feedback {
    pub account_id: String,
    /// Time-ordered (UUIDv7): listings are newest first by this id.
    pub feedback_id: String,
    pub session_id: String,
    pub run_id: String,
    pub invocation_id: Option<String>,
    /// The client-visible id of the answer (`resp_…`), when the client named it so.
    pub response_id: Option<String>,
    pub rating: Rating,
    pub comment: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// A person's answer to a waiting run's request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Approve,
    Reject,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Approve => "approve",
            Decision::Reject => "reject",
        }
    }

    pub fn parse(s: &str) -> Option<Decision> {
        match s {
            "approve" => Some(Decision::Approve),
            "reject" => Some(Decision::Reject),
            _ => None,
        }
    }
}

/// A request a run ended waiting on (its `requires_action` status), owned by one account,
/// pending until resolved (see [`Store::resolve_approval`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Approval {
    pub account_id: String,
    pub session_id: String,
    /// The agent's own id for the request.
    pub request_id: String,
    pub run_id: String,
    /// The waiting invocation.
    pub invocation_id: String,
    pub agent_id: Option<String>,
    /// `approval`, `input` or `auth`.
    pub kind: String,
    /// The `action` of the run's `requires_action` status.
    pub action: serde_json::Value,
    pub requested_at: DateTime<Utc>,
    /// When the timeout sweeper resolves it, if ever.
    pub expires_at: Option<DateTime<Utc>>,
    /// `None` while pending.
    pub decision: Option<Decision>,
    /// `{"by": …}` or `{"timeout": true}`, with `arguments` and `comment` when given.
    pub resolution: Option<serde_json::Value>,
    pub resolved_at: Option<DateTime<Utc>>,
}

/// Which pending approvals a listing shows (always one account's).
#[derive(Clone, Copy, Debug, Default)]
pub struct ApprovalFilter<'a> {
    pub session_id: Option<&'a str>,
    pub agent_id: Option<&'a str>,
}

/// The run a client's first request with an `Idempotency-Key` started (see
/// [`Store::claim_idempotency_key`]).
#[derive(Clone, Debug, PartialEq)]
pub struct IdempotentRun {
    pub account_id: String,
    pub key: String,
    pub session_id: String,
    pub run_id: String,
    pub created_at: DateTime<Utc>,
}

/// Where `Store::append_seqs` put each event of a batch.
#[derive(Debug, Default)]
pub struct Appended {
    /// One entry per input event, in input order: its seq and commit time, or `None` for
    /// an event the store dropped.
    pub placed: Vec<Option<(Seq, DateTime<Utc>)>>,
}

impl Appended {
    /// A batch committed at `created_at`, with these seqs.
    pub fn at(seqs: Vec<Option<Seq>>, created_at: DateTime<Utc>) -> Self {
        let placed = seqs
            .into_iter()
            .map(|s| s.map(|s| (s, created_at)))
            .collect();
        Appended { placed }
    }

    /// The committed events, made from the batch `append_seqs` was given.
    pub fn events(&self, batch: impl IntoIterator<Item = NewEvent>) -> Vec<Option<Event>> {
        batch
            .into_iter()
            .zip(&self.placed)
            .map(|(event, placed)| placed.map(|(seq, at)| Event::committed(event, seq, at)))
            .collect()
    }
}

/// What [`Store::import_session`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Imported {
    /// The session and its events are stored, with their seqs.
    Created,
    /// The account already has a session with this id: nothing was written.
    SessionExists,
    /// The account already has an invocation with this id: nothing was written.
    InvocationExists(String),
}

/// A durable session log. Every read is scoped to one account: an id that belongs to
/// another account is indistinguishable from one that does not exist.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// `"sqlite"` or `"postgres"`.
    fn backend(&self) -> &'static str;

    /// The store as errors and logs name it: the SQLite file, or PostgreSQL's host, port
    /// and database (never credentials).
    fn describe(&self) -> String;

    /// Succeeds when the database answers a trivial query.
    async fn ping(&self) -> Result<(), StoreError>;

    /// Closes the store's connections on a clean stop, after a last checkpoint where the
    /// backend keeps a write-ahead log (SQLite's WAL is then merged into the main file).
    /// Every call after it fails.
    async fn close(&self) {}

    /// Commits `batch` in one transaction and returns one entry per input event, in input
    /// order: the committed event, or `None` for an event the store dropped (below).
    ///
    /// Sessions are created on their first event. Seqs are assigned per session in input
    /// order, continuing after the session's last seq. `run_status` events maintain the
    /// invocation table: `in_progress` opens an invocation, a terminal status closes it —
    /// and a terminal status for an invocation that is not open (already closed, or never
    /// opened) is dropped, so every invocation ends exactly once even when two parties
    /// race to close it. Dropped events get no seq.
    async fn append(&self, batch: &[NewEvent]) -> Result<Vec<Option<Event>>, StoreError> {
        let mut batch = batch.to_vec();
        let appended = self.append_seqs(&mut batch).await?;
        Ok(appended.events(batch))
    }

    /// `append` for a caller that owns the batch (the writer): returns only where each
    /// event went, so the events become committed ones without being copied. A store that
    /// cannot keep some content as given (PostgreSQL and U+0000) rewrites it in `batch`,
    /// which therefore always holds what is stored.
    async fn append_seqs(&self, batch: &mut [NewEvent]) -> Result<Appended, StoreError>;

    async fn session(
        &self,
        account_id: &str,
        session_id: &str,
    ) -> Result<Option<Session>, StoreError>;

    /// The account's sessions that `filter` lets through, most recently updated first
    /// (ties by id, so pages are stable), `limit` of them after skipping `offset`; and
    /// the count of all that match. Sessions a client deleted are never listed.
    async fn list_sessions(
        &self,
        account_id: &str,
        filter: &SessionFilter,
        offset: i64,
        limit: i64,
    ) -> Result<(Vec<Session>, i64), StoreError>;

    /// Events matching `query`, in seq order.
    async fn events(&self, query: &EventQuery) -> Result<Vec<Event>, StoreError>;

    /// Commits `first` as seq 1 of a session that does not exist yet (a fork's
    /// `session_fork`), in one transaction with the session's creation. `None`, changing
    /// nothing, when the account already has a session of that id.
    async fn create_session(&self, first: &NewEvent) -> Result<Option<Event>, StoreError>;

    /// A `run_checkpoint` event of a session: the one whose content names `checkpoint_id`,
    /// or the latest without it; only events with `seq <= until_seq` when that is set.
    /// Found through an index of checkpoints, so the cost does not grow with the log.
    async fn checkpoint_event(
        &self,
        account_id: &str,
        session_id: &str,
        checkpoint_id: Option<&str>,
        until_seq: Option<Seq>,
    ) -> Result<Option<Event>, StoreError>;

    /// Number of events in a session.
    async fn count_events(&self, account_id: &str, session_id: &str) -> Result<i64, StoreError>;

    /// The most recent invocation of `run_id` in the account.
    async fn run(&self, account_id: &str, run_id: &str) -> Result<Option<Invocation>, StoreError>;

    async fn invocation(
        &self,
        account_id: &str,
        invocation_id: &str,
    ) -> Result<Option<Invocation>, StoreError>;

    /// The first of `invocation_ids` that an account other than `account_id` holds (an
    /// import must not adopt an id another account's run is known by). Reads the whole
    /// table: for imports only.
    async fn invocation_known_elsewhere(
        &self,
        account_id: &str,
        invocation_ids: &[String],
    ) -> Result<Option<String>, StoreError>;

    /// Records the agent's own handle for an invocation of the account (an A2A task id,
    /// say), replacing any recorded before, so that a client knowing only that handle
    /// finds the run with [`Store::invocation_by_agent_ref`]. Setting it on an invocation
    /// the account does not have is a no-op.
    async fn set_agent_ref(
        &self,
        account_id: &str,
        invocation_id: &str,
        agent_ref: &str,
    ) -> Result<(), StoreError>;

    /// The most recent invocation of the account whose agent handle is `agent_ref`;
    /// another account's handle is `None`.
    async fn invocation_by_agent_ref(
        &self,
        account_id: &str,
        agent_ref: &str,
    ) -> Result<Option<Invocation>, StoreError>;

    /// Every invocation still `in_progress`, across all accounts (used at start to close
    /// what a dead gateway left open).
    async fn open_invocations(&self) -> Result<Vec<Invocation>, StoreError>;

    /// Opens `claim.invocation_id` for `claim.owner` with a lease of `claim.lease`, unless
    /// another invocation of the session is open under a live lease. Check and insert are
    /// one transaction (serialised per session), so two replicas starting a run in the
    /// same session at once cannot both win. The run's `in_progress` event, appended
    /// afterwards, finds the row already there.
    ///
    /// SQLite does the same without a transaction of its own: `Granted` is provisional
    /// (refused early only against what the file and this process already show), and the
    /// append that opens the invocation checks the session and inserts the row with owner
    /// and lease in its transaction. If another live run holds the session by then, that
    /// append drops every event of the invocation in its batch, so a caller must treat a
    /// missing `in_progress` in the committed events as `Busy`.
    ///
    /// A `fresh` claim costs no round trip on either store: it is remembered, and the
    /// append that opens the invocation inserts the row with owner and lease.
    async fn claim(&self, claim: &Claim<'_>) -> Result<Claimed, StoreError>;

    /// Extends the leases of `owner`'s open invocations among `invocation_ids` to `lease`
    /// from now. Returns those renewed: an id missing from the answer is closed or no
    /// longer this owner's, and its run must stop.
    async fn renew_leases(
        &self,
        owner: &str,
        invocation_ids: &[String],
        lease: std::time::Duration,
    ) -> Result<Vec<Renewed>, StoreError>;

    /// Open invocations nobody drives any more: their lease ran out. At a restart
    /// (`restarted_owner` set) also those of this replica's previous life and those opened
    /// without a claim (by a gateway from before leases, or anything appending
    /// `in_progress` directly): the periodic sweep leaves the latter alone, since it
    /// cannot tell whether someone still drives them.
    async fn abandoned_invocations(
        &self,
        restarted_owner: Option<&str>,
    ) -> Result<Vec<Invocation>, StoreError>;

    /// The lease of an invocation of the account, if the invocation exists.
    async fn lease(
        &self,
        account_id: &str,
        invocation_id: &str,
    ) -> Result<Option<Lease>, StoreError>;

    /// Flags an open invocation for cancellation by its owner. Returns whether it is open.
    async fn request_cancel(
        &self,
        account_id: &str,
        invocation_id: &str,
    ) -> Result<bool, StoreError>;

    /// Tells other replicas something happened (PostgreSQL NOTIFY on `channel`, one per
    /// payload), on a connection of its own and outside any write transaction. Stores
    /// that only one process uses have nobody to tell.
    async fn notify(&self, _channel: &str, _payloads: &[String]) -> Result<(), StoreError> {
        Ok(())
    }

    /// Stores a whole session exported from another log, in one transaction: `events`
    /// (one account and session, checked by [`import::invocations`](crate::import::invocations))
    /// keep their seqs and times, the session's `last_seq` is the last of them, and the
    /// invocations their `run_status` events open are recorded as those events end them
    /// (still `in_progress`, unowned, when they do not). A session or invocation id the
    /// account already has refuses the whole import, which then writes nothing.
    async fn import_session(&self, events: &[Event]) -> Result<Imported, StoreError>;

    /// Stores an attachment; storing the same (account, file id) again is a no-op.
    async fn put_attachment(&self, attachment: &Attachment) -> Result<(), StoreError>;

    /// An attachment of the account; another account's file id is `None`.
    async fn attachment(
        &self,
        account_id: &str,
        file_id: &str,
    ) -> Result<Option<Attachment>, StoreError>;

    /// Makes `record` the run of its account's idempotency key, unless the key already
    /// names a run recorded at or after `since` (other than `replacing`, a run being
    /// retried): then that record is returned and nothing changes. `None`: the key is
    /// `record`'s now. One statement, so two requests with the same key cannot both win.
    async fn claim_idempotency_key(
        &self,
        record: &IdempotentRun,
        since: DateTime<Utc>,
        replacing: Option<&str>,
    ) -> Result<Option<IdempotentRun>, StoreError>;

    /// Gives up the account's claim of `key` for `run_id`, a run that was refused before it
    /// started: a repeat of the key is then a new request at once, instead of waiting for
    /// a run that will never come. A claim the key has moved on from is left alone.
    async fn release_idempotency_key(
        &self,
        account_id: &str,
        key: &str,
        run_id: &str,
    ) -> Result<(), StoreError>;

    /// When this database took the migration `description` (as sqlx names it, from the
    /// file: `idempotency keys`), `None` when it has not. A release's migrations date what
    /// that release first wrote, which tells apart what earlier releases left in the log
    /// (the gateway reads an earlier release's stream ids so).
    async fn migrated_at(&self, _description: &str) -> Result<Option<DateTime<Utc>>, StoreError> {
        Ok(None)
    }

    /// Stores one feedback record.
    async fn put_feedback(&self, feedback: &Feedback) -> Result<(), StoreError>;

    /// The account's feedback, newest first, optionally of one session; and the total
    /// count of what matches.
    async fn list_feedback(
        &self,
        account_id: &str,
        session_id: Option<&str>,
        offset: i64,
        limit: i64,
    ) -> Result<(Vec<Feedback>, i64), StoreError>;

    /// Removes what `removal` names (a session, a user's or an account's data) and writes
    /// its audit row, in one transaction; refuses, changing nothing, a session with a run
    /// in progress or with forks left behind (see [`crate::removal`]).
    async fn remove(&self, removal: &Removal) -> Result<Deletion, StoreError>;

    /// Archives (`at` set) or unarchives (`None`) a session of the account: an archived
    /// session is read-only (no run starts in it) and left out of `list_sessions` unless
    /// its filter asks for archived sessions.
    /// Returns whether the account has the session.
    async fn set_archived(
        &self,
        account_id: &str,
        session_id: &str,
        at: Option<DateTime<Utc>>,
    ) -> Result<bool, StoreError>;

    /// When the session was archived; `None` when active or unknown.
    async fn archived_at(
        &self,
        account_id: &str,
        session_id: &str,
    ) -> Result<Option<DateTime<Utc>>, StoreError>;

    /// What the account stores now (zero for an account with nothing).
    async fn usage(&self, account_id: &str) -> Result<Usage, StoreError>;

    /// Takes or renews the retention sweeper's lease for `owner` (for `lease` from now),
    /// unless another owner holds it: whether `owner` holds it, so exactly one replica
    /// sweeps at a time.
    async fn claim_sweep(
        &self,
        owner: &str,
        lease: std::time::Duration,
    ) -> Result<bool, StoreError>;

    /// Where webhook events go from now on: every append (and journal backfill) that
    /// commits an event causing one writes its outbox rows for these routes in the same
    /// transaction (see [`crate::outbox`]). None until set: no rows are written.
    fn route_webhooks(&self, routes: Vec<outbox::Route>);

    /// Leases up to `limit` due deliveries of `endpoint` to `owner` for `lease` (see
    /// [`crate::outbox`]): across replicas, each is attempted by one worker at a time.
    async fn claim_webhook_deliveries(
        &self,
        endpoint: &str,
        owner: &str,
        lease: std::time::Duration,
        limit: i64,
    ) -> Result<Vec<outbox::Claimed>, StoreError>;

    /// Gives up the leases `owner` holds on deliveries (a replica restarting under the same
    /// id: what its previous life was posting is due again at once, not after the lease).
    async fn release_webhook_leases(&self, owner: &str) -> Result<(), StoreError>;

    /// Records an attempt at a delivery `owner` leased; whether it still held the lease.
    async fn finish_webhook_delivery(
        &self,
        endpoint: &str,
        event_id: &str,
        owner: &str,
        attempt: &outbox::Attempt,
    ) -> Result<bool, StoreError>;

    /// An account's webhook deliveries matching `query`, newest first, and their count.
    async fn list_webhook_deliveries(
        &self,
        query: &outbox::DeliveryQuery,
    ) -> Result<(Vec<outbox::Delivery>, i64), StoreError>;

    /// (account, session, last activity) of sessions, across accounts, last active
    /// before `before`, oldest first: `limit` of them after skipping `offset`.
    async fn idle_sessions(
        &self,
        before: DateTime<Utc>,
        offset: i64,
        limit: i64,
    ) -> Result<Vec<(String, String, DateTime<Utc>)>, StoreError>;

    /// Deletes the tombstones of sessions removed before `before` (see
    /// [`crate::retention`] for how long they must be kept): how many.
    async fn prune_tombstones(&self, before: DateTime<Utc>) -> Result<u64, StoreError>;

    /// Records a request a run ended waiting on; recording the same (account, session,
    /// request) again is a no-op.
    async fn put_approval(&self, approval: &Approval) -> Result<(), StoreError>;

    /// The account's pending approvals matching `filter`, oldest first, and their count.
    async fn list_pending_approvals(
        &self,
        account_id: &str,
        filter: ApprovalFilter<'_>,
        offset: i64,
        limit: i64,
    ) -> Result<(Vec<Approval>, i64), StoreError>;

    /// One approval of the account, pending or not; another account's is `None`.
    async fn approval(
        &self,
        account_id: &str,
        session_id: &str,
        request_id: &str,
    ) -> Result<Option<Approval>, StoreError>;

    /// Resolves a pending approval: one conditional statement, so of any number of
    /// resolvers (on any replica, the timeout sweeper among them) exactly one gets
    /// `Some` (the approval as resolved); the others, and a resolve of one already
    /// resolved or unknown, get `None`.
    async fn resolve_approval(
        &self,
        account_id: &str,
        session_id: &str,
        request_id: &str,
        decision: Decision,
        resolution: &serde_json::Value,
        at: DateTime<Utc>,
    ) -> Result<Option<Approval>, StoreError>;

    /// Drops the session's pending approvals (the session went on without an answer
    /// through Tether: a client answered in its own protocol, or moved on); returns how
    /// many. Resolved ones stay.
    async fn drop_pending_approvals(
        &self,
        account_id: &str,
        session_id: &str,
    ) -> Result<u64, StoreError>;

    /// Resolves, as [`Store::resolve_approval`] does, every pending approval across
    /// accounts whose time ran out by `now`, with `decision` and `{"timeout": true}`:
    /// returns those this call resolved (a concurrent sweep on another replica gets the
    /// others).
    async fn resolve_expired_approvals(
        &self,
        now: DateTime<Utc>,
        decision: Decision,
    ) -> Result<Vec<Approval>, StoreError>;
}
