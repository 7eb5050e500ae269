//! What the parts of the Chat Completions adapter share about its wire format.

use serde_json::{json, Value};

/// A tool call as an assistant message carries it.
pub(super) fn tool_call_json(id: &str, name: &str, arguments: &str) -> Value {
    json!({ "id": id, "type": "function", "function": { "name": name, "arguments": arguments } })
}
