//! Process-wide counters and the `GET /metrics` page in the Prometheus text format,
//! written by hand: a few counters and histograms do not need a metrics framework.
//!
//! No label carries an account, session or run id: the page is safe to scrape without
//! credentials, and its size does not grow with tenants.

use std::fmt::{Display, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;

use session_log::histogram::{Histogram, HistogramSnapshot};
use session_log::writer::WriterStats;
use session_log::RunStatus;

/// Bounds of the commit-to-forward lag, in microseconds (0.1 ms to 10 s).
const LAG_BOUNDS_US: [u64; 13] = [
    100, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 1_000_000, 2_500_000,
    10_000_000,
];

/// HTTP status classes requests are counted by.
const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

pub struct Metrics {
    /// By status class (index = first digit - 1); 0 when nothing was sent.
    requests: [AtomicU64; 5],
    requests_without_response: AtomicU64,
    runs_started: AtomicU64,
    /// Panics caught at a run task's boundary (the run closed `failed`).
    panics: AtomicU64,
    /// By terminal status, in `RunStatus::TERMINAL` order.
    runs_ended: [AtomicU64; 5],
    /// Refused by the per-credential request rate.
    rate_limited_requests: AtomicU64,
    /// Refused by the per-account concurrent-run cap.
    rate_limited_runs: AtomicU64,
    /// Time from an event's commit to its frame being written to a client.
    forward_lag_us: Histogram,
    /// Hard deletes, by scope (`DELETION_SCOPES` order), and what they removed.
    deletions: [AtomicU64; 4],
    deleted_sessions: AtomicU64,
    deleted_events: AtomicU64,
    /// Bytes removed: events' JSON, attachments, workspace files.
    deleted_bytes: [AtomicU64; 3],
    /// Webhook delivery attempts, by outcome (`WebhookOutcome` order).
    webhook_deliveries: [AtomicU64; 3],
}

/// What one webhook delivery attempt came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WebhookOutcome {
    /// The receiver answered 2xx.
    Delivered,
    /// It failed; another attempt follows.
    Retried,
    /// It failed and was the last: the delivery is marked failed.
    Failed,
}

impl WebhookOutcome {
    const ALL: [WebhookOutcome; 3] = [
        WebhookOutcome::Delivered,
        WebhookOutcome::Retried,
        WebhookOutcome::Failed,
    ];

    fn as_str(self) -> &'static str {
        match self {
            WebhookOutcome::Delivered => "delivered",
            WebhookOutcome::Retried => "retried",
            WebhookOutcome::Failed => "failed",
        }
    }
}

/// The scopes of hard deletes, as `session_log::Scope::as_str` names them, and the
/// retention sweep's (one session each).
const DELETION_SCOPES: [&str; 4] = ["session", "user", "account", "retention"];

const TERMINAL: [RunStatus; 5] = [
    RunStatus::Completed,
    RunStatus::RequiresAction,
    RunStatus::Failed,
    RunStatus::Cancelled,
    RunStatus::Interrupted,
];

pub static METRICS: LazyLock<Metrics> = LazyLock::new(|| Metrics {
    requests: Default::default(),
    requests_without_response: AtomicU64::new(0),
    runs_started: AtomicU64::new(0),
    panics: AtomicU64::new(0),
    runs_ended: Default::default(),
    rate_limited_requests: AtomicU64::new(0),
    rate_limited_runs: AtomicU64::new(0),
    forward_lag_us: Histogram::new(&LAG_BOUNDS_US),
    deletions: Default::default(),
    deleted_sessions: AtomicU64::new(0),
    deleted_events: AtomicU64::new(0),
    deleted_bytes: Default::default(),
    webhook_deliveries: Default::default(),
});

/// Which limit refused a request.
#[derive(Clone, Copy)]
pub enum Limit {
    Requests,
    Runs,
}

