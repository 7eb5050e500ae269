//! Rate limits: requests per second with a burst (GCRA, via `governor`) per account and per
//! credential, with per-account overrides, and a cap on concurrent runs per account.
//!
//! A refusal is a [`Limited`], which carries what a 429 needs: `Retry-After` in whole
//! seconds (rounded up, so a client that waits exactly that long is let through) and the
//! `RateLimit-Policy` / `RateLimit` header values in the syntax of
//! draft-ietf-httpapi-ratelimit-headers-09 (structured-field lists):
//!
//! ```text
//! RateLimit-Policy: "account";q=20;w=2
//! RateLimit: "account";r=0;t=1
//! ```
//!
//! `q` is the burst (the quota an idle caller may spend at once) and `w` the seconds in which
//! a spent burst is fully replenished (`burst / rate`, rounded up, at least 1); `r=0` is the
//! remaining quota and `t` the seconds until the next request is allowed. Policies are named
//! `"account"`, `"credential"` and `"concurrent-runs"` (the latter has no window).
//!
//! Idle keys are forgotten by [`RateLimits::retain_recent`], which the gateway runs from a
//! background service (every minute is plenty): a key whose bucket is full again carries no
//! information, so dropping it changes no decision.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use governor::clock::{Clock, MonotonicClock};
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DashMapStateStore;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};

use crate::auth::Identity;
use crate::config::RateLimitConfig;

type Keyed<C> =
    RateLimiter<String, DashMapStateStore<String>, C, NoOpMiddleware<<C as Clock>::Instant>>;
type Direct<C> = RateLimiter<NotKeyed, InMemoryState, C, NoOpMiddleware<<C as Clock>::Instant>>;

/// Which limit refused the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKind {
    Account,
    Credential,
    ConcurrentRuns,
}

/// A refused request: answer 429 with [`Limited::headers`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("rate limit exceeded ({policy}); retry after {retry_after} s")]
pub struct Limited {
    pub kind: LimitKind,
    /// Whole seconds until a retry can succeed (at least 1).
    pub retry_after: u64,
    /// Value for `RateLimit-Policy`.
    pub policy: String,
    /// Value for `RateLimit`.
    pub ratelimit: String,
}

impl Limited {
    /// HTTP status for a refusal.
    pub const STATUS: u16 = 429;

