//! The agent's Responses answer read into outputs: a stream of Responses events, or one
//! `response` (or error) document.

use std::collections::HashSet;

use serde_json::{json, Map, Value};

use super::wire::reasoning_text;
use crate::body_parser::{BodyParser, BodyReader};
use crate::item::{Block, Item};
use crate::sse::SseFrame;
use crate::upstream::{Output, StreamParser};

/// A parser for the agent's response body with the given content type.
pub(super) fn body_parser(content_type: &str) -> Box<dyn StreamParser> {
    Box::new(BodyParser::new(content_type, ResponsesReader::default()))
}

/// Reads a stream of Responses events, or one `response` (or error) document.
#[derive(Default)]
struct ResponsesReader {
    /// `response.completed` or an error was seen: the turn is decided.
    finished: bool,
    /// Output items already emitted (by id, or by output index when there is none).
    emitted: HashSet<String>,
    /// Text deltas since the last emitted message, kept in case the agent never sends
    /// the finished message item.
    pending_text: String,
}

const UPSTREAM_ERROR: &str = "upstream_error";

/// What a Responses agent's finished response says it used, shown to the client in place
/// of what the request asked for (an agent may serve `service_tier: "auto"` as
/// `"default"`, or clamp a parameter). The rest of the object is Tether's own.
const AGENT_ECHOED: [&str; 10] = [
    "service_tier",
    "temperature",
    "top_p",
    "presence_penalty",
    "frequency_penalty",
    "top_logprobs",
    "truncation",
    "reasoning",
    "text",
    "max_tool_calls",
];

fn str_at<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// The Item an output item records, if it is one the log can hold.
fn item_from_output(v: &Value) -> Option<Item> {
    match str_at(v, "type")? {
        "message" => {
            let text = match v.get("content") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(parts)) => parts
                    .iter()
                    .filter_map(|p| str_at(p, "text").or_else(|| str_at(p, "refusal")))
                    .collect(),
                _ => String::new(),
            };
            if text.is_empty() {
                return None;
            }
            Some(Item::Message {
                role: str_at(v, "role").unwrap_or("assistant").to_owned(),
                content: vec![Block::Text(text)],
            })
        }
        "function_call" => Some(Item::ToolCall {
            call_id: str_at(v, "call_id").or_else(|| str_at(v, "id"))?.to_owned(),
            name: str_at(v, "name")?.to_owned(),
            arguments: str_at(v, "arguments").unwrap_or("").to_owned(),
        }),
        "reasoning" => {
            let text = reasoning_text(v);
            (!text.is_empty()).then_some(Item::Reasoning { text })
        }
        "mcp_approval_request" => Some(Item::Approval(v.clone())),
        // Hosted tool calls (web search, MCP calls, …) ran inside the agent; the log has
        // no item for them and the model does not need them replayed.
        _ => None,
    }
}

fn error_output(err: Option<&Value>, default_code: &str, default_message: &str) -> Output {
    let err = err.filter(|e| e.is_object());
    let get = |k: &str| err.and_then(|e| str_at(e, k));
    Output::Error {
        code: get("code").unwrap_or(default_code).to_owned(),
        message: get("message").unwrap_or(default_message).to_owned(),
    }
}

impl ResponsesReader {
    fn emit_item(&mut self, item: &Value, index: Option<u64>, out: &mut Vec<Output>) {
        let key = match (str_at(item, "id"), index) {
            (Some(id), _) => format!("id:{id}"),
            (None, Some(i)) => format!("index:{i}"),
            (None, None) => String::new(),
        };
        if !key.is_empty() && !self.emitted.insert(key) {
            return;
        }
        if let Some(item) = item_from_output(item) {
            if matches!(item, Item::Message { .. }) {
                self.pending_text.clear();
            }
            out.push(Output::Item(item));
        }
    }

