//! Retention: sessions idle longer than a maximum age are removed in the background, one
//! session per transaction, each followed by a pause as long as it took
//! ([`give_way`]: the writer's other commits go between them, and the sweep takes at
//! most about half of the writer's time), by the one
//! replica holding the sweeper's lease, each with its audit row (`deleted_by` =
//! `retention`). A session with a run in progress is never swept (its delete is refused),
//! nor one whose forks still read it (it goes once they do).
//!
//! Each sweep also prunes the tombstones (`removed_sessions`) older than
//! [`RetentionConfig::tombstones`]. A tombstone exists for one reader: another replica's
//! PostgreSQL outage journal, whose backfill discards what it journaled for a session
//! removed after that. The journal has no age limit of its own (it is a file that outlives
//! a restart; a replica backfills it once PostgreSQL answers, every `probe_every`), so how
//! long a backfill can still arrive is how long a replica can run cut off from PostgreSQL,
//! or stay down with an unbackfilled journal: the default, [`TOMBSTONES`], is far past
//! any outage a deployment runs through unnoticed. A backfill arriving later than that
//! for a session removed meanwhile would write its journaled rows back (the session's
//! next sweep removes them again if it is idle past the maximum).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;

use crate::removal::{give_way, Deletion, Removal, Removed, Scope};
use crate::store::Store;

/// Who the audit trail names for a sweep's deletes.
pub const BY: &str = "retention";

/// How long a tombstone is kept unless configured: 30 days.
pub const TOMBSTONES: Duration = Duration::from_secs(30 * 86_400);

#[derive(Clone, Debug)]
pub struct RetentionConfig {
    /// Sessions whose last activity is older than this are removed.
    pub max_idle: Duration,
    /// Accounts with a maximum of their own instead.
    pub accounts: HashMap<String, Duration>,
    /// How often a sweep runs.
    pub interval: Duration,
    /// Sessions read per page of a sweep.
    pub batch: i64,
    /// Tombstones of removed sessions older than this are pruned (see the module's
    /// documentation).
    pub tombstones: Duration,
}

/// Sweeps every `config.interval` while the process lives. `new_id` makes the audit rows'
/// ids; `removed` is told of each delete (metrics).
pub async fn keep(
    store: Arc<dyn Store>,
    owner: String,
    config: RetentionConfig,
    new_id: impl Fn() -> String + Send + 'static,
    removed: impl Fn(&Removed) + Send + 'static,
) {
    let mut tick = tokio::time::interval(config.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match sweep(&*store, &owner, &config, &new_id, &removed).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(sessions = n, "retention sweep removed idle sessions"),
            Err(error) => tracing::warn!(%error, "retention sweep failed; retrying at the next"),
        }
    }
}

/// One sweep, if this replica holds the sweeper's lease: how many sessions it removed.
pub async fn sweep(
    store: &dyn Store,
    owner: &str,
    config: &RetentionConfig,
    new_id: &impl Fn() -> String,
    removed: &impl Fn(&Removed),
) -> Result<usize, crate::StoreError> {
    // The lease outlives the sweep's interval a little: a replica whose sweep runs long
    // keeps it, and one that died hands it over after two intervals.
    if !store.claim_sweep(owner, config.interval * 2).await? {
        return Ok(0);
    }
    let now = Utc::now();
    let cutoff = |idle: Duration| now - chrono::Duration::from_std(idle).unwrap_or_default();
    // Read from the shortest maximum; a session of an account allowed longer is skipped.
    let shortest = config
        .accounts
        .values()
        .fold(config.max_idle, |a, b| a.min(*b));
    let before = cutoff(shortest);
    let pruned = store.prune_tombstones(cutoff(config.tombstones)).await?;
    if pruned > 0 {
        tracing::info!(tombstones = pruned, "retention sweep pruned old tombstones");
    }
    let (mut count, mut skipped) = (0, 0);
    loop {
        let page = store.idle_sessions(before, skipped, config.batch).await?;
        if page.is_empty() {
            return Ok(count);
        }
        for (account_id, session_id, active_at) in page {
            let max_idle = config.accounts.get(&account_id).unwrap_or(&config.max_idle);
            if active_at >= cutoff(*max_idle) {
                skipped += 1;
                continue;
            }
            let removal = Removal {
                deletion_id: new_id(),
                account_id,
                scope: Scope::Session(session_id),
                by: BY.to_owned(),
            };
            let started = std::time::Instant::now();
            let outcome = store.remove(&removal).await?;
            give_way(started.elapsed()).await;
            match outcome {
                Deletion::Removed(r) => {
                    count += 1;
                    removed(&r);
                }
                // Kept for now; the next pages start after it.
                _ => skipped += 1,
            }
        }
    }
}
