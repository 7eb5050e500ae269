//! Real clients as they are written, on SQLite and PostgreSQL: stream ids that are
//! distinct and increasing on every surface, with an `EventSource`-style reconnect
//! (`Last-Event-ID`, or the surface's query cursor) that loses and repeats nothing; a
//! Responses client resending its input items (tool calls included) recorded once; and
//! tests/interop/test_clients_openai.py, the official `openai` SDK resending history,
//! editing it, retrying through an outage and repeating an `Idempotency-Key`.

use serde_json::{json, Value};
use session_log::EventType;

use crate::harness::*;
use crate::interop::{interop_python, run_pytest_behind_tether};

const SLOW: &str = "slow:12:60";

fn expected_text() -> String {
    (1..=12).map(|i| format!("w{i} ")).collect()
}

/// A frame's number in its stream: a Chat or Responses frame id (`v1.<seq>.<frame>`)
/// names it; a `SubscribeRunEvents` id is a position.
fn id_of(frame: &SseEvent) -> i64 {
    let id = frame
        .id
        .as_deref()
        .unwrap_or_else(|| panic!("a frame without id: {frame:?}"));
    runtime_adapter::cursor::frame_number(id).unwrap_or_else(|| panic!("not a stream id: {id}"))
}

/// The text deltas of a `SubscribeRunEvents` stream.
fn subscribed_text(frames: &[SseEvent]) -> String {
    frames
        .iter()
        .filter(|f| f.data != "[DONE]")
        .map(SseEvent::json)
        .filter(|v| v["EventType"] == "text_delta")
        .map(|v| v["Content"]["delta"].as_str().unwrap().to_owned())
        .collect()
}

/// Every id distinct and increasing, across the frames of a stream and its resumption.
fn assert_increasing(ids: &[i64]) {
    assert!(
        ids.windows(2).all(|w| w[1] > w[0]),
        "ids are distinct and increasing: {ids:?}"
    );
}

/// Reads a run's stream until `k` text deltas came; returns (frames read, text so far).
fn read_deltas(sse: &mut SseStream, surface: Surface, k: usize) -> (Vec<SseEvent>, String) {
    let (mut frames, mut text, mut deltas) = (Vec::new(), String::new(), 0);
    while deltas < k {
        let frame = sse.next_event().expect("the stream ended early");
        let delta = surface.delta(&frame);
        if !delta.is_empty() {
            deltas += 1;
            text.push_str(&delta);
        }
        frames.push(frame);
    }
    (frames, text)
}

/// The run's response id as the surface's frames name it.
fn response_id(surface: Surface, frames: &[SseEvent]) -> String {
    frames
        .iter()
        .find_map(|f| {
            let v = f.json();
            match surface {
                Surface::Chat => v["id"].as_str().map(str::to_owned),
                Surface::Responses => v["response"]["id"].as_str().map(str::to_owned),
            }
        })
        .expect("a frame names the response")
}

