//! `GET /metrics`: the Prometheus page counts requests, runs by outcome, commits, batch
//! sizes and commit latency, commit-to-forward lag, subscribers, rate-limited requests and
//! the backend state — and needs no credential, like the health checks.

use crate::auth::{authed_gateway, bearer, KEY_A};
use crate::harness::*;

/// The value of the sample `name` (with its labels, exactly as printed).
fn sample(page: &str, name: &str) -> f64 {
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no sample {name} in\n{page}"))
        .parse()
        .unwrap()
}

#[test]
fn metrics_count_runs_commits_lag_and_refusals() {
    let (store, _agent, tether) =
        authed_gateway("[rate_limits]\nrequests_per_second = 0.5\nburst = 2\n");
    // No credential needed.
    let page = get(&format!("{}/metrics", tether.url()), &[]);
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page
        .header("content-type")
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    assert_eq!(
        sample(&page.body, "tether_runs_total{status=\"completed\"}"),
        0.0
    );

    let (k, v) = bearer(KEY_A);
    let url = format!("{}/v1/chat/completions", tether.url());
    let unauthenticated = post(&url, "{}", &[]);
    assert_eq!(unauthenticated.status, 401, "a 4xx");
    let url = format!("{}/v1/chat/completions", tether.url());
    let body = Surface::Chat.body("slow:4:20", None, true).to_string();
    let run = post(&url, &body, &[(k, &v)]);
    assert_eq!(run.status, 200, "{}", run.body);
    let session = run.session_id.clone().unwrap();
    // The burst of 2 is spent: the next request is refused.
    assert_eq!(post(&url, &body, &[(k, &v)]).status, 200);
    assert_eq!(post(&url, &body, &[(k, &v)]).status, 429);
    store.wait_for_terminal("acct-a", &session, 1);

    let page = get(&format!("{}/metrics", tether.url()), &[]).body;
    assert!(
        sample(&page, "tether_runs_total{status=\"completed\"}") >= 1.0,
        "{page}"
    );
    assert_eq!(sample(&page, "tether_runs_started_total"), 2.0, "{page}");
    assert_eq!(
        sample(
            &page,
            "tether_rate_limited_requests_total{limit=\"requests\"}"
        ),
        1.0
    );
    assert!(
        sample(&page, "tether_requests_total{status=\"2xx\"}") >= 2.0,
        "{page}"
    );
    assert!(
        sample(&page, "tether_requests_total{status=\"4xx\"}") >= 2.0,
        "{page}"
    );
    assert!(
        sample(&page, "tether_events_committed_total") >= 10.0,
        "{page}"
    );
    assert!(
        sample(&page, "tether_writer_batch_size_events_count") >= 1.0,
        "{page}"
    );
    assert!(
        sample(&page, "tether_writer_commit_seconds_count") >= 1.0,
        "{page}"
    );
    // Every streamed frame of the run was forwarded after its commit, and measured.
    assert!(
        sample(&page, "tether_commit_to_forward_seconds_count") >= 4.0,
        "{page}"
    );
    assert_eq!(
        sample(
            &page,
            "tether_commit_to_forward_seconds_bucket{le=\"+Inf\"}"
        ),
        sample(&page, "tether_commit_to_forward_seconds_count")
    );
    assert_eq!(
        sample(&page, "tether_session_backend_up{backend=\"sqlite\"}"),
        1.0
    );
    assert_eq!(sample(&page, "tether_subscribers"), 0.0);
}
