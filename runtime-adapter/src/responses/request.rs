//! The agent's Responses request for a turn: the session's projection and the turn's input
//! as input items, always streaming, never stored at the agent.

use serde_json::{json, Value};

use super::{stream, ResponsesUpstream};
use crate::item::{Block, Item};
use crate::protocol::Protocol;
use crate::turn::{Tool, TurnRequest};
use crate::upstream::{Stateless, StreamParser};

/// Fields Tether decides for the agent request whatever the client sent: the agent gets
/// the whole history each turn and must not keep (or look up) any of its own.
const RESERVED_UPSTREAM: [&str; 6] = [
    "model",
    "input",
    "stream",
    "store",
    "previous_response_id",
    "conversation",
];

/// An item as a Responses input item (`None` for reasoning, which an agent cannot take
/// back without its original ids).
pub(crate) fn item_json(item: &Item) -> Option<Value> {
    Some(match item {
        Item::Message { role, content } => {
            let assistant = role == "assistant";
            let parts: Vec<Value> = content
                .iter()
                .filter_map(|b| match b {
                    Block::Text(t) if assistant => {
                        Some(json!({ "type": "output_text", "text": t }))
                    }
                    Block::Text(t) => Some(json!({ "type": "input_text", "text": t })),
                    // Assistant messages take output parts only.
                    _ if assistant => None,
                    Block::Image { url, detail } => {
                        let mut part = json!({
                            "type": "input_image",
                            "detail": detail.as_deref().unwrap_or("auto"),
                        });
                        part[if is_url(url) { "image_url" } else { "file_id" }] = json!(url);
                        Some(part)
                    }
                    Block::File {
                        filename,
                        data,
                        url,
                    } => {
                        let mut part = json!({ "type": "input_file" });
                        if let Some(f) = filename {
                            part["filename"] = json!(f);
                        }
                        if let Some(d) = data {
                            part["file_data"] = json!(d);
                        }
                        if let Some(u) = url {
                            part[if is_url(u) { "file_url" } else { "file_id" }] = json!(u);
                        }
                        Some(part)
                    }
                })
                .collect();
            json!({ "type": "message", "role": role, "content": parts })
        }
        Item::ToolCall {
            call_id,
            name,
            arguments,
        } => {
            json!({ "type": "function_call", "call_id": call_id, "name": name, "arguments": arguments })
        }
        Item::ToolResult { call_id, output } => {
            json!({ "type": "function_call_output", "call_id": call_id, "output": output })
        }
        // Upstream reasoning items need their original ids or encrypted content, which
        // the log does not keep; the model does fine without its old reasoning.
        Item::Reasoning { .. } => return None,
        Item::Approval(v) => v.clone(),
    })
}

fn is_url(s: &str) -> bool {
    s.contains(':')
}

fn tool_json(t: &Tool) -> Value {
    let mut v = t.function_fields();
    v.insert("type".into(), json!("function"));
    Value::Object(v)
}

impl Stateless for ResponsesUpstream {
    const PROTOCOL: Protocol = Protocol::OpenAiResponses;
    const PATH: &'static str = "/v1/responses";

    fn build_request(&self, history: &[Item], turn: &TurnRequest, default_model: &str) -> Value {
        let input: Vec<Value> = turn
            .system
            .iter()
            .chain(history)
            .chain(&turn.input)
            .filter_map(item_json)
            .collect();
        let mut body = json!({
            "model": turn.model.as_deref().unwrap_or(default_model),
            "input": input,
            "stream": true,
            "store": false,
        });
        if let Some(i) = &turn.instructions {
            body["instructions"] = json!(i);
        }
        let mut tools: Vec<Value> = turn.tools.iter().map(tool_json).collect();
        if let Some(choice) = &turn.tool_choice {
            body["tool_choice"] = match choice.as_str() {
                "auto" | "none" | "required" => json!(choice),
                name => json!({ "type": "function", "name": name }),
            };
        }
        if let Some(t) = turn.temperature {
            body["temperature"] = json!(t);
        }
        if let Some(p) = turn.top_p {
            body["top_p"] = json!(p);
        }
        if let Some(m) = turn.max_output_tokens {
            body["max_output_tokens"] = json!(m);
        }
        if turn.surface == Protocol::OpenAiResponses {
            for (k, v) in &turn.extra {
                match k.as_str() {
                    k if RESERVED_UPSTREAM.contains(&k) => {}
                    "tools" => tools.extend(v.as_array().into_iter().flatten().cloned()),
                    _ if body.get(k).is_some() => {}
                    _ => body[k] = v.clone(),
                }
            }
        }
        if !tools.is_empty() {
            body["tools"] = Value::Array(tools);
        }
        body
    }

    fn body_parser(&self, content_type: &str) -> Box<dyn StreamParser> {
        stream::body_parser(content_type)
    }
}