/// A slow streamed run on `surface`, read for 3 deltas and dropped; then resumed from
/// the last id seen, by `Last-Event-ID` (what `EventSource` sends) and by the query
/// cursor. Nothing is lost, nothing repeated, every id distinct and increasing.
fn resume_a_stream(tether: &Tether, surface: Surface) {
    let mut sse = SseStream::post(
        &format!("{}{}", tether.url(), surface.path()),
        &surface.body(SLOW, None, true),
    );
    assert_eq!(sse.status, 200);
    let (seen, before) = read_deltas(&mut sse, surface, 3);
    let (session, invocation) = (
        sse.session_id.clone().unwrap(),
        sse.invocation_id.clone().unwrap(),
    );
    drop(sse);
    let ids: Vec<i64> = seen.iter().map(id_of).collect();
    assert_eq!(ids.first(), Some(&0), "ids count frames from 0");
    assert_increasing(&ids);
    let last = *ids.last().unwrap();
    let last_id = seen.last().unwrap().id.clone().unwrap();
    assert!(
        last_id.starts_with("v1."),
        "a frame id says its form: {last_id}"
    );
    let id = response_id(surface, &seen);
    let stream_url = format!("{}{}/{id}?stream=true", tether.url(), surface.path());

    // The same id resumes on SubscribeRunEvents, by header and as AfterSeqId: the log's
    // events after the last one the client was shown, each once.
    let subscribe = format!(
        "{}/agentengine/api/v1/SubscribeRunEvents?SessionId={session}&InvocationId={invocation}",
        tether.url()
    );
    let by_header = SseStream::get(&subscribe, &[("last-event-id", &last_id)]).collect();
    let by_param = SseStream::get(&format!("{subscribe}&AfterSeqId={last_id}"), &[]).collect();
    for (how, resumed) in [("Last-Event-ID", &by_header), ("AfterSeqId", &by_param)] {
        assert_eq!(resumed.last().unwrap().data, "[DONE]", "{how}");
        let after = subscribed_text(resumed);
        assert_eq!(
            format!("{before}{after}"),
            expected_text(),
            "SubscribeRunEvents {how}"
        );
    }
    // The release before `v1` sent the frame's bare number; this store took that
    // release's migration before the run started, so a bare Last-Event-ID here is that
    // number and resumes after that frame. (The release before that sent log seqs:
    // upgrade.rs resumes its ids, streamed by its own binary.)
    let resumed = SseStream::get(&stream_url, &[("last-event-id", &last.to_string())]).collect();
    let after: String = resumed.iter().map(|f| surface.delta(f)).collect();
    assert_eq!(
        format!("{before}{after}"),
        expected_text(),
        "the previous release's bare frame number"
    );
    assert_eq!(resumed.first().map(id_of), Some(last + 1));

    let by_header = SseStream::get(&stream_url, &[("last-event-id", &last_id)]).collect();
    let by_query = SseStream::get(&format!("{stream_url}&starting_after={last}"), &[]).collect();
    for (how, resumed) in [("Last-Event-ID", &by_header), ("starting_after", &by_query)] {
        let resumed_ids: Vec<i64> = resumed.iter().map(id_of).collect();
        assert_eq!(resumed_ids.first(), Some(&(last + 1)), "{how}");
        let all: Vec<i64> = ids.iter().chain(&resumed_ids).copied().collect();
        assert_increasing(&all);
        let after: String = resumed.iter().map(|f| surface.delta(f)).collect();
        assert_eq!(format!("{before}{after}"), expected_text(), "{how}");
    }
    assert_eq!(
        by_header.iter().map(|f| &f.data).collect::<Vec<_>>(),
        by_query.iter().map(|f| &f.data).collect::<Vec<_>>(),
        "one cursor, two ways to send it"
    );
    if surface == Surface::Chat {
        assert_eq!(by_header.last().unwrap().data, "[DONE]");
        // The finished run, retrieved whole.
        let (status, body) = get_json(&format!("{}{}/{id}", tether.url(), surface.path()));
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["object"], "chat.completion");
        assert_eq!(surface.text(&body), expected_text());
    } else {
        for f in &by_header {
            assert_eq!(f.json()["sequence_number"].as_i64(), Some(id_of(f)));
        }
    }
    // The whole stream again from the start: the ids of the original.
    let whole = SseStream::get(&stream_url, &[]).collect();
    let whole_ids: Vec<i64> = whole.iter().map(id_of).collect();
    assert_eq!(whole_ids, (0..whole.len() as i64).collect::<Vec<_>>());
    assert_eq!(
        whole[..seen.len()]
            .iter()
            .map(|f| surface.delta(f))
            .collect::<String>(),
        before
    );
    // A cursor that is not a frame id is refused in the surface's format, naming where it
    // came from; the control API's subscription says the same in its envelope.
    let bad = get(&stream_url, &[("last-event-id", "soon")]);
    assert_eq!(bad.status, 400, "{}", bad.body);
    let error = &bad.json()["error"];
    assert_eq!(error["param"], "Last-Event-ID", "{}", bad.body);
    assert_eq!(error["code"], "invalid_id", "{}", bad.body);
    let subscribe = format!(
        "{}/agentengine/api/v1/SubscribeRunEvents?SessionId=s",
        tether.url()
    );
    let control = get(&subscribe, &[("last-event-id", "soon")]);
    assert_eq!(control.status, 400, "{}", control.body);
    assert_eq!(control.json()["Data"]["Field"], "Last-Event-ID");
    assert_eq!(
        control.json()["Message"],
        error["message"],
        "one error, two formats"
    );
    for n in ["-1", "1.5", "x"] {
        let bad = get(&format!("{stream_url}&starting_after={n}"), &[]);
        assert_eq!(bad.status, 400, "{n}: {}", bad.body);
        assert_eq!(
            bad.json()["error"]["param"],
            "starting_after",
            "{}",
            bad.body
        );
        let control = get(&format!("{subscribe}&AfterSeqId={n}"), &[]);
        assert_eq!(control.status, 400, "{n}: {}", control.body);
        assert_eq!(
            control.json()["Data"]["Field"],
            "AfterSeqId",
            "{}",
            control.body
        );
    }
}

