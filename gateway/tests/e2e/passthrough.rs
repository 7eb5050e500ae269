//! Pass-through: every other path reaches the agent through Pingora's proxy pipeline,
//! with the gateway's identity stamped and each exchange teed into the log.

use serde_json::Value;
use session_log::EventType;

use crate::harness::*;

#[test]
fn other_paths_are_proxied_with_the_gateways_identity_and_recorded() {
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let agent = FakeAgent::start();
    let tether = Tether::start(&agent.url(), "openai-chat", &store.url, &[]);

    let reply = get(
        &format!("{}/echo?x=1", tether.url()),
        &[
            ("x-account-id", "mallory"),
            ("X_Account_Id", "mallory2"),
            ("authorization", "Bearer caller-secret"),
            ("x-session-id", "tee-1"),
        ],
    );
    assert_eq!(reply.status, 200);
    let echo = reply.json();
    assert_eq!(echo["path"], "/echo");
    assert_eq!(
        echo["headers"]["x-account-id"], "local",
        "exactly one, the gateway's: {echo}"
    );
    assert!(echo["headers"].get("x_account_id").is_none(), "{echo}");
    assert!(
        echo["headers"].get("authorization").is_none(),
        "the caller's credential is not forwarded: {echo}"
    );

    let events = wait_for(&store, "tee-1", 2);
    let request = events
        .iter()
        .find(|e| e.event_type == EventType::HttpRequest)
        .unwrap();
    assert_eq!(request.content["method"], "GET");
    assert_eq!(request.content["path"], "/echo?x=1");
    assert_eq!(request.content["headers"]["authorization"], "[redacted]");
    let response = events
        .iter()
        .find(|e| e.event_type == EventType::HttpResponse)
        .unwrap();
    assert_eq!(response.content["status"], 200);
    assert!(response.content["body"]["text"]
        .as_str()
        .unwrap()
        .contains("\"/echo\""));
    assert!(request.seq < response.seq);
}

#[test]
fn a_streamed_pass_through_response_is_recorded_event_by_event() {
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let agent = FakeAgent::start();
    let tether = Tether::start(&agent.url(), "openai-chat", &store.url, &[]);
    let reply = get(
        &format!("{}/events?n=5&ms=20", tether.url()),
        &[("x-session-id", "tee-sse")],
    );
    assert_eq!(reply.status, 200);
    let received: Vec<&str> = reply
        .body
        .lines()
        .filter(|l| l.starts_with("data:"))
        .collect();
    assert_eq!(
        received.len(),
        5,
        "the client got every event: {}",
        reply.body
    );

    let events = wait_for(&store, "tee-sse", 7);
    let sse: Vec<Value> = events
        .iter()
        .filter(|e| e.event_type == EventType::HttpSseEvent)
        .map(|e| serde_json::from_str(e.content["data"].as_str().unwrap()).unwrap())
        .collect();
    assert_eq!(
        sse,
        (0..5)
            .map(|i| serde_json::json!({ "i": i }))
            .collect::<Vec<_>>(),
        "reassembled across split writes, in order"
    );
    let response = events
        .iter()
        .find(|e| e.event_type == EventType::HttpResponse)
        .unwrap();
    assert_eq!(response.content["sse_events"], 5);
}

fn wait_for(store: &TestStore, session: &str, n: usize) -> Vec<session_log::Event> {
    let start = std::time::Instant::now();
    loop {
        let events = store.events("local", session);
        if events.len() >= n || start.elapsed().as_secs() > 10 {
            return events;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
