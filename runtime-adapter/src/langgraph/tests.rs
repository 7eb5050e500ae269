//! The LangGraph adapter's tests: thread ids, routes, the agent's request and answer,
//! restore, and what clients are shown.

use chrono::{TimeZone, Utc};
use serde_json::{json, Value};
use session_log::{Event, EventType, NewEvent};

use super::routes::Mode;
use super::wire::{agent_thread_id, META_ACCOUNT, META_THREAD};
use super::{LangGraphSurface, LangGraphUpstream};
use crate::item::Item;
use crate::surface::{ClientRequest, Route, RunInfo, Surface};
use crate::turn::{SessionRef, TurnRequest};
use crate::upstream::{Output, Probe, TurnCall, Upstream};

const THREAD: &str = "6b0c6f50-0000-4000-8000-000000000001";

fn request<'a>(
    method: &'a str,
    path: &'a str,
    body: &'a [u8],
    account: &'a str,
) -> ClientRequest<'a> {
    ClientRequest {
        method,
        path,
        query: None,
        headers: &[],
        body,
        account_id: account,
    }
}

fn route(method: &str, path: &str, body: Value) -> Route {
    let bytes = if body.is_null() {
        String::new()
    } else {
        body.to_string()
    };
    LangGraphSurface.route(&request(method, path, bytes.as_bytes(), "acct"))
}

fn forwarded(route: Route) -> crate::upstream::AgentRequest {
    match route {
        Route::Forward(req) => req,
        other => panic!("expected a forward, got {other:?}"),
    }
}

fn turn_of(route: Route) -> TurnRequest {
    match route {
        Route::Run(turn) => turn,
        other => panic!("expected a run, got {other:?}"),
    }
}

fn call<'a>(turn: &'a TurnRequest, history: &'a [Item], events: &'a [Event]) -> TurnCall<'a> {
    TurnCall {
        account_id: "acct",
        session_id: THREAD,
        run_id: "run-1",
        history,
        events,
        turn,
        default_model: "agent",
    }
}

fn event(seq: i64, new: NewEvent) -> Event {
    Event::committed(
        new.in_run("run-1", "inv-1"),
        seq,
        Utc.timestamp_opt(1_700_000_000, 0).unwrap(),
    )
}

fn frame_event(seq: i64, frame: Value) -> Event {
    event(
        seq,
        NewEvent::new("acct", THREAD, EventType::AgentEvent, frame),
    )
}

fn run_status(seq: i64, status: &str) -> Event {
    event(
        seq,
        NewEvent::new(
            "acct",
            THREAD,
            EventType::RunStatus,
            json!({ "status": status }),
        ),
    )
}

fn run_info(client: Value) -> RunInfo {
    RunInfo {
        run_id: "run-1".into(),
        session_id: THREAD.into(),
        model: "agent".into(),
        created_at: 1_700_000_000,
        client,
    }
}

fn agent() -> String {
    agent_thread_id("acct", THREAD)
}

// ---- thread ids ------------------------------------------------------------------------

#[test]
fn agent_thread_ids_are_uuids_per_account() {
    let a = agent_thread_id("acct", THREAD);
    assert!(uuid::Uuid::parse_str(&a).is_ok(), "{a}");
    assert_eq!(a, agent_thread_id("acct", &THREAD.to_uppercase()));
    assert_ne!(a, agent_thread_id("other", THREAD));
    assert_ne!(a, THREAD);
    // The account and the id cannot be shifted into each other.
    assert_ne!(agent_thread_id("ab", "c"), agent_thread_id("a", "bc"));
}

// ---- routes ----------------------------------------------------------------------------

#[test]
fn claims_threads_only() {
    let s = LangGraphSurface;
    for path in [
        "/threads",
        "/threads/search",
        &format!("/threads/{THREAD}/runs/stream"),
    ] {
        assert!(s.claims("POST", path), "{path}");
    }
    for path in ["/assistants/search", "/runs/stream", "/ok", "/store/items"] {
        assert!(!s.claims("POST", path), "{path}");
    }
}