fn stream_ids_on(kind: StoreKind) {
    let Some(store) = TestStore::new(kind) else {
        return;
    };
    let agent = FakeAgent::start();
    let tether = Tether::start(&agent.url(), "openai-chat", &store.url, &[]);
    // A run that starts within the second the store was migrated is taken for the older
    // release's (SQLite dates migrations to the second): the bare frame numbers resumed
    // below are those of runs that start later.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    resume_a_stream(&tether, Surface::Chat);
    resume_a_stream(&tether, Surface::Responses);

    // SubscribeRunEvents: its cursor is the event's seq; [DONE] has an id of its own.
    let sse = SseStream::post(
        &format!("{}/v1/chat/completions", tether.url()),
        &Surface::Chat.body(SLOW, None, true),
    );
    let (session, invocation) = (
        sse.session_id.clone().unwrap(),
        sse.invocation_id.clone().unwrap(),
    );
    let base = format!(
        "{}/agentengine/api/v1/SubscribeRunEvents?SessionId={session}&InvocationId={invocation}",
        tether.url()
    );
    let mut sub = SseStream::get(&base, &[]);
    let mut seen = Vec::new();
    let mut before = String::new();
    while before.matches(' ').count() < 3 {
        let frame = sub.next_event().unwrap();
        let v = frame.json();
        if v["EventType"] == "text_delta" {
            before.push_str(v["Content"]["delta"].as_str().unwrap());
        }
        seen.push(id_of(&frame));
    }
    drop(sub);
    drop(sse);
    let last = *seen.last().unwrap();
    let resumed = SseStream::get(&base, &[("last-event-id", &last.to_string())]).collect();
    let ids: Vec<i64> = seen
        .iter()
        .copied()
        .chain(resumed.iter().map(id_of))
        .collect();
    assert_increasing(&ids);
    assert_eq!(resumed.last().unwrap().data, "[DONE]");
    let after: String = resumed
        .iter()
        .filter(|f| f.data != "[DONE]")
        .map(SseEvent::json)
        .filter(|v| v["EventType"] == "text_delta")
        .map(|v| v["Content"]["delta"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(format!("{before}{after}"), expected_text());
}

#[test]
fn every_stream_has_distinct_increasing_ids_and_resumes_from_last_event_id_sqlite() {
    stream_ids_on(StoreKind::Sqlite);
}

#[test]
fn every_stream_has_distinct_increasing_ids_and_resumes_from_last_event_id_postgres() {
    stream_ids_on(StoreKind::Postgres);
}

/// A Responses client that keeps its own list of input items (its messages, the model's
/// function calls and its outputs) and sends all of them every turn.
fn responses_client_resending_items(kind: StoreKind) {
    let Some(store) = TestStore::new(kind) else {
        return;
    };
    let agent = FakeAgent::start();
    let tether = Tether::start(&agent.url(), "openai-chat", &store.url, &[]);
    let url = format!("{}/v1/responses", tether.url());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let session = format!("items-{}-{nanos}", std::process::id());
    let mut items: Vec<Value> = vec![
        json!({ "role": "developer", "content": "Answer briefly." }),
        json!({ "role": "user", "content": "tool:lookup" }),
    ];
    let turn = |items: &[Value]| {
        let body = json!({ "model": "fake", "conversation": session, "input": items });
        let reply = post_json(&url, &body);
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(reply.header("x-session-id"), Some(session.as_str()));
        reply.json()
    };
    let first = turn(&items);
    let call = first["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "function_call")
        .cloned()
        .expect("the agent called the tool");
    // The client echoes the call as the SDK gives it (its own id and status fields), then
    // its output.
    items.push(call.clone());
    items.push(
        json!({ "type": "function_call_output", "call_id": call["call_id"], "output": "42" }),
    );
    let second = turn(&items);
    assert_eq!(Surface::Responses.text(&second), "tool said: 42");
    items.push(json!({ "role": "assistant", "content": "tool said: 42" }));
    items.push(json!({ "role": "user", "content": "Reply with OK" }));
    let third = turn(&items);
    assert_eq!(Surface::Responses.text(&third), "OK.");

    // The agent's last request (it speaks Chat Completions): the developer message, then
    // each item once.
    let last = agent.requests().pop().unwrap();
    let messages = last["body"]["messages"].as_array().unwrap().clone();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        [
            "developer",
            "user",
            "assistant",
            "tool",
            "assistant",
            "user"
        ],
        "{messages:?}"
    );
    assert_eq!(messages[2]["tool_calls"][0]["id"], "call_1");
    assert_eq!(messages[3]["tool_call_id"], "call_1");
    // The log: each item once, and no developer message.
    let events = store.events("local", &session);
    let count = |t: EventType, role: &str| {
        events
            .iter()
            .filter(|e| e.event_type == t && e.role.as_deref() == Some(role))
            .filter(|e| t != EventType::Message || !e.text().is_empty())
            .count()
    };
    assert_eq!(count(EventType::Message, "user"), 2);
    assert_eq!(count(EventType::Message, "developer"), 0);
    assert_eq!(count(EventType::ToolCall, "assistant"), 1);
    assert_eq!(count(EventType::ToolResult, "tool"), 1);
    assert_eq!(count(EventType::Message, "assistant"), 2);
}

#[test]
fn a_responses_client_resending_its_items_is_recorded_once_sqlite() {
    responses_client_resending_items(StoreKind::Sqlite);
}

#[test]
fn a_responses_client_resending_its_items_is_recorded_once_postgres() {
    responses_client_resending_items(StoreKind::Postgres);
}

/// tests/interop/test_clients_openai.py against a gateway on `kind`'s store, in front of
/// the fake agent the file starts (and kills) on AGENT_PORT.
fn sdk_clients_on(kind: StoreKind) {
    let Some(python) = interop_python() else {
        return;
    };
    let Some(store) = TestStore::new(kind) else {
        return;
    };
    run_pytest_behind_tether(
        python,
        &store,
        "openai-chat",
        "tests/interop/test_clients_openai.py",
        &[],
    );
}

#[test]
fn openai_sdk_clients_resend_edit_retry_and_repeat_sqlite() {
    sdk_clients_on(StoreKind::Sqlite);
}

#[test]
fn openai_sdk_clients_resend_edit_retry_and_repeat_postgres() {
    sdk_clients_on(StoreKind::Postgres);
}

/// A chat client that starts without a session, opts in with the `x-session-id` its first
/// answer named, and resends everything: appended once. Then it edits the first answer,
/// before any checkpoint of the session: a new session (not a fork) takes the request as
/// sent, and the session is left as it was.
fn opting_in_and_diverging_in_the_first_turn(kind: StoreKind) {
    let Some(store) = TestStore::new(kind) else {
        return;
    };
    let agent = FakeAgent::start();
    let tether = Tether::start(&agent.url(), "openai-chat", &store.url, &[]);
    let url = format!("{}/v1/chat/completions", tether.url());
    let system = json!({ "role": "system", "content": "Be brief." });
    let u1 = json!({ "role": "user", "content": "My project is named zebra42. Reply with OK." });
    let send = |messages: Vec<Value>, session: Option<&str>| {
        let body = json!({ "model": "fake", "messages": messages });
        let headers: Vec<(&str, &str)> = session.map(|s| ("x-session-id", s)).into_iter().collect();
        let reply = post(&url, &body.to_string(), &headers);
        assert_eq!(reply.status, 200, "{}", reply.body);
        reply
    };
    let first = send(vec![system.clone(), u1.clone()], None);
    let s = first.session_id.clone().unwrap();
    let a1 = json!({ "role": "assistant", "content": Surface::Chat.text(&first.json()) });
    let q = json!({ "role": "user", "content": "What is my project named?" });
    let second = send(
        vec![system.clone(), u1.clone(), a1.clone(), q.clone()],
        Some(&s),
    );
    assert_eq!(second.session_id.as_deref(), Some(s.as_str()));
    assert_eq!(Surface::Chat.text(&second.json()), "zebra42");
    let sent = history_sent(&agent.requests().pop().unwrap());
    let texts: Vec<&str> = sent.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(
        texts,
        [
            "Be brief.",
            u1["content"].as_str().unwrap(),
            "OK.",
            "What is my project named?"
        ]
    );
    let messages = |session: &str| -> Vec<(String, String)> {
        store
            .events("local", session)
            .iter()
            .filter(|e| e.event_type == EventType::Message)
            .map(|e| (e.role.clone().unwrap_or_default(), e.text().to_owned()))
            .collect()
    };
    let logged = messages(&s);
    assert_eq!(
        logged.len(),
        4,
        "each message once, no system message: {logged:?}"
    );
    let before = store.events("local", &s).len();

    let edited = json!({ "role": "assistant", "content": "Noted: the project is koala7." });
    let third = send(vec![system, u1, edited, q], Some(&s));
    let n = third.session_id.clone().unwrap();
    assert_ne!(n, s);
    assert_eq!(third.header("x-previous-session-id"), Some(s.as_str()));
    assert_eq!(
        messages(&n)
            .iter()
            .map(|(r, _)| r.as_str())
            .collect::<Vec<_>>(),
        ["user", "assistant", "user", "assistant"],
        "the new session holds the request as sent, then the answer"
    );
    assert_eq!(messages(&n)[1].1, "Noted: the project is koala7.");
    let first_event = &store.events("local", &n)[0];
    assert_ne!(first_event.event_type, EventType::SessionFork, "not a fork");
    assert_eq!(
        store.events("local", &s).len(),
        before,
        "the session is untouched"
    );
}

#[test]
fn opting_in_and_diverging_in_the_first_turn_sqlite() {
    opting_in_and_diverging_in_the_first_turn(StoreKind::Sqlite);
}

#[test]
fn opting_in_and_diverging_in_the_first_turn_postgres() {
    opting_in_and_diverging_in_the_first_turn(StoreKind::Postgres);
}

/// Repeats of an `Idempotency-Key`: concurrent requests with the same key and body make
/// one run, and every one of them is answered by it; the key with another body is refused
/// (422 `idempotency_key_reused`) and writes nothing.
fn idempotency_key_repeats(kind: StoreKind) {
    let Some(store) = TestStore::new(kind) else {
        return;
    };
    let agent = FakeAgent::start();
    let tether = Tether::start(&agent.url(), "openai-chat", &store.url, &[]);
    let url = format!("{}/v1/chat/completions", tether.url());
    let session = format!("idem-{}-{}", std::process::id(), kind_name(kind));
    let key = format!("key-{session}");
    let body =
        json!({ "model": "fake", "messages": [{ "role": "user", "content": "Reply with OK" }] })
            .to_string();
    let replies: Vec<Reply> = std::thread::scope(|scope| {
        let posts: Vec<_> = (0..8)
            .map(|_| {
                scope.spawn(|| {
                    post(
                        &url,
                        &body,
                        &[("idempotency-key", &key), ("x-session-id", &session)],
                    )
                })
            })
            .collect();
        posts.into_iter().map(|p| p.join().unwrap()).collect()
    });
    let ids: Vec<String> = replies
        .iter()
        .map(|r| {
            assert_eq!(r.status, 200, "{}", r.body);
            assert_eq!(Surface::Chat.text(&r.json()), "OK.");
            r.json()["id"].as_str().unwrap().to_owned()
        })
        .collect();
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
    let runs = |events: &[session_log::Event]| {
        let mut runs: Vec<String> = events
            .iter()
            .filter(|e| e.event_type == EventType::RunStatus)
            .filter_map(|e| e.run_id.clone())
            .collect();
        runs.dedup();
        runs
    };
    let before = store.events("local", &session);
    assert_eq!(runs(&before).len(), 1, "{:?}", runs(&before));

    // The same key with another body.
    let other =
        json!({ "model": "fake", "messages": [{ "role": "user", "content": "Reply with KO" }] })
            .to_string();
    let refused = post(
        &url,
        &other,
        &[("idempotency-key", &key), ("x-session-id", &session)],
    );
    assert_eq!(refused.status, 422, "{}", refused.body);
    let error = &refused.json()["error"];
    assert_eq!(error["code"], "idempotency_key_reused", "{}", refused.body);
    assert_eq!(error["type"], "invalid_request_error");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("another request"),
        "{}",
        refused.body
    );
    assert_eq!(store.events("local", &session).len(), before.len());
    // The same body again is still answered by the first run.
    let again = post(
        &url,
        &body,
        &[("idempotency-key", &key), ("x-session-id", &session)],
    );
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.json()["id"], ids[0].as_str());
    assert_eq!(again.header("x-idempotent-replay"), Some("true"));
}

