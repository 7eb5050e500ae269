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
    write!(tcp, "POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len()).unwrap();
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
    tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let n = tcp.read(&mut buf).unwrap();
    assert!(
        String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
}
