//! Committed events rendered as `chat.completion.chunk` frames and the `chat.completion` body.

use super::*;
use crate::cursor::frame_number;

struct Log {
    seq: i64,
    events: Vec<Event>,
}

impl Log {
    fn new() -> Self {
        Log {
            seq: 10,
            events: Vec::new(),
        }
    }

    fn push(&mut self, new: NewEvent) -> &mut Self {
        self.seq += 1;
        let created = Utc.timestamp_opt(1_700_000_000, 0).unwrap();
        self.events.push(Event::committed(new, self.seq, created));
        self
    }

    fn run(&mut self, event_type: EventType, role: Option<&str>, content: Value) -> &mut Self {
        let mut new = NewEvent::new("acct", "s1", event_type, content).in_run(RUN, "inv1");
        new.role = role.map(str::to_owned);
        self.push(new)
    }

    fn item(&mut self, item: Item) -> &mut Self {
        self.push(item.to_event("acct", "s1").in_run(RUN, "inv1"))
    }

    fn status(&mut self, status: RunStatus) -> &mut Self {
        self.run(
            EventType::RunStatus,
            None,
            session_log::event::run_status_content(status, None),
        )
    }

    fn status_with_usage(&mut self, status: RunStatus, usage: Value) -> &mut Self {
        self.push(
            NewEvent::new(
                "acct",
                "s1",
                EventType::RunStatus,
                session_log::event::run_status_content(status, None),
            )
            .in_run(RUN, "inv1")
            .with_metadata(json!({ "usage": usage })),
        )
    }

    fn delta(&mut self, text: &str) -> &mut Self {
        self.run(EventType::TextDelta, None, json!({ "delta": text }))
    }

    /// (id, data as JSON or the raw string) of every frame, `end()` included.
    fn render(&self) -> Vec<(Option<String>, Value)> {
        let mut r = ChatSurface.stream_renderer(&run_info());
        let mut frames: Vec<SseFrame> = self.events.iter().flat_map(|e| r.render(e)).collect();
        frames.extend(r.end());
        frames
            .into_iter()
            .map(|f| {
                assert_eq!(f.event, None, "chat frames carry no event: line");
                let data = serde_json::from_str(&f.data).unwrap_or(Value::String(f.data));
                // The frame's number; `frame_ids_*` checks the rest of the id.
                let id =
                    f.id.map(|id| frame_number(&id).expect("a frame id").to_string());
                (id, data)
            })
            .collect()
    }
}

fn chunk(delta: Value, finish_reason: Value) -> Value {
    json!({
        "id": CHAT_ID,
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "gpt-test",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": null}],
    })
}

/// The id of a stream's `n`-th frame (frames are numbered from 0, whatever their events'
/// seqs: every frame's id is distinct, and a replay numbers them alike).
fn id(n: i64) -> Option<String> {
    Some(n.to_string())
}

