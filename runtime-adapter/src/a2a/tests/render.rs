//! The log replayed to the client: streams, send answers, task snapshots.

use super::*;
use chrono::{SecondsFormat, TimeZone, Utc};
use session_log::{EventType, NewEvent, RunStatus};

use crate::sse::SseFrame;
use crate::surface::RunInfo;

const RUN: &str = "run_a2a";

struct Log {
    seq: i64,
    events: Vec<Event>,
}

impl Log {
    fn new() -> Self {
        let mut log = Log {
            seq: 10,
            events: Vec::new(),
        };
        log.push(
            Item::user_text("hi")
                .to_event("acct", "s1")
                .in_run(RUN, "inv1"),
        );
        log.status(RunStatus::InProgress);
        log
    }

    fn push(&mut self, new: NewEvent) -> &mut Self {
        self.seq += 1;
        let at = Utc.timestamp_opt(1_796_221_000 + self.seq, 0).unwrap();
        self.events.push(Event::committed(new, self.seq, at));
        self
    }

    fn run(&mut self, event_type: EventType, content: Value) -> &mut Self {
        self.push(NewEvent::new("acct", "s1", event_type, content).in_run(RUN, "inv1"))
    }

    fn frames(&mut self, frames: &[Value]) -> &mut Self {
        for frame in frames {
            self.run(EventType::AgentEvent, frame.clone());
        }
        self
    }

    fn status(&mut self, status: RunStatus) -> &mut Self {
        self.run(
            EventType::RunStatus,
            session_log::event::run_status_content(status, None),
        )
    }

    fn error(&mut self, code: &str, message: &str) -> &mut Self {
        self.run(
            EventType::Error,
            json!({ "code": code, "message": message }),
        )
    }

    fn render(&self, client: Value) -> Vec<SseFrame> {
        let mut r = A2aSurface::AUTO.stream_renderer(&run_info(client));
        let mut frames: Vec<SseFrame> = self.events.iter().flat_map(|e| r.render(e)).collect();
        frames.extend(r.end());
        frames
    }

    fn last_time(&self) -> String {
        self.events
            .last()
            .unwrap()
            .created_at
            .to_rfc3339_opts(SecondsFormat::Micros, true)
    }
}

fn run_info(client: Value) -> RunInfo {
    RunInfo {
        run_id: RUN.into(),
        session_id: "s1".into(),
        model: String::new(),
        created_at: 1_796_221_000,
        client,
    }
}

fn client(transport: &str, version: &str, method: &str, id: Value) -> Value {
    json!({ "transport": transport, "version": version, "method": method, "id": id })
}

fn data(frame: &SseFrame) -> Value {
    json_of(&frame.data)
}

#[test]
fn renders_each_frame_as_a_json_rpc_response_numbered_from_0() {
    let results = stream_results(captures::V03_STREAM);
    let mut log = Log::new();
    log.frames(&results).status(RunStatus::Completed);
    let frames = log.render(client("jsonrpc", "0.3", "message/stream", json!("c-1")));
    assert_eq!(frames.len(), 10);
    for (i, (frame, result)) in frames.iter().zip(&results).enumerate() {
        assert_eq!(frame.id, Some(i.to_string()));
        assert_eq!(frame.event, None);
        assert_eq!(
            data(frame),
            json!({ "jsonrpc": "2.0", "id": "c-1", "result": result })
        );
    }
    // Byte for byte what the agent sent inside the envelope.
    assert!(frames[0].data.contains(&results[0].to_string()));
}

