//! Parsing the agent's answer: streams, JSON documents, errors.

use super::*;
use crate::protocol::Protocol;
use crate::upstream::{Output, StreamParser, Upstream};

use super::super::parser::A2aParser;
use super::super::A2aUpstream;

/// Feeds `body` in chunks of `size` bytes.
fn parse(sse: bool, body: &[u8], size: usize) -> Vec<Output> {
    let mut parser = A2aParser::new(sse);
    let mut out = Vec::new();
    for chunk in body.chunks(size.max(1)) {
        out.extend(parser.feed(chunk));
    }
    out.extend(parser.finish());
    out
}

fn frames(out: &[Output]) -> Vec<Value> {
    out.iter()
        .filter_map(|o| match o {
            Output::Frame(f) => Some(f.clone()),
            _ => None,
        })
        .collect()
}

fn others(out: &[Output]) -> Vec<Output> {
    out.iter()
        .filter(|o| !matches!(o, Output::Frame(_)))
        .cloned()
        .collect()
}

fn answered(text: &str, task: &str, context: &str, state: &str) -> Output {
    Output::ItemWith(
        Item::assistant_text(text),
        json!({ "a2a": { "taskId": task, "contextId": context, "state": state } }),
    )
}

#[test]
fn parses_a_v03_stream_split_anywhere() {
    let body = crlf(captures::V03_STREAM);
    let task = "fec33ee8-d85e-4039-b755-a15bd9aa5299";
    let context = "326b0b34-2b77-41e8-abae-1cf42b70780d";
    for size in [1, 2, 7, 61, 500, body.len()] {
        let out = parse(true, body.as_bytes(), size);
        assert_eq!(
            frames(&out),
            stream_results(captures::V03_STREAM),
            "chunks of {size}"
        );
        assert_eq!(
            others(&out),
            vec![
                Output::AgentRef(task.into()),
                answered(
                    "You said: My project is named zebra42.",
                    task,
                    context,
                    "completed"
                ),
                Output::Done { usage: None },
            ],
            "chunks of {size}"
        );
        // The task id is known as soon as the first frame is.
        assert_eq!(out[1], Output::AgentRef(task.into()));
    }
}

#[test]
fn parses_a_v10_stream_split_anywhere() {
    let body = crlf(captures::V10_STREAM);
    let task = "06170946-a53c-4498-9ba8-e9d947eb44b7";
    let context = "632b4b73-3433-4d82-823d-e10e5d2e8957";
    for size in [1, 3, 64, 777, body.len()] {
        let out = parse(true, body.as_bytes(), size);
        assert_eq!(frames(&out).len(), 10);
        assert_eq!(frames(&out), stream_results(captures::V10_STREAM));
        assert_eq!(
            others(&out),
            vec![
                Output::AgentRef(task.into()),
                answered(
                    "You said: My project is named zebra42.",
                    task,
                    context,
                    "completed"
                ),
                Output::Done { usage: None },
            ]
        );
    }
    // The upstream's parser picks SSE from the content type.
    let turn = TurnRequest::new(Protocol::A2a);
    let call = call(&turn, &[], &[]);
    let mut parser = A2aUpstream::JSONRPC.parser(&call, "text/event-stream; charset=utf-8");
    let mut out = parser.feed(body.as_bytes());
    out.extend(parser.finish());
    assert_eq!(out.last(), Some(&Output::Done { usage: None }));
}

#[test]
fn parses_http_json_streams() {
    let out = parse(true, crlf(captures::REST10_STREAM).as_bytes(), 50);
    assert_eq!(frames(&out), stream_results(captures::REST10_STREAM));
    assert_eq!(
        others(&out)[1..],
        [
            answered(
                "zebra42",
                "4c21fcae-ec5a-48aa-8c6b-589c4cd20b38",
                "4c06c2f6-1aad-432b-8fcc-f3a685c1b761",
                "completed"
            ),
            Output::Done { usage: None },
        ]
    );
    let out = parse(true, crlf(captures::REST03_STREAM).as_bytes(), 50);
    assert_eq!(frames(&out).len(), 4);
    assert_eq!(out.last(), Some(&Output::Done { usage: None }));
}

