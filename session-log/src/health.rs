//! Whether the store can take writes now: the writer's outage (commits failing because of
//! what the store is, not what it was given) and the free space under a SQLite store. Read
//! by whatever must refuse new work, end waiting work or report readiness instead of
//! hanging on a store that cannot write.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::store::Fault;

/// How long a stream, a run or a request waits for a store that cannot write before it
/// ends with an error: long enough for a lock or a failover blip, short enough that no
/// client hangs on a full disk.
pub const OUTAGE_GRACE: Duration = Duration::from_secs(5);

/// The `Retry-After` (seconds) of work refused because the store cannot write.
pub const RETRY_AFTER_SECS: u64 = 5;

/// How often the free space under the store is read (one `statvfs`).
pub const FREE_SPACE_EVERY: Duration = Duration::from_secs(1);

/// Why the store cannot take new work now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unwritable {
    #[error("the session store cannot write ({})", .0.as_str())]
    Outage(Fault),
    #[error("the session store's disk has less free space than store_min_free_bytes")]
    LowSpace,
}

/// An outage in progress: what the last failed commit meant, and since when commits fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outage {
    pub fault: Fault,
    pub since: Instant,
}

/// Shared view of the store's health (cheap to clone): the writer reports, everyone else
/// reads.
#[derive(Clone, Default)]
pub struct Health {
    inner: Arc<Inner>,
}

struct Inner {
    outage: watch::Sender<Option<Outage>>,
    low_space: AtomicBool,
}

impl Default for Inner {
    fn default() -> Self {
        Inner {
            outage: watch::channel(None).0,
            low_space: AtomicBool::new(false),
        }
    }
}

impl Health {
    pub fn new() -> Self {
        Self::default()
    }

    /// `Ok` when new work may start: no outage, enough free space.
    pub fn writable(&self) -> Result<(), Unwritable> {
        if let Some(outage) = self.outage() {
            return Err(Unwritable::Outage(outage.fault));
        }
        if self.inner.low_space.load(Ordering::Relaxed) {
            return Err(Unwritable::LowSpace);
        }
        Ok(())
    }

    /// The outage in progress, if any.
    pub fn outage(&self) -> Option<Outage> {
        *self.inner.outage.borrow()
    }

    /// A commit failed with an outage fault: the outage starts now unless it already has.
    pub fn commit_failed(&self, fault: Fault) {
        self.inner.outage.send_if_modified(|outage| match outage {
            Some(o) if o.fault == fault => false,
            Some(o) => {
                o.fault = fault;
                true
            }
            None => {
                *outage = Some(Outage {
                    fault,
                    since: Instant::now(),
                });
                true
            }
        });
    }

    /// A commit succeeded: the outage, if any, is over.
    pub fn committed(&self) {
        self.inner
            .outage
            .send_if_modified(|outage| outage.take().is_some());
    }

    pub fn set_low_space(&self, low: bool) {
        let was = self.inner.low_space.swap(low, Ordering::Relaxed);
        if was != low {
            tracing::warn!(low, "session store free space below min_free_bytes: {low}");
        }
    }

    /// Resolves once an outage has lasted `grace` (at once if one already has); never
    /// while the store writes.
    pub async fn outage_lasting(&self, grace: Duration) {
        let mut changes = self.inner.outage.subscribe();
        loop {
            let since = changes.borrow_and_update().map(|o| o.since);
            match since {
                Some(since) => tokio::select! {
                    _ = tokio::time::sleep_until(since + grace) => return,
                    changed = changes.changed() => if changed.is_err() {
                        return std::future::pending().await;
                    },
                },
                None => {
                    if changes.changed().await.is_err() {
                        return std::future::pending().await;
                    }
                }
            }
        }
    }

    /// Reads the free space of the filesystem holding `path` every [`FREE_SPACE_EVERY`]
    /// and refuses new work (see [`Health::writable`]) while it is below `min_free`
    /// bytes, so the runs in flight can finish before the disk is full. Never returns.
    pub async fn watch_free_space(&self, path: PathBuf, min_free: u64) {
        let mut every = tokio::time::interval(FREE_SPACE_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            match free_bytes(&path) {
                Ok(free) => self.set_low_space(free < min_free),
                Err(error) => {
                    tracing::warn!(%error, path = %path.display(), "cannot read the free space under the session store")
                }
            }
        }
    }
}

/// Bytes an unprivileged writer may still use on the filesystem holding `path`.
pub fn free_bytes(path: &std::path::Path) -> std::io::Result<u64> {
    let stat = rustix::fs::statvfs(path)?;
    Ok(stat.f_bavail.saturating_mul(stat.f_frsize))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: Duration = Duration::from_millis(300);

    #[tokio::test]
    async fn an_outage_is_reported_once_it_lasts_the_grace() {
        let health = Health::new();
        assert_eq!(health.writable(), Ok(()));
        let waiting = tokio::spawn({
            let health = health.clone();
            async move { health.outage_lasting(GRACE).await }
        });
        tokio::time::sleep(GRACE * 2).await;
        assert!(!waiting.is_finished(), "no outage yet");
        health.commit_failed(Fault::Full);
        assert_eq!(health.writable(), Err(Unwritable::Outage(Fault::Full)));
        tokio::time::sleep(GRACE / 3).await;
        assert!(!waiting.is_finished(), "within the grace");
        tokio::time::timeout(GRACE * 3, waiting)
            .await
            .expect("past the grace")
            .unwrap();
        health.committed();
        assert_eq!(health.writable(), Ok(()));
    }

    #[tokio::test]
    async fn an_outage_that_ends_within_the_grace_ends_nothing() {
        let health = Health::new();
        let waiting = tokio::spawn({
            let health = health.clone();
            async move { health.outage_lasting(GRACE).await }
        });
        tokio::task::yield_now().await;
        health.commit_failed(Fault::Busy);
        tokio::time::sleep(GRACE / 3).await;
        health.committed();
        tokio::time::sleep(GRACE * 2).await;
        assert!(!waiting.is_finished());
    }

    #[test]
    fn low_space_refuses_new_work() {
        let health = Health::new();
        health.set_low_space(true);
        assert_eq!(health.writable(), Err(Unwritable::LowSpace));
        health.set_low_space(false);
        assert_eq!(health.writable(), Ok(()));
        assert!(free_bytes(std::path::Path::new("/")).is_ok());
    }
}
