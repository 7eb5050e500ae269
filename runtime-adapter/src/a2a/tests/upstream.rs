//! Requests to the agent: sends, probes, restores, cancels.

use super::*;
use chrono::{TimeZone, Utc};
use session_log::{EventType, NewEvent, RunStatus};

use crate::protocol::Protocol;
use crate::upstream::{AgentRequest, Probe, Upstream};

use super::super::A2aUpstream;

fn turn_of(method: &str, path: &str, headers: &[(&str, &str)], body: Value) -> TurnRequest {
    run_of(route(method, path, headers, &body))
}

fn earlier_run(agent_ref: &str) -> Vec<Event> {
    let new = NewEvent::new(
        "acct",
        "sess-1",
        EventType::RunStatus,
        session_log::event::run_status_content(RunStatus::Completed, None),
    )
    .in_run("run-0", "inv-0")
    .with_metadata(json!({ "agent_ref": agent_ref }));
    vec![Event::committed(
        new,
        5,
        Utc.timestamp_opt(1_796_221_000, 0).unwrap(),
    )]
}

#[test]
fn the_agent_gets_the_clients_request_in_the_session() {
    let params = json!({ "message": v10_message(json!({ "contextId": "ctx-from-client" })),
                         "configuration": { "returnImmediately": true, "historyLength": 2 } });
    let turn = turn_of("POST", "/", V1, rpc("SendMessage", params));
    let request = A2aUpstream::JSONRPC.request(&call(&turn, &[], &[]));
    let mut message = v10_message(json!({}));
    message["contextId"] = json!("sess-1");
    assert_eq!(
        request,
        AgentRequest::post(
            "/",
            json!({ "jsonrpc": "2.0", "id": "run-1", "method": "SendMessage",
            "params": { "message": message, "configuration": { "historyLength": 2 } } })
        )
        .with_header("A2A-Version", "1.0")
    );

    let turn = turn_of(
        "POST",
        "/",
        &[],
        rpc(
            "message/stream",
            json!({ "message": v03_message(json!({ "taskId": "t1", "contextId": "c" })) }),
        ),
    );
    let request = A2aUpstream::JSONRPC.request(&call(&turn, &[], &[]));
    assert_eq!(
        request.headers,
        vec![("Accept".to_owned(), "text/event-stream".to_owned())]
    );
    let body = request.body.unwrap();
    assert_eq!(body["method"], "message/stream");
    assert_eq!(body["params"]["message"]["contextId"], "sess-1");
    assert_eq!(body["params"]["message"]["taskId"], "t1");

    let turn = turn_of(
        "POST",
        "/rest/v1/message:send",
        &[],
        json!({ "request": {
        "messageId": "m", "role": "ROLE_USER", "content": [{ "text": "hi" }] }, "configuration": { "blocking": false } }),
    );
    let request = A2aUpstream::JSONRPC.request(&call(&turn, &[], &[]));
    assert_eq!(
        request,
        AgentRequest::post(
            "/rest/v1/message:send",
            json!({ "request": {
            "messageId": "m", "role": "ROLE_USER", "content": [{ "text": "hi" }], "contextId": "sess-1" },
            "configuration": {} })
        )
    );
}

#[test]
fn a_turn_from_another_surface_is_sent_as_v03_json_rpc() {
    let mut turn = TurnRequest::new(Protocol::OpenAiChat);
    turn.input = vec![Item::user_text("hello")];
    let request = A2aUpstream::JSONRPC.request(&call(&turn, &[], &[]));
    assert_eq!(
        request,
        AgentRequest::post(
            "/",
            json!({ "jsonrpc": "2.0", "id": "run-1", "method": "message/send",
            "params": { "message": { "kind": "message", "role": "user", "messageId": "run-1-input",
                "contextId": "sess-1", "parts": [{ "kind": "text", "text": "hello" }] } } })
        )
    );
}

#[test]
fn probes_ask_for_the_last_task() {
    let turn = turn_of(
        "POST",
        "/",
        V1,
        rpc(
            "SendMessage",
            json!({ "message": v10_message(json!({ "contextId": "c" })) }),
        ),
    );
    let history = [
        Item::user_text("My project is named zebra42."),
        Item::assistant_text("You said so."),
    ];
    assert_eq!(
        A2aUpstream::JSONRPC.probe(&call(&turn, &[], &[])),
        Probe::Skip
    );
    assert_eq!(
        A2aUpstream::JSONRPC.probe(&call(&turn, &history, &[])),
        Probe::Restore
    );
    let events = earlier_run("t-old");
    assert_eq!(
        A2aUpstream::JSONRPC.probe(&call(&turn, &history, &events)),
        Probe::Ask(
            AgentRequest::post(
                "/",
                json!({ "jsonrpc": "2.0", "id": "tether-probe-run-1", "method": "GetTask",
                "params": { "id": "t-old", "historyLength": 0 } })
            )
            .with_header("A2A-Version", "1.0")
        )
    );
    let turn = turn_of(
        "POST",
        "/rest/message:send",
        V1,
        json!({ "message": v10_message(json!({})) }),
    );
    assert_eq!(
        A2aUpstream::JSONRPC.probe(&call(&turn, &history, &events)),
        Probe::Ask(
            AgentRequest::get("/rest/tasks/t-old?historyLength=0")
                .with_header("A2A-Version", "1.0")
        )
    );
}

