//! The client's request read into a turn, and refused when it is wrong.

use super::*;

#[test]
fn a_string_input_is_one_user_message() {
    let t = parse(json!({"model": "m", "input": "hi", "stream": true})).unwrap();
    assert_eq!(t.surface, Protocol::OpenAiResponses);
    assert_eq!(t.input, vec![Item::user_text("hi")]);
    assert_eq!(t.model.as_deref(), Some("m"));
    assert!(t.stream);
    assert_eq!(t.session, SessionRef::New);
    assert!(t.extra.is_empty());
}

#[test]
fn every_input_item_kind_is_parsed() {
    let t = parse(json!({"input": [
        {"role": "developer", "content": "be brief"},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "look: "},
            {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "low"},
            {"type": "input_image", "file_id": "file-img"},
            {"type": "input_file", "filename": "a.txt", "file_data": "data:text/plain;base64,aGk="},
            {"type": "input_file", "file_id": "file-1"},
            {"type": "input_file", "file_url": "https://x/y.pdf"},
        ]},
        {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
         "content": [{"type": "output_text", "text": "ok", "annotations": []}]},
        {"type": "reasoning", "id": "rs_1", "summary": [
            {"type": "summary_text", "text": "one"}, {"type": "summary_text", "text": "two"}]},
        {"type": "reasoning", "id": "rs_2", "summary": [],
         "content": [{"type": "reasoning_text", "text": "raw"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{\"a\":1}"},
        {"type": "function_call_output", "call_id": "c1", "output": "42"},
        {"type": "function_call_output", "call_id": "c2", "output": [
            {"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
        {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": true},
    ]}))
    .unwrap();
    assert_eq!(
        t.input,
        vec![
            Item::Message {
                role: "developer".into(),
                content: vec![Block::Text("be brief".into())]
            },
            Item::Message {
                role: "user".into(),
                content: vec![
                    Block::Text("look: ".into()),
                    Block::Image {
                        url: "data:image/png;base64,AAAA".into(),
                        detail: Some("low".into())
                    },
                    Block::Image {
                        url: "file-img".into(),
                        detail: None
                    },
                    Block::File {
                        filename: Some("a.txt".into()),
                        data: Some("data:text/plain;base64,aGk=".into()),
                        url: None
                    },
                    Block::File {
                        filename: None,
                        data: None,
                        url: Some("file-1".into())
                    },
                    Block::File {
                        filename: None,
                        data: None,
                        url: Some("https://x/y.pdf".into())
                    },
                ]
            },
            Item::assistant_text("ok"),
            Item::Reasoning {
                text: "one\n\ntwo".into()
            },
            Item::Reasoning { text: "raw".into() },
            Item::ToolCall {
                call_id: "c1".into(),
                name: "f".into(),
                arguments: "{\"a\":1}".into()
            },
            Item::ToolResult {
                call_id: "c1".into(),
                output: "42".into()
            },
            Item::ToolResult {
                call_id: "c2".into(),
                output: "ab".into()
            },
            Item::Approval(
                json!({"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": true})
            ),
        ]
    );
}

#[test]
fn item_references_are_kept_apart_with_their_place_in_the_input() {
    let t = parse(json!({"input": [
        {"role": "user", "content": "one"},
        {"type": "item_reference", "id": "msg_a"},
        {"id": "fc_b"},
        {"role": "user", "content": "two"},
    ]}))
    .unwrap();
    assert_eq!(
        t.input,
        vec![Item::user_text("one"), Item::user_text("two")]
    );
    let refs: Vec<_> = t
        .references
        .iter()
        .map(|r| (r.position, r.id.as_str(), r.param.as_str()))
        .collect();
    assert_eq!(
        refs,
        [(1, "msg_a", "input[1].id"), (1, "fc_b", "input[2].id")]
    );
}

#[test]
fn known_fields_are_typed_and_the_rest_is_extra() {
    let t = parse(json!({
        "model": "m", "input": "x", "instructions": "Talk like a pirate.",
        "temperature": 0.5, "top_p": 1, "max_output_tokens": 100,
        "tools": [
            {"type": "function", "name": "get_weather", "description": "d",
             "parameters": {"type": "object"}, "strict": true},
            {"type": "function", "name": "bare"},
            {"type": "web_search"},
        ],
        "tool_choice": {"type": "function", "name": "get_weather"},
        "store": true, "background": true, "parallel_tool_calls": false,
        "reasoning": {"effort": "low"}, "metadata": {"k": "v"},
    }))
    .unwrap();
    assert_eq!(t.instructions.as_deref(), Some("Talk like a pirate."));
    assert_eq!(t.temperature, Some(0.5));
    assert_eq!(t.top_p, Some(1.0));
    assert_eq!(t.max_output_tokens, Some(100));
    assert_eq!(
        t.tools,
        vec![
            Tool {
                name: "get_weather".into(),
                description: Some("d".into()),
                parameters: Some(json!({"type": "object"})),
                strict: Some(true)
            },
            Tool {
                name: "bare".into(),
                description: None,
                parameters: None,
                strict: None
            },
        ]
    );
    assert_eq!(t.tool_choice.as_deref(), Some("get_weather"));
    assert_eq!(
        Value::Object(t.extra),
        json!({
            "tools": [{"type": "web_search"}],
            "parallel_tool_calls": false,
            "reasoning": {"effort": "low"},
            "metadata": {"k": "v"},
        })
    );
    let t = parse(json!({"input": "x", "tool_choice": "required", "temperature": null})).unwrap();
    assert_eq!(t.tool_choice.as_deref(), Some("required"));
    assert_eq!(t.temperature, None);
    let t = parse(json!({"input": "x", "tool_choice": {"type": "web_search"}})).unwrap();
    assert_eq!(t.tool_choice, None);
    assert_eq!(t.extra["tool_choice"], json!({"type": "web_search"}));
}

#[test]
fn sessions_are_named_by_conversation_session_id_or_header() {
    let named = |s: &str| SessionRef::Named(s.into());
    assert_eq!(
        parse(json!({"input": "x", "conversation": "c1"}))
            .unwrap()
            .session,
        named("c1")
    );
    assert_eq!(
        parse(json!({"input": "x", "conversation": {"id": "c1"}}))
            .unwrap()
            .session,
        named("c1")
    );
    assert_eq!(
        parse(json!({"input": "x", "session_id": "s1"}))
            .unwrap()
            .session,
        named("s1")
    );
    assert_eq!(
        parse(json!({"input": "x", "conversation": {"id": "c1"}, "session_id": "c1"}))
            .unwrap()
            .session,
        named("c1")
    );
    assert_eq!(
        parse_with_header(json!({"input": "x"}), "h1")
            .unwrap()
            .session,
        named("h1")
    );
    assert_eq!(
        parse_with_header(json!({"input": "x", "conversation": "h1"}), "h1")
            .unwrap()
            .session,
        named("h1")
    );
    assert_eq!(
        parse_with_header(json!({"input": "x"}), " ")
            .unwrap()
            .session,
        SessionRef::New
    );
    assert_eq!(
        parse(json!({"input": "x", "previous_response_id": RESP}))
            .unwrap()
            .session,
        SessionRef::AfterResponse(RESP.into())
    );
    assert_eq!(
        parse(json!({"input": "x", "conversation": null, "session_id": null}))
            .unwrap()
            .session,
        SessionRef::New
    );
}

#[test]
fn conflicting_session_names_are_rejected() {
    let (code, param, message) =
        err(json!({"input": "x", "conversation": {"id": "a"}, "session_id": "b"}));
    assert_eq!(
        (code, param.as_deref()),
        ("invalid_value", Some("session_id"))
    );
    assert!(message.contains("disagree"), "{message}");
    for other in [json!({"conversation": "a"}), json!({"session_id": "a"})] {
        let mut body = json!({"input": "x", "previous_response_id": RESP});
        body.as_object_mut()
            .unwrap()
            .extend(other.as_object().unwrap().clone());
        let (code, param, _) = err(body);
        assert_eq!(
            (code, param.as_deref()),
            ("invalid_value", Some("previous_response_id"))
        );
    }
    let e =
        parse_with_header(json!({"input": "x", "previous_response_id": RESP}), "h").unwrap_err();
    assert_eq!(e.param.as_deref(), Some("previous_response_id"));
    let e = parse_with_header(json!({"input": "x", "session_id": "a"}), "b").unwrap_err();
    assert_eq!(
        (e.code, e.param.as_deref()),
        ("invalid_value", Some("x-session-id"))
    );
}

#[test]
fn malformed_requests_get_precise_errors() {
    let e = ResponsesSurface
        .parse_request(b"{\"input\": ", None)
        .unwrap_err();
    assert_eq!((e.code, e.param), ("invalid_json", None));
    let e = ResponsesSurface.parse_request(b"[1]", None).unwrap_err();
    assert_eq!((e.code, e.param), ("invalid_type", None));

    let cases = [
        (json!({}), "missing_required_parameter", "input"),
        (json!({"input": 3}), "invalid_type", "input"),
        (
            json!({"input": "x", "stream": "yes"}),
            "invalid_type",
            "stream",
        ),
        (
            json!({"input": "x", "temperature": "hot"}),
            "invalid_type",
            "temperature",
        ),
        (
            json!({"input": "x", "temperature": 3}),
            "invalid_value",
            "temperature",
        ),
        (
            json!({"input": "x", "top_p": 1.5}),
            "invalid_value",
            "top_p",
        ),
        (
            json!({"input": "x", "max_output_tokens": 1.5}),
            "invalid_type",
            "max_output_tokens",
        ),
        (
            json!({"input": "x", "max_output_tokens": -1}),
            "invalid_value",
            "max_output_tokens",
        ),
        (json!({"input": "x", "model": 1}), "invalid_type", "model"),
        (
            json!({"input": "x", "instructions": []}),
            "invalid_type",
            "instructions",
        ),
        (json!({"input": "x", "tools": {}}), "invalid_type", "tools"),
        (
            json!({"input": "x", "tools": [{"type": "function"}]}),
            "missing_required_parameter",
            "tools[0].name",
        ),
        (
            json!({"input": "x", "tools": [{"name": "f"}]}),
            "missing_required_parameter",
            "tools[0].type",
        ),
        (
            json!({"input": "x", "tools": [{"type": "function", "name": "f", "strict": "no"}]}),
            "invalid_type",
            "tools[0].strict",
        ),
        (
            json!({"input": "x", "tool_choice": "sometimes"}),
            "invalid_value",
            "tool_choice",
        ),
        (
            json!({"input": "x", "tool_choice": {"type": "function"}}),
            "missing_required_parameter",
            "tool_choice.name",
        ),
        (
            json!({"input": "x", "tool_choice": 1}),
            "invalid_type",
            "tool_choice",
        ),
        (
            json!({"input": "x", "conversation": 5}),
            "invalid_type",
            "conversation",
        ),
        (
            json!({"input": "x", "conversation": {}}),
            "missing_required_parameter",
            "conversation.id",
        ),
        (
            json!({"input": "x", "conversation": {"id": 5}}),
            "invalid_type",
            "conversation.id",
        ),
        (
            json!({"input": "x", "conversation": ""}),
            "invalid_value",
            "conversation",
        ),
        (
            json!({"input": "x", "session_id": 5}),
            "invalid_type",
            "session_id",
        ),
        (
            json!({"input": "x", "previous_response_id": false}),
            "invalid_type",
            "previous_response_id",
        ),
        (json!({"input": [1]}), "invalid_type", "input[0]"),
        (
            json!({"input": [{"content": "hi"}]}),
            "missing_required_parameter",
            "input[0].type",
        ),
        (
            json!({"input": [{"role": "robot", "content": "hi"}]}),
            "invalid_value",
            "input[0].role",
        ),
        (
            json!({"input": [{"role": "user"}]}),
            "missing_required_parameter",
            "input[0].content",
        ),
        (
            json!({"input": [{"role": "user", "content": 1}]}),
            "invalid_type",
            "input[0].content",
        ),
        (
            json!({"input": [{"role": "user", "content": [{"type": "input_audio"}]}]}),
            "invalid_value",
            "input[0].content[0].type",
        ),
        (
            json!({"input": [{"role": "user", "content": [{"type": "input_text"}]}]}),
            "missing_required_parameter",
            "input[0].content[0].text",
        ),
        (
            json!({"input": [{"role": "user", "content": [{"type": "input_image"}]}]}),
            "missing_required_parameter",
            "input[0].content[0].image_url",
        ),
        (
            json!({"input": [{"role": "user", "content": [{"type": "input_file", "filename": "a"}]}]}),
            "missing_required_parameter",
            "input[0].content[0].file_data",
        ),
        (
            json!({"input": [{"type": "item_reference"}]}),
            "missing_required_parameter",
            "input[0].id",
        ),
        (
            json!({"input": [{"type": "item_reference", "id": 7}]}),
            "invalid_type",
            "input[0].id",
        ),
        (
            json!({"input": [{"type": "computer_call_output", "call_id": "c"}]}),
            "invalid_value",
            "input[0].type",
        ),
        (
            json!({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}),
            "missing_required_parameter",
            "input[0].call_id",
        ),
        (
            json!({"input": [{"type": "function_call_output", "call_id": "c"}]}),
            "missing_required_parameter",
            "input[0].output",
        ),
        (
            json!({"input": [{"type": "function_call_output", "call_id": "c", "output": 1}]}),
            "invalid_type",
            "input[0].output",
        ),
    ];
    for (body, code, param) in cases {
        let (got_code, got_param, message) = err(body.clone());
        assert_eq!(
            (got_code, got_param.as_deref()),
            (code, Some(param)),
            "{body}: {message}"
        );
        assert!(message.contains(param), "{message}");
    }
}