#[test]
fn renders_bare_events_over_http_json_and_converts_for_other_dialects() {
    let results = stream_results(captures::V10_STREAM);
    let mut log = Log::new();
    log.frames(&results).status(RunStatus::Completed);
    let rest = log.render(client("rest", "1.0", "subscribe", Value::Null));
    assert_eq!(rest.iter().map(data).collect::<Vec<_>>(), results);

    let v03 = log.render(client("jsonrpc", "0.3", "tasks/resubscribe", json!(5)));
    assert_eq!(v03.len(), 10);
    let first = &data(&v03[0])["result"];
    assert_eq!(first["kind"], "task");
    assert_eq!(first["status"]["state"], "submitted");
    assert_eq!(first["history"][0]["role"], "user");
    assert_eq!(first["history"][0]["parts"][0]["kind"], "text");
    let last = &data(&v03[9])["result"];
    assert_eq!(last["kind"], "status-update");
    assert_eq!(last["final"], true);
    assert_eq!(last["status"]["state"], "completed");
    assert_eq!(last["status"]["message"]["role"], "agent");
}

#[test]
fn a_run_tether_cancelled_ends_with_a_canceled_status() {
    let results = stream_results(captures::V03_CANCELED_STREAM);
    let mut log = Log::new();
    log.frames(&results[..5]).status(RunStatus::Cancelled);
    let at = log.last_time();
    let frames = log.render(client("jsonrpc", "0.3", "message/stream", json!("c-1")));
    assert_eq!(frames.len(), 6);
    assert_eq!(frames[5].id.as_deref(), Some("5"));
    assert_eq!(
        data(&frames[5]),
        json!({ "jsonrpc": "2.0", "id": "c-1", "result": {
            "kind": "status-update",
            "taskId": "6b1002dc-fd50-45e7-92ea-ee1d6a99ef3c",
            "contextId": "44205b86-0901-4d69-a32d-21ff59ab2c96",
            "status": { "state": "canceled", "timestamp": at },
            "final": true,
        }})
    );
    let frames = log.render(client("jsonrpc", "1.0", "SendStreamingMessage", json!(2)));
    assert_eq!(
        data(&frames[5])["result"],
        json!({ "statusUpdate": {
            "taskId": "6b1002dc-fd50-45e7-92ea-ee1d6a99ef3c",
            "contextId": "44205b86-0901-4d69-a32d-21ff59ab2c96",
            "status": { "state": "TASK_STATE_CANCELED", "timestamp": at },
        }})
    );
}

#[test]
fn a_run_that_died_ends_with_a_failed_status() {
    let results = stream_results(captures::V10_STREAM);
    let mut log = Log::new();
    log.frames(&results[..4])
        .error("agent_connection_lost", "connection reset")
        .status(RunStatus::Failed);
    let frames = log.render(client("jsonrpc", "1.0", "SendStreamingMessage", json!(2)));
    assert_eq!(frames.len(), 5);
    let status = &data(&frames[4])["result"]["statusUpdate"]["status"];
    assert_eq!(status["state"], "TASK_STATE_FAILED");
    assert_eq!(
        status["message"]["parts"],
        json!([{ "text": "connection reset" }])
    );
    assert_eq!(status["message"]["role"], "ROLE_AGENT");
}

#[test]
fn the_agents_own_end_is_not_repeated() {
    let mut log = Log::new();
    log.frames(&stream_results(captures::V03_CANCELED_STREAM))
        .error("agent_task_canceled", "canceled")
        .status(RunStatus::Failed);
    assert_eq!(
        log.render(client("jsonrpc", "0.3", "message/stream", json!(1)))
            .len(),
        6
    );
}

#[test]
fn a_run_without_a_task_ends_with_a_json_rpc_error() {
    let mut log = Log::new();
    log.error("a2a_error_-32001", "Task t9 not found")
        .status(RunStatus::Failed);
    let frames = log.render(client("jsonrpc", "1.0", "SendStreamingMessage", json!(3)));
    assert_eq!(frames.len(), 1);
    assert_eq!(
        data(&frames[0]),
        json!({ "jsonrpc": "2.0", "id": 3, "error": { "code": -32001, "message": "Task t9 not found" } })
    );
    let mut log = Log::new();
    log.error("agent_error", "the agent answered HTTP 500")
        .status(RunStatus::Failed);
    let frames = log.render(client("rest", "1.0", "message:stream", Value::Null));
    assert_eq!(data(&frames[0])["error"]["code"], 500);
}

