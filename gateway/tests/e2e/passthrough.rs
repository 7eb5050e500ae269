//! Pass-through: every other path reaches the agent through Pingora's proxy pipeline,
//! with the gateway's identity stamped and each exchange teed into the log.

use serde_json::Value;
use session_log::EventType;

use crate::harness::*;

#[test]
fn other_paths_are_proxied_with_the_gateways_identity_and_recorded() {
    let (store, _agent, tether) = chat_gateway(&[]);

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

    // The response came whole, so the exchange is one event.
    let events = wait_for(&store, "tee-1", 1);
    assert_eq!(
        events.iter().map(|e| e.event_type).collect::<Vec<_>>(),
        vec![EventType::HttpExchange],
        "{events:#?}"
    );
    let request = &events[0].content["request"];
    assert_eq!(request["method"], "GET");
    assert_eq!(request["path"], "/echo?x=1");
    assert_eq!(request["headers"]["authorization"], "[redacted]");
    let response = &events[0].content["response"];
    assert_eq!(response["status"], 200);
    assert!(response["body"]["text"]
        .as_str()
        .unwrap()
        .contains("\"/echo\""));
    assert!(
        events[0].metadata["exchange_id"]
            .as_str()
            .is_some_and(|x| x.starts_with('x')),
        "{:?}",
        events[0].metadata
    );
}