/// A request that takes an `Idempotency-Key` and is then refused before its run starts
/// gives the key back: a repeat right after is handled at once as a new request, not
/// after the 5 s a repeat waits for a first request still starting its run.
fn refused_requests_release_their_idempotency_key(kind: StoreKind) {
    let Some(store) = TestStore::new(kind) else {
        return;
    };
    let agent = FakeAgent::start();
    let tether = Tether::start(&agent.url(), "openai-chat", &store.url, &[]);
    let url = format!("{}/v1/chat/completions", tether.url());
    let key = format!("refused-{}-{}", std::process::id(), kind_name(kind));
    let quick = std::time::Duration::from_millis(2500);
    let timed = |body: &str, headers: &[(&str, &str)]| {
        let started = std::time::Instant::now();
        let r = post(&url, body, headers);
        (r, started.elapsed())
    };

    // Refused for an upload that does not exist; then the corrected request, same key.
    let session = format!("{key}-upload");
    let chat = |content: Value| {
        json!({ "model": "fake", "messages": [{ "role": "user", "content": content }] }).to_string()
    };
    let missing = chat(json!([
        { "type": "text", "text": "look" },
        { "type": "image_url", "image_url": { "url": "tether-upload://file-missing" } }
    ]));
    let headers = [
        ("idempotency-key", key.as_str()),
        ("x-session-id", &session),
    ];
    let (refused, _) = timed(&missing, &headers);
    assert_eq!(refused.status, 404, "{}", refused.body);
    assert_eq!(refused.json()["error"]["code"], "upload_not_found");
    let (again, took) = timed(&missing, &headers);
    assert_eq!(again.status, 404, "{}", again.body);
    assert!(
        took < quick,
        "the repeat of a refused request waited {took:?}"
    );
    let (fixed, took) = timed(&chat(json!("Reply with OK")), &headers);
    assert_eq!(fixed.status, 200, "{}", fixed.body);
    assert!(took < quick, "the corrected request waited {took:?}");
    assert_eq!(
        fixed.header("x-idempotent-replay"),
        None,
        "a new run answers"
    );
    assert_eq!(Surface::Chat.text(&fixed.json()), "OK.");
    let sent = agent.requests();
    assert_eq!(
        sent.len(),
        1,
        "only the corrected request reached the agent"
    );
    assert_eq!(history_sent(&sent[0]).last().unwrap().1, "Reply with OK");
    let events = store.events("local", &session);
    let runs: std::collections::BTreeSet<_> =
        events.iter().filter_map(|e| e.run_id.clone()).collect();
    assert_eq!(runs.len(), 1, "one run in the log: {runs:?}");
    // The key now names that run: its repeat is answered by it.
    let (replayed, _) = timed(&chat(json!("Reply with OK")), &headers);
    assert_eq!(replayed.header("x-idempotent-replay"), Some("true"));
    assert_eq!(replayed.json()["id"], fixed.json()["id"]);

    // Refused as busy (another run goes on in the session): its repeat is refused at once.
    let (_slow, busy_session, _) = slow_chat_run(&tether, 2);
    let busy_key = format!("{key}-busy");
    let headers = [
        ("idempotency-key", busy_key.as_str()),
        ("x-session-id", &busy_session),
    ];
    let body = chat(json!("Reply with OK"));
    for attempt in 0..2 {
        let (r, took) = timed(&body, &headers);
        assert_eq!(r.status, 409, "attempt {attempt}: {}", r.body);
        assert_eq!(r.json()["error"]["code"], "conversation_busy", "{}", r.body);
        assert!(took < quick, "attempt {attempt} waited {took:?}");
    }
    let runs: std::collections::BTreeSet<_> = store
        .events("local", &busy_session)
        .iter()
        .filter_map(|e| e.run_id.clone())
        .collect();
    assert_eq!(
        runs.len(),
        1,
        "the refused requests wrote nothing: {runs:?}"
    );
    assert_eq!(
        agent.requests().len(),
        2,
        "only the slow run reached the agent"
    );
}

