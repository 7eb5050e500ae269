//! What the LangGraph API's wire holds that the rest of the adapter shares: thread ids as
//! the client and the agent know them, LangGraph messages to and from transcript items, and
//! the run events Tether records.

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::item::{Block, Item};

/// Thread metadata Tether stamps on the threads it creates: the owning account (the
/// filter `POST /threads/search` and `/count` get) and the client's thread id (what a
/// search result is shown as). Removed from every answer.
pub(super) const META_ACCOUNT: &str = "tether_account_id";
pub(super) const META_THREAD: &str = "tether_thread_id";

/// The thread id the agent knows a client's thread by: a UUID (v8, as LangGraph requires
/// one) from the account and the client's id, so that two accounts' threads never meet and
/// no id a client can send names another account's thread.
pub fn agent_thread_id(account_id: &str, thread_id: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(b"tether-langgraph-thread\0");
    hash.update(account_id.as_bytes());
    hash.update([0]);
    hash.update(thread_id.to_ascii_lowercase().as_bytes());
    let digest = hash.finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_custom_bytes(bytes)
        .into_uuid()
        .hyphenated()
        .to_string()
}

/// A thread id as LangGraph takes it: a UUID, in its canonical (lowercase, hyphenated)
/// spelling, or `None`.
pub(super) fn canonical_thread_id(id: &str) -> Option<String> {
    uuid::Uuid::parse_str(id)
        .ok()
        .map(|u| u.hyphenated().to_string())
}

/// Replaces the agent's thread id by the client's everywhere in an answer (ids, paths in
/// strings), and removes the metadata Tether stamped.
pub(super) fn unscope(value: &mut Value, agent_thread: &str, thread: &str) {
    match value {
        Value::String(s) if s.contains(agent_thread) => *s = s.replace(agent_thread, thread),
        Value::Array(items) => items
            .iter_mut()
            .for_each(|v| unscope(v, agent_thread, thread)),
        Value::Object(obj) => {
            strip_metadata(obj);
            obj.values_mut()
                .for_each(|v| unscope(v, agent_thread, thread));
        }
        _ => {}
    }
}

/// A thread object's (or a list of them) `thread_id` shown as the client's, from the
/// metadata Tether stamped; then `unscope` for each.
pub(super) fn unscope_threads(value: &mut Value) {
    let threads = match value {
        Value::Array(items) => items.iter_mut().collect::<Vec<_>>(),
        other => vec![other],
    };
    for thread in threads {
        let own = thread["metadata"][META_THREAD].as_str().map(str::to_owned);
        let agent = thread["thread_id"].as_str().map(str::to_owned);
        if let (Some(own), Some(agent)) = (own, agent) {
            unscope(thread, &agent, &own);
        } else if let Value::Object(obj) = thread {
            strip_metadata(obj);
        }
    }
}

fn strip_metadata(obj: &mut Map<String, Value>) {
    if let Some(Value::Object(meta)) = obj.get_mut("metadata") {
        meta.remove(META_ACCOUNT);
        meta.remove(META_THREAD);
    }
}

/// The metadata a thread Tether creates carries.
pub(super) fn thread_metadata(account_id: &str, thread_id: &str) -> Value {
    json!({ META_ACCOUNT: account_id, META_THREAD: thread_id })
}

// ---------------------------------------------------------------------------------------
// Messages
// ---------------------------------------------------------------------------------------

/// The text of a LangChain message's `content`: a string, or text content blocks.
pub(super) fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| match p {
                Value::String(s) => Some(s.as_str()),
                p => p.get("text").and_then(Value::as_str),
            })
            .collect(),
        _ => String::new(),
    }
}

/// A message's role, whatever the spelling: LangChain's `type` (`human`, `ai`, `tool`,
/// `system`, also as `…MessageChunk`) or OpenAI's `role`.
fn message_role(message: &Value) -> Option<&'static str> {
    let kind = message
        .get("type")
        .or_else(|| message.get("role"))
        .and_then(Value::as_str)?;
    Some(match kind.trim_end_matches("MessageChunk") {
        "human" | "user" | "HumanMessage" | "Human" => "user",
        "ai" | "assistant" | "AIMessage" | "AI" => "assistant",
        "tool" | "ToolMessage" | "Tool" => "tool",
        "system" | "developer" | "SystemMessage" | "System" => "system",
        _ => return None,
    })
}

