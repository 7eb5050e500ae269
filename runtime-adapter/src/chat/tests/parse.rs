//! The client's request read into a turn, and refused when it is wrong.

use super::*;

#[test]
fn parses_a_full_request() {
    let turn = parse(json!({
        "model": "gpt-4o",
        "stream": true,
        "stream_options": {"include_usage": true},
        "temperature": 0.5,
        "top_p": 0.9,
        "max_completion_tokens": 100,
        "session_id": "sess-1",
        "user": "u-42",
        "parallel_tool_calls": false,
        "tools": [{"type": "function", "function": {
            "name": "get_weather", "description": "Weather", "strict": true,
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}
        }}],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": [{"type": "text", "text": "Dev."}]},
            {"role": "user", "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "https://x/img.png", "detail": "low"}},
                {"type": "file", "file": {"filename": "a.pdf", "file_data": "data:application/pdf;base64,QQ=="}},
                {"type": "file", "file": {"file_id": "file-123"}}
            ]},
            {"role": "assistant", "content": "Checking.", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
            {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "rain"}, {"type": "text", "text": "y"}]},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_3", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
            ]}
        ]
    }))
    .unwrap();

    assert_eq!(turn.surface, Protocol::OpenAiChat);
    assert_eq!(turn.model.as_deref(), Some("gpt-4o"));
    assert!(turn.stream);
    assert_eq!(turn.temperature, Some(0.5));
    assert_eq!(turn.top_p, Some(0.9));
    assert_eq!(turn.max_output_tokens, Some(100));
    assert_eq!(turn.session, SessionRef::Named("sess-1".into()));
    assert_eq!(turn.tool_choice.as_deref(), Some("get_weather"));
    assert_eq!(
        turn.tools,
        vec![Tool {
            name: "get_weather".into(),
            description: Some("Weather".into()),
            parameters: Some(json!({"type": "object", "properties": {"city": {"type": "string"}}})),
            strict: Some(true),
        }]
    );
    assert_eq!(
        Value::Object(turn.extra.clone()),
        json!({"user": "u-42", "parallel_tool_calls": false})
    );
    let call = |id: &str, args: &str| Item::ToolCall {
        call_id: id.into(),
        name: "get_weather".into(),
        arguments: args.into(),
    };
    assert_eq!(
        turn.input,
        vec![
            Item::Message {
                role: "system".into(),
                content: vec![Block::Text("Be brief.".into())]
            },
            Item::Message {
                role: "developer".into(),
                content: vec![Block::Text("Dev.".into())]
            },
            Item::Message {
                role: "user".into(),
                content: vec![
                    Block::Text("What is this?".into()),
                    Block::Image {
                        url: "https://x/img.png".into(),
                        detail: Some("low".into())
                    },
                    Block::File {
                        filename: Some("a.pdf".into()),
                        data: Some("data:application/pdf;base64,QQ==".into()),
                        url: None
                    },
                    Block::File {
                        filename: None,
                        data: None,
                        url: Some("file-123".into())
                    },
                ]
            },
            Item::assistant_text("Checking."),
            call("call_1", "{\"city\":\"Paris\"}"),
            call("call_2", "{}"),
            Item::ToolResult {
                call_id: "call_1".into(),
                output: "sunny".into()
            },
            Item::ToolResult {
                call_id: "call_2".into(),
                output: "rainy".into()
            },
            call("call_3", "{}"),
        ]
    );
}

#[test]
fn max_tokens_and_defaults() {
    let turn =
        parse(json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 7})).unwrap();
    assert_eq!(turn.max_output_tokens, Some(7));
    assert!(!turn.stream);
    assert_eq!(turn.model, None);
    assert_eq!(turn.session, SessionRef::New);
    assert!(turn.extra.is_empty());
    assert_eq!(turn.input, vec![Item::user_text("hi")]);

    // Explicit nulls mean "not given", as at OpenAI.
    let turn = parse(json!({
        "messages": [{"role": "user", "content": "hi"}],
        "temperature": null, "stream": null, "tools": null, "tool_choice": null, "session_id": null
    }))
    .unwrap();
    assert_eq!(turn.temperature, None);
    assert!(turn.tools.is_empty());
    assert_eq!(turn.session, SessionRef::New);
}

