//! Hard deletion: what a caller asks a store to remove ([`Removal`]) and what it did
//! ([`Deletion`]), with the rules every store applies (the SQL is in the backends).
//!
//! - A session is removed whole: its events (checkpoints, tool receipts, compactions are
//!   events), invocations, feedback, idempotency keys, and the attachments its events
//!   refer to that no other session of the account refers to.
//! - A fork reads its parent's events up to the fork point. Deleting a session that has
//!   forks is refused with the forks named (deleting them first, or the whole user's or
//!   account's data, removes both): keeping the inherited part for the forks would keep
//!   exactly the content the delete was asked to remove.
//! - A session with a run in progress is refused, naming the run: it must be cancelled
//!   first (a run's events are still coming, and would outlive the delete).
//! - One audit row ([`Removed`], table `deletions`) is written in the delete's
//!   transaction: counts and ids, never content.
//! - A removal too large for one transaction (more than 100 sessions, or a session of
//!   more than [`rows_per_step`] events) goes in steps, and gives way to the writes
//!   around it: after each step it pauses as long as the step took ([`give_way`]), so it
//!   takes at most about half of the writer's time.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};

/// Events of one session deleted per transaction when it has more (see
/// [`rows_per_step`]).
pub const ROWS_PER_STEP: i64 = 10_000;

static ROWS: AtomicI64 = AtomicI64::new(ROWS_PER_STEP);

/// Events of one session a removal deletes per transaction: a session with more is
/// hidden first (no reader finds it, no run starts in it), then emptied this many events
/// at a time, newest first, and removed whole last. [`ROWS_PER_STEP`] unless a test set
/// it lower.
pub fn rows_per_step() -> i64 {
    ROWS.load(Ordering::Relaxed)
}

/// Sets [`rows_per_step`] for the whole process (at least 1): for tests, which make a
/// session larger than a step without writing 10,000 events.
#[doc(hidden)]
pub fn set_rows_per_step(rows: i64) {
    ROWS.store(rows.max(1), Ordering::Relaxed);
}

/// The pause after a removal's step that held the writer for `took`: as long again, so
/// that the writes queued meanwhile commit and a long removal (an erasure, a retention
/// sweep) takes at most about half of the writer's time.
pub async fn give_way(took: Duration) {
    tokio::time::sleep(took).await;
}

/// Scheme of the references the log holds in place of an attachment's bytes
/// (`tether-upload://<file_id>`).
pub const UPLOAD_SCHEME: &str = "tether-upload://";

/// The file ids of the attachments `text` refers to (`tether-upload://<file_id>`).
pub fn upload_ids(text: &str) -> impl Iterator<Item = &str> {
    text.match_indices(UPLOAD_SCHEME)
        .filter_map(move |(at, _)| {
            let rest = &text[at + UPLOAD_SCHEME.len()..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
                .unwrap_or(rest.len());
            (end > 0).then(|| &rest[..end])
        })
}

/// Whose data a removal takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// One session (refused while it has forks).
    Session(String),
    /// Every session whose events name this user id (the ADK surface's `user_id`, the
    /// only surface with users), with their forks.
    User(String),
    /// Everything of the account.
    Account,
}

impl Scope {
    /// As the audit trail names it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Scope::Session(_) => "session",
            Scope::User(_) => "user",
            Scope::Account => "account",
        }
    }

    /// The id the request named, if any.
    pub fn subject(&self) -> Option<&str> {
        match self {
            Scope::Session(id) | Scope::User(id) => Some(id),
            Scope::Account => None,
        }
    }
}

/// A request to remove data of one account.
#[derive(Clone, Debug)]
pub struct Removal {
    /// The audit row's id (time-ordered), chosen by the caller.
    pub deletion_id: String,
    pub account_id: String,
    pub scope: Scope,
    /// Who asked: a credential id (`key:<id>`, `jwt:<sub>`, `local`) or `retention`.
    pub by: String,
}

/// What a removal removed: the audit row, as written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Removed {
    pub deletion_id: String,
    pub session_ids: Vec<String>,
    pub events: i64,
    /// Bytes of the removed events' JSON text (content and metadata).
    pub event_bytes: i64,
    pub invocations: i64,
    pub feedback: i64,
    pub idempotency_keys: i64,
    pub attachments: i64,
    pub attachment_bytes: i64,
    pub at: DateTime<Utc>,
}

/// The answer to a [`Removal`]. Only `Removed` changed anything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Deletion {
    Removed(Removed),
    /// The account has no such session.
    NotFound,
    /// A run of the session is in progress: cancel it first.
    LiveRun {
        session_id: String,
        run_id: String,
        invocation_id: String,
    },
    /// The session has forks, which read its events: delete them first.
    Forked {
        session_id: String,
        forks: Vec<String>,
    },
    /// The PostgreSQL outage journal holds events of the session (PostgreSQL is down, or
    /// the journal is not backfilled yet): a delete now would be undone by the backfill,
    /// so it is refused until the journal is empty. `None`: PostgreSQL is unreachable.
    Journaled {
        session_id: Option<String>,
    },
}

#[cfg(test)]
mod tests {
    use super::upload_ids;

    #[test]
    fn upload_ids_are_read_from_any_json_text() {
        let text = r#"{"url":"tether-upload://file_01ab","x":"see tether-upload://file_2-c."}"#;
        assert_eq!(
            upload_ids(text).collect::<Vec<_>>(),
            ["file_01ab", "file_2-c"]
        );
        assert_eq!(upload_ids("tether-upload://").count(), 0);
        assert_eq!(upload_ids("nothing here").count(), 0);
    }
}