#[test]
fn streams_text_as_the_sdk_expects() {
    let mut log = Log::new();
    log.push(Item::user_text("hi").to_event("acct", "s1")) // 11, no run id
        .status(RunStatus::InProgress) // 12
        .run(EventType::ReasoningDelta, None, json!({"delta": "think"})) // 13
        .item(Item::Reasoning {
            text: "think".into(),
        }) // 14
        .delta("Hel") // 15
        .delta("lo") // 16
        .item(Item::assistant_text("Hello")) // 17
        .push(NewEvent::new(
            "acct",
            "s1",
            EventType::HttpRequest,
            json!({}),
        )) // 18
        .status_with_usage(
            RunStatus::Completed,
            json!({"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}),
        ); // 19
    let mut finish = chunk(json!({}), json!("stop"));
    finish["usage"] = json!({"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7});
    assert_eq!(
        log.render(),
        vec![
            (
                id(0),
                chunk(json!({"role": "assistant", "content": ""}), Value::Null)
            ),
            (
                id(1),
                chunk(json!({"reasoning_content": "think"}), Value::Null)
            ),
            (id(2), chunk(json!({"content": "Hel"}), Value::Null)),
            (id(3), chunk(json!({"content": "lo"}), Value::Null)),
            (id(4), finish),
            (id(5), json!("[DONE]")),
        ]
    );
}

#[test]
fn wire_form_is_data_and_id_lines_only() {
    let mut r = ChatSurface.stream_renderer(&run_info());
    let mut log = Log::new();
    log.status(RunStatus::InProgress);
    let mut out = String::new();
    for f in r.render(&log.events[0]) {
        f.encode(&mut out);
    }
    let first = format!("id: v1.{}.0\ndata: {{", log.events[0].seq);
    assert!(out.starts_with(&first), "{out}");
    assert!(out.ends_with("}\n\n"));
    assert_eq!(out.lines().count(), 3);
}

#[test]
fn a_non_streamed_answer_is_sent_whole_and_tool_calls_are_indexed() {
    let mut log = Log::new();
    log.status(RunStatus::InProgress) // 11
        .item(Item::assistant_text("Let me check.")) // 12: no deltas before it
        .item(Item::ToolCall {
            call_id: "call_a".into(),
            name: "f".into(),
            arguments: "{\"x\":1}".into(),
        }) // 13
        .item(Item::ToolCall {
            call_id: "call_b".into(),
            name: "g".into(),
            arguments: "{}".into(),
        }) // 14
        .status_with_usage(
            RunStatus::Completed,
            json!({"input_tokens": 3, "output_tokens": 4, "total_tokens": 7,
                   "output_tokens_details": {"reasoning_tokens": 1}}),
        ); // 15
    let mut finish = chunk(json!({}), json!("tool_calls"));
    finish["usage"] = json!({"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7,
                             "completion_tokens_details": {"reasoning_tokens": 1}});
    assert_eq!(
        log.render(),
        vec![
            (
                id(0),
                chunk(json!({"role": "assistant", "content": ""}), Value::Null)
            ),
            (
                id(1),
                chunk(json!({"content": "Let me check."}), Value::Null)
            ),
            (
                id(2),
                chunk(
                    json!({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                                            "function": {"name": "f", "arguments": "{\"x\":1}"}}]}),
                    Value::Null
                )
            ),
            (
                id(3),
                chunk(
                    json!({"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                                            "function": {"name": "g", "arguments": "{}"}}]}),
                    Value::Null
                )
            ),
            (id(4), finish),
            (id(5), json!("[DONE]")),
        ]
    );
}

#[test]
fn a_failed_run_ends_with_an_error_frame_and_no_done() {
    let mut log = Log::new();
    log.status(RunStatus::InProgress) // 11
        .delta("par") // 12
        .run(
            EventType::Error,
            None,
            json!({"code": "agent_unreachable", "message": "the agent closed the stream"}),
        ) // 13
        .status(RunStatus::Failed); // 14
    let frames = log.render();
    assert_eq!(frames.len(), 3);
    assert_eq!(
        frames[2],
        (
            id(2),
            json!({"error": {"message": "the agent closed the stream", "type": "server_error",
                             "param": null, "code": "failed"}})
        )
    );

    let mut log = Log::new();
    log.status(RunStatus::InProgress).run(
        EventType::RunStatus,
        None,
        session_log::event::run_status_content(
            RunStatus::Cancelled,
            Some("cancelled by the client"),
        ),
    );
    let frames = log.render();
    assert_eq!(
        frames.last().unwrap(),
        &(
            id(1),
            json!({"error": {"message": "cancelled by the client", "type": "cancelled",
                             "param": null, "code": "cancelled"}})
        )
    );

    let mut log = Log::new();
    log.status(RunStatus::InProgress)
        .status(RunStatus::Interrupted);
    let frames = log.render();
    assert_eq!(frames.len(), 2);
    assert_eq!(frames[1].1["error"]["code"], "interrupted");
    assert_eq!(frames[1].1["error"]["type"], "server_error");
}

#[test]
fn the_turns_own_input_is_not_rendered() {
    // A client that echoes the assistant's tool calls back with their results: all of
    // it is recorded in this run, before `in_progress`.
    let mut log = Log::new();
    log.item(Item::assistant_text("Checking.")) // 11
        .item(call("call_a", "f", "{}")) // 12
        .item(result("call_a", "42")) // 13
        .item(Item::user_text("so?")) // 14
        .status(RunStatus::InProgress) // 15
        .delta("42.") // 16
        .item(Item::assistant_text("42.")) // 17
        .status(RunStatus::Completed); // 18
    assert_eq!(
        log.render(),
        vec![
            (
                id(0),
                chunk(json!({"role": "assistant", "content": ""}), Value::Null)
            ),
            (id(1), chunk(json!({"content": "42."}), Value::Null)),
            (id(2), chunk(json!({}), json!("stop"))),
            (id(3), json!("[DONE]")),
        ]
    );
    let body = ChatSurface.final_body(&run_info(), &log.events);
    assert_eq!(
        body["choices"][0]["message"],
        json!({"role": "assistant", "content": "42.", "refusal": null, "annotations": []})
    );
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
}

#[test]
fn a_resumed_run_opens_once_and_keeps_counting_tool_calls() {
    let mut log = Log::new();
    log.status(RunStatus::InProgress) // 11
        .item(call("call_a", "f", "{}")) // 12
        .status(RunStatus::Interrupted) // 13
        .item(result("call_a", "1")) // 14: input of the resume
        .status(RunStatus::InProgress) // 15
        .item(call("call_b", "g", "{}")) // 16
        .status(RunStatus::Completed); // 17
    let frames = log.render();
    let ids: Vec<_> = frames.iter().map(|(id, _)| id.clone()).collect();
    assert_eq!(ids, vec![id(0), id(1), id(2), id(3), id(4), id(5)]);
    assert_eq!(
        frames[3].1["choices"][0]["delta"]["tool_calls"][0]["index"],
        1
    );
    assert_eq!(frames[4].1["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(frames[5].1, json!("[DONE]"));
}

#[test]
fn events_of_other_runs_are_not_rendered() {
    let mut log = Log::new();
    log.push(
        Item::assistant_text("old answer")
            .to_event("acct", "s1")
            .in_run("run_ffffffffffffffffffffffffffffffff", "i0"),
    )
    .status(RunStatus::InProgress)
    .delta("new")
    .status(RunStatus::Completed);
    let frames = log.render();
    assert_eq!(frames.len(), 4);
    assert!(!frames
        .iter()
        .any(|(_, v)| v.to_string().contains("old answer")));
}

#[test]
fn final_body_is_a_chat_completion() {
    let mut log = Log::new();
    log.push(Item::user_text("hi").to_event("acct", "s1"))
        .status(RunStatus::InProgress)
        .run(EventType::ReasoningDelta, None, json!({"delta": "hm"}))
        .item(Item::Reasoning { text: "hm".into() })
        .delta("Hel")
        .delta("lo")
        .item(Item::assistant_text("Hello"))
        .status_with_usage(
            RunStatus::Completed,
            json!({"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}),
        );
    assert_eq!(
        ChatSurface.final_body(&run_info(), &log.events),
        json!({
            "id": CHAT_ID,
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": "gpt-test",
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": "Hello", "refusal": null, "annotations": [],
                            "reasoning_content": "hm"},
                "finish_reason": "stop",
                "logprobs": null,
            }],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
        })
    );
}

#[test]
fn final_body_with_only_tool_calls_has_null_content() {
    let mut log = Log::new();
    log.status(RunStatus::InProgress)
        .item(Item::ToolCall {
            call_id: "call_a".into(),
            name: "f".into(),
            arguments: "{}".into(),
        })
        .status(RunStatus::Completed);
    let body = ChatSurface.final_body(&run_info(), &log.events);
    assert_eq!(
        body["choices"][0],
        json!({
            "index": 0,
            "message": {"role": "assistant", "content": null, "refusal": null, "annotations": [], "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ]},
            "finish_reason": "tool_calls",
            "logprobs": null,
        })
    );
    assert_eq!(body["usage"], Value::Null);
}

#[test]
fn final_body_keeps_only_the_last_invocation() {
    let mut log = Log::new();
    log.status(RunStatus::InProgress)
        .delta("partial")
        .item(Item::assistant_text("partial"))
        .status(RunStatus::Interrupted)
        .status(RunStatus::InProgress)
        .delta("whole answer")
        .status(RunStatus::Completed);
    let body = ChatSurface.final_body(&run_info(), &log.events);
    assert_eq!(body["choices"][0]["message"]["content"], "whole answer");
}
