//! The control API and stream resumption: reconnect after a cursor (AfterSeqId,
//! Last-Event-ID, starting_after), cancel, listing, and bad input — all served from the
//! log, for an agent that knows nothing of any of it.

use serde_json::{json, Value};

use crate::harness::*;

pub fn control(tether: &Tether, action: &str, body: Value) -> Reply {
    post_json(
        &format!("{}/agentengine/api/v1/{action}", tether.url()),
        &body,
    )
}

/// Starts a slow streamed run, subscribes to it with SubscribeRunEvents and reads that
/// until `k` text deltas have arrived. Returns (the run's own stream, session, invocation,
/// text so far, last id seen on the subscription).
fn read_some(tether: &Tether, k: usize) -> (SseStream, String, String, String, i64) {
    let sse = SseStream::post(
        &format!("{}/v1/chat/completions", tether.url()),
        &Surface::Chat.body("slow:12:60", None, true),
    );
    let session = sse.session_id.clone().unwrap();
    let invocation = sse.invocation_id.clone().expect("x-invocation-id header");
    let mut sub = SseStream::get(
        &format!(
            "{}/agentengine/api/v1/SubscribeRunEvents?SessionId={session}&InvocationId={invocation}",
            tether.url()
        ),
        &[],
    );
    let (mut text, mut deltas, mut last_id) = (String::new(), 0, 0);
    while deltas < k {
        let event = sub.next_event().unwrap();
        last_id = event.id.as_deref().unwrap().parse().unwrap();
        let v = event.json();
        if v["EventType"] == "text_delta" {
            deltas += 1;
            text.push_str(v["Content"]["delta"].as_str().unwrap());
        }
    }
    (sse, session, invocation, text, last_id)
}

fn expected_text() -> String {
    (1..=12).map(|i| format!("w{i} ")).collect()
}

/// Reads a SubscribeRunEvents stream to its end: (seqs, text of its deltas, ended with [DONE]).
fn read_subscription(sse: SseStream) -> (Vec<i64>, String, bool) {
    let frames = sse.collect();
    let done = frames.last().is_some_and(|f| f.data == "[DONE]");
    let events: Vec<Value> = frames
        .iter()
        .filter(|f| f.data != "[DONE]")
        .map(SseEvent::json)
        .collect();
    for (frame, event) in frames.iter().zip(&events) {
        assert_eq!(
            frame.id.as_deref().unwrap(),
            event["SeqId"].to_string(),
            "id: is the event's seq"
        );
    }
    let seqs = events
        .iter()
        .map(|e| e["SeqId"].as_i64().unwrap())
        .collect();
    let text = events
        .iter()
        .filter(|e| e["EventType"] == "text_delta")
        .map(|e| e["Content"]["delta"].as_str().unwrap().to_owned())
        .collect();
    (seqs, text, done)
}

#[test]
fn reconnect_after_a_cursor_loses_and_repeats_nothing() {
    let (_store, _agent, tether) = chat_gateway(&[]);
    for by_header in [false, true] {
        let (sse, session, invocation, before, cursor) = read_some(&tether, 3);
        drop(sse);
        let base = format!("{}/agentengine/api/v1/SubscribeRunEvents?SessionId={session}&InvocationId={invocation}", tether.url());
        let sub = if by_header {
            SseStream::get(&base, &[("last-event-id", &cursor.to_string())])
        } else {
            SseStream::get(&format!("{base}&AfterSeqId={cursor}"), &[])
        };
        assert_eq!(sub.status, 200);
        let (seqs, after, done) = read_subscription(sub);
        assert!(done, "the stream ends with [DONE]");
        assert_eq!(
            seqs.first(),
            Some(&(cursor + 1)),
            "starts right after the cursor"
        );
        assert!(
            seqs.windows(2).all(|w| w[1] == w[0] + 1),
            "every later event exactly once, in order: {seqs:?}"
        );
        assert_eq!(format!("{before}{after}"), expected_text());

        // A finished run replays the same, and a cursor past its end gives just [DONE].
        let (replayed, _, done) =
            read_subscription(SseStream::get(&format!("{base}&AfterSeqId={cursor}"), &[]));
        assert!(done);
        assert_eq!(replayed, seqs);
        let last = *seqs.last().unwrap();
        let (rest, _, done) =
            read_subscription(SseStream::get(&format!("{base}&AfterSeqId={last}"), &[]));
        assert!(done && rest.is_empty());
        // [DONE] has an id of its own, one past the terminal event's: resuming after it
        // finds the run finished.
        let frames = SseStream::get(&base, &[]).collect();
        let done = frames.last().unwrap();
        assert_eq!(done.data, "[DONE]");
        let done_id: i64 = done.id.as_deref().unwrap().parse().unwrap();
        assert_eq!(done_id, last + 1);
        let after_done =
            SseStream::get(&base, &[("last-event-id", &done_id.to_string())]).collect();
        assert_eq!(after_done.len(), 1);
        assert_eq!(after_done[0].data, "[DONE]");
    }
}

