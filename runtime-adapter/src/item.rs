//! `Item`: one model-facing history element, and its one mapping to and from log events.

use serde_json::{json, Value};
use session_log::{Event, EventType, NewEvent};

/// A piece of message content.
#[derive(Clone, Debug, PartialEq)]
pub enum Block {
    Text(String),
    /// An image by URL (a `data:` URL or an upload reference).
    Image {
        url: String,
        detail: Option<String>,
    },
    /// A file by inline data (a `data:` URL) and/or URL/upload reference.
    File {
        filename: Option<String>,
        data: Option<String>,
        url: Option<String>,
    },
}

/// One element of the history a model sees. Each maps to exactly one transcript event.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    /// `role` is `user`, `assistant`, `system` or `developer`.
    Message {
        role: String,
        content: Vec<Block>,
    },
    Reasoning {
        text: String,
    },
    ToolCall {
        call_id: String,
        name: String,
        arguments: String,
    },
    ToolResult {
        call_id: String,
        output: String,
    },
    /// An approval request or response, kept verbatim in the upstream's own shape.
    Approval(Value),
}

impl Item {
    pub fn user_text(text: &str) -> Item {
        Item::Message {
            role: "user".into(),
            content: vec![Block::Text(text.into())],
        }
    }

    pub fn assistant_text(text: &str) -> Item {
        Item::Message {
            role: "assistant".into(),
            content: vec![Block::Text(text.into())],
        }
    }

    /// All text blocks of a message joined, or the text of reasoning/tool output.
    pub fn text(&self) -> String {
        match self {
            Item::Message { content, .. } => content
                .iter()
                .filter_map(|b| match b {
                    Block::Text(t) => Some(t.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join(""),
            Item::Reasoning { text } => text.clone(),
            Item::ToolResult { output, .. } => output.clone(),
            Item::ToolCall { arguments, .. } => arguments.clone(),
            Item::Approval(_) => String::new(),
        }
    }

    /// The event that records this item (without run fields).
    pub fn to_event(&self, account_id: &str, session_id: &str) -> NewEvent {
        let (event_type, role, content) = match self {
            Item::Message { role, content } => {
                let mut c = json!({ "text": self.text() });
                let plain = content.len() == 1 && matches!(content[0], Block::Text(_));
                if !plain && !content.is_empty() {
                    c["content"] = Value::Array(content.iter().map(block_to_json).collect());
                }
                (EventType::Message, role.as_str(), c)
            }
            Item::Reasoning { text } => {
                (EventType::Reasoning, "assistant", json!({ "text": text }))
            }
            Item::ToolCall {
                call_id,
                name,
                arguments,
            } => (
                EventType::ToolCall,
                "assistant",
                json!({ "call_id": call_id, "name": name, "arguments": arguments }),
            ),
            Item::ToolResult { call_id, output } => (
                EventType::ToolResult,
                "tool",
                json!({ "call_id": call_id, "output": output }),
            ),
            Item::Approval(v) => (EventType::Approval, "assistant", v.clone()),
        };
        NewEvent::new(account_id, session_id, event_type, content).with_role(role)
    }

    /// The item a transcript event records; `None` for control events.
    pub fn from_event(event: &Event) -> Option<Item> {
        let c = &event.content;
        let s = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        Some(match event.event_type {
            EventType::Message => {
                let content = match c.get("content").and_then(Value::as_array) {
                    Some(blocks) => blocks.iter().filter_map(block_from_json).collect(),
                    None => vec![Block::Text(s("text"))],
                };
                Item::Message {
                    role: event.role.clone().unwrap_or_else(|| "user".into()),
                    content,
                }
            }
            EventType::Reasoning => Item::Reasoning { text: s("text") },
            EventType::ToolCall => Item::ToolCall {
                call_id: s("call_id"),
                name: s("name"),
                arguments: s("arguments"),
            },
            EventType::ToolResult => Item::ToolResult {
                call_id: s("call_id"),
                output: s("output"),
            },
            EventType::Approval => Item::Approval(c.clone()),
            _ => return None,
        })
    }
}

fn block_to_json(b: &Block) -> Value {
    match b {
        Block::Text(t) => json!({ "type": "text", "text": t }),
        Block::Image { url, detail } => {
            json!({ "type": "image", "image_url": url, "detail": detail })
        }
        Block::File {
            filename,
            data,
            url,
        } => {
            json!({ "type": "file", "filename": filename, "file_data": data, "file_url": url })
        }
    }
}

fn block_from_json(v: &Value) -> Option<Block> {
    let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    match v.get("type")?.as_str()? {
        "text" => Some(Block::Text(s("text")?)),
        "image" => Some(Block::Image {
            url: s("image_url")?,
            detail: s("detail"),
        }),
        "file" => Some(Block::File {
            filename: s("filename"),
            data: s("file_data"),
            url: s("file_url"),
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    fn roundtrip(item: Item) {
        let new = item.to_event("acct", "s1");
        let event = Event::committed(new, 1, Utc::now());
        assert_eq!(Item::from_event(&event), Some(item));
    }

    #[test]
    fn every_item_survives_the_log() {
        roundtrip(Item::user_text("hello"));
        roundtrip(Item::Message {
            role: "user".into(),
            content: vec![
                Block::Text("look: ".into()),
                Block::Image {
                    url: "data:image/png;base64,AAAA".into(),
                    detail: Some("low".into()),
                },
                Block::File {
                    filename: Some("a.txt".into()),
                    data: Some("data:text/plain;base64,aGk=".into()),
                    url: None,
                },
            ],
        });
        roundtrip(Item::Reasoning {
            text: "think".into(),
        });
        roundtrip(Item::ToolCall {
            call_id: "c1".into(),
            name: "f".into(),
            arguments: "{\"a\":1}".into(),
        });
        roundtrip(Item::ToolResult {
            call_id: "c1".into(),
            output: "42".into(),
        });
    }
}