/// One LangGraph message as transcript items: a message's text, an AI message's tool
/// calls, a tool message's result.
pub(super) fn message_items(message: &Value) -> Vec<Item> {
    let text = content_text(&message["content"]);
    match message_role(message) {
        Some("tool") => vec![Item::ToolResult {
            call_id: message["tool_call_id"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            output: text,
        }],
        Some(role) => {
            let mut items = Vec::new();
            if !text.is_empty() || role != "assistant" {
                items.push(Item::Message {
                    role: role.into(),
                    content: vec![Block::Text(text)],
                });
            }
            for call in message["tool_calls"].as_array().into_iter().flatten() {
                items.push(Item::ToolCall {
                    call_id: call["id"].as_str().unwrap_or_default().to_owned(),
                    name: call["name"].as_str().unwrap_or_default().to_owned(),
                    arguments: call["args"].to_string(),
                });
            }
            items
        }
        None => Vec::new(),
    }
}

/// The input messages of a run (`input.messages`: message objects, `[role, text]` pairs
/// or strings) as transcript items.
pub(super) fn input_items(input: &Value) -> Vec<Item> {
    let messages = match input.get("messages") {
        Some(Value::Array(m)) => m.clone(),
        Some(one @ Value::Object(_)) => vec![one.clone()],
        _ => return Vec::new(),
    };
    messages
        .iter()
        .flat_map(|m| match m {
            Value::String(text) => vec![Item::user_text(text)],
            Value::Array(pair) => {
                let role = pair.first().cloned().unwrap_or(Value::Null);
                let content = pair.get(1).cloned().unwrap_or(Value::Null);
                message_items(&json!({ "role": role, "content": content }))
            }
            m => message_items(m),
        })
        .collect()
}

/// Transcript items as LangGraph messages (for a thread's state): messages by role, a tool
/// call added to the AI message before it, results as tool messages.
pub(super) fn history_messages(history: &[Item]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for item in history {
        match item {
            Item::Message { role, .. } => {
                let kind = match role.as_str() {
                    "user" => "human",
                    "assistant" => "ai",
                    _ => "system",
                };
                out.push(json!({ "type": kind, "content": item.text() }));
            }
            Item::ToolCall {
                call_id,
                name,
                arguments,
            } => {
                let args: Value = serde_json::from_str(arguments)
                    .unwrap_or_else(|_| json!({ "value": arguments }));
                let call =
                    json!({ "id": call_id, "name": name, "args": args, "type": "tool_call" });
                match out.last_mut() {
                    Some(last) if last["type"] == "ai" => {
                        if !last["tool_calls"].is_array() {
                            last["tool_calls"] = json!([]);
                        }
                        if let Some(calls) = last["tool_calls"].as_array_mut() {
                            calls.push(call);
                        }
                    }
                    _ => out.push(json!({ "type": "ai", "content": "", "tool_calls": [call] })),
                }
            }
            Item::ToolResult { call_id, output } => {
                out.push(json!({ "type": "tool", "tool_call_id": call_id, "content": output }))
            }
            Item::Reasoning { .. } | Item::Approval(_) => {}
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// Recorded events
// ---------------------------------------------------------------------------------------

/// A streamed event as Tether records it: `{"event": name, "data": …}`, with `"added":
/// true` for an event of a stream mode Tether asked for itself (not shown to the client).
pub(super) fn frame(event: &str, data: Value, added: bool) -> Value {
    let mut frame = json!({ "event": event, "data": data });
    if added {
        frame["added"] = json!(true);
    }
    frame
}

/// The stream modes a run's request asks for, as a list (LangGraph's default: `values`).
pub(super) fn stream_modes(body: &Map<String, Value>) -> Vec<String> {
    match body.get("stream_mode") {
        Some(Value::String(mode)) => vec![mode.clone()],
        Some(Value::Array(modes)) => modes
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => vec!["values".into()],
    }
}