    /// A finished `response` object: any item not yet emitted, then the verdict.
    fn response(&mut self, response: &Value, out: &mut Vec<Output>) {
        if let Some(items) = response.get("output").and_then(Value::as_array) {
            for (i, item) in items.iter().enumerate() {
                self.emit_item(item, Some(i as u64), out);
            }
        }
        if !self.pending_text.is_empty() {
            let text = std::mem::take(&mut self.pending_text);
            out.push(Output::Item(Item::assistant_text(&text)));
        }
        self.finished = true;
        let answered: Map<String, Value> = AGENT_ECHOED
            .iter()
            .filter_map(|k| {
                Some((
                    (*k).to_owned(),
                    response.get(*k).filter(|v| !v.is_null())?.clone(),
                ))
            })
            .collect();
        if !answered.is_empty() {
            out.push(Output::Answered(answered));
        }
        match str_at(response, "status").unwrap_or("completed") {
            "completed" => out.push(Output::Done {
                usage: response.get("usage").filter(|u| !u.is_null()).cloned(),
            }),
            "failed" => out.push(error_output(
                response.get("error"),
                UPSTREAM_ERROR,
                "The agent's response failed.",
            )),
            "incomplete" => out.push(incomplete(response)),
            other => out.push(Output::Error {
                code: UPSTREAM_ERROR.into(),
                message: format!("The agent's response ended with status '{other}'."),
            }),
        }
    }

    fn event(&mut self, v: &Value, event_name: Option<&str>, out: &mut Vec<Output>) {
        if self.finished {
            return;
        }
        let kind = str_at(v, "type").or(event_name).unwrap_or("");
        let delta = || str_at(v, "delta").unwrap_or("").to_owned();
        match kind {
            "response.output_text.delta" | "response.refusal.delta" => {
                let d = delta();
                if !d.is_empty() {
                    self.pending_text.push_str(&d);
                    out.push(Output::TextDelta(d));
                }
            }
            "response.reasoning_text.delta" | "response.reasoning_summary_text.delta" => {
                let d = delta();
                if !d.is_empty() {
                    out.push(Output::ReasoningDelta(d));
                }
            }
            // Summary parts are paragraphs: keep the streamed text the same as the
            // aggregated item's.
            "response.reasoning_summary_part.added"
                if v.get("summary_index").and_then(Value::as_u64) > Some(0) =>
            {
                out.push(Output::ReasoningDelta("\n\n".into()))
            }
            "response.output_item.done" => {
                if let Some(item) = v.get("item") {
                    let index = v.get("output_index").and_then(Value::as_u64);
                    self.emit_item(item, index, out);
                }
            }
            "response.completed" => {
                let empty = json!({});
                let response = v.get("response").unwrap_or(&empty);
                self.response(response, out);
            }
            "response.failed" => {
                self.finished = true;
                out.push(error_output(
                    v.get("response").and_then(|r| r.get("error")),
                    UPSTREAM_ERROR,
                    "The agent's response failed.",
                ));
            }
            "response.incomplete" => {
                self.finished = true;
                out.push(incomplete(v.get("response").unwrap_or(&Value::Null)));
            }
            "error" => {
                self.finished = true;
                let err = if v.get("message").is_some() {
                    Some(v)
                } else {
                    v.get("error")
                };
                out.push(error_output(
                    err,
                    UPSTREAM_ERROR,
                    "The agent reported an error.",
                ));
            }
            // The SDK's own rule: a data object carrying `error` is an error, whatever else.
            _ if v.get("error").is_some_and(Value::is_object) && v.get("type").is_none() => {
                self.finished = true;
                out.push(error_output(
                    v.get("error"),
                    UPSTREAM_ERROR,
                    "The agent reported an error.",
                ));
            }
            _ => {}
        }
    }
}

fn incomplete(response: &Value) -> Output {
    let reason = response
        .get("incomplete_details")
        .and_then(|d| str_at(d, "reason"))
        .unwrap_or("unknown");
    Output::Error {
        code: "incomplete".into(),
        message: format!("The agent's response is incomplete ({reason})."),
    }
}

impl BodyReader for ResponsesReader {
    fn frame(&mut self, frame: SseFrame, out: &mut Vec<Output>) {
        let data = frame.data.trim();
        if data.is_empty() || data == "[DONE]" {
            return;
        }
        // A frame that is not JSON (a keep-alive, a proxy's banner) carries nothing.
        if let Ok(v) = serde_json::from_str::<Value>(data) {
            self.event(&v, frame.event.as_deref(), out);
        }
    }

    fn document(&mut self, body: &[u8], out: &mut Vec<Output>) {
        match serde_json::from_slice::<Value>(body) {
            // A failed response object carries `error` too: its status decides.
            Ok(v) if v.get("output").is_some_and(Value::is_array) => self.response(&v, out),
            Ok(v) if v.get("error").is_some_and(|e| !e.is_null()) => out.push(error_output(
                v.get("error"),
                UPSTREAM_ERROR,
                "The agent reported an error.",
            )),
            _ => out.push(Output::Error {
                code: "invalid_upstream_response".into(),
                message: "The agent's response is not a Responses API response object.".into(),
            }),
        }
    }
}