#[test]
fn a_created_thread_is_the_accounts() {
    let req = forwarded(route(
        "POST",
        "/threads",
        json!({ "thread_id": THREAD, "metadata": {"k": 1} }),
    ));
    let body = req.body.unwrap();
    assert_eq!((req.method, req.path.as_str()), ("POST", "/threads"));
    assert_eq!(body["thread_id"], agent());
    assert_eq!(
        body["metadata"],
        json!({"k": 1, META_ACCOUNT: "acct", META_THREAD: THREAD})
    );
    // No id: Tether picks one (a UUID), the agent gets its account's form of it.
    let body = forwarded(route("POST", "/threads", Value::Null))
        .body
        .unwrap();
    let mine = body["metadata"][META_THREAD].as_str().unwrap();
    assert_eq!(body["thread_id"], agent_thread_id("acct", mine));
    // The answer shows the client's id and not Tether's metadata.
    let answer = json!({"thread_id": agent(), "metadata": {"k": 1, META_ACCOUNT: "acct", META_THREAD: THREAD}, "values": null});
    let shown =
        LangGraphSurface.rewrite_forwarded(&request("POST", "/threads", b"", "acct"), "", answer);
    assert_eq!(
        shown,
        json!({"thread_id": THREAD, "metadata": {"k": 1}, "values": null})
    );
}

#[test]
fn thread_requests_go_to_the_accounts_thread() {
    let path = format!("/threads/{THREAD}/state");
    let req = forwarded(route("GET", &path, Value::Null));
    assert_eq!(req.path, format!("/threads/{}/state", agent()));
    let answer = json!({"values": {}, "checkpoint": {"thread_id": agent()}, "metadata": {META_ACCOUNT: "acct"}});
    let shown = LangGraphSurface.rewrite_forwarded(&request("GET", &path, b"", "acct"), "", answer);
    assert_eq!(
        shown,
        json!({"values": {}, "checkpoint": {"thread_id": THREAD}, "metadata": {}})
    );
    // Another account naming the same id reaches its own.
    let theirs = LangGraphSurface.route(&request("GET", &path, b"", "other"));
    assert_eq!(
        forwarded(theirs).path,
        format!("/threads/{}/state", agent_thread_id("other", THREAD))
    );
}

#[test]
fn searches_see_only_the_accounts_threads() {
    let req = forwarded(route(
        "POST",
        "/threads/search",
        json!({"metadata": {"k": 1}, "ids": [THREAD], "limit": 5}),
    ));
    let body = req.body.unwrap();
    assert_eq!(body["metadata"], json!({"k": 1, META_ACCOUNT: "acct"}));
    assert_eq!(body["ids"], json!([agent()]));
    let answer =
        json!([{"thread_id": agent(), "metadata": {META_ACCOUNT: "acct", META_THREAD: THREAD}}]);
    let shown = LangGraphSurface.rewrite_forwarded(
        &request("POST", "/threads/search", b"", "acct"),
        "",
        answer,
    );
    assert_eq!(shown, json!([{"thread_id": THREAD, "metadata": {}}]));
}

#[test]
fn bad_ids_and_unoffered_operations_are_refused() {
    let Route::Reply { status, .. } = route("GET", "/threads/not-a-uuid/state", Value::Null) else {
        panic!()
    };
    assert_eq!(status, 400);
    for path in [
        "/threads/prune".to_owned(),
        format!("/threads/{THREAD}/copy"),
    ] {
        let Route::Reply { status, .. } = route("POST", &path, Value::Null) else {
            panic!()
        };
        assert_eq!(status, 501, "{path}");
    }
    let Route::Reply { status, .. } = route(
        "POST",
        &format!("/threads/{THREAD}/runs/wait"),
        json!({"input": {}}),
    ) else {
        panic!()
    };
    assert_eq!(status, 422, "a run without assistant_id");
    let deletes = |method: &str, path: &str| {
        LangGraphSurface.deletes_session(&request(method, path, b"", "acct"))
    };
    assert_eq!(
        deletes("DELETE", &format!("/threads/{THREAD}")),
        Some(THREAD.to_owned())
    );
    assert_eq!(
        deletes("DELETE", &format!("/threads/{THREAD}/runs/r1")),
        None
    );
    assert_eq!(deletes("GET", &format!("/threads/{THREAD}")), None);
}

