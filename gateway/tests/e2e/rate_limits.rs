//! Rate limits through the real binary: the burst passes, the next request is a 429 whose
//! Retry-After is right, the limit recovers on time; and the concurrent-run cap holds a
//! slot for a run's whole life (not its client's), then frees it.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::auth::{authed_gateway, bearer, KEY_A, KEY_B};
use crate::harness::*;

#[test]
fn the_burst_passes_then_429_with_retry_after_then_recovery() {
    let (store, _agent, tether) =
        authed_gateway("[rate_limits]\nrequests_per_second = 0.5\nburst = 3\n");
    let (k, v) = bearer(KEY_A);
    let echo = || get(&format!("{}/echo", tether.url()), &[(k, &v)]);
    for i in 0..3 {
        assert_eq!(echo().status, 200, "request {i} of the burst");
    }
    let refused = echo();
    assert_eq!(refused.status, 429, "{}", refused.body);
    let retry: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    assert_eq!(retry, 2, "one token every 2 s");
    assert_eq!(
        refused.header("ratelimit-policy"),
        Some("\"account\";q=3;w=6")
    );
    assert_eq!(refused.header("ratelimit"), Some("\"account\";r=0;t=2"));
    assert_eq!(refused.json()["error"]["code"], "rate_limit_exceeded");
    // Other accounts are not affected; the control API answers 429 in its envelope.
    assert_eq!(
        get(&format!("{}/echo", tether.url()), &[("x-api-key", KEY_B)]).status,
        200
    );
    let control = post(
        &format!("{}/agentengine/api/v1/ListSessions", tether.url()),
        "{}",
        &[(k, &v)],
    );
    assert_eq!(control.status, 429);
    assert_eq!(control.json()["Code"], 429);
    let run = post(
        &format!("{}/v1/responses", tether.url()),
        &Surface::Responses.body("hi", None, false).to_string(),
        &[(k, &v)],
    );
    assert_eq!(run.status, 429);
    assert!(run.header("retry-after").is_some());
    // The only session is the tee's record of the pass-through requests: the refused run
    // wrote nothing.
    assert_eq!(store.session_count("acct-a"), 1);
    assert!(store
        .events("acct-a", "passthrough")
        .iter()
        .all(|e| e.run_id.is_none()));

    std::thread::sleep(Duration::from_millis(retry * 1000 + 100));
    assert_eq!(echo().status, 200, "recovered after Retry-After");
    assert_eq!(echo().status, 429, "and only one token came back");
}

#[test]
fn a_running_run_holds_its_slot_until_it_ends() {
    let (store, _agent, tether) = authed_gateway("[rate_limits]\nconcurrent_runs = 1\n");
    let (k, v) = bearer(KEY_A);
    // A slow streamed run; its client leaves after the first event.
    let started = Instant::now();
    let mut sse = {
        let r = ureq::post(&format!("{}/v1/chat/completions", tether.url()))
            .set(k, &v)
            .set("content-type", "application/json")
            .send_string(&Surface::Chat.body("slow:8:200", None, true).to_string())
            .unwrap();
        let session = r.header("x-session-id").unwrap().to_owned();
        (r.into_reader(), session)
    };
    let mut first = [0u8; 16];
    std::io::Read::read(&mut sse.0, &mut first).unwrap();
    let session = sse.1.clone();
    drop(sse);
    let body = Surface::Chat.body("Reply with OK", None, false).to_string();
    let second = post(
        &format!("{}/v1/chat/completions", tether.url()),
        &body,
        &[(k, &v)],
    );
    assert_eq!(second.status, 429, "{}", second.body);
    assert_eq!(second.header("retry-after"), Some("1"));
    assert!(second
        .header("ratelimit-policy")
        .unwrap()
        .contains("concurrent-runs"));
    // Another account has its own slots.
    assert_eq!(
        post(
            &format!("{}/v1/chat/completions", tether.url()),
            &body,
            &[("x-api-key", KEY_B)]
        )
        .status,
        200
    );
    // ResumeRun is a run too.
    let resume = post(
        &format!("{}/agentengine/api/v1/ResumeRun", tether.url()),
        &json!({ "SessionId": session, "RunId": "run_x", "CheckpointId": "ckpt_x" }).to_string(),
        &[(k, &v)],
    );
    assert_eq!(resume.status, 429, "{}", resume.body);

    store.wait_for_terminal("acct-a", &session, 1);
    assert!(
        started.elapsed() >= Duration::from_millis(1200),
        "the run outlived its client"
    );
    let mut freed = None;
    for _ in 0..50 {
        let r = post(
            &format!("{}/v1/chat/completions", tether.url()),
            &body,
            &[(k, &v)],
        );
        if r.status != 429 {
            freed = Some(r.status);
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(freed, Some(200), "the slot frees when the run ends");
}
