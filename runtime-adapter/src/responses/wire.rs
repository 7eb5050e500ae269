//! What the parts of the Responses adapter share about its wire format.

use serde_json::Value;

/// The text of a reasoning item: its full reasoning content when there is any, else its
/// summaries (an OpenAI model shows only those), one paragraph each.
pub(super) fn reasoning_text(item: &Value) -> String {
    let texts = |key: &str| -> Vec<&str> {
        item.get(key)
            .and_then(Value::as_array)
            .map(|parts| {
                parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect()
            })
            .unwrap_or_default()
    };
    let content = texts("content");
    if !content.is_empty() {
        return content.concat();
    }
    texts("summary").join("\n\n")
}
