//! The agent's request built from the projection and the turn.

use super::*;

#[test]
fn build_request_sends_the_whole_history_and_never_a_stored_conversation() {
    let history = vec![
        Item::Message {
            role: "system".into(),
            content: vec![Block::Text("summary".into())],
        },
        Item::user_text("Weather in Paris?"),
        Item::Reasoning {
            text: "think".into(),
        },
        Item::ToolCall {
            call_id: "c1".into(),
            name: "get_weather".into(),
            arguments: "{}".into(),
        },
        Item::ToolResult {
            call_id: "c1".into(),
            output: "sunny".into(),
        },
        Item::assistant_text("It is sunny."),
        Item::Approval(
            json!({"type": "mcp_approval_request", "id": "mcpr_1", "name": "t", "server_label": "s", "arguments": "{}"}),
        ),
    ];
    let mut turn = parse(json!({
        "model": "client-model",
        "conversation": "sess-1",
        "input": [{"role": "user", "content": [
            {"type": "input_text", "text": "And this?"},
            {"type": "input_image", "image_url": "https://x/a.png"},
            {"type": "input_image", "file_id": "file-9", "detail": "high"},
            {"type": "input_file", "filename": "n.txt", "file_data": "data:text/plain;base64,aGk="},
            {"type": "input_file", "file_id": "file-2"},
        ]}],
        "instructions": "Be brief.",
        "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}, {"type": "web_search"}],
        "tool_choice": "auto",
        "temperature": 0.2,
        "max_output_tokens": 50,
        "store": true,
        "reasoning": {"effort": "low"},
    }))
    .unwrap();
    let body = ResponsesUpstream.build_request(&history, &turn, "default");
    assert_eq!(
        body,
        json!({
            "model": "client-model",
            "stream": true,
            "store": false,
            "instructions": "Be brief.",
            "tools": [
                {"type": "function", "name": "get_weather", "parameters": {"type": "object"}},
                {"type": "web_search"},
            ],
            "tool_choice": "auto",
            "temperature": 0.2,
            "max_output_tokens": 50,
            "reasoning": {"effort": "low"},
            "input": [
                {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "summary"}]},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
                {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "It is sunny."}]},
                {"type": "mcp_approval_request", "id": "mcpr_1", "name": "t", "server_label": "s", "arguments": "{}"},
                {"type": "message", "role": "user", "content": [
                    {"type": "input_text", "text": "And this?"},
                    {"type": "input_image", "image_url": "https://x/a.png", "detail": "auto"},
                    {"type": "input_image", "file_id": "file-9", "detail": "high"},
                    {"type": "input_file", "filename": "n.txt", "file_data": "data:text/plain;base64,aGk="},
                    {"type": "input_file", "file_id": "file-2"},
                ]},
            ],
        })
    );

    // Another surface's extras are not Responses fields; the typed fields still go.
    turn.surface = Protocol::OpenAiChat;
    turn.model = None;
    turn.tool_choice = Some("get_weather".into());
    turn.extra
        .insert("previous_response_id".into(), json!("resp_x"));
    let body = ResponsesUpstream.build_request(&[], &turn, "default");
    assert_eq!(body["model"], "default");
    assert_eq!(
        body["tool_choice"],
        json!({"type": "function", "name": "get_weather"})
    );
    assert_eq!(body["tools"].as_array().unwrap().len(), 1);
    assert!(body.get("reasoning").is_none());
    assert!(body.get("previous_response_id").is_none());

    // Even from this surface, extras cannot name a stored conversation.
    turn.surface = Protocol::OpenAiResponses;
    turn.extra.insert("conversation".into(), json!("c"));
    let body = ResponsesUpstream.build_request(&[], &turn, "default");
    assert!(body.get("previous_response_id").is_none());
    assert!(body.get("conversation").is_none());
    assert_eq!(body["store"], false);
    assert_eq!(ResponsesUpstream.protocol(), Protocol::OpenAiResponses);
}

#[test]
fn tools_go_to_the_agent_with_every_field_given() {
    let mut turn = TurnRequest::new(Protocol::OpenAiChat);
    turn.input = vec![Item::user_text("hi")];
    turn.tools = Tool::samples();
    let body = ResponsesUpstream.build_request(&[], &turn, "m");
    assert_eq!(
        body["tools"],
        json!([
            {"type": "function", "name": "f", "description": "does f",
             "parameters": {"type": "object"}, "strict": true},
            {"type": "function", "name": "g"},
        ])
    );
}