#[test]
fn other_runs_are_not_rendered() {
    let mut log = Log::new();
    log.push(
        NewEvent::new(
            "acct",
            "s1",
            EventType::AgentEvent,
            stream_results(captures::V10_STREAM)[0].clone(),
        )
        .in_run("run_other", "i9"),
    );
    assert!(log
        .render(client("jsonrpc", "1.0", "SendStreamingMessage", json!(1)))
        .is_empty());
}

#[test]
fn the_folded_task_is_what_the_agent_itself_answers_to_a_get() {
    // a2a_22 folded == a2a_24 (v0.3), a2a_28 folded == a2a_30 (v1.0).
    for (stream, get, method) in [
        (
            captures::V03_CANCELED_STREAM,
            captures::V03_GET_AFTER_CANCEL,
            "tasks/get",
        ),
        (
            captures::V10_CANCELED_STREAM,
            captures::V10_GET_AFTER_CANCEL,
            "GetTask",
        ),
    ] {
        let expected = json_of(get);
        let version = if method == "GetTask" { "1.0" } else { "0.3" };
        let mut log = Log::new();
        log.frames(&stream_results(stream))
            .error("agent_task_canceled", "canceled")
            .status(RunStatus::Failed);
        let run = run_info(client("jsonrpc", version, method, expected["id"].clone()));
        assert_eq!(
            A2aSurface::AUTO.snapshot(&run, &log.events),
            expected,
            "{method}"
        );
    }
}

#[test]
fn a_non_streaming_send_is_answered_as_the_agent_answered() {
    for (body, version, method) in [
        (captures::V10_SEND, "1.0", "SendMessage"),
        (captures::V03_SEND, "0.3", "message/send"),
    ] {
        let expected = json_of(body);
        let mut log = Log::new();
        log.frames(&[expected["result"].clone()])
            .status(RunStatus::Completed);
        let run = run_info(client("jsonrpc", version, method, expected["id"].clone()));
        assert_eq!(
            A2aSurface::AUTO.final_response(&run, &log.events),
            (200, expected)
        );
    }
    // A streamed run answered to a non-streaming HTTP+JSON client.
    let mut log = Log::new();
    log.frames(&stream_results(captures::V10_STREAM))
        .status(RunStatus::Completed);
    let body = A2aSurface::AUTO.final_body(
        &run_info(client("rest", "1.0", "message:send", Value::Null)),
        &log.events,
    );
    let task = &body["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(
        task["artifacts"],
        json!([{ "artifactId": "answer", "name": "answer", "parts": [
            { "text": "You " }, { "text": "said: " }, { "text": "My " }, { "text": "project " },
            { "text": "is " }, { "text": "named " }, { "text": "zebra42." }] }])
    );
}

#[test]
fn failures_answer_in_the_clients_protocol() {
    // A task that failed is still a result.
    let mut log = Log::new();
    log.frames(&stream_results(captures::V10_FAILED_STREAM))
        .error("agent_task_failed", "LLM error")
        .status(RunStatus::Failed);
    let (status, body) = A2aSurface::AUTO.final_response(
        &run_info(client("jsonrpc", "1.0", "SendMessage", json!(1))),
        &log.events,
    );
    assert_eq!(status, 200);
    assert_eq!(
        body["result"]["task"]["status"]["state"],
        "TASK_STATE_FAILED"
    );

    // No task at all: the agent's error, in a 200 for JSON-RPC.
    let mut log = Log::new();
    log.error("a2a_error_-32001", "Task t1 not found")
        .status(RunStatus::Failed);
    assert_eq!(
        A2aSurface::AUTO.final_response(
            &run_info(client("jsonrpc", "0.3", "message/send", json!("r"))),
            &log.events
        ),
        (
            200,
            json!({ "jsonrpc": "2.0", "id": "r", "error": { "code": -32001, "message": "Task t1 not found" } })
        )
    );
    let (status, body) = A2aSurface::AUTO.final_response(
        &run_info(client("rest", "1.0", "message:send", Value::Null)),
        &log.events,
    );
    assert_eq!(
        (status, body["error"]["status"].clone()),
        (404, json!("NOT_FOUND"))
    );
    let mut log = Log::new();
    log.error("agent_connection_lost", "reset")
        .status(RunStatus::Interrupted);
    let (_, body) = A2aSurface::AUTO.final_response(
        &run_info(client("jsonrpc", "1.0", "SendMessage", json!(1))),
        &log.events,
    );
    assert_eq!(body["error"], json!({ "code": -32603, "message": "reset" }));
}