#[test]
fn assistant_reasoning_and_empty_content_beside_tool_calls() {
    let turn = parse(json!({"messages": [
        {"role": "assistant", "content": "", "reasoning_content": "hmm",
         "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
    ]}))
    .unwrap();
    assert_eq!(
        turn.input,
        vec![
            Item::Reasoning { text: "hmm".into() },
            Item::ToolCall {
                call_id: "c".into(),
                name: "f".into(),
                arguments: "{}".into()
            }
        ]
    );
}

#[test]
fn session_from_header_and_conflicts() {
    let body = json!({"messages": [{"role": "user", "content": "hi"}]}).to_string();
    let turn = ChatSurface
        .parse_request(body.as_bytes(), Some("from-header"))
        .unwrap();
    assert_eq!(turn.session, SessionRef::Named("from-header".into()));

    let body =
        json!({"session_id": "a", "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let turn = ChatSurface
        .parse_request(body.as_bytes(), Some("a"))
        .unwrap();
    assert_eq!(turn.session, SessionRef::Named("a".into()));
    assert!(!turn.extra.contains_key("session_id"));

    let err = ChatSurface
        .parse_request(body.as_bytes(), Some("b"))
        .unwrap_err();
    assert_eq!(err.code, "invalid_value");
    assert_eq!(err.param.as_deref(), Some("session_id"));
    assert!(err.message.contains("'a'") && err.message.contains("'b'"));
}

#[test]
fn refuses_bad_input_with_param_and_code() {
    let err = ChatSurface.parse_request(b"{not json", None).unwrap_err();
    assert_eq!((err.code, err.param), ("invalid_json", None));

    let err = ChatSurface.parse_request(b"[1]", None).unwrap_err();
    assert_eq!((err.code, err.param), ("invalid_type", None));

    let hi = json!([{"role": "user", "content": "hi"}]);
    let cases: Vec<(Value, &str, &str)> = vec![
        (json!({}), "missing_required_parameter", "messages"),
        (json!({"messages": "hi"}), "invalid_type", "messages"),
        (json!({"messages": []}), "invalid_value", "messages"),
        (json!({"messages": [1]}), "invalid_type", "messages[0]"),
        (
            json!({"messages": [{"content": "x"}]}),
            "missing_required_parameter",
            "messages[0].role",
        ),
        (
            json!({"messages": [{"role": 3, "content": "x"}]}),
            "invalid_type",
            "messages[0].role",
        ),
        (
            json!({"messages": [{"role": "robot", "content": "x"}]}),
            "invalid_value",
            "messages[0].role",
        ),
        (
            json!({"messages": [{"role": "user"}]}),
            "missing_required_parameter",
            "messages[0].content",
        ),
        (
            json!({"messages": [{"role": "user", "content": 5}]}),
            "invalid_type",
            "messages[0].content",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]}),
            "invalid_value",
            "messages[0].content[0].type",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "text"}]}]}),
            "missing_required_parameter",
            "messages[0].content[0].text",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"detail": "low"}}]}]}),
            "missing_required_parameter",
            "messages[0].content[0].image_url.url",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "file", "file": {"filename": "a"}}]}]}),
            "missing_required_parameter",
            "messages[0].content[0].file.file_data",
        ),
        (
            json!({"messages": [{"role": "assistant"}]}),
            "missing_required_parameter",
            "messages[0].content",
        ),
        (
            json!({"messages": [{"role": "assistant", "tool_calls": {}}]}),
            "invalid_type",
            "messages[0].tool_calls",
        ),
        (
            json!({"messages": [{"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]}]}),
            "missing_required_parameter",
            "messages[0].tool_calls[0].id",
        ),
        (
            json!({"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {}}}]}]}),
            "invalid_type",
            "messages[0].tool_calls[0].function.arguments",
        ),
        (
            json!({"messages": [{"role": "tool", "content": "x"}]}),
            "missing_required_parameter",
            "messages[0].tool_call_id",
        ),
        (
            json!({"messages": [{"role": "tool", "tool_call_id": "c", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}]}),
            "invalid_value",
            "messages[0].content[0].type",
        ),
        (
            json!({"messages": hi, "stream": "yes"}),
            "invalid_type",
            "stream",
        ),
        (
            json!({"messages": hi, "temperature": "hot"}),
            "invalid_type",
            "temperature",
        ),
        (
            json!({"messages": hi, "temperature": 3}),
            "invalid_value",
            "temperature",
        ),
        (
            json!({"messages": hi, "top_p": 1.5}),
            "invalid_value",
            "top_p",
        ),
        (
            json!({"messages": hi, "max_tokens": 1.5}),
            "invalid_type",
            "max_tokens",
        ),
        (
            json!({"messages": hi, "max_completion_tokens": -1}),
            "invalid_value",
            "max_completion_tokens",
        ),
        (json!({"messages": hi, "model": 4}), "invalid_type", "model"),
        (
            json!({"messages": hi, "tools": {}}),
            "invalid_type",
            "tools",
        ),
        (
            json!({"messages": hi, "tools": [{"type": "web_search"}]}),
            "invalid_value",
            "tools[0].type",
        ),
        (
            json!({"messages": hi, "tools": [{"type": "function", "function": {}}]}),
            "missing_required_parameter",
            "tools[0].function.name",
        ),
        (
            json!({"messages": hi, "tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]}),
            "invalid_type",
            "tools[0].function.parameters",
        ),
        (
            json!({"messages": hi, "tool_choice": "sometimes"}),
            "invalid_value",
            "tool_choice",
        ),
        (
            json!({"messages": hi, "tool_choice": 1}),
            "invalid_type",
            "tool_choice",
        ),
        (
            json!({"messages": hi, "tool_choice": {"type": "function", "function": {}}}),
            "missing_required_parameter",
            "tool_choice.function.name",
        ),
        (
            json!({"messages": hi, "session_id": 12}),
            "invalid_type",
            "session_id",
        ),
        (
            json!({"messages": hi, "session_id": ""}),
            "invalid_value",
            "session_id",
        ),
        (
            json!({"messages": hi, "stream_options": true}),
            "invalid_type",
            "stream_options",
        ),
        (json!({"messages": hi, "n": 2}), "invalid_value", "n"),
    ];
    for (body, code, param) in cases {
        let err = parse_err(body.clone());
        assert_eq!(
            (err.code, err.param.as_deref()),
            (code, Some(param)),
            "{body} -> {err:?}"
        );
        assert!(err.message.contains(param), "{body} -> {}", err.message);
    }
}

#[test]
fn error_messages_read_well() {
    let err =
        parse_err(json!({"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}));
    assert_eq!(
        err.message,
        "Invalid type for 'temperature': expected a number, but got a string instead."
    );
    let err = parse_err(json!({"model": "m"}));
    assert_eq!(err.message, "Missing required parameter: 'messages'.");
}

#[test]
fn response_ids_round_trip() {
    assert_eq!(ChatSurface.response_id(RUN), CHAT_ID);
    assert_eq!(ChatSurface.run_id(CHAT_ID).as_deref(), Some(RUN));
    assert_eq!(
        ChatSurface.run_id("resp_0123456789abcdef0123456789abcdef"),
        None
    );
    assert_eq!(ChatSurface.run_id("chatcmpl-abc"), None);
    assert_eq!(
        ChatSurface.run_id("chatcmpl-0123456789abcdef0123456789abcdeg"),
        None
    );
}