impl Metrics {
    pub fn request_done(&self, status: Option<u16>) {
        match status.map(|s| s / 100) {
            Some(class @ 1..=5) => {
                self.requests[usize::from(class - 1)].fetch_add(1, Ordering::Relaxed)
            }
            _ => self
                .requests_without_response
                .fetch_add(1, Ordering::Relaxed),
        };
    }

    pub fn panicked(&self) {
        self.panics.fetch_add(1, Ordering::Relaxed);
    }

    pub fn run_started(&self) {
        self.runs_started.fetch_add(1, Ordering::Relaxed);
    }

    pub fn run_ended(&self, status: RunStatus) {
        if let Some(i) = TERMINAL.iter().position(|s| *s == status) {
            self.runs_ended[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A hard delete of `scope` removed `removed`, and `workspace_bytes` of files.
    pub fn deleted(&self, scope: &str, removed: &session_log::Removed, workspace_bytes: u64) {
        if let Some(i) = DELETION_SCOPES.iter().position(|s| *s == scope) {
            self.deletions[i].fetch_add(1, Ordering::Relaxed);
        }
        let n = |v: i64| u64::try_from(v).unwrap_or(0);
        self.deleted_sessions
            .fetch_add(removed.session_ids.len() as u64, Ordering::Relaxed);
        self.deleted_events
            .fetch_add(n(removed.events), Ordering::Relaxed);
        for (slot, bytes) in self.deleted_bytes.iter().zip([
            n(removed.event_bytes),
            n(removed.attachment_bytes),
            workspace_bytes,
        ]) {
            slot.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    pub fn webhook_attempt(&self, outcome: WebhookOutcome) {
        self.webhook_deliveries[outcome as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn rate_limited(&self, limit: Limit) {
        match limit {
            Limit::Requests => &self.rate_limited_requests,
            Limit::Runs => &self.rate_limited_runs,
        }
        .fetch_add(1, Ordering::Relaxed);
    }

    /// An event committed at `committed_at` has just been written to a client.
    pub fn forwarded(&self, committed_at: chrono::DateTime<chrono::Utc>) {
        let lag = chrono::Utc::now() - committed_at;
        // A replayed event is old by design: only count what is forwarded live-ish, so the
        // histogram measures the pipeline and not how far back clients resume.
        if let Ok(lag) = lag.to_std() {
            if lag.as_secs() < 60 {
                self.forward_lag_us.observe(lag.as_micros() as u64);
            }
        }
    }
}

/// What the page reports beside the process-wide counters.
pub struct Gauges<'a> {
    pub writer: &'a WriterStats,
    pub backend: &'static str,
    pub subscribers: usize,
    pub followed_sessions: usize,
    pub active_runs: usize,
    /// Why the store cannot take new work now, if it cannot (see `session_log::health`).
    pub unwritable: Option<session_log::Unwritable>,
}

/// The whole page.
pub fn render(m: &Metrics, g: &Gauges<'_>) -> String {
    let mut out = String::with_capacity(4096);
    let out = &mut out;
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);

    let by_class = CLASSES.iter().zip(&m.requests).map(|(c, n)| (*c, load(n)));
    labelled(
        out,
        ("tether_requests_total", "counter"),
        "HTTP requests answered, by status class.",
        "status",
        by_class.chain([("none", load(&m.requests_without_response))]),
    );
    labelled(
        out,
        ("tether_rate_limited_requests_total", "counter"),
        "Requests refused by a rate limit, by limit.",
        "limit",
        [
            ("requests", load(&m.rate_limited_requests)),
            ("concurrent_runs", load(&m.rate_limited_runs)),
        ],
    );
    labelled(
        out,
        ("tether_deleted_total", "counter"),
        "Hard deletes this replica made (DeleteSession, DeleteUserData, DeleteAccountData; retention: sessions its sweeps removed), by scope.",
        "scope",
        DELETION_SCOPES
            .iter()
            .zip(&m.deletions)
            .map(|(s, n)| (*s, load(n))),
    );
    single(
        out,
        ("tether_deleted_sessions_total", "counter"),
        "Sessions hard deletes removed.",
        load(&m.deleted_sessions),
    );
    single(
        out,
        ("tether_deleted_events_total", "counter"),
        "Events hard deletes removed.",
        load(&m.deleted_events),
    );
    labelled(
        out,
        ("tether_deleted_bytes_total", "counter"),
        "Bytes hard deletes removed, by what held them.",
        "what",
        ["events", "attachments", "workspace"]
            .into_iter()
            .zip(&m.deleted_bytes)
            .map(|(w, n)| (w, load(n))),
    );
    labelled(
        out,
        ("tether_webhook_deliveries_total", "counter"),
        "Webhook delivery attempts this replica made, by outcome: delivered (2xx), retried \
         (failed, tried again later), failed (failed, the last attempt).",
        "outcome",
        WebhookOutcome::ALL
            .iter()
            .zip(&m.webhook_deliveries)
            .map(|(o, n)| (o.as_str(), load(n))),
    );
    single(
        out,
        ("tether_runs_started_total", "counter"),
        "Invocations started on this replica.",
        load(&m.runs_started),
    );
    single(
        out,
        ("tether_panics_total", "counter"),
        "Panics caught at a run task's boundary; each closed its run as failed.",
        load(&m.panics),
    );
    labelled(
        out,
        ("tether_runs_total", "counter"),
        "Invocations this replica ended, by terminal status.",
        "status",
        TERMINAL
            .iter()
            .zip(&m.runs_ended)
            .map(|(s, n)| (s.as_str(), load(n))),
    );
    single(
        out,
        ("tether_runs_active", "gauge"),
        "Invocations this replica is driving.",
        g.active_runs,
    );

    let w = g.writer;
    single(
        out,
        ("tether_events_committed_total", "counter"),
        "Events committed to the session log by this replica.",
        load(&w.events_committed),
    );
    single(
        out,
        ("tether_commit_failures_total", "counter"),
        "Failed commit attempts (each is retried).",
        load(&w.commit_failures),
    );
    labelled(
        out,
        ("tether_events_dropped_total", "counter"),
        "Events not committed, by reason.",
        "reason",
        [
            ("queue_full", load(&w.dropped)),
            ("refused", load(&w.rejected)),
        ],
    );
    histogram(
        out,
        "tether_writer_batch_size_events",
        "Events per committed transaction.",
        &w.batch_size.snapshot(),
        1.0,
    );
    histogram(
        out,
        "tether_writer_commit_seconds",
        "Duration of one committed transaction.",
        &w.commit_latency_us.snapshot(),
        1e6,
    );
    histogram(
        out,
        "tether_commit_to_forward_seconds",
        "Time from an event's commit to its frame being written to a client.",
        &m.forward_lag_us.snapshot(),
        1e6,
    );

    single(
        out,
        ("tether_subscribers", "gauge"),
        "Live event subscribers (client streams) on this replica.",
        g.subscribers,
    );
    single(
        out,
        ("tether_followed_sessions", "gauge"),
        "Sessions with live subscribers on this replica.",
        g.followed_sessions,
    );

    // While degraded the journal takes the commits, so the writer is not failing; the
    // backend is still down.
    let state = session_log::journal::backend_state();
    let up = u8::from(
        !w.failing.load(Ordering::Relaxed) && state != session_log::journal::BackendState::Degraded,
    );
    labelled(
        out,
        ("tether_session_backend_up", "gauge"),
        "1 while the session log commits, 0 while commits fail.",
        "backend",
        [(g.backend, up)],
    );
    single(
        out,
        ("tether_session_store_writable", "gauge"),
        "1 while the session store takes new runs and writes; 0 during an outage (a full \
         disk, a read-only or failing store) or while its free space is below \
         store_min_free_bytes.",
        u64::from(g.unwritable.is_none()),
    );
    let states = [
        session_log::journal::BackendState::Healthy,
        session_log::journal::BackendState::Degraded,
        session_log::journal::BackendState::Recovering,
    ];
    labelled(
        out,
        ("tether_session_backend_state", "gauge"),
        "1 for the session backend's current state: healthy, degraded (commits go to the \
         local journal) or recovering (the journal is being backfilled).",
        "state",
        states.map(|s| (s.as_str(), u8::from(s == state))),
    );
    std::mem::take(out)
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// A family of one unlabelled sample. `(name, kind)`: kind is `counter` or `gauge`.
fn single(out: &mut String, (name, kind): (&str, &str), help: &str, value: impl Display) {
    header(out, name, kind, help);
    let _ = writeln!(out, "{name} {value}");
}

/// A family of samples told apart by one label, one per `(label value, value)`.
fn labelled<V: Display>(
    out: &mut String,
    (name, kind): (&str, &str),
    help: &str,
    label: &str,
    samples: impl IntoIterator<Item = (&'static str, V)>,
) {
    header(out, name, kind, help);
    for (label_value, value) in samples {
        let _ = writeln!(out, "{name}{{{label}=\"{label_value}\"}} {value}");
    }
}

/// `divisor` turns the stored unit into the exported one (1e6: microseconds to seconds);
/// dividing by an exact power of ten keeps bounds such as 0.001 exact.
fn histogram(out: &mut String, name: &str, help: &str, h: &HistogramSnapshot, divisor: f64) {
    header(out, name, "histogram", help);
    for (bound, n) in &h.buckets {
        let _ = writeln!(
            out,
            "{name}_bucket{{le=\"{}\"}} {n}",
            *bound as f64 / divisor
        );
    }
    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", h.count);
    let _ = writeln!(out, "{name}_sum {}", h.sum as f64 / divisor);
    let _ = writeln!(out, "{name}_count {}", h.count);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_cumulative_histograms() {
        let m = Metrics {
            requests: Default::default(),
            requests_without_response: AtomicU64::new(0),
            runs_started: AtomicU64::new(0),
            panics: AtomicU64::new(0),
            runs_ended: Default::default(),
            rate_limited_requests: AtomicU64::new(0),
            rate_limited_runs: AtomicU64::new(0),
            forward_lag_us: Histogram::new(&LAG_BOUNDS_US),
            deletions: Default::default(),
            deleted_sessions: AtomicU64::new(0),
            deleted_events: AtomicU64::new(0),
            deleted_bytes: Default::default(),
            webhook_deliveries: Default::default(),
        };
        m.request_done(Some(200));
        m.webhook_attempt(WebhookOutcome::Retried);
        m.request_done(Some(429));
        m.rate_limited(Limit::Requests);
        m.run_ended(RunStatus::Cancelled);
        m.forward_lag_us.observe(700);
        let writer = WriterStats::default();
        writer.batch_size.observe(3);
        let page = render(
            &m,
            &Gauges {
                writer: &writer,
                backend: "sqlite",
                subscribers: 2,
                followed_sessions: 1,
                active_runs: 0,
                unwritable: Some(session_log::Unwritable::LowSpace),
            },
        );
        for line in [
            "tether_requests_total{status=\"2xx\"} 1",
            "tether_requests_total{status=\"4xx\"} 1",
            "tether_rate_limited_requests_total{limit=\"requests\"} 1",
            "tether_runs_total{status=\"cancelled\"} 1",
            "tether_writer_batch_size_events_bucket{le=\"5\"} 1",
            "tether_writer_batch_size_events_bucket{le=\"2\"} 0",
            "tether_commit_to_forward_seconds_bucket{le=\"0.001\"} 1",
            "tether_session_store_writable 0",
            "tether_commit_to_forward_seconds_count 1",
            "tether_subscribers 2",
            "tether_webhook_deliveries_total{outcome=\"retried\"} 1",
            "tether_webhook_deliveries_total{outcome=\"delivered\"} 0",
            "tether_session_backend_up{backend=\"sqlite\"} 1",
        ] {
            assert!(
                page.lines().any(|l| l == line),
                "missing {line:?} in\n{page}"
            );
        }
    }
}