#[test]
fn snapshots_after_a_cancel_and_with_history_length() {
    let results = stream_results(captures::V10_CANCELED_STREAM);
    let mut log = Log::new();
    log.frames(&results[..5]);
    // Still running: the state so far.
    let run = run_info(client("jsonrpc", "1.0", "GetTask", json!(1)));
    let snap = A2aSurface::AUTO.snapshot(&run, &log.events);
    assert_eq!(snap["result"]["status"]["state"], "TASK_STATE_WORKING");
    assert_eq!(
        snap["result"]["artifacts"][0]["parts"],
        json!([{ "text": "w1 " }, { "text": "w2 " }, { "text": "w3 " }])
    );
    // Tether cancelled it before the agent said so.
    log.status(RunStatus::Cancelled);
    let at = log.last_time();
    let run = run_info(client("jsonrpc", "1.0", "CancelTask", json!(1)));
    let snap = A2aSurface::AUTO.snapshot(&run, &log.events);
    assert_eq!(
        snap["result"]["status"],
        json!({ "state": "TASK_STATE_CANCELED", "timestamp": at })
    );
    // historyLength 0 drops the history; 1 keeps the last message.
    let mut c = client("jsonrpc", "0.3", "tasks/get", json!(1));
    c["historyLength"] = json!(0);
    let snap = A2aSurface::AUTO.snapshot(&run_info(c.clone()), &log.events);
    assert!(snap["result"].get("history").is_none());
    assert_eq!(snap["result"]["status"]["state"], "canceled");
    c["historyLength"] = json!(1);
    let snap = A2aSurface::AUTO.snapshot(&run_info(c), &log.events);
    assert_eq!(snap["result"]["history"].as_array().map(Vec::len), Some(1));
}

#[test]
fn cancelling_a_finished_task_is_refused_as_the_sdk_refuses_it() {
    let mut log = Log::new();
    log.frames(&stream_results(captures::V03_STREAM))
        .status(RunStatus::Completed);
    let run = run_info(client("jsonrpc", "0.3", "tasks/cancel", json!("x")));
    assert_eq!(
        A2aSurface::AUTO.snapshot(&run, &log.events),
        json!({ "jsonrpc": "2.0", "id": "x", "error": { "code": -32002, "message": "Task cannot be canceled" } })
    );
    let mut log = Log::new();
    log.status(RunStatus::Failed);
    let run = run_info(client("jsonrpc", "0.3", "tasks/get", json!("x")));
    assert_eq!(
        A2aSurface::AUTO.snapshot(&run, &log.events)["error"]["code"],
        -32001
    );
}

#[test]
fn a_resumed_run_answers_with_its_last_invocation() {
    let mut log = Log::new();
    log.frames(&stream_results(captures::V03_CANCELED_STREAM)[..3])
        .status(RunStatus::Interrupted);
    log.status(RunStatus::InProgress)
        .frames(&stream_results(captures::V03_STREAM))
        .status(RunStatus::Completed);
    let run = run_info(client("jsonrpc", "0.3", "message/send", json!(1)));
    let body = A2aSurface::AUTO.final_body(&run, &log.events);
    assert_eq!(body["result"]["id"], "fec33ee8-d85e-4039-b755-a15bd9aa5299");
    assert_eq!(body["result"]["status"]["state"], "completed");
}
