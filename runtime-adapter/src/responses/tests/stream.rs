//! The agent's answer read into outputs, however it is split.

use super::*;

fn sse(events: &[Value]) -> String {
    events
        .iter()
        .map(|e| format!("event: {}\ndata: {}\n\n", e["type"].as_str().unwrap(), e))
        .collect()
}

fn parse_stream(body: &str, chunk: usize) -> Vec<Output> {
    let mut p = ResponsesUpstream.body_parser("text/event-stream; charset=utf-8");
    let mut out: Vec<Output> = body
        .as_bytes()
        .chunks(chunk)
        .flat_map(|c| p.feed(c))
        .collect();
    out.extend(p.finish());
    out
}

fn upstream_text_run() -> Vec<Value> {
    let msg = json!({"id": "msg_u1", "type": "message", "role": "assistant", "status": "completed",
        "content": [{"type": "output_text", "text": "Hi there", "annotations": []}]});
    vec![
        json!({"type": "response.created", "sequence_number": 0, "response": {"id": "resp_u", "status": "in_progress", "output": []}}),
        json!({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0,
            "item": {"id": "rs_u1", "type": "reasoning", "summary": []}}),
        json!({"type": "response.reasoning_summary_part.added", "sequence_number": 2, "item_id": "rs_u1", "output_index": 0, "summary_index": 0}),
        json!({"type": "response.reasoning_summary_text.delta", "sequence_number": 3, "item_id": "rs_u1", "output_index": 0, "summary_index": 0, "delta": "Greet"}),
        json!({"type": "response.reasoning_summary_part.added", "sequence_number": 4, "item_id": "rs_u1", "output_index": 0, "summary_index": 1}),
        json!({"type": "response.reasoning_summary_text.delta", "sequence_number": 5, "item_id": "rs_u1", "output_index": 0, "summary_index": 1, "delta": "Briefly"}),
        json!({"type": "response.output_item.done", "sequence_number": 6, "output_index": 0,
            "item": {"id": "rs_u1", "type": "reasoning", "summary": [
                {"type": "summary_text", "text": "Greet"}, {"type": "summary_text", "text": "Briefly"}]}}),
        json!({"type": "response.output_item.added", "sequence_number": 7, "output_index": 1,
            "item": {"id": "msg_u1", "type": "message", "role": "assistant", "status": "in_progress", "content": []}}),
        json!({"type": "response.output_text.delta", "sequence_number": 8, "item_id": "msg_u1", "output_index": 1, "content_index": 0, "delta": "Hi "}),
        json!({"type": "response.output_text.delta", "sequence_number": 9, "item_id": "msg_u1", "output_index": 1, "content_index": 0, "delta": "there"}),
        json!({"type": "response.output_text.done", "sequence_number": 10, "item_id": "msg_u1", "output_index": 1, "content_index": 0, "text": "Hi there"}),
        json!({"type": "response.output_item.done", "sequence_number": 11, "output_index": 1, "item": msg}),
        json!({"type": "response.completed", "sequence_number": 12, "response": {"id": "resp_u", "status": "completed",
            "output": [{"id": "rs_u1", "type": "reasoning", "summary": []}, msg],
            "usage": {"input_tokens": 5, "output_tokens": 2, "total_tokens": 7}}}),
    ]
}

#[test]
fn an_upstream_stream_split_anywhere_parses_the_same() {
    let body = sse(&upstream_text_run());
    let expected = vec![
        Output::ReasoningDelta("Greet".into()),
        Output::ReasoningDelta("\n\n".into()),
        Output::ReasoningDelta("Briefly".into()),
        Output::Item(Item::Reasoning {
            text: "Greet\n\nBriefly".into(),
        }),
        Output::TextDelta("Hi ".into()),
        Output::TextDelta("there".into()),
        Output::Item(Item::assistant_text("Hi there")),
        Output::Done {
            usage: Some(json!({"input_tokens": 5, "output_tokens": 2, "total_tokens": 7})),
        },
    ];
    for chunk in [1, 2, 7, 13, 64, body.len()] {
        assert_eq!(parse_stream(&body, chunk), expected, "chunk size {chunk}");
    }
    // CRLF line ends, no `event:` lines.
    let crlf: String = upstream_text_run()
        .iter()
        .map(|e| format!("data: {e}\r\n\r\n"))
        .collect();
    assert_eq!(parse_stream(&crlf, 5), expected);
}

