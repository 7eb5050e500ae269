//! Webhook delivery: one worker per `[[webhooks]]` endpoint claims due rows of the
//! store's outbox under a lease (see `session_log::outbox`), posts each signed in the
//! style of Standard Webhooks, and records the attempt: delivered on a 2xx, otherwise
//! retried with exponential backoff and jitter until `max_attempts`, then failed.
//!
//! Workers never touch the writer or a run: they read rows other transactions committed,
//! post them from blocking threads (at most `concurrency` per endpoint, each attempt
//! bounded by `timeout_seconds`), so a slow or failing receiver delays only its own
//! deliveries.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use hmac::{Hmac, Mac};
use session_log::outbox::{Attempt, Claimed, DeliveryStatus, Route};
use session_log::Store;
use sha2::Sha256;

use crate::config::Webhook;
use crate::metrics::{WebhookOutcome, METRICS};

/// How often an idle worker looks for due deliveries.
const POLL: Duration = Duration::from_millis(250);
/// The longest wait between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(3600);
/// The longest error text a delivery keeps.
const MAX_ERROR_CHARS: usize = 300;

/// Tells the store where webhook events go: from now on every commit of an event that
/// causes one writes its outbox rows (set before anything is appended, so that the runs a
/// restart closes as interrupted are announced too).
pub fn route(store: &dyn Store, webhooks: &[Webhook]) {
    store.route_webhooks(
        webhooks
            .iter()
            .map(|w| Route {
                endpoint: w.name.clone(),
                kinds: w.kinds.clone(),
                accounts: w.accounts.clone(),
            })
            .collect(),
    );
}

/// Starts one worker per endpoint, as replica `owner` (whose leases from a previous life
/// are given up first).
pub fn start(
    runtime: &tokio::runtime::Handle,
    store: Arc<dyn Store>,
    webhooks: &[Webhook],
    owner: &str,
) {
    if webhooks.is_empty() {
        return;
    }
    let owner = owner.to_owned();
    let webhooks = webhooks.to_vec();
    runtime.spawn(async move {
        if let Err(error) = store.release_webhook_leases(&owner).await {
            tracing::warn!(%error, "could not release this replica's earlier webhook leases; they run out by themselves");
        }
        for hook in webhooks {
            tokio::spawn(work(store.clone(), Arc::new(hook), owner.clone()));
        }
    });
}

/// One endpoint's worker, for as long as the process lives.
async fn work(store: Arc<dyn Store>, hook: Arc<Webhook>, owner: String) {
    let slots = Arc::new(tokio::sync::Semaphore::new(hook.concurrency));
    let agent = ureq::AgentBuilder::new()
        .timeout(hook.timeout)
        .redirects(0)
        .user_agent("tether-webhooks")
        .build();
    // Held past the attempt's timeout and the write that records it: a row is taken
    // over only from a worker that is gone.
    let lease = hook.timeout * 2 + Duration::from_secs(10);
    loop {
        let free = slots.available_permits();
        if free == 0 {
            // Wait for a slot to come back, without holding it.
            drop(slots.clone().acquire_owned().await);
            continue;
        }
        let claimed = match store
            .claim_webhook_deliveries(&hook.name, &owner, lease, free as i64)
            .await
        {
            Ok(rows) => rows,
            Err(error) => {
                tracing::debug!(endpoint = %hook.name, %error, "cannot claim webhook deliveries now");
                tokio::time::sleep(POLL * 4).await;
                continue;
            }
        };
        if claimed.is_empty() {
            tokio::time::sleep(POLL).await;
            continue;
        }
        for row in claimed {
            let Ok(slot) = slots.clone().acquire_owned().await else {
                return;
            };
            let (store, hook, owner, agent) =
                (store.clone(), hook.clone(), owner.clone(), agent.clone());
            tokio::spawn(async move {
                deliver(&*store, &hook, &owner, agent, row).await;
                drop(slot);
            });
        }
    }
}