#[test]
fn runs_are_turns_and_run_reads_come_from_the_log() {
    let body = json!({"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": "hi"}, ["human", "there"]]}, "stream_mode": "messages-tuple"});
    let turn = turn_of(route(
        "POST",
        &format!("/threads/{THREAD}/runs/stream"),
        body.clone(),
    ));
    assert_eq!(turn.session, SessionRef::Named(THREAD.into()));
    assert_eq!(
        turn.input,
        vec![Item::user_text("hi"), Item::user_text("there")]
    );
    assert!(turn.stream);
    assert_eq!(turn.extra["client"]["mode"], "stream");
    assert_eq!(turn.extra["client"]["modes"], json!(["messages-tuple"]));
    assert_eq!(turn.extra["langgraph"]["agent_thread"], agent());
    let turn = turn_of(route("POST", &format!("/threads/{THREAD}/runs"), body));
    assert_eq!(
        (turn.stream, turn.extra["client"]["mode"].as_str()),
        (false, Some("background"))
    );

    let run = format!("/threads/{THREAD}/runs/r-1");
    assert!(
        matches!(route("GET", &format!("{run}/join"), Value::Null), Route::Join { agent_ref, .. } if agent_ref == "r-1")
    );
    assert!(matches!(
        route("POST", &format!("{run}/cancel"), Value::Null),
        Route::Cancel { .. }
    ));
    assert!(matches!(route("GET", &run, Value::Null), Route::Get { .. }));
    let path = format!("{run}/stream");
    let req = ClientRequest {
        headers: &[("Last-Event-ID", "7")],
        ..request("GET", &path, b"", "acct")
    };
    assert!(matches!(
        LangGraphSurface.route(&req),
        Route::Subscribe {
            last_event_id: Some(7),
            ..
        }
    ));
}

// ---- the agent's request and answer ----------------------------------------------------

#[test]
fn every_run_goes_to_runs_stream_with_values() {
    let body = json!({"assistant_id": "agent", "input": {"messages": []}, "stream_mode": ["messages-tuple"], "if_not_exists": "create"});
    let turn = turn_of(route(
        "POST",
        &format!("/threads/{THREAD}/runs/stream"),
        body.clone(),
    ));
    let req = LangGraphUpstream.request(&call(&turn, &[], &[]));
    assert_eq!(req.path, format!("/threads/{}/runs/stream", agent()));
    let sent = req.body.unwrap();
    assert_eq!(sent["stream_mode"], json!(["messages-tuple", "values"]));
    assert_eq!(sent["if_not_exists"], "create");
    // A thread with history is restored, never created empty.
    let history = [Item::user_text("a"), Item::assistant_text("b")];
    let sent = LangGraphUpstream
        .request(&call(&turn, &history, &[]))
        .body
        .unwrap();
    assert!(sent.get("if_not_exists").is_none(), "{sent}");

    let wait = turn_of(route("POST", &format!("/threads/{THREAD}/runs/wait"), body));
    let sent = LangGraphUpstream
        .request(&call(&wait, &[], &[]))
        .body
        .unwrap();
    assert_eq!(sent["stream_mode"], json!(["values"]));

    // Another surface's turn: its text as a user message, the model as the assistant.
    let mut other = TurnRequest::new(crate::protocol::Protocol::OpenAiChat);
    other.input = vec![Item::user_text("hello")];
    let sent = LangGraphUpstream
        .request(&call(&other, &[], &[]))
        .body
        .unwrap();
    assert_eq!(sent["assistant_id"], "agent");
    assert_eq!(
        sent["input"],
        json!({"messages": [{"role": "user", "content": "hello"}]})
    );
    assert_eq!(sent["stream_mode"], json!(["values", "messages-tuple"]));
}

