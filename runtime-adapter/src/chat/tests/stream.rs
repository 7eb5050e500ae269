//! The agent's answer read into outputs, however it is split or labelled.

use super::*;

fn sse_chunk(delta: Value, finish_reason: Value) -> String {
    let c = json!({"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 1,
                   "model": "m", "choices": [{"index": 0, "delta": delta,
                   "finish_reason": finish_reason, "logprobs": null}]});
    format!("data: {c}\n\n")
}

fn run_parser(content_type: &str, pieces: &[&[u8]]) -> Vec<Output> {
    let mut p = ChatUpstream.body_parser(content_type);
    let mut out = Vec::new();
    for piece in pieces {
        out.extend(p.feed(piece));
    }
    out.extend(p.finish());
    out
}

/// Parses `body` whole and cut into pieces of every size from 1 to 7 bytes (so events,
/// lines, CRLFs and UTF-8 sequences are all split somewhere); the outputs must agree.
fn parse_split(body: &str) -> Vec<Output> {
    let whole = run_parser("text/event-stream", &[body.as_bytes()]);
    for size in 1..=7 {
        let pieces: Vec<&[u8]> = body.as_bytes().chunks(size).collect();
        let split = run_parser("Text/Event-Stream; charset=utf-8", &pieces);
        assert_eq!(split, whole, "piece size {size}");
    }
    whole
}

#[test]
fn parses_a_text_stream_split_anywhere() {
    let mut body = String::new();
    body += &sse_chunk(json!({"role": "assistant", "content": ""}), Value::Null);
    body += &sse_chunk(json!({"reasoning_content": "let me "}), Value::Null);
    body += &sse_chunk(json!({"reasoning": "think"}), Value::Null);
    body += &sse_chunk(json!({"content": "Hel"}), Value::Null);
    body += ": keep-alive\n\n";
    body += &sse_chunk(json!({"content": "lo ünïcode"}), Value::Null);
    body += &sse_chunk(json!({}), json!("stop"));
    body += "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2,\"total_tokens\":5}}\r\n\r\n";
    body += "data: [DONE]\n\n";
    assert_eq!(
        parse_split(&body),
        vec![
            Output::ReasoningDelta("let me ".into()),
            Output::ReasoningDelta("think".into()),
            Output::TextDelta("Hel".into()),
            Output::TextDelta("lo ünïcode".into()),
            Output::Item(Item::Reasoning {
                text: "let me think".into()
            }),
            Output::Item(Item::assistant_text("Hello ünïcode")),
            Output::Done {
                usage: Some(json!({"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}))
            },
        ]
    );
}

#[test]
fn reassembles_tool_call_arguments_split_across_chunks() {
    let mut body = String::new();
    body += &sse_chunk(json!({"role": "assistant", "content": null}), Value::Null);
    body += &sse_chunk(json!({"content": "Checking."}), Value::Null);
    body += &sse_chunk(
        json!({"tool_calls": [{"index": 0, "id": "call_p", "type": "function",
                               "function": {"name": "weather", "arguments": ""}}]}),
        Value::Null,
    );
    body += &sse_chunk(
        json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"ci"}}]}),
        Value::Null,
    );
    body += &sse_chunk(
        json!({"tool_calls": [{"index": 1, "id": "call_r", "type": "function",
                               "function": {"name": "weather", "arguments": "{\"city\""}}]}),
        Value::Null,
    );
    body += &sse_chunk(
        json!({"tool_calls": [{"index": 0, "function": {"arguments": "ty\":\"Paris\"}"}}]}),
        Value::Null,
    );
    body += &sse_chunk(
        json!({"tool_calls": [{"index": 1, "function": {"arguments": ":\"Rome\"}"}}]}),
        Value::Null,
    );
    body += &sse_chunk(json!({}), json!("tool_calls"));
    body += "data: [DONE]\n\n";
    assert_eq!(
        parse_split(&body),
        vec![
            Output::TextDelta("Checking.".into()),
            Output::Item(Item::assistant_text("Checking.")),
            Output::Item(call("call_p", "weather", "{\"city\":\"Paris\"}")),
            Output::Item(call("call_r", "weather", "{\"city\":\"Rome\"}")),
            Output::Done { usage: None },
        ]
    );
}

#[test]
fn repeated_index_with_new_id_is_a_new_call_and_missing_ids_are_made_up() {
    let mut body = String::new();
    body += &sse_chunk(
        json!({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f", "arguments": "{}"}}]}),
        Value::Null,
    );
    body += &sse_chunk(
        json!({"tool_calls": [{"index": 0, "id": "b", "function": {"name": "g", "arguments": "{}"}}]}),
        Value::Null,
    );
    body += &sse_chunk(
        json!({"tool_calls": [{"function": {"name": "h", "arguments": {"k": 1}}}]}),
        Value::Null,
    );
    body += &sse_chunk(json!({}), json!("tool_calls"));
    let out = run_parser("text/event-stream", &[body.as_bytes()]);
    assert_eq!(out.len(), 4);
    assert_eq!(out[0], Output::Item(call("a", "f", "{}")));
    assert_eq!(out[1], Output::Item(call("b", "g", "{}")));
    match &out[2] {
        Output::Item(Item::ToolCall {
            call_id,
            name,
            arguments,
        }) => {
            assert!(
                call_id.starts_with("call_") && call_id.len() == 37,
                "{call_id}"
            );
            assert_eq!((name.as_str(), arguments.as_str()), ("h", "{\"k\":1}"));
        }
        other => panic!("{other:?}"),
    }
    // finish_reason without [DONE]: complete at the end of the body.
    assert_eq!(out[3], Output::Done { usage: None });
}

#[test]
fn a_stream_that_closes_early_yields_items_but_no_done() {
    let mut body = String::new();
    body += &sse_chunk(json!({"role": "assistant", "content": ""}), Value::Null);
    body += &sse_chunk(json!({"content": "Half an ans"}), Value::Null);
    body += &sse_chunk(
        json!({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f", "arguments": "{\"a\""}}]}),
        Value::Null,
    );
    body += "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"wer"; // cut mid-event
    let out = run_parser("text/event-stream", &[body.as_bytes()]);
    assert_eq!(
        out,
        vec![
            Output::TextDelta("Half an ans".into()),
            Output::Item(Item::assistant_text("Half an ans")),
            Output::Item(call("c", "f", "{\"a\"")),
        ]
    );
}

