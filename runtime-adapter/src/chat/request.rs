//! The agent's Chat Completions request for a turn: the session's projection and the
//! turn's input as messages, always streaming.

use serde_json::{json, Map, Value};

use super::wire::tool_call_json;
use super::{stream, ChatUpstream};
use crate::item::{Block, Item};
use crate::protocol::Protocol;
use crate::turn::{Tool, TurnRequest};
use crate::upstream::{Stateless, StreamParser};

/// Fields of `extra` never forwarded: Tether sets them itself, or they name a session the
/// agent must not know about.
const NOT_FORWARDED: &[&str] = &[
    "model",
    "messages",
    "stream",
    "stream_options",
    "session_id",
    "max_completion_tokens",
];

impl Stateless for ChatUpstream {
    const PROTOCOL: Protocol = Protocol::OpenAiChat;
    const PATH: &'static str = "/v1/chat/completions";

    fn build_request(&self, history: &[Item], turn: &TurnRequest, default_model: &str) -> Value {
        let mut body = Map::new();
        if turn.surface == Protocol::OpenAiChat {
            for (k, v) in &turn.extra {
                if !NOT_FORWARDED.contains(&k.as_str()) {
                    body.insert(k.clone(), v.clone());
                }
            }
        }
        let model = turn
            .model
            .as_deref()
            .filter(|m| !m.is_empty())
            .unwrap_or(default_model);
        let mut messages = Vec::new();
        if let Some(instructions) = &turn.instructions {
            messages.push(json!({ "role": "system", "content": instructions }));
        }
        messages.extend(chat_messages(turn.system.iter()));
        messages.extend(chat_messages(history.iter().chain(&turn.input)));
        body.insert("model".into(), json!(model));
        body.insert("messages".into(), Value::Array(messages));
        body.insert("stream".into(), json!(true));
        body.insert("stream_options".into(), json!({ "include_usage": true }));
        if !turn.tools.is_empty() {
            let tools = turn.tools.iter().map(chat_tool).collect();
            body.insert("tools".into(), Value::Array(tools));
        }
        if let Some(choice) = &turn.tool_choice {
            let choice = match choice.as_str() {
                "auto" | "none" | "required" => json!(choice),
                name => json!({ "type": "function", "function": { "name": name } }),
            };
            body.insert("tool_choice".into(), choice);
        }
        if let Some(t) = turn.temperature {
            body.insert("temperature".into(), json!(t));
        }
        if let Some(p) = turn.top_p {
            body.insert("top_p".into(), json!(p));
        }
        if let Some(m) = turn.max_output_tokens {
            body.insert("max_tokens".into(), json!(m));
        }
        Value::Object(body)
    }

    fn body_parser(&self, content_type: &str) -> Box<dyn StreamParser> {
        stream::body_parser(content_type)
    }
}

fn chat_tool(tool: &Tool) -> Value {
    json!({ "type": "function", "function": tool.function_fields() })
}

/// History items as chat messages. Tool calls join the assistant message just before
/// them, because Chat Completions carries a turn's calls on one assistant message.
fn chat_messages<'a>(items: impl Iterator<Item = &'a Item>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    // Whether the last message is an assistant message that tool calls may join.
    let mut open_assistant = false;
    for item in items {
        match item {
            Item::Message { role, content } => {
                out.push(json!({ "role": role, "content": chat_content(content) }));
                open_assistant = role == "assistant";
            }
            Item::ToolCall {
                call_id,
                name,
                arguments,
            } => {
                let call = tool_call_json(call_id, name, arguments);
                match out.last_mut() {
                    Some(last) if open_assistant => match last.get_mut("tool_calls") {
                        Some(Value::Array(calls)) => calls.push(call),
                        _ => last["tool_calls"] = json!([call]),
                    },
                    _ => {
                        out.push(
                            json!({ "role": "assistant", "content": null, "tool_calls": [call] }),
                        );
                        open_assistant = true;
                    }
                }
            }
            Item::ToolResult { call_id, output } => {
                out.push(json!({ "role": "tool", "tool_call_id": call_id, "content": output }));
                open_assistant = false;
            }
            // Chat has no reasoning input, and approvals are another protocol's items;
            // neither interrupts the assistant message tool calls attach to.
            Item::Reasoning { .. } | Item::Approval(_) => {}
        }
    }
    out
}

fn chat_content(blocks: &[Block]) -> Value {
    if blocks.iter().all(|b| matches!(b, Block::Text(_))) {
        let text: String = blocks
            .iter()
            .filter_map(|b| match b {
                Block::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        return Value::String(text);
    }
    Value::Array(
        blocks
            .iter()
            .map(|b| match b {
                Block::Text(t) => json!({ "type": "text", "text": t }),
                Block::Image { url, detail } => {
                    let mut image = json!({ "url": url });
                    if let Some(d) = detail {
                        image["detail"] = json!(d);
                    }
                    json!({ "type": "image_url", "image_url": image })
                }
                Block::File {
                    filename,
                    data,
                    url,
                } => {
                    let mut file = Map::new();
                    if let Some(f) = filename {
                        file.insert("filename".into(), json!(f));
                    }
                    if let Some(d) = data {
                        file.insert("file_data".into(), json!(d));
                    } else if let Some(u) = url {
                        // Chat file parts name stored files by id; that is what a file
                        // reference without inline data is.
                        file.insert("file_id".into(), json!(u));
                    }
                    json!({ "type": "file", "file": file })
                }
            })
            .collect(),
    )
}