const STREAM: &str = "event: metadata\r\ndata: {\"run_id\":\"r-1\",\"attempt\":1}\r\n\r\n\
event: values\r\ndata: {\"messages\":[{\"type\":\"human\",\"content\":\"hi\",\"id\":\"m1\"}]}\r\n\r\n\
event: messages\r\ndata: [{\"type\":\"AIMessageChunk\",\"content\":\"He\"},{\"graph_id\":\"agent\",\"thread_id\":\"AGENT\"}]\r\n\r\n\
event: messages\r\ndata: [{\"type\":\"AIMessageChunk\",\"content\":\"llo\"},{\"graph_id\":\"agent\"}]\r\n\r\n\
event: values\r\ndata: {\"messages\":[{\"type\":\"human\",\"content\":\"hi\",\"id\":\"m1\"},{\"type\":\"ai\",\"content\":\"Hello\",\"id\":\"m2\",\"tool_calls\":[{\"id\":\"c1\",\"name\":\"f\",\"args\":{\"x\":1}}]}]}\r\n\r\n";

fn parse(body: &str, turn: &TurnRequest) -> Vec<Output> {
    let mut parser =
        LangGraphUpstream.parser(&call(turn, &[], &[]), "text/event-stream; charset=utf-8");
    let body = body.replace("AGENT", &agent());
    let mut out = Vec::new();
    for piece in body.as_bytes().chunks(7) {
        out.extend(parser.feed(piece));
    }
    out.extend(parser.finish());
    out
}

