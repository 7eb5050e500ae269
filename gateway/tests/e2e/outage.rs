//! PostgreSQL stopped mid-run and started again (a private cluster the test starts with
//! `initdb` and `pg_ctl`, so it can be stopped): the client receives the whole run, the
//! degraded and recovered log lines appear, and afterwards PostgreSQL holds every event of
//! the run exactly once, seqs strictly increasing, with one terminal status.

#[path = "../../../session-log/tests/support/pg_cluster.rs"]
pub mod pg_cluster;

use std::time::{Duration, Instant};

use session_log::{EventQuery, EventType, Store};

use crate::harness::*;

/// `text` without ANSI colour sequences (the text log colours field names).
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn logged(text: &str, state: &str) -> bool {
    plain(text).lines().any(|l| {
        l.contains(&format!("session_backend_state=\"{state}\""))
            || l.contains(&format!("session_backend_state={state}"))
            || l.contains(&format!("\"session_backend_state\":\"{state}\""))
    })
}

fn wait_for(what: &str, timeout: Duration, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_postgres_outage_mid_run_loses_nothing() {
    let Some(cluster) = pg_cluster::Cluster::start() else {
        return;
    };
    let agent = FakeAgent::start();
    let journal = cluster.path().join("tether-journal.sqlite");
    let tether = Tether::start(
        &agent.url(),
        "openai-chat",
        &cluster.url(),
        &["--journal-path", &journal.display().to_string()],
    );
    let surface = Surface::Chat;
    let mut sse = SseStream::post(
        &format!("{}{}", tether.url(), surface.path()),
        &surface.body("slow:40:100", None, true),
    );
    assert_eq!(sse.status, 200);
    let session = sse.session_id.clone().expect("x-session-id");
    let mut received = String::new();
    let read_until = |sse: &mut SseStream, received: &mut String, word: &str| {
        while !received.contains(word) {
            let event = sse.next_event().expect("the stream goes on");
            if event.data != "[DONE]" {
                received.push_str(&surface.delta(&event));
            }
        }
    };
    read_until(&mut sse, &mut received, "w3 ");
    cluster.down();
    read_until(&mut sse, &mut received, "w12 ");
    let degraded = Instant::now() + Duration::from_secs(10);
    while !logged(&tether.log_text(), "degraded") {
        assert!(
            Instant::now() < degraded,
            "no degraded log line: {}",
            tether.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    read_until(&mut sse, &mut received, "w18 ");
    cluster.up();
    // The rest of the run, to the end of the stream.
    let mut done = false;
    while let Some(event) = sse.next_event() {
        if event.data == "[DONE]" {
            done = true;
            break;
        }
        received.push_str(&surface.delta(&event));
    }
    let expected: String = (1..=40).map(|i| format!("w{i} ")).collect();
    assert_eq!(received, expected, "the client received the whole run");
    assert!(done, "the stream ends with [DONE]");
    wait_for("the recovered log line", Duration::from_secs(30), || {
        logged(&tether.log_text(), "recovered")
    });
    let log = plain(&tether.log_text());
    assert_eq!(
        log.lines()
            .filter(|l| l.contains("session_backend_state") && l.contains("degraded"))
            .count(),
        1,
        "one degraded line per outage: {log}"
    );

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let events = rt.block_on(async {
        let pg = session_log::postgres::PgStore::connect(&cluster.url())
            .await
            .unwrap();
        pg.events(&EventQuery::session("local", &session))
            .await
            .unwrap()
    });
    assert_run_landed_once(&events, &expected);
    // `recovered` is logged only once the journal holds nothing more.
}

#[test]
fn a_run_started_while_postgres_is_down_completes_and_is_backfilled_once() {
    let Some(cluster) = pg_cluster::Cluster::start() else {
        return;
    };
    let agent = FakeAgent::start();
    let journal = cluster.path().join("tether-journal.sqlite");
    let tether = Tether::start(
        &agent.url(),
        "openai-chat",
        &cluster.url(),
        &["--journal-path", &journal.display().to_string()],
    );
    let surface = Surface::Chat;
    cluster.down();
    // A new run (new session): claimed in the local journal, driven, streamed to the end.
    let mut sse = SseStream::post(
        &format!("{}{}", tether.url(), surface.path()),
        &surface.body("slow:12:50", None, true),
    );
    assert_eq!(sse.status, 200, "a run starts while PostgreSQL is down");
    let session = sse.session_id.clone().expect("x-session-id");
    let mut received = String::new();
    let mut done = false;
    while let Some(event) = sse.next_event() {
        if event.data == "[DONE]" {
            done = true;
            break;
        }
        received.push_str(&surface.delta(&event));
    }
    let expected: String = (1..=12).map(|i| format!("w{i} ")).collect();
    assert_eq!(received, expected, "the client received the whole run");
    assert!(done, "the stream ends with [DONE]");
    assert!(
        logged(&tether.log_text(), "degraded"),
        "degraded: {}",
        tether.log_text()
    );

    cluster.up();
    wait_for("the recovered log line", Duration::from_secs(30), || {
        logged(&tether.log_text(), "recovered")
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (events, invocations, open) = rt.block_on(async {
        let pg = session_log::postgres::PgStore::connect(&cluster.url())
            .await
            .unwrap();
        let events = pg
            .events(&EventQuery::session("local", &session))
            .await
            .unwrap();
        let mut ids: Vec<String> = events
            .iter()
            .filter_map(|e| e.invocation_id.clone())
            .collect();
        ids.dedup();
        let mut invocations = Vec::new();
        for id in ids {
            let inv = pg.invocation("local", &id).await.unwrap();
            let lease = pg.lease("local", &id).await.unwrap();
            invocations.push((id, inv, lease));
        }
        let open = pg.open_invocations().await.unwrap();
        (events, invocations, open)
    });
    assert_run_landed_once(&events, &expected);
    assert_eq!(invocations.len(), 1, "one invocation: {invocations:?}");
    let (_, inv, lease) = &invocations[0];
    let inv = inv.as_ref().expect("the invocation row reached PostgreSQL");
    assert_eq!(inv.session_id, session);
    assert_eq!(inv.status, session_log::RunStatus::Completed);
    assert!(
        lease.as_ref().is_some_and(|l| l.owner.is_some()),
        "claimed, with its owner: {lease:?}"
    );
    assert!(
        open.iter().all(|i| i.session_id != session),
        "nothing left open in the session"
    );
}

/// What PostgreSQL must hold for a run after the outage: seqs strictly increasing, every
/// delta once and in order, and exactly one terminal status, `completed`.
fn assert_run_landed_once(events: &[session_log::Event], expected: &str) {
    assert!(
        events.windows(2).all(|w| w[0].seq < w[1].seq),
        "seqs strictly increasing"
    );
    let deltas: String = events
        .iter()
        .filter(|e| e.event_type == EventType::TextDelta)
        .map(|e| e.text())
        .collect();
    assert_eq!(
        deltas, expected,
        "every delta once, in order, in PostgreSQL"
    );
    let terminals: Vec<_> = events
        .iter()
        .filter(|e| e.is_terminal())
        .map(|e| e.run_status())
        .collect();
    assert_eq!(
        terminals,
        vec![Some(session_log::RunStatus::Completed)],
        "one terminal status"
    );
}

/// Two replicas share PostgreSQL and it is down for longer than a run lease: when it is
/// back, the idle replica's lease sweeper does not close the other's live run as
/// `interrupted` (it waits a lease period after regaining the store; the owner renews its
/// leases first), so the run completes and every event its client received is in the log
/// at the seq the client was sent.
#[test]
fn a_restart_longer_than_a_lease_interrupts_no_live_run() {
    let Some(cluster) = pg_cluster::Cluster::start() else {
        return;
    };
    let agent = FakeAgent::start();
    let start = |name: &str| {
        let journal = cluster.path().join(format!("journal-{name}.sqlite"));
        Tether::start(
            &agent.url(),
            "openai-chat",
            &cluster.url(),
            &[
                "--journal-path",
                &journal.display().to_string(),
                "--run-lease-seconds",
                "3",
            ],
        )
    };
    let owner = start("a");
    let _sweeper = start("b");
    let surface = Surface::Chat;
    let mut sse = SseStream::post(
        &format!("{}{}", owner.url(), surface.path()),
        &surface.body("slow:40:200", None, true),
    );
    assert_eq!(sse.status, 200);
    let session = sse.session_id.clone().expect("x-session-id");
    let mut received: Vec<(i64, String)> = Vec::new();
    let mut done = false;
    let mut restarted = false;
    while let Some(event) = sse.next_event() {
        if event.data == "[DONE]" {
            done = true;
            break;
        }
        let text = surface.delta(&event);
        if let Some(id) = event
            .id
            .as_deref()
            .and_then(runtime_adapter::cursor::frame_number)
        {
            if !text.is_empty() {
                received.push((id, text));
            }
        }
        if !restarted && received.len() == 3 {
            restarted = true;
            cluster.down();
            // Longer than the lease: every lease of the run has run out in PostgreSQL.
            std::thread::sleep(Duration::from_secs(4));
            cluster.up();
        }
    }
    assert!(done, "the run went on to its end");
    let text: String = received.iter().map(|(_, t)| t.as_str()).collect();
    let expected: String = (1..=40).map(|i| format!("w{i} ")).collect();
    assert_eq!(text, expected, "the client received the whole run");

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let pg = rt.block_on(session_log::postgres::PgStore::connect(&cluster.url()));
    let pg = pg.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let events = loop {
        let events = rt
            .block_on(pg.events(&EventQuery::session("local", &session)))
            .unwrap();
        let closed = events.iter().any(|e| e.is_terminal());
        let dense = events
            .iter()
            .enumerate()
            .all(|(i, e)| e.seq == i as i64 + 1);
        if (closed && dense && events.len() > 40) || Instant::now() > deadline {
            break events;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_run_landed_once(&events, &expected);
    let seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        (1..=events.len() as i64).collect::<Vec<_>>(),
        "no gap"
    );
    // A chat stream numbers its frames from 0 in the order the run's events render them:
    // the role chunk (the `in_progress` status), then a chunk per delta.
    let rendered: Vec<_> = events
        .iter()
        .filter(|e| {
            e.event_type == session_log::EventType::TextDelta
                || e.run_status() == Some(session_log::RunStatus::InProgress)
        })
        .collect();
    for (id, text) in &received {
        let logged = usize::try_from(*id)
            .ok()
            .and_then(|n| rendered.get(n))
            .map(|e| e.text());
        assert_eq!(
            logged,
            Some(text.as_str()),
            "frame {id} as the client got it"
        );
    }
}

/// An `Idempotency-Key` cannot be checked while PostgreSQL is down (a replica's journal
/// cannot see the keys other replicas took), so the keyed request is refused — 503 with a
/// `Retry-After` — and starts nothing, rather than running as new (it may be the retry of
/// a request that ran). Its retry once PostgreSQL is back runs once, and a repeat after
/// that is answered by that run.
#[test]
fn a_keyed_request_is_refused_while_postgres_is_down_and_its_retry_runs_once() {
    let Some(cluster) = pg_cluster::Cluster::start() else {
        return;
    };
    let agent = FakeAgent::start();
    let journal = cluster.path().join("tether-journal.sqlite");
    let tether = Tether::start(
        &agent.url(),
        "openai-chat",
        &cluster.url(),
        &["--journal-path", &journal.display().to_string()],
    );
    let url = format!("{}/v1/chat/completions", tether.url());
    let body = serde_json::json!({ "model": "fake",
        "messages": [{ "role": "user", "content": "Reply with OK" }] })
    .to_string();
    // A new session: without the key, a run would start (claimed in the journal).
    let headers = [("idempotency-key", "key-outage")];

    cluster.down();
    let refused = post(&url, &body, &headers);
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert_eq!(
        refused.json()["error"]["code"],
        "session_store_unavailable",
        "{}",
        refused.body
    );
    assert_eq!(refused.header("retry-after"), Some("2"));
    cluster.up();

    // The client retries as told until the store answers.
    let deadline = Instant::now() + Duration::from_secs(30);
    let first = loop {
        let r = post(&url, &body, &headers);
        if r.status == 200 {
            break r;
        }
        assert_eq!(r.status, 503, "{}", r.body);
        assert!(Instant::now() < deadline, "no run 30 s after the restart");
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(first.header("x-idempotent-replay"), None);
    let again = post(&url, &body, &headers);
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.json()["id"], first.json()["id"]);
    assert_eq!(again.header("x-idempotent-replay"), Some("true"));
    let session = first
        .header("x-session-id")
        .expect("x-session-id")
        .to_owned();

    // What the replica journaled before it noticed PostgreSQL was back reaches it too.
    wait_for("the recovered log line", Duration::from_secs(30), || {
        logged(&tether.log_text(), "recovered")
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let events = rt.block_on(async {
        let pg = session_log::postgres::PgStore::connect(&cluster.url())
            .await
            .unwrap();
        pg.events(&EventQuery::session("local", &session))
            .await
            .unwrap()
    });
    let statuses: Vec<_> = events
        .iter()
        .filter(|e| e.event_type == EventType::RunStatus)
        .map(|e| (e.run_id.clone(), e.content["status"].clone()))
        .collect();
    assert_eq!(
        statuses.len(),
        2,
        "one run, started and ended: {statuses:?}"
    );
    assert_eq!(statuses[0].0, statuses[1].0);
}