#[test]
fn refused_requests_release_their_idempotency_key_sqlite() {
    refused_requests_release_their_idempotency_key(StoreKind::Sqlite);
}

#[test]
fn refused_requests_release_their_idempotency_key_postgres() {
    refused_requests_release_their_idempotency_key(StoreKind::Postgres);
}

fn kind_name(kind: StoreKind) -> &'static str {
    match kind {
        StoreKind::Sqlite => "sqlite",
        StoreKind::Postgres => "postgres",
    }
}

#[test]
fn concurrent_repeats_of_an_idempotency_key_make_one_run_and_another_body_is_refused_sqlite() {
    idempotency_key_repeats(StoreKind::Sqlite);
}

#[test]
fn concurrent_repeats_of_an_idempotency_key_make_one_run_and_another_body_is_refused_postgres() {
    idempotency_key_repeats(StoreKind::Postgres);
}

/// A chat turn's system message is recorded in its run's `in_progress` metadata (what the
/// agent was told), not as history: the next turn, resending it, hands the agent one.
fn system_messages_recorded(kind: StoreKind) {
    let Some(store) = TestStore::new(kind) else {
        return;
    };
    let agent = FakeAgent::start();
    let tether = Tether::start(&agent.url(), "openai-chat", &store.url, &[]);
    let url = format!("{}/v1/chat/completions", tether.url());
    let session = format!("told-{}-{}", std::process::id(), kind_name(kind));
    let system = json!({ "role": "system", "content": "You are terse." });
    let mut messages = vec![
        system.clone(),
        json!({ "role": "user", "content": "Reply with OK" }),
    ];
    let turn = |messages: &[Value]| {
        let body = json!({ "model": "fake", "messages": messages }).to_string();
        let reply = post(&url, &body, &[("x-session-id", &session)]);
        assert_eq!(reply.status, 200, "{}", reply.body);
        reply
    };
    let first = turn(&messages);
    let run_id = first.header("x-run-id").unwrap().to_owned();
    let (status, listed) = Api::of(&tether).call(
        "ListSessionEvents",
        json!({ "SessionId": session, "Limit": 500 }),
    );
    assert_eq!(status, 200, "{listed}");
    let events = listed["Data"]["Events"].as_array().unwrap();
    let started = events
        .iter()
        .find(|e| {
            e["EventType"] == "run_status"
                && e["RunId"] == run_id.as_str()
                && e["Content"]["status"] == "in_progress"
        })
        .unwrap_or_else(|| panic!("an in_progress event: {listed}"));
    assert_eq!(
        started["Metadata"]["system"],
        json!([{ "role": "system", "content": "You are terse." }]),
        "{started}"
    );
    assert!(
        events
            .iter()
            .all(|e| e["EventType"] != "message"
                || (e["Role"] != "system" && e["Role"] != "developer")),
        "{listed}"
    );
    // The next turn resends everything, system message first.
    messages.push(json!({ "role": "assistant", "content": "OK." }));
    messages.push(json!({ "role": "user", "content": "Reply with OK" }));
    turn(&messages);
    let last = agent.requests().pop().unwrap();
    let sent = last["body"]["messages"].as_array().unwrap();
    let roles: Vec<&str> = sent.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"], "{sent:?}");
}

#[test]
fn a_runs_system_messages_are_recorded_with_its_start_not_as_history_sqlite() {
    system_messages_recorded(StoreKind::Sqlite);
}

#[test]
fn a_runs_system_messages_are_recorded_with_its_start_not_as_history_postgres() {
    system_messages_recorded(StoreKind::Postgres);
}
