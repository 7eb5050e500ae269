//! Faults: clients that leave, agents that die or cannot be reached, gateways that are
//! stopped or killed. Each run still ends with exactly one terminal status and nothing
//! committed is lost.

use std::time::Duration;

use serde_json::json;
use session_log::{Event, EventType, RunStatus};

use crate::harness::*;

fn terminal_statuses(events: &[Event]) -> Vec<RunStatus> {
    events
        .iter()
        .filter(|e| e.is_terminal())
        .filter_map(|e| e.run_status())
        .collect()
}

fn assert_well_formed(events: &[Event]) {
    assert!(
        events.windows(2).all(|w| w[0].seq < w[1].seq),
        "seqs strictly increase"
    );
    assert_eq!(
        terminal_statuses(events).len(),
        1,
        "exactly one terminal run_status: {events:#?}"
    );
    assert!(
        events.last().unwrap().is_terminal(),
        "the terminal status is the last event"
    );
}

#[test]
fn a_client_that_leaves_does_not_stop_the_run() {
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let agent = FakeAgent::start();
    for surface in [Surface::Chat, Surface::Responses] {
        let tether = Tether::start(&agent.url(), "openai-chat", &store.url, &[]);
        let mut sse = SseStream::post(
            &format!("{}{}", tether.url(), surface.path()),
            &surface.body("slow:20:40", None, true),
        );
        let session = sse.session_id.clone().unwrap();
        let mut seen = String::new();
        while !seen.contains("w3 ") {
            seen.push_str(&surface.delta(&sse.next_event().expect("a few events before leaving")));
        }
        drop(sse); // the client leaves after a few events

        let events = store.wait_for_terminal("local", &session, 1);
        assert_well_formed(&events);
        assert_eq!(terminal_statuses(&events), [RunStatus::Completed]);
        let deltas: String = events
            .iter()
            .filter(|e| e.event_type == EventType::TextDelta)
            .map(|e| e.text())
            .collect();
        let expected: String = (1..=20).map(|i| format!("w{i} ")).collect();
        assert_eq!(deltas, expected, "every delta is in the log");
        let answer = events
            .iter()
            .find(|e| e.event_type == EventType::Message && e.role.as_deref() == Some("assistant"))
            .unwrap();
        assert_eq!(answer.text(), expected);
    }
}

#[test]
fn an_agent_that_dies_mid_stream_fails_the_run() {
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    for (surface, protocol) in [
        (Surface::Chat, "openai-chat"),
        (Surface::Responses, "openai-responses"),
    ] {
        let mut agent = FakeAgent::start();
        let tether = Tether::start(&agent.url(), protocol, &store.url, &[]);
        let sse = SseStream::post(
            &format!("{}{}", tether.url(), surface.path()),
            &surface.body("die:3", None, true),
        );
        let session = sse.session_id.clone().unwrap();
        let frames = sse.collect();
        agent.wait_exit();

        // The client got the deltas and then a structured error in its own format.
        let text: String = frames.iter().map(|f| surface.delta(f)).collect();
        assert_eq!(text, "w1 w2 w3 ");
        let last = frames.last().unwrap().json();
        match surface {
            Surface::Chat => assert!(last["error"]["message"].is_string(), "{last}"),
            Surface::Responses => assert_eq!(last["type"], "response.failed", "{last}"),
        }

        let events = store.wait_for_terminal("local", &session, 1);
        assert_well_formed(&events);
        assert_eq!(terminal_statuses(&events), [RunStatus::Failed]);
        assert!(
            events.iter().any(|e| e.event_type == EventType::Error),
            "an error event is recorded"
        );
        assert_eq!(
            events
                .iter()
                .filter(|e| e.event_type == EventType::TextDelta)
                .count(),
            3,
            "nothing committed is lost"
        );
    }
}

#[test]
fn an_unreachable_agent_fails_the_run_with_a_structured_error() {
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let nobody = format!("http://127.0.0.1:{}", free_port());
    let tether = Tether::start(&nobody, "openai-chat", &store.url, &[]);
    for surface in [Surface::Chat, Surface::Responses] {
        let reply = post_json(
            &format!("{}{}", tether.url(), surface.path()),
            &surface.body("hello", None, false),
        );
        assert_eq!(reply.status, 502, "{}", reply.body);
        let body = reply.json();
        assert_eq!(body["error"]["code"], "agent_unreachable", "{body}");
        let session = reply.session_id.expect("x-session-id on errors too");
        let events = store.wait_for_terminal("local", &session, 1);
        assert_well_formed(&events);
        assert_eq!(terminal_statuses(&events), [RunStatus::Failed]);
    }
}