#[test]
fn function_calls_come_from_the_finished_item() {
    let call = json!({"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "get_weather",
        "arguments": "{\"city\":\"Paris\"}", "status": "completed"});
    let body = sse(&[
        json!({"type": "response.output_item.added", "output_index": 0,
            "item": {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": ""}}),
        json!({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 0, "delta": "{\"city\":"}),
        json!({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 0, "delta": "\"Paris\"}"}),
        json!({"type": "response.function_call_arguments.done", "item_id": "fc_1", "output_index": 0, "arguments": "{\"city\":\"Paris\"}"}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": call}),
        json!({"type": "response.output_item.added", "output_index": 1,
            "item": {"id": "mcpr_1", "type": "mcp_approval_request", "name": "t", "server_label": "s", "arguments": "{}"}}),
        json!({"type": "response.output_item.done", "output_index": 1,
            "item": {"id": "mcpr_1", "type": "mcp_approval_request", "name": "t", "server_label": "s", "arguments": "{}"}}),
        json!({"type": "response.output_item.done", "output_index": 2,
            "item": {"id": "ws_1", "type": "web_search_call", "status": "completed"}}),
        json!({"type": "response.completed", "response": {"status": "completed", "output": [call], "usage": null}}),
    ]);
    assert_eq!(
        parse_stream(&body, 10),
        vec![
            Output::Item(Item::ToolCall {
                call_id: "call_1".into(),
                name: "get_weather".into(),
                arguments: "{\"city\":\"Paris\"}".into()
            }),
            Output::Item(Item::Approval(
                json!({"id": "mcpr_1", "type": "mcp_approval_request", "name": "t", "server_label": "s", "arguments": "{}"})
            )),
            Output::Done { usage: None },
        ]
    );
}

#[test]
fn upstream_failures_are_errors_without_done() {
    let failed = sse(&[
        json!({"type": "response.output_text.delta", "delta": "par"}),
        json!({"type": "response.failed", "response": {"status": "failed",
            "error": {"code": "server_error", "message": "boom"}}}),
    ]);
    assert_eq!(
        parse_stream(&failed, 3),
        vec![
            Output::TextDelta("par".into()),
            Output::Error {
                code: "server_error".into(),
                message: "boom".into()
            },
        ]
    );
    // An `error` event is usually followed by `response.failed`: one error only.
    let error = sse(&[
        json!({"type": "error", "code": "rate_limit_exceeded", "message": "slow down", "param": null}),
        json!({"type": "response.failed", "response": {"status": "failed", "error": {"code": "server_error", "message": "x"}}}),
    ]);
    assert_eq!(
        parse_stream(&error, 100),
        vec![Output::Error {
            code: "rate_limit_exceeded".into(),
            message: "slow down".into()
        }]
    );
    let incomplete = sse(&[
        json!({"type": "response.incomplete", "response": {"status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"}}}),
    ]);
    assert_eq!(
        parse_stream(&incomplete, 100),
        vec![Output::Error {
            code: "incomplete".into(),
            message: "The agent's response is incomplete (max_output_tokens).".into()
        }]
    );
    // The SDK's convention: a data object with `error` and no `type`.
    let bare = "data: {\"error\": {\"message\": \"bad key\", \"code\": \"invalid_api_key\"}}\n\n";
    assert_eq!(
        parse_stream(bare, 100),
        vec![Output::Error {
            code: "invalid_api_key".into(),
            message: "bad key".into()
        }]
    );
}

#[test]
fn a_stream_cut_short_yields_no_done() {
    let mut body = sse(&upstream_text_run()[..9]);
    // The last event arrives without its blank line.
    body.push_str("data: {\"type\":\"response.output_text.delta\",\"delta\":\"!\"}");
    let out = parse_stream(&body, 4);
    assert_eq!(out.last(), Some(&Output::TextDelta("!".into())));
    assert!(!out
        .iter()
        .any(|o| matches!(o, Output::Done { .. } | Output::Error { .. })));
    // Keep-alives and junk between events are harmless.
    let noisy = format!(
        ": ping\n\ndata: not json\n\ndata: [DONE]\n\n{}",
        sse(&upstream_text_run())
    );
    assert!(matches!(
        parse_stream(&noisy, 9).last(),
        Some(Output::Done { .. })
    ));
}

#[test]
fn a_completed_response_fills_in_items_the_stream_did_not_finish() {
    let body = sse(&[
        json!({"type": "response.output_text.delta", "item_id": "m", "output_index": 0, "delta": "Hi"}),
        json!({"type": "response.completed", "response": {"status": "completed", "output": [
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}]}}),
    ]);
    assert_eq!(
        parse_stream(&body, 100),
        vec![
            Output::TextDelta("Hi".into()),
            Output::Item(Item::ToolCall {
                call_id: "c".into(),
                name: "f".into(),
                arguments: "{}".into()
            }),
            Output::Item(Item::assistant_text("Hi")),
            Output::Done { usage: None },
        ]
    );
}

#[test]
fn a_json_body_is_parsed_at_finish() {
    let body = json!({"id": "resp_1", "object": "response", "status": "completed", "error": null,
        "output": [
            {"id": "rs_1", "type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "hmm"}]},
            {"id": "msg_1", "type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": "Hello", "annotations": []}]},
        ],
        "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2},
        "service_tier": "default", "temperature": 0.7, "top_p": null, "model": "m", "store": false});
    let mut p = ResponsesUpstream.body_parser("application/json");
    let bytes = body.to_string();
    let (a, b) = bytes.as_bytes().split_at(10);
    assert!(p.feed(a).is_empty());
    assert!(p.feed(b).is_empty());
    assert_eq!(
        p.finish(),
        vec![
            Output::Item(Item::Reasoning { text: "hmm".into() }),
            Output::Item(Item::assistant_text("Hello")),
            // What it says it used (null is saying nothing; model and store are Tether's).
            Output::Answered(
                json!({"service_tier": "default", "temperature": 0.7})
                    .as_object()
                    .unwrap()
                    .clone()
            ),
            Output::Done {
                usage: Some(json!({"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}))
            },
        ]
    );

    let mut p = ResponsesUpstream.body_parser("application/json");
    p.feed(br#"{"error": {"message": "Invalid model", "type": "invalid_request_error", "code": "model_not_found"}}"#);
    assert_eq!(
        p.finish(),
        vec![Output::Error {
            code: "model_not_found".into(),
            message: "Invalid model".into()
        }]
    );

    let mut p = ResponsesUpstream.body_parser("text/html");
    p.feed(b"<html>bad gateway</html>");
    assert!(
        matches!(&p.finish()[..], [Output::Error { code, .. }] if code == "invalid_upstream_response")
    );
}

#[test]
fn what_the_upstream_parser_reads_the_renderer_can_write() {
    // Tether in front of Tether: a rendered stream parses back into the same items.
    let frames = render_all(&streamed_run());
    let mut wire = String::new();
    for f in &frames {
        f.encode(&mut wire);
    }
    let out = parse_stream(&wire, 11);
    assert_eq!(
        out,
        vec![
            Output::TextDelta("Hel".into()),
            Output::TextDelta("lo!".into()),
            Output::Item(Item::assistant_text("Hello!")),
            // The downstream Tether's defaults, which the upstream one shows as used.
            Output::Answered(
                json!({
                    "service_tier": "default", "temperature": 1.0, "top_p": 1.0,
                    "presence_penalty": 0.0, "frequency_penalty": 0.0, "top_logprobs": 0,
                    "truncation": "disabled", "reasoning": {"effort": null, "summary": null},
                    "text": {"format": {"type": "text"}},
                })
                .as_object()
                .unwrap()
                .clone()
            ),
            Output::Done {
                usage: Some(json!({
                    "input_tokens": 12,
                    "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                    "output_tokens": 3,
                    "output_tokens_details": {"reasoning_tokens": 0},
                    "total_tokens": 15,
                }))
            },
        ]
    );
}