#[test]
fn forgot_means_task_not_found() {
    assert!(A2aUpstream::JSONRPC.forgot(
        404,
        br#"{"error":{"code":404,"status":"NOT_FOUND","message":"Task not found"}}"#
    ));
    assert!(A2aUpstream::JSONRPC.forgot(200, captures::V10_NOT_FOUND.as_bytes()));
    assert!(A2aUpstream::JSONRPC.forgot(200, br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32001,"data":null,"message":"Task t not found"}}"#));
    assert!(A2aUpstream::JSONRPC.forgot(200, b"data: {\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32001,\"message\":\"x\"}}\r\n\r\n"));
    assert!(!A2aUpstream::JSONRPC.forgot(200, captures::V10_SEND.as_bytes()));
    assert!(!A2aUpstream::JSONRPC.forgot(200, captures::V10_SUBSCRIBE_FINISHED.as_bytes()));
    assert!(!A2aUpstream::JSONRPC.forgot(200, crlf(captures::V03_STREAM).as_bytes()));
    assert!(!A2aUpstream::JSONRPC.forgot(500, b"oops"));
}

#[test]
fn restore_tells_the_agent_the_earlier_turns_first() {
    let message = v10_message(
        json!({ "contextId": "c", "taskId": "t-old", "parts": [{ "text": "What is my project named?" }] }),
    );
    let turn = turn_of(
        "POST",
        "/",
        V1,
        rpc("SendStreamingMessage", json!({ "message": message })),
    );
    let history = [
        Item::user_text("My project is named zebra42."),
        Item::assistant_text("You said: My project is named zebra42."),
        Item::Reasoning {
            text: "hidden".into(),
        },
    ];
    let restore = A2aUpstream::JSONRPC
        .restore(&call(&turn, &history, &[]))
        .unwrap();
    let text = "[Tether restored this conversation: the agent had lost it. Earlier turns:]\n\
                User: My project is named zebra42.\n\
                Assistant: You said: My project is named zebra42.\n\
                [End of earlier turns. Reply with OK.]";
    assert_eq!(
        restore.before,
        vec![AgentRequest::post("/", json!({ "jsonrpc": "2.0", "id": "tether-restore-run-1", "method": "SendMessage",
            "params": { "message": { "role": "ROLE_USER", "messageId": "run-1-restore", "contextId": "sess-1",
                "parts": [{ "text": text }] } } }))
        .with_header("A2A-Version", "1.0")]
    );
    // The turn itself, without the task the agent lost.
    let body = restore.request.body.unwrap();
    assert_eq!(body["method"], "SendStreamingMessage");
    assert_eq!(body["params"]["message"]["contextId"], "sess-1");
    assert!(body["params"]["message"].get("taskId").is_none());

    // In v0.3 JSON-RPC and v0.3 HTTP+JSON shapes.
    let turn = turn_of(
        "POST",
        "/",
        &[],
        rpc("message/send", json!({ "message": v03_message(json!({})) })),
    );
    let restore = A2aUpstream::JSONRPC
        .restore(&call(&turn, &history, &[]))
        .unwrap();
    let body = restore.before[0].body.clone().unwrap();
    assert_eq!(body["method"], "message/send");
    assert_eq!(
        body["params"]["message"]["parts"],
        json!([{ "kind": "text", "text": text }])
    );
    let turn = turn_of(
        "POST",
        "/rest/v1/message:stream",
        &[],
        json!({ "request": {
        "messageId": "m", "role": "ROLE_USER", "content": [{ "text": "hi" }] } }),
    );
    let restore = A2aUpstream::JSONRPC
        .restore(&call(&turn, &history, &[]))
        .unwrap();
    assert_eq!(restore.before[0].path, "/rest/v1/message:send");
    assert_eq!(
        restore.before[0].body.as_ref().unwrap()["request"]["content"],
        json!([{ "text": text }])
    );
    // Nothing to tell: just the turn.
    assert!(A2aUpstream::JSONRPC
        .restore(&call(&turn, &[], &[]))
        .unwrap()
        .before
        .is_empty());
}

#[test]
fn cancel_names_the_task_in_the_turns_protocol() {
    let id_of = |r: &AgentRequest| r.body.as_ref().unwrap()["id"].as_str().unwrap().to_owned();
    let turn = turn_of(
        "POST",
        "/",
        &[],
        rpc(
            "message/stream",
            json!({ "message": v03_message(json!({})) }),
        ),
    );
    let request = A2aUpstream::JSONRPC.cancel(&turn).unwrap()("t1");
    assert_eq!(
        request,
        AgentRequest::post(
            "/",
            json!({ "jsonrpc": "2.0", "id": id_of(&request), "method": "tasks/cancel", "params": { "id": "t1" } })
        )
    );
    let turn = turn_of(
        "POST",
        "/",
        V1,
        rpc(
            "SendStreamingMessage",
            json!({ "message": v10_message(json!({})) }),
        ),
    );
    let request = A2aUpstream::JSONRPC.cancel(&turn).unwrap()("t1");
    assert_eq!(request.body.as_ref().unwrap()["method"], "CancelTask");
    assert_eq!(
        request.headers,
        vec![("A2A-Version".to_owned(), "1.0".to_owned())]
    );
    let turn = turn_of(
        "POST",
        "/rest/message:stream",
        V1,
        json!({ "message": v10_message(json!({})) }),
    );
    assert_eq!(
        A2aUpstream::JSONRPC.cancel(&turn).unwrap()("a/b"),
        AgentRequest::post("/rest/tasks/a%2Fb:cancel", json!({})).with_header("A2A-Version", "1.0")
    );
}