#[test]
fn parses_a_non_streaming_answer() {
    let out = parse(false, captures::V10_SEND.as_bytes(), 100);
    assert_eq!(
        frames(&out),
        vec![json_of(captures::V10_SEND)["result"].clone()]
    );
    assert_eq!(
        others(&out),
        vec![
            Output::AgentRef("c4227bb9-5139-45fc-850e-a93679687554".into()),
            answered(
                "You said: My project is named zebra42.",
                "c4227bb9-5139-45fc-850e-a93679687554",
                "dc2c1530-bdd9-4d09-a490-8a093190b1d4",
                "completed"
            ),
            Output::Done { usage: None },
        ]
    );
    let out = parse(false, captures::V03_SEND.as_bytes(), 1);
    assert_eq!(out.len(), 4);
    assert_eq!(out[3], Output::Done { usage: None });
}

#[test]
fn a_message_reply_is_a_whole_answer() {
    let reply = json!({ "jsonrpc": "2.0", "id": 1, "result": {
        "kind": "message", "role": "agent", "messageId": "a1", "contextId": "c1",
        "parts": [{ "kind": "text", "text": "Hello " }, { "kind": "text", "text": "there" }],
    }});
    let out = parse(false, reply.to_string().as_bytes(), 9);
    assert_eq!(
        out,
        vec![
            Output::Frame(reply["result"].clone()),
            Output::ItemWith(
                Item::assistant_text("Hello there"),
                json!({ "a2a": { "messageId": "a1", "contextId": "c1" } })
            ),
            Output::Done { usage: None },
        ]
    );
}

#[test]
fn failed_and_canceled_tasks_end_the_turn_with_an_error() {
    let out = parse(true, crlf(captures::V10_FAILED_STREAM).as_bytes(), 33);
    assert_eq!(frames(&out).len(), 3);
    let Some(Output::Error { code, message }) = out.last() else {
        panic!("{out:?}")
    };
    assert_eq!(code, "agent_task_failed");
    assert!(
        message.starts_with("LLM error: Server error '500"),
        "{message}"
    );
    // A failed task's status message is not recorded as an answer.
    assert!(!out.iter().any(|o| matches!(o, Output::ItemWith(..))));

    let out = parse(true, crlf(captures::V03_CANCELED_STREAM).as_bytes(), 100);
    let tail = &others(&out)[1..];
    assert_eq!(
        tail,
        [
            answered(
                "w1 w2 w3 ",
                "6b1002dc-fd50-45e7-92ea-ee1d6a99ef3c",
                "44205b86-0901-4d69-a32d-21ff59ab2c96",
                "canceled"
            ),
            Output::Error {
                code: "agent_task_canceled".into(),
                message: "The agent's task ended as canceled.".into()
            },
        ]
    );
}

#[test]
fn json_rpc_errors_become_errors() {
    let out = parse(false, captures::V10_NOT_FOUND.as_bytes(), 10);
    assert_eq!(
        out,
        vec![Output::Error {
            code: "a2a_error_-32001".into(),
            message: "Task not found".into()
        }]
    );
    // a2a_37: a streaming method answered with plain JSON.
    let out = parse(true, captures::V10_SUBSCRIBE_FINISHED.as_bytes(), 10);
    assert!(matches!(&out[..], [Output::Error { code, .. }] if code == "a2a_error_-32004"));
    // a2a_34: the error as the stream's only event.
    let sse = "data: {\"error\":{\"code\":-32004,\"message\":\"done\"},\"id\":\"x\",\"jsonrpc\":\"2.0\"}\r\n\r\n";
    assert_eq!(
        parse(true, sse.as_bytes(), 5),
        vec![Output::Error {
            code: "a2a_error_-32004".into(),
            message: "done".into()
        }]
    );
    assert!(
        matches!(&parse(false, b"", 1)[..], [Output::Error { code, .. }] if code == "empty_response")
    );
    assert!(
        matches!(&parse(false, b"<html>", 1)[..], [Output::Error { code, .. }] if code == "invalid_response")
    );
}

#[test]
fn a_stream_cut_short_does_not_complete() {
    let body = crlf(captures::V03_STREAM);
    let cut = &body[..body.len() / 2];
    let out = parse(true, cut.as_bytes(), 40);
    assert!(!out.is_empty());
    assert!(!out
        .iter()
        .any(|o| matches!(o, Output::Done { .. } | Output::ItemWith(..))));
    // Frames after the end are not the turn's.
    let twice = format!("{body}{body}");
    let out = parse(true, twice.as_bytes(), 4096);
    assert_eq!(frames(&out).len(), 10);
}