#[test]
fn a_responses_stream_resumes_after_a_sequence_number() {
    let (_store, _agent, tether) = chat_gateway(&[]);
    let mut sse = SseStream::post(
        &format!("{}/v1/responses", tether.url()),
        &Surface::Responses.body("slow:12:60", None, true),
    );
    let (mut before, mut last_seq_no, mut response_id) = (String::new(), -1, String::new());
    while before.matches(' ').count() < 3 {
        let event = sse.next_event().unwrap();
        let v = event.json();
        last_seq_no = v["sequence_number"].as_i64().unwrap();
        if v["type"] == "response.created" {
            response_id = v["response"]["id"].as_str().unwrap().to_owned();
        }
        before.push_str(&Surface::Responses.delta(&event));
    }
    drop(sse);
    let resumed = SseStream::get(
        &format!(
            "{}/v1/responses/{response_id}?stream=true&starting_after={last_seq_no}",
            tether.url()
        ),
        &[],
    )
    .collect();
    let numbers: Vec<i64> = resumed
        .iter()
        .map(|f| f.json()["sequence_number"].as_i64().unwrap())
        .collect();
    assert_eq!(numbers.first(), Some(&(last_seq_no + 1)));
    assert!(numbers.windows(2).all(|w| w[1] == w[0] + 1), "{numbers:?}");
    let after: String = resumed
        .iter()
        .map(|f| Surface::Responses.delta(f))
        .collect();
    assert_eq!(format!("{before}{after}"), expected_text());
    let last = resumed.last().unwrap().json();
    assert_eq!(last["type"], "response.completed");
    assert_eq!(
        last["response"]["output"][0]["content"][0]["text"],
        expected_text()
    );

    let (status, body) = get_json(&format!("{}/v1/responses/{response_id}", tether.url()));
    assert_eq!(status, 200);
    assert_eq!(body["status"], "completed");
    let (status, body) = get_json(&format!(
        "{}/v1/responses/resp_0123456789abcdef0123456789abcdef",
        tether.url()
    ));
    assert_eq!(status, 404, "{body}");
}

#[test]
fn cancel_stops_the_agent_call_and_ends_every_subscriber() {
    let (store, _agent, tether) = chat_gateway(&[]);
    let (sse, session, invocation) = slow_chat_run(&tether, 1);
    let subscriber = SseStream::get(&format!("{}/agentengine/api/v1/SubscribeRunEvents?SessionId={session}&InvocationId={invocation}", tether.url()), &[]);

    let reply = control(&tether, "CancelRun", json!({ "InvocationId": invocation }));
    assert_eq!(reply.status, 200, "{}", reply.body);
    let data = &reply.json()["Data"];
    assert_eq!(
        (
            data["Cancelled"].as_bool(),
            data["Found"].as_bool(),
            data["RunnerCancelStatus"].as_str()
        ),
        (Some(true), Some(true), Some("accepted"))
    );

    // Both the original stream and the subscriber end.
    let original = sse.collect();
    assert!(
        original.last().unwrap().json()["error"].is_object(),
        "the original stream ends with the cancellation"
    );
    let (_, _, done) = read_subscription(subscriber);
    assert!(done);

    assert_cancelled_early(&store, &session);

    // Idempotent, and an unknown id is Found=false.
    let again = control(&tether, "CancelRun", json!({ "InvocationId": invocation })).json();
    assert_eq!(again["Data"]["Status"], "cancelled");
    assert_eq!(again["Data"]["Found"], true);
    let unknown = control(&tether, "CancelRun", json!({ "InvocationId": "inv_nope" })).json();
    assert_eq!(unknown["Data"]["Found"], false);
}