#[test]
fn an_agent_error_reaches_the_client_in_its_format() {
    let (store, _agent, tether) = chat_gateway(&[]);
    let reply = post_json(
        &format!("{}/v1/chat/completions", tether.url()),
        &Surface::Chat.body("please error", None, false),
    );
    assert_eq!(reply.status, 502);
    assert!(
        reply.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("fake failure"),
        "{}",
        reply.body
    );
    let events = store.wait_for_terminal("local", &reply.session_id.unwrap(), 1);
    assert_eq!(terminal_statuses(&events), [RunStatus::Failed]);
}

#[test]
fn sigterm_lets_a_short_run_finish_and_commits_it() {
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let agent = FakeAgent::start();
    let mut tether = Tether::start(&agent.url(), "openai-chat", &store.url, &[]);
    let mut sse = SseStream::post(
        &format!("{}/v1/chat/completions", tether.url()),
        &Surface::Chat.body("slow:10:50", None, true),
    );
    let session = sse.session_id.clone().unwrap();
    sse.next_event().unwrap();
    assert!(
        tether.signal("TERM", Duration::from_secs(20)),
        "tether exits after SIGTERM"
    );
    drop(sse);
    let events = store.events("local", &session);
    assert_well_formed(&events);
    assert_eq!(
        terminal_statuses(&events),
        [RunStatus::Completed],
        "the run finished within the grace period"
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| e.event_type == EventType::TextDelta)
            .count(),
        10
    );
}

#[test]
fn sigterm_interrupts_a_long_run_and_commits_what_it_had() {
    let (store, _agent, mut tether) = chat_gateway(&[]);
    let (_sse, session, _) = slow_chat_run(&tether, 3);
    assert!(
        tether.signal("TERM", Duration::from_secs(20)),
        "tether exits after SIGTERM"
    );
    let events = store.events("local", &session);
    assert_well_formed(&events);
    assert_eq!(terminal_statuses(&events), [RunStatus::Interrupted]);
    assert!(
        events
            .iter()
            .filter(|e| e.event_type == EventType::TextDelta)
            .count()
            >= 2
    );
}

#[test]
fn sigterm_checkpoints_the_wal_into_the_main_file() {
    let (store, _agent, mut tether) = chat_gateway(&[]);
    let mut sessions = Vec::new();
    for i in 0..5 {
        let reply = post_json(
            &format!("{}/v1/chat/completions", tether.url()),
            &Surface::Chat.body(&format!("turn {i}"), None, false),
        );
        assert_eq!(reply.status, 200, "{}", reply.body);
        sessions.push(reply.session_id.unwrap());
    }
    assert!(
        tether.signal("TERM", Duration::from_secs(20)),
        "tether exits after SIGTERM"
    );
    let wal = format!("{}-wal", store.url);
    let wal_len = std::fs::metadata(&wal).map_or(0, |m| m.len());
    assert_eq!(
        wal_len, 0,
        "the WAL is merged into the main file at a clean stop"
    );
    // The main file alone, copied away from any WAL, holds every run.
    let alone = tempfile::tempdir().unwrap();
    let copy = alone.path().join("sessions.sqlite");
    std::fs::copy(&store.url, &copy).unwrap();
    let copy = TestStore::at(&copy.display().to_string());
    for session in &sessions {
        let events = copy.events("local", session);
        assert_well_formed(&events);
        assert_eq!(terminal_statuses(&events), [RunStatus::Completed]);
    }
}

#[test]
fn a_run_left_open_by_a_killed_gateway_is_closed_at_restart() {
    let (store, agent, mut tether) = chat_gateway(&[]);
    let (_sse, session, _) = slow_chat_run(&tether, 3);
    assert!(tether.signal("KILL", Duration::from_secs(5)));
    let before = store.events("local", &session);
    assert!(
        terminal_statuses(&before).is_empty(),
        "nobody closed the run"
    );

    let _restarted = Tether::start(&agent.url(), "openai-chat", &store.url, &[]);
    let after = store.events("local", &session);
    assert_well_formed(&after);
    assert_eq!(terminal_statuses(&after), [RunStatus::Interrupted]);
    assert_eq!(
        &after[..before.len()],
        &before[..],
        "what was committed is kept as it was"
    );
}