/// One attempt at `row`, and its record.
async fn deliver(store: &dyn Store, hook: &Webhook, owner: &str, agent: ureq::Agent, row: Claimed) {
    let (url, secret) = (hook.url.clone(), hook.secret.clone());
    let (id, body) = (row.event_id.clone(), row.payload.clone());
    let posted = tokio::task::spawn_blocking(move || post(&agent, &url, &secret, &id, &body))
        .await
        .unwrap_or_else(|e| Err((None, format!("delivery task failed: {e}"))));
    let now = chrono::Utc::now().timestamp_millis();
    let attempts = row.attempts + 1;
    let (attempt, outcome) = match posted {
        Ok(code) => (
            Attempt {
                at_ms: now,
                status: DeliveryStatus::Delivered,
                next_attempt_ms: now,
                status_code: Some(i64::from(code)),
                error: None,
            },
            WebhookOutcome::Delivered,
        ),
        Err((code, error)) => {
            let give_up = attempts >= i64::from(hook.max_attempts);
            let wait = backoff(hook.retry_initial, attempts, jitter());
            let error: String = error.chars().take(MAX_ERROR_CHARS).collect();
            tracing::info!(endpoint = %hook.name, event_id = %row.event_id, attempts, status = ?code, %error,
                give_up, "webhook delivery failed");
            (
                Attempt {
                    at_ms: now,
                    status: match give_up {
                        true => DeliveryStatus::Failed,
                        false => DeliveryStatus::Pending,
                    },
                    next_attempt_ms: now + wait.as_millis() as i64,
                    status_code: code.map(i64::from),
                    error: Some(error),
                },
                match give_up {
                    true => WebhookOutcome::Failed,
                    false => WebhookOutcome::Retried,
                },
            )
        }
    };
    METRICS.webhook_attempt(outcome);
    // A record the store cannot take now leaves the lease to run out: the row is tried
    // again then (at least once, never lost).
    match store
        .finish_webhook_delivery(&hook.name, &row.event_id, owner, &attempt)
        .await
    {
        Ok(true) => {}
        Ok(false) => tracing::info!(endpoint = %hook.name, event_id = %row.event_id,
            "a webhook delivery's lease ran out during its attempt; another worker retries it"),
        Err(error) => tracing::warn!(endpoint = %hook.name, event_id = %row.event_id, %error,
            "could not record a webhook delivery attempt; it is retried when its lease runs out"),
    }
}

/// Posts `body` as the webhook event `id`: the receiver's 2xx status, or its status (if
/// it answered) and what went wrong.
fn post(
    agent: &ureq::Agent,
    url: &str,
    secret: &[u8],
    id: &str,
    body: &str,
) -> Result<u16, (Option<u16>, String)> {
    let timestamp = chrono::Utc::now().timestamp();
    let signature = sign(secret, id, timestamp, body);
    let sent = agent
        .post(url)
        .set("content-type", "application/json")
        .set("webhook-id", id)
        .set("webhook-timestamp", &timestamp.to_string())
        .set("webhook-signature", &signature)
        .send_string(body);
    match sent {
        Ok(response) if (200..300).contains(&response.status()) => Ok(response.status()),
        Ok(response) => Err((
            Some(response.status()),
            format!("answered {}", response.status()),
        )),
        Err(ureq::Error::Status(code, _)) => Err((Some(code), format!("answered {code}"))),
        Err(ureq::Error::Transport(t)) => Err((None, t.to_string())),
    }
}

/// The `webhook-signature` header: `v1,` and the base64 HMAC-SHA256, keyed with the
/// secret, of `{id}.{timestamp}.{body}`.
pub fn sign(secret: &[u8], id: &str, timestamp: i64, body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body.as_bytes());
    let tag = mac.finalize().into_bytes();
    format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(tag)
    )
}

/// The wait after the `attempts`-th failed attempt: `initial` doubled for each attempt
/// after the first, at most [`MAX_BACKOFF`], scaled by `jitter` (in [0.5, 1]) so that
/// deliveries failing together do not all come back at once.
fn backoff(initial: Duration, attempts: i64, jitter: f64) -> Duration {
    let doublings = u32::try_from(attempts.saturating_sub(1))
        .unwrap_or(0)
        .min(30);
    let wait = initial.saturating_mul(1 << doublings).min(MAX_BACKOFF);
    wait.mul_f64(jitter.clamp(0.5, 1.0))
}

/// A random factor in [0.5, 1).
fn jitter() -> f64 {
    let bits = uuid::Uuid::new_v4().as_u128() as u64 >> 11;
    0.5 + 0.5 * (bits as f64 / (1u64 << 53) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_standard_webhooks_v1() {
        // The example of the Standard Webhooks reference libraries.
        let secret = base64::engine::general_purpose::STANDARD
            .decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
            .unwrap();
        let sig = sign(
            &secret,
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            r#"{"test": 2432232314}"#,
        );
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn backoff_doubles_up_to_its_cap_with_jitter() {
        let s = Duration::from_secs(1);
        assert_eq!(backoff(s, 1, 1.0), s);
        assert_eq!(backoff(s, 4, 1.0), Duration::from_secs(8));
        assert_eq!(backoff(s, 4, 0.5), Duration::from_secs(4));
        assert_eq!(backoff(s, 40, 1.0), MAX_BACKOFF);
        for _ in 0..100 {
            assert!((0.5..1.0).contains(&jitter()));
        }
    }
}