    /// `Retry-After`, `RateLimit-Policy` and `RateLimit`, ready to send.
    pub fn headers(&self) -> [(&'static str, String); 3] {
        [
            ("retry-after", self.retry_after.to_string()),
            ("ratelimit-policy", self.policy.clone()),
            ("ratelimit", self.ratelimit.clone()),
        ]
    }
}

/// One rate, as advertised in `RateLimit-Policy`.
#[derive(Debug, Clone)]
struct Policy {
    name: &'static str,
    burst: u32,
    window_secs: u64,
}

impl Policy {
    fn header(&self) -> String {
        format!("\"{}\";q={};w={}", self.name, self.burst, self.window_secs)
    }
}

fn quota(rps: f64, burst: Option<u32>) -> Option<(Quota, u32, u64)> {
    let burst = burst.unwrap_or_else(|| rps.ceil().clamp(1.0, u32::MAX as f64) as u32);
    let burst_nz = NonZeroU32::new(burst)?;
    let period = Duration::from_secs_f64(1.0 / rps);
    let q = Quota::with_period(period)?.allow_burst(burst_nz);
    let window = (f64::from(burst) / rps).ceil().max(1.0) as u64;
    Some((q, burst, window))
}

struct Override<C: Clock> {
    rate: Option<(Direct<C>, Policy)>,
    concurrent_runs: Option<u32>,
}

/// All rate limits, built once from `[rate_limits]` and shared by every request.
pub struct RateLimits<C: Clock = MonotonicClock> {
    clock: C,
    account: Option<(Keyed<C>, Policy)>,
    credential: Option<(Keyed<C>, Policy)>,
    overrides: HashMap<String, Override<C>>,
    concurrent_runs: Option<u32>,
    runs: Arc<Mutex<HashMap<String, u32>>>,
}

impl RateLimits<MonotonicClock> {
    /// Limits from a validated [`RateLimitConfig`]; a default config limits nothing.
    pub fn new(config: &RateLimitConfig) -> Self {
        Self::with_clock(config, MonotonicClock)
    }
}

impl<C> RateLimits<C>
where
    C: Clock + Clone,
{
    /// Same as [`RateLimits::new`] with a chosen clock (tests use governor's
    /// `FakeRelativeClock`).
    pub fn with_clock(config: &RateLimitConfig, clock: C) -> Self {
        let keyed = |rps: Option<f64>, burst: Option<u32>, name| {
            let (q, burst, window_secs) = quota(rps?, burst)?;
            Some((
                RateLimiter::dashmap_with_clock(q, clock.clone()),
                Policy {
                    name,
                    burst,
                    window_secs,
                },
            ))
        };
        let account = keyed(config.requests_per_second, config.burst, "account");
        let credential = keyed(
            config.per_credential_requests_per_second,
            config.per_credential_burst,
            "credential",
        );
        let overrides = config
            .accounts
            .iter()
            .map(|(id, o)| {
                let rate = if o.requests_per_second.is_some() || o.burst.is_some() {
                    // A new rate without a burst gets the rate's own default burst rather
                    // than the base burst, which was sized for the base rate.
                    let burst = o.burst.or(if o.requests_per_second.is_some() {
                        None
                    } else {
                        config.burst
                    });
                    o.requests_per_second
                        .or(config.requests_per_second)
                        .and_then(|rps| quota(rps, burst))
                        .map(|(q, burst, window_secs)| {
                            (
                                RateLimiter::direct_with_clock(q, clock.clone()),
                                Policy {
                                    name: "account",
                                    burst,
                                    window_secs,
                                },
                            )
                        })
                } else {
                    None
                };
                (
                    id.clone(),
                    Override {
                        rate,
                        concurrent_runs: o.concurrent_runs,
                    },
                )
            })
            .collect();
        Self {
            clock,
            account,
            credential,
            overrides,
            concurrent_runs: config.concurrent_runs,
            runs: Arc::default(),
        }
    }

    fn refused(
        &self,
        kind: LimitKind,
        policy: &Policy,
        not_until: governor::NotUntil<C::Instant>,
    ) -> Limited {
        let wait = not_until.wait_time_from(self.clock.now());
        // Round up: Retry-After is in whole seconds, and waiting less would be refused again.
        let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        let retry_after = secs.max(1);
        Limited {
            kind,
            retry_after,
            policy: policy.header(),
            ratelimit: format!("\"{}\";r=0;t={}", policy.name, retry_after),
        }
    }

    /// Counts one request against the caller's credential and account. The credential is
    /// checked first so a refused credential does not spend its account's budget.
    pub fn check(&self, identity: &Identity) -> Result<(), Limited> {
        if let Some((limiter, policy)) = &self.credential {
            // Scoped by account: a JWT `sub` is only unique within its issuer's tenant.
            let key = format!("{}\n{}", identity.account_id, identity.credential_id);
            limiter
                .check_key(&key)
                .map_err(|n| self.refused(LimitKind::Credential, policy, n))?;
        }
        match self
            .overrides
            .get(&identity.account_id)
            .and_then(|o| o.rate.as_ref())
        {
            Some((limiter, policy)) => limiter
                .check()
                .map_err(|n| self.refused(LimitKind::Account, policy, n)),
            None => match &self.account {
                Some((limiter, policy)) => limiter
                    .check_key(&identity.account_id)
                    .map_err(|n| self.refused(LimitKind::Account, policy, n)),
                None => Ok(()),
            },
        }
    }

    /// The `RateLimit-Policy` value for an account's request limit, if it has one; a
    /// gateway may send it on successful responses too.
    pub fn policy_header(&self, account_id: &str) -> Option<String> {
        match self.overrides.get(account_id).and_then(|o| o.rate.as_ref()) {
            Some((_, p)) => Some(p.header()),
            None => self.account.as_ref().map(|(_, p)| p.header()),
        }
    }

    fn run_cap(&self, account_id: &str) -> Option<u32> {
        self.overrides
            .get(account_id)
            .and_then(|o| o.concurrent_runs)
            .or(self.concurrent_runs)
    }

    /// Takes one of the account's concurrent-run slots, released when the permit drops.
    /// Refused with `Retry-After: 1`: when a slot frees up is unknowable here.
    pub fn try_acquire_run(&self, account_id: &str) -> Result<RunPermit, Limited> {
        let cap = self.run_cap(account_id);
        let mut runs = self.runs.lock().unwrap_or_else(PoisonError::into_inner);
        let running = runs.get(account_id).copied().unwrap_or(0);
        if let Some(cap) = cap {
            if running >= cap {
                return Err(Limited {
                    kind: LimitKind::ConcurrentRuns,
                    retry_after: 1,
                    policy: format!("\"concurrent-runs\";q={cap}"),
                    ratelimit: "\"concurrent-runs\";r=0;t=1".to_owned(),
                });
            }
        }
        runs.insert(account_id.to_owned(), running + 1);
        Ok(RunPermit {
            runs: Arc::clone(&self.runs),
            account_id: account_id.to_owned(),
        })
    }

    /// Runs the account has in flight.
    pub fn running(&self, account_id: &str) -> u32 {
        self.runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(account_id)
            .copied()
            .unwrap_or(0)
    }

    /// Forgets keys whose buckets are full again (idle accounts and credentials) and
    /// releases the memory. Run it periodically.
    pub fn retain_recent(&self) {
        for (limiter, _) in [&self.account, &self.credential].into_iter().flatten() {
            limiter.retain_recent();
            limiter.shrink_to_fit();
        }
    }

    /// Keys currently remembered by the keyed limiters (for metrics and tests).
    pub fn tracked_keys(&self) -> usize {
        [&self.account, &self.credential]
            .into_iter()
            .flatten()
            .map(|(l, _)| l.len())
            .sum()
    }
}

/// A concurrent-run slot; dropping it frees the slot.
#[derive(Debug)]
pub struct RunPermit {
    runs: Arc<Mutex<HashMap<String, u32>>>,
    account_id: String,
}

impl RunPermit {
    pub fn account_id(&self) -> &str {
        &self.account_id
    }
}

impl Drop for RunPermit {
    fn drop(&mut self) {
        let mut runs = self.runs.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = runs.get_mut(&self.account_id) {
            *n = n.saturating_sub(1);
            // Idle accounts leave no entry behind.
            if *n == 0 {
                runs.remove(&self.account_id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::AccountRateLimit;
    use governor::clock::FakeRelativeClock;

    fn id(account: &str, credential: &str) -> Identity {
        Identity {
            account_id: account.to_owned(),
            credential_id: credential.to_owned(),
        }
    }

    fn cfg(rps: f64, burst: u32) -> RateLimitConfig {
        RateLimitConfig {
            requests_per_second: Some(rps),
            burst: Some(burst),
            ..Default::default()
        }
    }

    #[test]
    fn burst_then_refusal_then_recovery() {
        let clock = FakeRelativeClock::default();
        // 2 per second, burst 4: four at once, then one every 500 ms.
        let limits = RateLimits::with_clock(&cfg(2.0, 4), clock.clone());
        let a = id("acme", "key:a");
        for i in 0..4 {
            assert!(limits.check(&a).is_ok(), "burst request {i}");
        }
        let refused = limits.check(&a).expect_err("fifth is refused");
        assert_eq!(refused.kind, LimitKind::Account);
        assert_eq!(refused.retry_after, 1, "500 ms rounds up to 1 s");
        assert_eq!(refused.policy, "\"account\";q=4;w=2");
        assert_eq!(refused.ratelimit, "\"account\";r=0;t=1");
        let headers = refused.headers();
        assert_eq!(headers[0], ("retry-after", "1".to_owned()));
        // 499 ms later: still refused; at 500 ms: allowed, exactly one.
        clock.advance(Duration::from_millis(499));
        assert!(limits.check(&a).is_err());
        clock.advance(Duration::from_millis(1));
        assert!(limits.check(&a).is_ok());
        assert!(limits.check(&a).is_err());
        // Another account is unaffected.
        assert!(limits.check(&id("other", "key:b")).is_ok());
        // After the whole window the full burst is back.
        clock.advance(Duration::from_secs(2));
        for _ in 0..4 {
            assert!(limits.check(&a).is_ok());
        }
        assert!(limits.check(&a).is_err());
    }

    #[test]
    fn retry_after_is_rounded_up_seconds() {
        let clock = FakeRelativeClock::default();
        // One every 4 s, burst 1.
        let limits = RateLimits::with_clock(&cfg(0.25, 1), clock.clone());
        let a = id("acme", "c");
        assert!(limits.check(&a).is_ok());
        assert_eq!(limits.check(&a).expect_err("refused").retry_after, 4);
        clock.advance(Duration::from_millis(1500));
        let e = limits.check(&a).expect_err("refused");
        assert_eq!(e.retry_after, 3, "2.5 s rounds up");
        assert_eq!(e.policy, "\"account\";q=1;w=4");
        clock.advance(Duration::from_millis(2500));
        assert!(limits.check(&a).is_ok());
    }

    #[test]
    fn per_credential_and_overrides() {
        let clock = FakeRelativeClock::default();
        let mut config = cfg(1.0, 2);
        config.per_credential_requests_per_second = Some(1.0);
        config.per_credential_burst = Some(1);
        config.accounts.insert(
            "big".to_owned(),
            AccountRateLimit {
                requests_per_second: Some(100.0),
                burst: Some(10),
                concurrent_runs: None,
            },
        );
        let limits = RateLimits::with_clock(&config, clock.clone());
        // Credential limit: one per second per key, even though the account allows two.
        assert!(limits.check(&id("acme", "k1")).is_ok());
        let e = limits.check(&id("acme", "k1")).expect_err("credential");
        assert_eq!(e.kind, LimitKind::Credential);
        assert_eq!(e.policy, "\"credential\";q=1;w=1");
        assert!(limits.check(&id("acme", "k2")).is_ok());
        assert_eq!(
            limits.check(&id("acme", "k3")).expect_err("account").kind,
            LimitKind::Account
        );
        // The override account gets its own, larger budget.
        for i in 0..10 {
            assert!(limits.check(&id("big", &format!("k{i}"))).is_ok(), "{i}");
        }
        assert!(limits.check(&id("big", "k99")).is_err());
        assert_eq!(
            limits.policy_header("big").as_deref(),
            Some("\"account\";q=10;w=1")
        );
        assert_eq!(
            limits.policy_header("acme").as_deref(),
            Some("\"account\";q=2;w=2")
        );
    }

    #[test]
    fn no_config_means_no_limits() {
        let limits = RateLimits::new(&RateLimitConfig::default());
        for _ in 0..1000 {
            assert!(limits.check(&Identity::local()).is_ok());
        }
        let permits: Vec<_> = (0..100)
            .map(|_| limits.try_acquire_run("local").expect("uncapped"))
            .collect();
        assert_eq!(limits.running("local"), 100);
        drop(permits);
        assert_eq!(limits.running("local"), 0);
        assert!(limits.policy_header("local").is_none());
    }

    #[test]
    fn concurrent_runs_are_capped_per_account() {
        let mut config = RateLimitConfig {
            concurrent_runs: Some(2),
            ..Default::default()
        };
        config.accounts.insert(
            "big".to_owned(),
            AccountRateLimit {
                concurrent_runs: Some(3),
                ..Default::default()
            },
        );
        let limits = RateLimits::new(&config);
        let p1 = limits.try_acquire_run("acme").expect("1");
        let p2 = limits.try_acquire_run("acme").expect("2");
        let e = limits.try_acquire_run("acme").expect_err("3rd refused");
        assert_eq!(e.kind, LimitKind::ConcurrentRuns);
        assert_eq!(e.retry_after, 1);
        assert_eq!(e.policy, "\"concurrent-runs\";q=2");
        // Other accounts have their own slots; the override account has three.
        let b: Vec<_> = (0..3)
            .map(|_| limits.try_acquire_run("big").expect("big"))
            .collect();
        assert!(limits.try_acquire_run("big").is_err());
        drop(p1);
        let p3 = limits.try_acquire_run("acme").expect("slot freed");
        assert_eq!(p3.account_id(), "acme");
        drop((p2, p3, b));
        assert_eq!(limits.running("acme"), 0);
        assert_eq!(limits.running("big"), 0);
    }

    #[test]
    fn idle_keys_are_cleaned_up() {
        let clock = FakeRelativeClock::default();
        let mut config = cfg(10.0, 10);
        config.per_credential_requests_per_second = Some(10.0);
        let limits = RateLimits::with_clock(&config, clock.clone());
        for i in 0..50 {
            assert!(limits
                .check(&id(&format!("a{i}"), &format!("c{i}")))
                .is_ok());
        }
        assert_eq!(limits.tracked_keys(), 100);
        // Still within the window: nothing may be forgotten yet.
        limits.retain_recent();
        assert_eq!(limits.tracked_keys(), 100);
        clock.advance(Duration::from_secs(2));
        limits.retain_recent();
        assert_eq!(limits.tracked_keys(), 0);
        // A busy key survives a cleanup.
        for _ in 0..10 {
            let _ = limits.check(&id("busy", "c"));
        }
        limits.retain_recent();
        assert_eq!(limits.tracked_keys(), 2);
        assert!(limits.check(&id("busy", "c")).is_err(), "state kept");
    }
}
