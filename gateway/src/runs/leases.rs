//! Who drives a run, and the end of runs nobody drives: the leases this replica renews on
//! its runs, abandoned runs (their replica died) closed as `interrupted`, and the drain
//! at shutdown.
//!
//! The sweeper's rule: a replica takes over no run whose lease expired while it could not
//! reach the store itself. After it regains the store (and after it starts) it waits one
//! lease period before it sweeps: an outage of the store is an outage for every replica,
//! and each needs that long to renew the leases of the runs it drove through it (the
//! journal renews them first thing when PostgreSQL answers again, before its backfill).
//! Only leases still expired after that wait are abandoned runs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use session_log::event::run_status_content;
use session_log::{EventType, NewEvent, RunStatus, WriteError, Writer};

use super::{Runs, Stop};

impl Runs {
    /// Renews the leases of this replica's runs every third of the lease, stops the runs
    /// whose lease was lost or whose cancel another replica requested, and closes open
    /// invocations nobody renews any more (their replica died) as `interrupted`. Runs
    /// until the process ends; must run on the core runtime.
    pub async fn keep_leases(self: Arc<Self>) {
        let mut tick = tokio::time::interval(self.lease / 3);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.heartbeat().await;
            self.close_abandoned().await;
        }
    }

    async fn heartbeat(&self) {
        let keys: Vec<(String, String)> = self
            .active()
            .by_run
            .iter()
            .filter(|(_, r)| r.leased && !r.finishing)
            .map(|(key, _)| key.clone())
            .collect();
        let ids: Vec<String> = keys.iter().map(|(_, id)| id.clone()).collect();
        if ids.is_empty() {
            return;
        }
        let renewed = match self.store.renew_leases(&self.owner, &ids, self.lease).await {
            Ok(r) => {
                self.contact().reached();
                r
            }
            Err(error) => {
                if error.is_transient() {
                    self.contact().lost();
                }
                // The runs go on: their events are queued for the writer, and the lease
                // is renewed at the next beat if the database is back by then.
                tracing::warn!(%error, runs = ids.len(), "could not renew run leases");
                return;
            }
        };
        for (account_id, id) in &keys {
            match renewed.iter().find(|r| &r.invocation_id == id) {
                Some(r) if r.cancel_requested => {
                    tracing::info!(invocation_id = %id, "cancel requested through another replica");
                    self.stop(account_id, id, Stop::Cancel);
                }
                Some(_) => {}
                // Closed under us (or finished between the listing and the update: then
                // the stop finds nothing to do).
                None => {
                    if self
                        .active()
                        .by_run
                        .get(&(account_id.clone(), id.clone()))
                        .is_some_and(|r| !r.finishing)
                    {
                        tracing::warn!(invocation_id = %id, "run lease lost; stopping the run");
                        self.stop(account_id, id, Stop::LeaseLost);
                    }
                }
            }
        }
    }

    fn contact(&self) -> std::sync::MutexGuard<'_, StoreContact> {
        self.contact.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn close_abandoned(&self) {
        // Bounded, so a store that hangs counts as lost like one that refuses.
        let Ok(found) =
            tokio::time::timeout(self.lease / 3, self.store.abandoned_invocations(None)).await
        else {
            self.contact().lost();
            tracing::warn!("could not look for abandoned runs: no answer in time");
            return;
        };
        if found.as_ref().is_err_and(|e| e.is_transient()) {
            self.contact().lost();
        }
        match found {
            Ok(open) => {
                let may_sweep = {
                    let mut contact = self.contact();
                    contact.reached();
                    contact.may_sweep(self.lease)
                };
                if !may_sweep {
                    if !open.is_empty() {
                        tracing::info!(
                            runs = open.len(),
                            "expired run leases found within a lease period of regaining the store; their owners may still renew them"
                        );
                    }
                    return;
                }
                // Ours are renewed by the heartbeat; one found here is being claimed or
                // finishing, never abandoned.
                let open: Vec<_> = {
                    let active = self.active();
                    open.into_iter()
                        .filter(|inv| {
                            !active
                                .by_run
                                .contains_key(&(inv.account_id.clone(), inv.invocation_id.clone()))
                        })
                        .collect()
                };
                if let Err(error) =
                    close_as_interrupted(&self.writer, &open, session_log::event::RUN_OWNER_LOST)
                        .await
                {
                    tracing::warn!(%error, "could not close abandoned runs");
                }
            }
            Err(error) => tracing::warn!(%error, "could not look for abandoned runs"),
        }
    }

    /// Waits until no run is active, or `timeout` passes; returns whether none is.
    async fn until_idle(&self, timeout: Duration) -> bool {
        tokio::time::timeout(timeout, async {
            loop {
                let changed = self.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                if self.active_count() == 0 {
                    return;
                }
                changed.await;
            }
        })
        .await
        .is_ok()
    }

    /// Refuses new runs, waits up to `grace` for running ones to finish, then closes the
    /// rest as `interrupted` and waits until everything is committed.
    pub async fn drain(&self, grace: Duration) {
        self.active().closed = true;
        if !self.until_idle(grace).await {
            let keys: Vec<(String, String)> = self.active().by_run.keys().cloned().collect();
            tracing::warn!(
                runs = keys.len(),
                "closing runs still going at shutdown as interrupted"
            );
            for (account_id, id) in keys {
                self.stop(&account_id, &id, Stop::Shutdown);
            }
            // Their supervisors write the terminal statuses.
            self.until_idle(Duration::from_secs(2)).await;
        }
        let _ = self.writer.flush().await;
    }
}

/// Appends an `interrupted` terminal status for each invocation (the store drops the ones
/// someone closed meanwhile, so racing replicas close each run once).
pub async fn close_as_interrupted(
    writer: &Writer,
    open: &[session_log::Invocation],
    reason: &str,
) -> Result<(), WriteError> {
    if open.is_empty() {
        return Ok(());
    }
    let batch: Vec<NewEvent> = open
        .iter()
        .map(|inv| {
            NewEvent::new(
                &inv.account_id,
                &inv.session_id,
                EventType::RunStatus,
                run_status_content(RunStatus::Interrupted, Some(reason)),
            )
            .in_run(&inv.run_id, &inv.invocation_id)
        })
        .collect();
    let closed = writer.append(batch).await?;
    for event in &closed {
        tracing::warn!(
            account_id = %event.account_id, session_id = %event.session_id,
            run_id = event.run_id.as_deref().unwrap_or_default(),
            invocation_id = event.invocation_id.as_deref().unwrap_or_default(),
            reason, "closed an abandoned run as interrupted"
        );
    }
    Ok(())
}

/// What the lease sweeper knows of its own contact with the store.
pub(super) struct StoreContact {
    /// The last look at the store failed (or hung).
    lost: bool,
    /// When the store answered again after a failure, or the process started.
    regained: Instant,
}

impl StoreContact {
    pub(super) fn new() -> StoreContact {
        StoreContact {
            lost: false,
            regained: Instant::now(),
        }
    }

    fn lost(&mut self) {
        self.lost = true;
    }

    fn reached(&mut self) {
        if self.lost {
            self.lost = false;
            self.regained = Instant::now();
        }
    }

    /// Whether a whole lease period has passed since the store was regained.
    fn may_sweep(&self, lease: Duration) -> bool {
        !self.lost && self.regained.elapsed() >= lease
    }
}