#[test]
fn the_stream_is_recorded_and_its_new_messages_are_the_transcript() {
    let body = json!({"assistant_id": "agent", "input": {"messages": []}, "stream_mode": "messages-tuple"});
    let turn = turn_of(route(
        "POST",
        &format!("/threads/{THREAD}/runs/stream"),
        body,
    ));
    let out = parse(STREAM, &turn);
    let frames: Vec<&Value> = out
        .iter()
        .filter_map(|o| match o {
            Output::Frame(f) => Some(f),
            _ => None,
        })
        .collect();
    assert_eq!(frames.len(), 5);
    assert_eq!(
        frames[0],
        &json!({"event": "metadata", "data": {"run_id": "r-1", "attempt": 1}})
    );
    // `values` was Tether's own addition: recorded, marked not to be shown.
    assert_eq!(frames[1]["added"], true);
    assert!(frames[2].get("added").is_none());
    // The agent's thread id is the client's in what is recorded.
    assert_eq!(frames[2]["data"][1]["thread_id"], THREAD);
    assert!(out.contains(&Output::AgentRef("r-1".into())));
    let deltas: String = out
        .iter()
        .filter_map(|o| match o {
            Output::TextDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, "Hello");
    let items: Vec<&Item> = out
        .iter()
        .filter_map(|o| match o {
            Output::ItemWith(i, _) => Some(i),
            _ => None,
        })
        .collect();
    assert_eq!(
        items,
        vec![
            &Item::assistant_text("Hello"),
            &Item::ToolCall {
                call_id: "c1".into(),
                name: "f".into(),
                arguments: r#"{"x":1}"#.into()
            }
        ]
    );
    let meta = out
        .iter()
        .find_map(|o| match o {
            Output::ItemWith(_, m) => Some(m),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        meta["langgraph"],
        json!({"message_id": "m2", "graph_id": "agent"})
    );
    assert_eq!(out.last(), Some(&Output::Done { usage: None }));
}

#[test]
fn errors_and_refusals_end_the_run_failed() {
    let turn = turn_of(route(
        "POST",
        &format!("/threads/{THREAD}/runs/wait"),
        json!({"assistant_id": "agent"}),
    ));
    let out = parse("event: metadata\ndata: {\"run_id\":\"r\"}\n\nevent: error\ndata: {\"error\":\"ValueError\",\"message\":\"boom\"}\n\n", &turn);
    assert!(out.contains(&Output::Error {
        code: "langgraph_error".into(),
        message: "boom".into()
    }));
    assert!(!out.iter().any(|o| matches!(o, Output::Done { .. })));

    let mut parser = LangGraphUpstream.parser(&call(&turn, &[], &[]), "application/json");
    parser.feed(br#"{"detail":"Thread or assistant not found."}"#);
    let out = parser.finish();
    assert_eq!(
        out,
        vec![Output::Error {
            code: "langgraph_not_found".into(),
            message: "Thread or assistant not found.".into()
        }]
    );
}

// ---- restore ---------------------------------------------------------------------------

#[test]
fn a_forgotten_thread_is_created_again_with_its_messages() {
    let turn = turn_of(route(
        "POST",
        &format!("/threads/{THREAD}/runs/wait"),
        json!({"assistant_id": "agent", "input": {"messages": [["user", "q"]]}}),
    ));
    assert_eq!(LangGraphUpstream.probe(&call(&turn, &[], &[])), Probe::Skip);
    let history = [
        Item::user_text("My project is named zebra42."),
        Item::assistant_text("OK."),
        Item::ToolCall {
            call_id: "c1".into(),
            name: "f".into(),
            arguments: r#"{"x":1}"#.into(),
        },
        Item::ToolResult {
            call_id: "c1".into(),
            output: "42".into(),
        },
    ];
    let Probe::Ask(probe) = LangGraphUpstream.probe(&call(&turn, &history, &[])) else {
        panic!()
    };
    assert_eq!(
        (probe.method, probe.path.as_str()),
        ("GET", format!("/threads/{}", agent()).as_str())
    );

    let up = LangGraphUpstream;
    let gone = format!(r#"{{"detail":"Thread with ID {} not found"}}"#, agent());
    assert!(up.forgot(404, gone.as_bytes()));
    // A run's own 404 does not say whether the thread or the assistant is missing.
    assert!(!up.forgot(404, br#"{"detail":"Thread or assistant not found."}"#));
    assert!(!up.forgot(200, gone.as_bytes()));

    let plan = up.restore(&call(&turn, &history, &[])).unwrap();
    assert_eq!(plan.before.len(), 2);
    assert_eq!(plan.before[0].path, "/threads");
    assert_eq!(
        plan.before[0].body,
        Some(json!({"thread_id": agent(), "if_exists": "raise",
                    "metadata": {META_ACCOUNT: "acct", META_THREAD: THREAD, "graph_id": "agent"}}))
    );
    assert_eq!(plan.before[1].path, format!("/threads/{}/state", agent()));
    assert_eq!(
        plan.before[1].body,
        Some(json!({"values": {"messages": [
            {"type": "human", "content": "My project is named zebra42."},
            {"type": "ai", "content": "OK.", "tool_calls": [{"id": "c1", "name": "f", "args": {"x": 1}, "type": "tool_call"}]},
            {"type": "tool", "tool_call_id": "c1", "content": "42"}
        ]}}))
    );
    assert_eq!(plan.request, up.request(&call(&turn, &history, &[])));

    // An assistant named by its UUID: the graph an earlier run showed.
    let by_id = turn_of(route(
        "POST",
        &format!("/threads/{THREAD}/runs/wait"),
        json!({"assistant_id": "fe096781-5601-53d2-b2f6-0d3403f7e9ca"}),
    ));
    let seen = [event(
        3,
        Item::assistant_text("OK.")
            .to_event("acct", THREAD)
            .with_metadata(json!({"langgraph": {"graph_id": "agent"}})),
    )];
    let plan = up.restore(&call(&by_id, &history, &seen)).unwrap();
    assert_eq!(
        plan.before[0].body.as_ref().unwrap()["metadata"]["graph_id"],
        "agent"
    );
}

// ---- what clients are shown ------------------------------------------------------------

fn run_events(mode: Mode) -> (RunInfo, Vec<Event>) {
    let info = run_info(json!({"mode": mode.as_str()}));
    let events = vec![
        run_status(1, "in_progress"),
        frame_event(2, json!({"event": "metadata", "data": {"run_id": "r-1"}})),
        frame_event(
            3,
            json!({"event": "values", "data": {"messages": []}, "added": true}),
        ),
        frame_event(
            4,
            json!({"event": "messages", "data": [{"content": "OK."}, {}]}),
        ),
        frame_event(
            5,
            json!({"event": "values", "data": {"messages": [{"type": "ai", "content": "OK."}]}, "added": true}),
        ),
        run_status(6, "completed"),
    ];
    (info, events)
}

#[test]
fn streams_show_the_clients_modes_with_frame_numbers() {
    let (info, events) = run_events(Mode::Stream);
    let mut renderer = LangGraphSurface.stream_renderer(&info);
    let frames: Vec<_> = events.iter().flat_map(|e| renderer.render(e)).collect();
    let shown: Vec<(Option<&str>, Option<&str>)> = frames
        .iter()
        .map(|f| (f.event.as_deref(), f.id.as_deref()))
        .collect();
    assert_eq!(
        shown,
        vec![(Some("metadata"), Some("0")), (Some("messages"), Some("1"))]
    );

    // A failed run says so in an `error` event.
    let mut renderer = LangGraphSurface.stream_renderer(&info);
    let failed = [
        run_status(1, "in_progress"),
        event(
            2,
            NewEvent::new(
                "acct",
                THREAD,
                EventType::Error,
                json!({"code": "agent_unreachable", "message": "down"}),
            ),
        ),
        run_status(3, "failed"),
    ];
    let frames: Vec<_> = failed.iter().flat_map(|e| renderer.render(e)).collect();
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0].event.as_deref(), Some("error"));
    assert_eq!(
        frames[0].data,
        r#"{"error":"agent_unreachable","message":"down"}"#
    );
}

#[test]
fn waits_get_the_final_values_and_background_runs_the_run() {
    let (info, events) = run_events(Mode::Wait);
    assert_eq!(
        LangGraphSurface.final_response(&info, &events),
        (200, json!({"messages": [{"type": "ai", "content": "OK."}]}))
    );
    assert_eq!(LangGraphSurface.early_response(&info, &events), None);

    let (info, events) = run_events(Mode::Background);
    assert_eq!(
        LangGraphSurface.early_response(&info, &events[..1]),
        None,
        "not before the agent named the run"
    );
    let (status, run) = LangGraphSurface
        .early_response(&info, &events[..2])
        .unwrap();
    assert_eq!(
        (status, &run["run_id"], &run["thread_id"], &run["status"]),
        (200, &json!("r-1"), &json!(THREAD), &json!("running"))
    );
    assert_eq!(
        LangGraphSurface.snapshot(&run_info(json!({"op": "get"})), &events)["status"],
        "success"
    );
    assert_eq!(
        LangGraphSurface.snapshot(&run_info(json!({"op": "join"})), &events)["messages"][0]
            ["content"],
        "OK."
    );

    let refused = [
        run_status(1, "in_progress"),
        event(
            2,
            NewEvent::new(
                "acct",
                THREAD,
                EventType::Error,
                json!({"code": "langgraph_not_found", "message": "Thread or assistant not found."}),
            ),
        ),
        run_status(3, "failed"),
    ];
    assert_eq!(
        LangGraphSurface.final_response(&info, &refused),
        (404, json!({"detail": "Thread or assistant not found."}))
    );
}