#[test]
fn an_empty_stream_is_a_stream_closed_early() {
    assert_eq!(run_parser("text/event-stream", &[]), vec![]);
    assert_eq!(run_parser("text/event-stream", &[b": ping\n\n"]), vec![]);
}

#[test]
fn finish_reason_without_done_completes_at_finish() {
    let mut body = String::new();
    body += &sse_chunk(json!({"content": "ok"}), Value::Null);
    body += &sse_chunk(json!({}), json!("stop"));
    let mut p = ChatUpstream.body_parser("text/event-stream");
    assert_eq!(
        p.feed(body.as_bytes()),
        vec![
            Output::TextDelta("ok".into()),
            Output::Item(Item::assistant_text("ok"))
        ]
    );
    assert_eq!(p.finish(), vec![Output::Done { usage: None }]);
}

#[test]
fn an_error_event_mid_stream_is_an_error() {
    let mut body = String::new();
    body += &sse_chunk(json!({"content": "a"}), Value::Null);
    body += "data: {\"error\": {\"message\": \"overloaded\", \"type\": \"server_error\", \"code\": 529}}\n\n";
    let out = run_parser("text/event-stream", &[body.as_bytes()]);
    assert_eq!(
        out,
        vec![
            Output::TextDelta("a".into()),
            Output::Error {
                code: "529".into(),
                message: "overloaded".into()
            },
            Output::Item(Item::assistant_text("a")),
        ]
    );
}

#[test]
fn done_is_emitted_once_and_late_data_ignored() {
    let mut body = String::new();
    body += &sse_chunk(json!({"content": "x"}), json!("stop"));
    body += "data: [DONE]\n\n";
    body += &sse_chunk(json!({"content": "late"}), Value::Null);
    body += "data: [DONE]\n\n";
    let out = run_parser("text/event-stream", &[body.as_bytes()]);
    assert_eq!(
        out,
        vec![
            Output::TextDelta("x".into()),
            Output::Item(Item::assistant_text("x")),
            Output::Done { usage: None },
        ]
    );
}

#[test]
fn parses_a_non_streaming_completion() {
    let body = json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": "Sure.", "reasoning_content": "easy",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{\"a\":1}"}}
            ]}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    })
    .to_string();
    let (a, b) = body.as_bytes().split_at(10);
    assert_eq!(
        run_parser("application/json", &[a, b]),
        vec![
            Output::Item(Item::Reasoning {
                text: "easy".into()
            }),
            Output::Item(Item::assistant_text("Sure.")),
            Output::Item(call("c1", "f", "{}")),
            Output::Item(call("c2", "g", "{\"a\":1}")),
            Output::Done {
                usage: Some(json!({"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}))
            },
        ]
    );

    let body = json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": null,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}}]});
    assert_eq!(
        run_parser("application/json", &[body.to_string().as_bytes()]),
        vec![
            Output::Item(call("c1", "f", "{}")),
            Output::Done { usage: None }
        ]
    );
}

#[test]
fn non_streaming_errors() {
    let out = run_parser(
        "application/json",
        &[br#"{"error": {"message": "bad key", "type": "invalid_request_error", "code": "invalid_api_key"}}"#],
    );
    assert_eq!(
        out,
        vec![Output::Error {
            code: "invalid_api_key".into(),
            message: "bad key".into()
        }]
    );
    let out = run_parser("application/json", &[br#"{"error": "boom"}"#]);
    assert_eq!(
        out,
        vec![Output::Error {
            code: "upstream_error".into(),
            message: "boom".into()
        }]
    );
    let out = run_parser("text/html", &[b"<html>502 Bad Gateway</html>"]);
    assert!(matches!(&out[..], [Output::Error { code, .. }] if code == "invalid_response"));
    let out = run_parser("application/json", &[]);
    assert!(matches!(&out[..], [Output::Error { code, .. }] if code == "empty_response"));
}

#[test]
fn mislabelled_bodies_are_still_understood() {
    // A JSON error under an SSE content type.
    let out = run_parser(
        "text/event-stream",
        &[br#"{"error": {"message": "no such model", "code": "model_not_found"}}"#],
    );
    assert_eq!(
        out,
        vec![Output::Error {
            code: "model_not_found".into(),
            message: "no such model".into()
        }]
    );
    // An SSE stream under a JSON content type.
    let body = sse_chunk(json!({"content": "hi"}), json!("stop")) + "data: [DONE]\n\n";
    let out = run_parser("application/json", &[body.as_bytes()]);
    assert_eq!(
        out,
        vec![
            Output::TextDelta("hi".into()),
            Output::Item(Item::assistant_text("hi")),
            Output::Done { usage: None }
        ]
    );
}

#[test]
fn protocol_is_chat() {
    assert_eq!(ChatUpstream.protocol(), Protocol::OpenAiChat);
}
