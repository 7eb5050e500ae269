//! ADK `Content` parts and transcript items, both ways: a client's `new_message` and the
//! agent's function calls and responses as items, history items as parts again (for a
//! turn from another surface and for re-created sessions).

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use super::{field, field_str};
use crate::item::{Block, Item};

/// The parts of a Content (none when it has no list of them).
pub(super) fn content_parts(content: &Value) -> &[Value] {
    content
        .get("parts")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The parts of an ADK event's `content`.
pub(super) fn event_parts(event: &Map<String, Value>) -> &[Value] {
    event.get("content").map_or(&[], content_parts)
}

/// Whether a part is the model's reasoning (`"thought": true`) rather than its answer.
pub(super) fn is_thought(part: &Value) -> bool {
    part.get("thought").and_then(Value::as_bool) == Some(true)
}

// ---------------------------------------------------------------------------------------
// Parts to items
// ---------------------------------------------------------------------------------------

/// The transcript items of a `new_message` Content: its text and media as one user
/// message, function responses (a client answering a long-running tool) as tool results.
pub(super) fn message_items(content: &Value) -> Vec<Item> {
    let mut blocks = Vec::new();
    let mut results = Vec::new();
    for part in content_parts(content) {
        if let Some(block) = part_block(part) {
            blocks.push(block);
        } else if let Some(fr) = part
            .as_object()
            .and_then(|p| field(p, "function_response", "functionResponse"))
        {
            results.push(tool_result(fr, ""));
        }
    }
    let mut items = Vec::new();
    if !blocks.is_empty() {
        items.push(Item::Message {
            role: "user".into(),
            content: blocks,
        });
    }
    items.extend(results);
    items
}

/// A Content part as a message block: text (not thoughts), inline data, file data.
fn part_block(part: &Value) -> Option<Block> {
    let p = part.as_object()?;
    if let Some(text) = p.get("text").and_then(Value::as_str) {
        return (!is_thought(part)).then(|| Block::Text(text.to_owned()));
    }
    let name =
        |o: &Map<String, Value>| field_str(o, "display_name", "displayName").map(str::to_owned);
    if let Some(Value::Object(blob)) = field(p, "inline_data", "inlineData") {
        let mime = field_str(blob, "mime_type", "mimeType").unwrap_or("application/octet-stream");
        let url = format!(
            "data:{mime};base64,{}",
            blob.get("data").and_then(Value::as_str).unwrap_or("")
        );
        return Some(if mime.starts_with("image/") {
            Block::Image { url, detail: None }
        } else {
            Block::File {
                filename: name(blob),
                data: Some(url),
                url: None,
            }
        });
    }
    if let Some(Value::Object(file)) = field(p, "file_data", "fileData") {
        let uri = field_str(file, "file_uri", "fileUri")?.to_owned();
        let mime = field_str(file, "mime_type", "mimeType").unwrap_or("");
        return Some(if mime.starts_with("image/") {
            Block::Image {
                url: uri,
                detail: None,
            }
        } else {
            Block::File {
                filename: name(file),
                data: None,
                url: Some(uri),
            }
        });
    }
    None
}

/// A `functionCall` as a tool call (`fallback_id` when ADK gave it none).
pub(super) fn tool_call(fc: &Value, fallback_id: &str) -> Item {
    let s = |k: &str| fc.get(k).and_then(Value::as_str);
    Item::ToolCall {
        call_id: s("id").unwrap_or(fallback_id).to_owned(),
        name: s("name").unwrap_or("").to_owned(),
        arguments: fc
            .get("args")
            .map(Value::to_string)
            .unwrap_or_else(|| "{}".into()),
    }
}

/// A `functionResponse` as a tool result (`fallback_id` when ADK gave it none).
pub(super) fn tool_result(fr: &Value, fallback_id: &str) -> Item {
    Item::ToolResult {
        call_id: fr
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or(fallback_id)
            .to_owned(),
        output: fr
            .get("response")
            .map(Value::to_string)
            .unwrap_or_else(|| "{}".into()),
    }
}

// ---------------------------------------------------------------------------------------
// Items to parts
// ---------------------------------------------------------------------------------------

/// Content parts for one history item (`names`: tool names by call id, for responses).
pub(super) fn item_parts(item: &Item, names: &HashMap<&str, &str>) -> Vec<Value> {
    match item {
        Item::Message { content, .. } => content.iter().filter_map(block_part).collect(),
        Item::ToolCall {
            call_id,
            name,
            arguments,
        } => {
            let args = match serde_json::from_str::<Value>(arguments) {
                Ok(v @ Value::Object(_)) => v,
                Ok(Value::Null) => json!({}),
                Err(_) if arguments.trim().is_empty() => json!({}),
                Ok(v) => json!({ "value": v }),
                Err(_) => json!({ "arguments": arguments }),
            };
            vec![json!({ "functionCall": { "id": call_id, "name": name, "args": args } })]
        }
        Item::ToolResult { call_id, output } => {
            // ADK wraps a tool's non-dict return as {"result": …}; so does this.
            let response = match serde_json::from_str::<Value>(output) {
                Ok(v @ Value::Object(_)) => v,
                Ok(v) => json!({ "result": v }),
                Err(_) => json!({ "result": output }),
            };
            let name = names.get(call_id.as_str()).copied().unwrap_or("");
            vec![
                json!({ "functionResponse": { "id": call_id, "name": name, "response": response } }),
            ]
        }
        _ => Vec::new(),
    }
}

fn block_part(block: &Block) -> Option<Value> {
    // A `data:` URL travels inline; anything else by reference.
    let media = |url: &str| match url
        .strip_prefix("data:")
        .and_then(|r| r.split_once(";base64,"))
    {
        Some((mime, data)) => json!({ "inlineData": { "mimeType": mime, "data": data } }),
        None => json!({ "fileData": { "fileUri": url } }),
    };
    match block {
        Block::Text(t) => Some(json!({ "text": t })),
        Block::Image { url, .. } => Some(media(url)),
        Block::File { data: Some(d), .. } => Some(media(d)),
        Block::File { url: Some(u), .. } => Some(media(u)),
        Block::File { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adk::test_support::*;

    #[test]
    fn new_message_parts_become_items() {
        let turn = run_turn(
            "/run",
            json!({"user_id": "u", "session_id": "s", "new_message": {"role": "user", "parts": [
                {"text": "look "},
                {"text": "secret plan", "thought": true},
                {"inlineData": {"mimeType": "image/png", "data": "AAAA"}},
                {"inline_data": {"mime_type": "text/plain", "data": "aGk=", "display_name": "a.txt"}},
                {"fileData": {"fileUri": "gs://b/doc.pdf", "mimeType": "application/pdf"}},
                {"functionResponse": {"id": "c1", "name": "f", "response": {"ok": true}}}
            ]}}),
        );
        assert_eq!(
            turn.input,
            vec![
                Item::Message {
                    role: "user".into(),
                    content: vec![
                        Block::Text("look ".into()),
                        Block::Image {
                            url: "data:image/png;base64,AAAA".into(),
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
                            url: Some("gs://b/doc.pdf".into())
                        },
                    ]
                },
                Item::ToolResult {
                    call_id: "c1".into(),
                    output: r#"{"ok":true}"#.into()
                },
            ]
        );
    }
}
