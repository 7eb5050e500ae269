//! The agent's request built from the projection and the turn.

use super::*;

#[test]
fn builds_a_multi_turn_request_with_tool_calls() {
    let history = vec![
        Item::Message {
            role: "system".into(),
            content: vec![Block::Text("summary of earlier turns".into())],
        },
        Item::user_text("weather in Paris and Rome?"),
        Item::Reasoning {
            text: "need two calls".into(),
        },
        Item::assistant_text("Checking both."),
        call("call_1", "weather", "{\"city\":\"Paris\"}"),
        Item::Reasoning {
            text: "and the other".into(),
        },
        call("call_2", "weather", "{\"city\":\"Rome\"}"),
        result("call_1", "sunny"),
        result("call_2", "rain"),
        Item::assistant_text("Paris sunny, Rome rain."),
        Item::user_text("and Oslo?"),
        call("call_3", "weather", "{\"city\":\"Oslo\"}"),
        Item::Approval(json!({"type": "mcp_approval_request"})),
        result("call_3", "snow"),
    ];
    let mut turn = TurnRequest::new(Protocol::OpenAiChat);
    turn.input = vec![Item::Message {
        role: "user".into(),
        content: vec![
            Block::Text("and this?".into()),
            Block::Image {
                url: "data:image/png;base64,AAAA".into(),
                detail: Some("high".into()),
            },
            Block::File {
                filename: Some("a.txt".into()),
                data: Some("data:text/plain;base64,aGk=".into()),
                url: None,
            },
            Block::File {
                filename: None,
                data: None,
                url: Some("file-9".into()),
            },
        ],
    }];
    turn.instructions = Some("Be brief.".into());
    turn.session = SessionRef::Named("secret-session".into());
    turn.tools = vec![Tool {
        name: "weather".into(),
        description: Some("Weather by city".into()),
        parameters: Some(json!({"type": "object"})),
        strict: None,
    }];
    turn.tool_choice = Some("weather".into());
    turn.temperature = Some(0.25);
    turn.top_p = Some(0.5);
    turn.max_output_tokens = Some(256);
    turn.extra.insert("user".into(), json!("u-1"));
    turn.extra.insert("session_id".into(), json!("leak"));
    turn.extra.insert("stream".into(), json!(false));

    let body = ChatUpstream.build_request(&history, &turn, "default-model");
    let tc = |id: &str, args: &str| json!({"id": id, "type": "function", "function": {"name": "weather", "arguments": args}});
    assert_eq!(
        body,
        json!({
            "model": "default-model",
            "stream": true,
            "stream_options": {"include_usage": true},
            "user": "u-1",
            "temperature": 0.25,
            "top_p": 0.5,
            "max_tokens": 256,
            "tools": [{"type": "function", "function": {
                "name": "weather", "description": "Weather by city", "parameters": {"type": "object"}}}],
            "tool_choice": {"type": "function", "function": {"name": "weather"}},
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "system", "content": "summary of earlier turns"},
                {"role": "user", "content": "weather in Paris and Rome?"},
                {"role": "assistant", "content": "Checking both.", "tool_calls": [
                    tc("call_1", "{\"city\":\"Paris\"}"), tc("call_2", "{\"city\":\"Rome\"}")]},
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                {"role": "tool", "tool_call_id": "call_2", "content": "rain"},
                {"role": "assistant", "content": "Paris sunny, Rome rain."},
                {"role": "user", "content": "and Oslo?"},
                {"role": "assistant", "content": null, "tool_calls": [tc("call_3", "{\"city\":\"Oslo\"}")]},
                {"role": "tool", "tool_call_id": "call_3", "content": "snow"},
                {"role": "user", "content": [
                    {"type": "text", "text": "and this?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "high"}},
                    {"type": "file", "file": {"filename": "a.txt", "file_data": "data:text/plain;base64,aGk="}},
                    {"type": "file", "file": {"file_id": "file-9"}},
                ]},
            ],
        })
    );
    assert!(!body.to_string().contains("secret-session"));
    assert!(!body.to_string().contains("leak"));
}

#[test]
fn extra_only_travels_between_chat_surfaces() {
    let mut turn = TurnRequest::new(Protocol::OpenAiResponses);
    turn.model = Some("m".into());
    turn.input = vec![Item::user_text("hi")];
    turn.extra.insert("store".into(), json!(true));
    turn.tool_choice = Some("required".into());
    let body = ChatUpstream.build_request(&[], &turn, "default");
    assert_eq!(
        body,
        json!({
            "model": "m",
            "stream": true,
            "stream_options": {"include_usage": true},
            "tool_choice": "required",
            "messages": [{"role": "user", "content": "hi"}],
        })
    );
}

#[test]
fn tools_go_to_the_agent_with_every_field_given() {
    let mut turn = TurnRequest::new(Protocol::OpenAiResponses);
    turn.input = vec![Item::user_text("hi")];
    turn.tools = Tool::samples();
    let body = ChatUpstream.build_request(&[], &turn, "m");
    assert_eq!(
        body["tools"],
        json!([
            {"type": "function", "function": {
                "name": "f", "description": "does f", "parameters": {"type": "object"}, "strict": true}},
            {"type": "function", "function": {"name": "g"}},
        ])
    );
}
