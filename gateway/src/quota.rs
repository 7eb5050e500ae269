//! Quotas per account (`[quotas]`): how many sessions, how many bytes of events and of
//! uploads an account may store. Checked once per write request, before anything of it
//! is stored or reaches the agent; for a run, at its start (a run in progress is never
//! cut: its own events may take the account past `event_bytes`, and the next run is
//! refused). The store keeps each account's usage in the transaction of every write and
//! delete, so the check reads one row, and a delete frees quota at once.
//!
//! Refusals: `sessions` (a count) is 429, `event_bytes` and `upload_bytes` are 413; each
//! with code `quota_exceeded`, the quota named in `param` and the message, in the
//! surface's own error format.

use session_log::Usage;

use crate::config::QuotaLimits;
use crate::error::ApiError;
use crate::state::State;

/// Which session a write request writes to.
#[derive(Clone, Copy, Debug, Default)]
pub enum Target<'a> {
    /// One the account has, or none (an upload).
    #[default]
    Existing,
    /// One it creates (a new conversation, a fork, an import).
    New,
    /// This one, which it creates unless the account has it (a client-named
    /// conversation): looked up only when the `sessions` quota is reached.
    Named(&'a str),
}

/// What a write request would add to the account's stores.
#[derive(Clone, Copy, Debug, Default)]
pub struct Adding<'a> {
    pub session: Target<'a>,
    /// Bytes of the uploads it stores.
    pub upload_bytes: u64,
    /// It writes events (a run, items, metadata): refused once the account's events
    /// have reached `event_bytes`.
    pub events: bool,
}

/// Refuses the write that `adding` describes when it would pass one of the account's
/// quotas; `Ok` at once, reading nothing, when no `[quotas]` are configured. The
/// usage read is the request's only cost; if the store cannot answer (an outage), the
/// write goes ahead (the database being down never stops a run), counted once it is
/// backfilled.
pub async fn refuse_over_quota(
    state: &State,
    account_id: &str,
    adding: Adding<'_>,
) -> Result<(), ApiError> {
    let Some(quotas) = &state.config.quotas else {
        return Ok(());
    };
    let limits = quotas.of(account_id);
    if limits == QuotaLimits::default() {
        return Ok(());
    }
    let usage = match state.store.usage(account_id).await {
        Ok(usage) => usage,
        Err(error) if error.is_transient() => {
            tracing::warn!(%error, account_id, "quota usage unreadable; the write goes ahead");
            return Ok(());
        }
        Err(error) => {
            return Err(ApiError::store_unavailable(
                &error,
                "cannot read quota usage",
            ))
        }
    };
    let new_session = match adding.session {
        Target::Existing => false,
        Target::New => true,
        Target::Named(id) => {
            limits.sessions.is_some_and(|l| usage.sessions >= l as i64)
                && state
                    .store
                    .session(account_id, id)
                    .await
                    .map_err(|e| ApiError::store_unavailable(&e, "cannot read the session"))?
                    .is_none()
        }
    };
    match over(&limits, &usage, new_session, adding) {
        Some(refusal) => Err(refusal),
        None => Ok(()),
    }
}

/// `refuse_over_quota` for a request that creates a session and writes its events (a
/// fork, an import).
pub async fn refuse_new_session(state: &State, account_id: &str) -> Result<(), ApiError> {
    let adding = Adding {
        session: Target::New,
        events: true,
        ..Adding::default()
    };
    refuse_over_quota(state, account_id, adding).await
}

/// The refusal of `adding` under `limits` at `usage`, if any.
fn over(
    limits: &QuotaLimits,
    usage: &Usage,
    new_session: bool,
    adding: Adding<'_>,
) -> Option<ApiError> {
    let refuse = |status: u16, quota: &str, limit: u64, message: String| {
        let mut e = ApiError::new(status, "insufficient_quota", "quota_exceeded", message);
        e.param = Some(quota.to_owned());
        tracing::info!(quota, limit, "write refused by a quota");
        Some(e)
    };
    let used = |n: i64| u64::try_from(n).unwrap_or(0);
    if let Some(limit) = limits.sessions {
        if new_session && used(usage.sessions) >= limit {
            return refuse(
                429,
                "sessions",
                limit,
                format!(
                    "the account's quota 'sessions' is reached ({} of {limit} stored); \
                     delete sessions to start new ones",
                    usage.sessions
                ),
            );
        }
    }
    if let Some(limit) = limits.event_bytes {
        if (adding.events || new_session) && used(usage.event_bytes) >= limit {
            return refuse(
                413,
                "event_bytes",
                limit,
                format!(
                    "the account's quota 'event_bytes' is reached ({} of {limit} bytes \
                     stored); delete sessions to write more",
                    usage.event_bytes
                ),
            );
        }
    }
    if let Some(limit) = limits.upload_bytes {
        if adding.upload_bytes > 0
            && used(usage.upload_bytes).saturating_add(adding.upload_bytes) > limit
        {
            return refuse(
                413,
                "upload_bytes",
                limit,
                format!(
                    "the account's quota 'upload_bytes' would be passed ({} of {limit} bytes \
                     stored, {} more sent); delete uploads' sessions to store more",
                    usage.upload_bytes, adding.upload_bytes
                ),
            );
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_quota_refuses_only_what_would_pass_it() {
        let limits = QuotaLimits {
            sessions: Some(2),
            event_bytes: Some(100),
            upload_bytes: Some(10),
        };
        let usage = |sessions, event_bytes, upload_bytes| Usage {
            sessions,
            event_bytes,
            upload_bytes,
        };
        let turn = Adding {
            events: true,
            ..Adding::default()
        };
        let upload = |n| Adding {
            upload_bytes: n,
            ..Adding::default()
        };
        assert!(over(&limits, &usage(1, 0, 0), true, turn).is_none());
        let e = over(&limits, &usage(2, 0, 0), true, turn).unwrap();
        assert_eq!((e.status, e.param.as_deref()), (429, Some("sessions")));
        assert!(
            over(&limits, &usage(2, 0, 0), false, turn).is_none(),
            "an existing session goes on"
        );
        let e = over(&limits, &usage(1, 100, 0), false, turn).unwrap();
        assert_eq!((e.status, e.param.as_deref()), (413, Some("event_bytes")));
        assert!(over(&limits, &usage(1, 0, 4), false, upload(6)).is_none());
        let e = over(&limits, &usage(1, 0, 4), false, upload(7)).unwrap();
        assert_eq!((e.status, e.param.as_deref()), (413, Some("upload_bytes")));
        assert_eq!(e.code, "quota_exceeded");
    }
}