#[test]
fn health_and_readiness() {
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let tether = Tether::start("http://127.0.0.1:9", "openai-chat", &store.url, &[]);
    assert_eq!(
        get_json(&format!("{}/healthz", tether.url())),
        (200, json!({"status": "ok"}))
    );
    let (status, body) = get_json(&format!("{}/readyz", tether.url()));
    assert_eq!(status, 200);
    assert_eq!(body["store"], "sqlite");
}

/// A streamed run ends with the chunked terminator, not by closing the connection, so an
/// HTTP/1.1 client can send its next request on the same socket.
#[test]
fn a_finished_stream_leaves_the_connection_usable() {
    use std::io::{Read, Write};
    let (_store, _agent, tether) = chat_gateway(&[]);
    let mut tcp = std::net::TcpStream::connect(("127.0.0.1", tether.port)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let body = Surface::Chat.body("hello", None, true).to_string();
    write!(tcp, "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len()).unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !seen.ends_with(b"0\r\n\r\n") {
        let n = tcp.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "the connection closed instead of ending the chunked body: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&seen).to_lowercase();
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    assert!(head.contains("data: [done]"));
    tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let n = tcp.read(&mut buf).unwrap();
    assert!(
        String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
}

/// Makes the store refuse every event of `session` (a trigger on `events`), the way a
/// database refuses a commit; returns the SQL that lifts the refusal.
fn refuse_events_of(store: &TestStore, kind: StoreKind, session: &str) -> String {
    let name = session.replace('-', "_");
    let (install, lift): (Vec<String>, String) = match kind {
        StoreKind::Sqlite => (
            vec![format!(
                "CREATE TRIGGER {name} BEFORE INSERT ON events WHEN NEW.session_id = '{session}' \
                 BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
            )],
            format!("DROP TRIGGER {name}"),
        ),
        StoreKind::Postgres => (
            vec![
                format!(
                    "CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
                     RAISE EXCEPTION 'refused by the test'; END $$"
                ),
                format!(
                    "CREATE TRIGGER {name} BEFORE INSERT ON events FOR EACH ROW \
                     WHEN (NEW.session_id = '{session}') EXECUTE FUNCTION {name}()"
                ),
            ],
            format!("DROP TRIGGER {name} ON events; DROP FUNCTION {name}()"),
        ),
    };
    for sql in install {
        execute(store, kind, &sql);
    }
    lift
}

fn execute(store: &TestStore, kind: StoreKind, sql: &str) {
    use sqlx::Connection;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        match kind {
            StoreKind::Sqlite => {
                let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", store.url))
                    .await
                    .unwrap();
                sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
            }
            StoreKind::Postgres => {
                let mut conn = sqlx::PgConnection::connect(&store.url).await.unwrap();
                sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
            }
        }
    });
}

/// A run's agent call is prepared while its start commits, but sent only once the start
/// is committed: a start the store refuses never reaches the agent, its client is told,
/// and the log holds no part of the run (no input, `in_progress` or delta). Another
/// session's run goes on as usual.
fn a_start_the_store_refuses_never_reaches_the_agent(kind: StoreKind) {
    let Some(store) = TestStore::new(kind) else {
        return;
    };
    let agent = FakeAgent::start();
    let tether = Tether::start(&agent.url(), "openai-chat", &store.url, &[]);
    let url = format!("{}/v1/chat/completions", tether.url());
    let tag = format!("{}", now_nanos());
    let refused = format!("refused-{tag}");
    let lift = refuse_events_of(&store, kind, &refused);

    let secret = format!("never-sent-{tag}");
    let mut sse = SseStream::post(&url, &Surface::Chat.body(&secret, Some(&refused), true));
    let status = sse.status;
    let body: Vec<SseEvent> = std::iter::from_fn(|| sse.next_event()).collect();
    assert_ne!(
        status, 200,
        "the client is told the run did not start: {body:?}"
    );

    // The gateway goes on: a run in another session reaches the agent and completes.
    let other = post(
        &url,
        &Surface::Chat
            .body(&format!("sent-{tag}"), None, false)
            .to_string(),
        &[],
    );
    assert_eq!(other.status, 200, "{}", other.body);
    let sent: Vec<String> = agent.requests().iter().map(|r| r.to_string()).collect();
    assert!(
        sent.iter().any(|r| r.contains(&format!("sent-{tag}"))),
        "the agent records what it receives: {sent:?}"
    );
    // Time for a driver that did not wait for the commit to have sent its request.
    std::thread::sleep(Duration::from_millis(300));
    let sent: Vec<String> = agent.requests().iter().map(|r| r.to_string()).collect();
    assert!(
        !sent.iter().any(|r| r.contains(&secret)),
        "the agent never heard of the refused turn: {sent:?}"
    );
    execute(&store, kind, &lift);
    // (On PostgreSQL the claim's invocation row stays for the lease sweeper, which may
    // close it later with one terminal status; nothing else of the run is ever written.)
    let events = store.events("local", &refused);
    assert!(
        events.iter().all(|e| e.is_terminal()) && events.len() <= 1,
        "nothing of the refused run is in the log: {events:#?}"
    );
}

#[test]
fn a_start_the_store_refuses_never_reaches_the_agent_sqlite() {
    a_start_the_store_refuses_never_reaches_the_agent(StoreKind::Sqlite);
}

#[test]
fn a_start_the_store_refuses_never_reaches_the_agent_postgres() {
    a_start_the_store_refuses_never_reaches_the_agent(StoreKind::Postgres);
}

/// Many runs starting at once (their starts share group commits with each other's first
/// deltas): in every session the start's input and `in_progress` come before the first
/// delta, seqs increase, the client saw the log's deltas in order, and the run ends once.
fn concurrent_starts_keep_each_sessions_order(kind: StoreKind) {
    let Some(store) = TestStore::new(kind) else {
        return;
    };
    let agent = FakeAgent::start();
    let tether = Tether::start(&agent.url(), "openai-chat", &store.url, &[]);
    let url = format!("{}/v1/chat/completions", tether.url());
    const RUNS: usize = 40;
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(RUNS));
    let clients: Vec<_> = (0..RUNS)
        .map(|i| {
            let (url, barrier) = (url.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                let sse = SseStream::post(
                    &url,
                    &Surface::Chat.body(&format!("burst {i} slow:5:5"), None, true),
                );
                assert_eq!(sse.status, 200);
                let session = sse.session_id.clone().unwrap();
                let events = sse.collect();
                let seen: String = events.iter().map(|e| Surface::Chat.delta(e)).collect();
                (i, session, seen, events)
            })
        })
        .collect();
    let expected = "w1 w2 w3 w4 w5 ";
    for client in clients {
        let (i, session, seen, streamed) = client.join().unwrap();
        let events = store.wait_for_terminal("local", &session, 1);
        assert_eq!(
            seen, expected,
            "run {i}'s client got every delta in order: {streamed:#?} {events:#?}"
        );
        assert_well_formed(&events);
        assert_eq!(terminal_statuses(&events), [RunStatus::Completed]);
        let first_delta = events
            .iter()
            .position(|e| e.event_type == EventType::TextDelta)
            .expect("deltas in the log");
        let input = events
            .iter()
            .position(|e| e.event_type == EventType::Message && e.role.as_deref() == Some("user"))
            .expect("the input in the log");
        let in_progress = events
            .iter()
            .position(|e| e.run_status() == Some(RunStatus::InProgress))
            .expect("in_progress in the log");
        assert!(
            input < in_progress && in_progress < first_delta,
            "run {i}: input, in_progress, then deltas: {events:#?}"
        );
        let deltas: String = events
            .iter()
            .filter(|e| e.event_type == EventType::TextDelta)
            .map(|e| e.text())
            .collect();
        assert_eq!(deltas, expected);
    }
    let requests = agent.requests();
    assert_eq!(requests.len(), RUNS, "the agent got each turn once");
}

#[test]
fn concurrent_starts_keep_each_sessions_order_sqlite() {
    concurrent_starts_keep_each_sessions_order(StoreKind::Sqlite);
}

#[test]
fn concurrent_starts_keep_each_sessions_order_postgres() {
    concurrent_starts_keep_each_sessions_order(StoreKind::Postgres);
}

fn now_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}
