//! Claims a store granted but has not written yet: the append that opens the claimed
//! invocation inserts its row with the claim's owner and lease, so the claim costs no
//! transaction of its own (see [`Store::claim`](crate::Store::claim)).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::store::{Claim, Claimed, Renewed};

/// A claim waiting for its invocation's `in_progress` append.
#[derive(Clone, Debug)]
pub(crate) struct PendingClaim {
    pub session_id: String,
    pub run_id: String,
    pub owner: String,
    pub lease: Duration,
    /// An agent handle recorded before the invocation's row exists (see
    /// [`Store::set_agent_ref`](crate::Store::set_agent_ref)); the append that inserts
    /// the row writes it too.
    pub agent_ref: Option<String>,
    /// The claim was fresh ([`Claim::fresh`]): its session was named for this run just
    /// now, so no other process can have opened a run in it since.
    pub fresh: bool,
    /// Forgotten after this unless renewed, like a lease: a start that failed before its
    /// append leaves nothing behind.
    expires: Instant,
}

/// The pending claims of one store, by (account, invocation).
#[derive(Default)]
pub(crate) struct PendingClaims(Mutex<HashMap<(String, String), PendingClaim>>);

impl PendingClaims {
    fn map(&self) -> MutexGuard<'_, HashMap<(String, String), PendingClaim>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Grants `claim` unless another pending claim holds its session. Claiming the same
    /// invocation again renews it and keeps an agent handle already recorded.
    pub fn grant(&self, claim: &Claim<'_>) -> Claimed {
        let now = Instant::now();
        let mut map = self.map();
        map.retain(|_, p| p.expires > now);
        let other = map.iter().find(|((account_id, invocation_id), p)| {
            account_id == claim.account_id
                && p.session_id == claim.session_id
                && invocation_id != claim.invocation_id
        });
        if let Some(((_, invocation_id), p)) = other {
            return Claimed::Busy {
                run_id: p.run_id.clone(),
                invocation_id: invocation_id.clone(),
            };
        }
        let key = (claim.account_id.to_owned(), claim.invocation_id.to_owned());
        let agent_ref = map.get(&key).and_then(|p| p.agent_ref.clone());
        map.insert(
            key,
            PendingClaim {
                session_id: claim.session_id.to_owned(),
                run_id: claim.run_id.to_owned(),
                owner: claim.owner.to_owned(),
                lease: claim.lease,
                agent_ref,
                fresh: claim.fresh,
                expires: now + claim.lease,
            },
        );
        Claimed::Granted
    }

    /// The claim an `in_progress` of this invocation opens, if it was claimed for the same
    /// session and run.
    pub fn get(
        &self,
        account_id: &str,
        invocation_id: &str,
        session_id: &str,
        run_id: &str,
    ) -> Option<PendingClaim> {
        self.map()
            .get(&(account_id.to_owned(), invocation_id.to_owned()))
            .filter(|p| p.session_id == session_id && p.run_id == run_id)
            .cloned()
    }

    pub fn contains(&self, account_id: &str, invocation_id: &str) -> bool {
        self.map()
            .contains_key(&(account_id.to_owned(), invocation_id.to_owned()))
    }

    /// Forgets claims whose rows are written (only once committed: a failed append is
    /// retried with its claims intact).
    pub fn written<'a>(&self, invocations: impl IntoIterator<Item = (&'a str, &'a str)>) {
        let mut map = self.map();
        for (account_id, invocation_id) in invocations {
            map.remove(&(account_id.to_owned(), invocation_id.to_owned()));
        }
    }

    /// Records an agent handle for a claim not written yet; false if there is none.
    pub fn set_agent_ref(&self, account_id: &str, invocation_id: &str, agent_ref: &str) -> bool {
        match self
            .map()
            .get_mut(&(account_id.to_owned(), invocation_id.to_owned()))
        {
            Some(p) => {
                p.agent_ref = Some(agent_ref.to_owned());
                true
            }
            None => false,
        }
    }

    /// Renews `owner`'s pending claims among `invocation_ids`: they are its runs too.
    pub fn renew(&self, owner: &str, invocation_ids: &[String], lease: Duration) -> Vec<Renewed> {
        let expires = Instant::now() + lease;
        let mut renewed = Vec::new();
        for ((_, invocation_id), p) in self.map().iter_mut() {
            if p.owner == owner && invocation_ids.contains(invocation_id) {
                p.expires = expires;
                renewed.push(Renewed {
                    invocation_id: invocation_id.clone(),
                    cancel_requested: false,
                });
            }
        }
        renewed
    }
}