#[test]
fn sessions_and_events_are_listed_in_stable_pages() {
    let (store, _agent, tether) = chat_gateway(&[]);
    for i in 0..3 {
        let r = post_json(
            &format!("{}/v1/responses", tether.url()),
            &Surface::Responses.body("Reply with OK", Some(&format!("s{i}")), false),
        );
        assert_eq!(r.status, 200);
    }
    let page = control(&tether, "ListSessions", json!({ "Page": 1, "PageSize": 2 })).json();
    assert_eq!(page["Code"], 0);
    assert_eq!(page["Action"], "ListSessions");
    assert!(page["RequestId"].as_str().unwrap().starts_with("req_"));
    assert_eq!(page["Data"]["Total"], 3);
    let ids: Vec<&str> = page["Data"]["Sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["SessionId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["s2", "s1"], "most recently updated first");

    let all = store.events("local", "s0");
    let first = control(
        &tether,
        "ListSessionEvents",
        json!({ "SessionId": "s0", "Offset": 0, "Limit": 2 }),
    )
    .json();
    let second = control(
        &tether,
        "ListSessionEvents",
        json!({ "SessionId": "s0", "Offset": 2, "Limit": 100 }),
    )
    .json();
    assert_eq!(first["Data"]["Total"].as_i64().unwrap() as usize, all.len());
    let seqs: Vec<i64> = [&first, &second]
        .iter()
        .flat_map(|p| {
            p["Data"]["Events"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["SeqId"].as_i64().unwrap())
        })
        .collect();
    assert_eq!(seqs, all.iter().map(|e| e.seq).collect::<Vec<_>>());
}

#[test]
fn bad_control_requests_get_the_envelope() {
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let tether = Tether::start("http://127.0.0.1:9", "openai-chat", &store.url, &[]);
    let url = |a: &str| format!("{}/agentengine/api/v1/{a}", tether.url());
    let cases: Vec<(&str, String, u16)> = vec![
        ("ListSessions", "{oops".into(), 400),
        ("ListSessions", json!({"PageSize": 1000}).to_string(), 400),
        ("ListSessions", json!({"Page": "one"}).to_string(), 400),
        ("ListSessionEvents", json!({}).to_string(), 400),
        (
            "ListSessionEvents",
            json!({"SessionId": "nope"}).to_string(),
            404,
        ),
        (
            "ListSessionEvents",
            json!({"SessionId": "nope", "Limit": -1}).to_string(),
            400,
        ),
        ("CancelRun", json!({"InvocationId": 7}).to_string(), 400),
        ("NoSuchAction", json!({}).to_string(), 404),
    ];
    for (action, body, status) in cases {
        let reply = post(&url(action), &body, &[]);
        assert_eq!(reply.status, status, "{action} {body}: {}", reply.body);
        let env = reply.json();
        assert_eq!(env["Code"], status, "{env}");
        assert_eq!(env["Action"], action);
        assert!(env["Message"].as_str().is_some_and(|m| !m.is_empty()));
    }
    for query in ["", "?SessionId=nope", "?SessionId=x&AfterSeqId=-3"] {
        let reply = get(&format!("{}{query}", url("SubscribeRunEvents")), &[]);
        assert!(
            reply.status == 400 || reply.status == 404,
            "{query}: {}",
            reply.body
        );
        assert_eq!(reply.json()["Action"], "SubscribeRunEvents");
    }
    assert_eq!(store.session_count("local"), 0, "nothing was written");
}

#[test]
fn a_finished_run_replays_after_a_gateway_restart() {
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let agent = FakeAgent::start();
    let first = Tether::start(&agent.url(), "openai-chat", &store.url, &[]);
    let sse = SseStream::post(
        &format!("{}/v1/chat/completions", first.url()),
        &Surface::Chat.body("slow:5:10", None, true),
    );
    let (session, invocation) = (
        sse.session_id.clone().unwrap(),
        sse.invocation_id.clone().unwrap(),
    );
    sse.collect();
    drop(first);

    let second = Tether::start(&agent.url(), "openai-chat", &store.url, &[]);
    let url = format!("{}/agentengine/api/v1/SubscribeRunEvents?SessionId={session}&InvocationId={invocation}&AfterSeqId=0", second.url());
    let (seqs, text, done) = read_subscription(SseStream::get(&url, &[]));
    assert!(done);
    assert_eq!(text, "w1 w2 w3 w4 w5 ");
    let logged: Vec<i64> = store
        .events("local", &session)
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(seqs, logged, "every committed event of the run, in order");
}

#[test]
fn a_response_is_cancelled_through_the_responses_surface() {
    let (_store, _agent, tether) = chat_gateway(&[]);
    let mut sse = SseStream::post(
        &format!("{}/v1/responses", tether.url()),
        &Surface::Responses.body("slow:200:50", None, true),
    );
    let created = sse.next_event().unwrap().json();
    let id = created["response"]["id"].as_str().unwrap().to_owned();
    let reply = post(
        &format!("{}/v1/responses/{id}/cancel", tether.url()),
        "",
        &[],
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["status"], "cancelled", "{}", reply.body);
    let last = sse.collect().last().unwrap().json();
    assert_eq!(last["type"], "response.failed");
    assert_eq!(last["response"]["status"], "cancelled");
    let (status, body) = get_json(&format!("{}/v1/responses/{id}", tether.url()));
    assert_eq!((status, body["status"].as_str()), (200, Some("cancelled")));
}