/// The `http_exchange` a user reads back (ListSessionEvents, and the store itself) holds
/// the request exactly as the client sent it (headers by lower-case name, a repeated one
/// as an array in order, credentials redacted, escapes intact), the response as the agent
/// sent it, both bodies, the status and the exchange id: on both stores.
fn the_exchange_read_back_is_the_exchange_sent(kind: StoreKind) {
    use std::io::{Read, Write};

    let Some(store) = TestStore::new(kind) else {
        return;
    };
    let agent = FakeAgent::start();
    let tether = Tether::start(&agent.url(), "openai-chat", &store.url, &[]);
    let session = format!(
        "tee-read-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let body = "{\"text\":\"h\u{e9}llo \\\"world\\\"\\n\",\"n\":1}";
    let host = tether.url().trim_start_matches("http://").to_owned();
    let request = format!(
        "POST /echo?q=%C3%A9&x=1 HTTP/1.1\r\nHost: {host}\r\nX-Session-Id: {session}\r\n\
         X-Multi: one\r\nAuthorization: Bearer caller-secret\r\nX-Multi: two\r\n\
         X-Quote: say \"hi\" \\ back\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut conn = std::net::TcpStream::connect(&host).unwrap();
    conn.write_all(request.as_bytes()).unwrap();
    let mut raw = Vec::new();
    conn.read_to_end(&mut raw).unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let (head, received) = raw.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{raw}");
    let echo: Value = serde_json::from_str(received).unwrap();
    assert_eq!(echo["body"], body, "the agent got the body: {echo}");

    let stored = wait_for(&store, &session, 1);
    assert_eq!(stored.len(), 1, "{stored:#?}");
    let listed = Api::of(&tether).ok(
        "ListSessionEvents",
        serde_json::json!({ "SessionId": session }),
    )["Events"]
        .as_array()
        .cloned()
        .unwrap();
    assert_eq!(listed.len(), 1, "{listed:#?}");
    let event = &listed[0];
    assert_eq!(event["EventType"], "http_exchange");
    assert_eq!(
        (&event["Content"], &event["Metadata"]),
        (&stored[0].content, &stored[0].metadata),
        "the API shows what the store holds"
    );

    let content = &event["Content"];
    let exchange_id = event["Metadata"]["exchange_id"].as_str().unwrap();
    assert!(exchange_id.starts_with('x'), "{exchange_id}");
    assert_eq!(
        event["Metadata"],
        serde_json::json!({ "exchange_id": exchange_id })
    );
    let duration = content["response"]["duration_ms"].as_f64().unwrap();
    assert!(duration > 0.0, "{content}");
    let agent_headers = &content["response"]["headers"];
    assert_eq!(
        agent_headers["content-type"], "application/json",
        "{content}"
    );
    assert_eq!(
        agent_headers["content-length"],
        received.len().to_string(),
        "{content}"
    );
    let expected = serde_json::json!({
        "request": {
            "method": "POST",
            "path": "/echo?q=%C3%A9&x=1",
            "headers": {
                "host": host,
                "x-session-id": session,
                "x-multi": ["one", "two"],
                "authorization": "[redacted]",
                "x-quote": "say \"hi\" \\ back",
                "content-type": "application/json",
                "content-length": body.len().to_string(),
                "connection": "close",
            },
            "body": { "text": body, "bytes": body.len(), "truncated": false },
        },
        "response": {
            "status": 200,
            "headers": agent_headers,
            "body": { "text": received, "bytes": received.len(), "truncated": false },
            "sse_events": 0,
            "duration_ms": duration,
        },
    });
    assert_eq!(content, &expected);
}

#[test]
fn the_exchange_read_back_is_the_exchange_sent_sqlite() {
    the_exchange_read_back_is_the_exchange_sent(StoreKind::Sqlite);
}

#[test]
fn the_exchange_read_back_is_the_exchange_sent_postgres() {
    the_exchange_read_back_is_the_exchange_sent(StoreKind::Postgres);
}

#[test]
fn an_exchange_the_agent_never_answered_is_recorded_with_its_error() {
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let nobody = format!("http://127.0.0.1:{}", free_port());
    let tether = Tether::start(&nobody, "openai-chat", &store.url, &[]);
    let reply = get(
        &format!("{}/echo", tether.url()),
        &[("x-session-id", "tee-down")],
    );
    assert_eq!(reply.status, 502, "{}", reply.body);

    let events = wait_for(&store, "tee-down", 1);
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0].event_type, EventType::HttpExchange);
    assert_eq!(events[0].content["request"]["path"], "/echo");
    let response = &events[0].content["response"];
    assert_eq!(response["status"], Value::Null, "{response}");
    assert!(
        response["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{response}"
    );
}

#[test]
fn a_streamed_pass_through_response_is_recorded_event_by_event() {
    let (store, _agent, tether) = chat_gateway(&[]);
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

    // A streamed response: its request when the response starts, each event as it
    // passed, then the response, all of one exchange.
    let events = wait_for(&store, "tee-sse", 7);
    let types: Vec<EventType> = events.iter().map(|e| e.event_type).collect();
    let mut expected = vec![EventType::HttpRequest];
    expected.extend([EventType::HttpSseEvent; 5]);
    expected.push(EventType::HttpResponse);
    assert_eq!(types, expected);
    assert!(events
        .iter()
        .all(|e| e.metadata["exchange_id"] == events[0].metadata["exchange_id"]));
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
    assert_eq!(events[6].content["sse_events"], 5);
}

#[test]
fn chunked_pass_through_bodies_of_any_size_are_forwarded_whole_and_recorded() {
    let (store, _agent, tether) = chat_gateway(&[]);
    let pattern =
        |n: usize| -> String { (0..n).map(|i| (b'a' + (i % 26) as u8) as char).collect() };
    // (case, chunk sizes): empty, small, just under and over the 64 KiB Pingora replays,
    // a single chunk bigger than that, and many chunks well past it.
    let cases: Vec<(&str, Vec<usize>)> = vec![
        ("empty", vec![]),
        ("small", vec![2, 3]),
        ("under-64k", vec![60_000, 5_000]),
        ("crossing-64k", vec![60_000, 10_000, 7]),
        ("one-big-chunk", vec![100_000]),
        ("many-chunks", vec![8_192; 40]),
    ];
    for (name, sizes) in &cases {
        let body = pattern(sizes.iter().sum());
        let mut wire = Vec::new();
        let mut at = 0;
        for n in sizes {
            wire.extend_from_slice(format!("{n:x}\r\n{}\r\n", &body[at..at + n]).as_bytes());
            at += n;
        }
        wire.extend_from_slice(b"0\r\n\r\n");
        let session = format!("chunked-{name}");
        let mut request = format!(
            "POST /echo?case={name} HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\nx-session-id: {session}\r\nConnection: close\r\n\r\n"
        )
        .into_bytes();
        request.extend_from_slice(&wire);
        let (raw, _) = raw_exchange(tether.port, &request, std::time::Duration::from_secs(10));
        assert_eq!(
            statuses(&raw),
            vec![200],
            "{name}: {}",
            String::from_utf8_lossy(&raw[..raw.len().min(500)])
        );
        let echo = raw_json(&raw);
        assert_eq!(echo["method"], "POST", "{name}");
        let got = echo["body"].as_str().unwrap_or_default();
        assert_eq!(got.len(), body.len(), "{name}: body length");
        assert!(got == body, "{name}: body differs");

        let events = wait_for(&store, &session, 1);
        let recorded = *teed_requests(&events)
            .first()
            .unwrap_or_else(|| panic!("{name}: no request recorded"));
        assert_eq!(
            recorded["body"]["bytes"],
            body.len(),
            "{name}: {}",
            recorded["body"]["bytes"]
        );
        let text = recorded["body"]["text"].as_str().unwrap_or_default();
        assert!(
            body.starts_with(text),
            "{name}: recorded body is the body's start"
        );
    }
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
