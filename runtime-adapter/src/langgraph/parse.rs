//! The agent's answer to a run: `/runs/stream`'s SSE (`event: <mode>`, `data: <json>`, no
//! end marker: the stream ends when the run does) read into outputs. Every event is
//! recorded as it came (the agent's thread id put back to the client's); the run's new
//! messages, from the last `values` event, become the transcript. A JSON answer is the
//! agent's refusal (`{"detail": …}`).

use serde_json::{json, Value};

use crate::item::Item;
use crate::sse::SseParser;
use crate::upstream::{Output, StreamParser};

use super::wire::{content_text, frame, message_items};

/// Run error codes for the agent's refusals, by the HTTP status the client gets.
pub(super) const NOT_FOUND: &str = "langgraph_not_found";
pub(super) const CONFLICT: &str = "langgraph_conflict";
pub(super) const INVALID: &str = "langgraph_invalid";
pub(super) const REFUSED: &str = "langgraph_refused";
/// An `event: error` in the stream: the graph failed.
pub(super) const GRAPH_ERROR: &str = "langgraph_error";

pub(super) struct LangGraphParser {
    sse: Option<SseParser>,
    raw: Vec<u8>,
    /// Stream modes Tether asked for itself: their events are recorded but not shown.
    added: Vec<String>,
    agent_thread: String,
    thread: String,
    /// How many messages the thread held once the input was in (the first `values`).
    before: Option<usize>,
    last_values: Option<Value>,
    graph_id: Option<String>,
    failed: bool,
}

impl LangGraphParser {
    pub(super) fn new(sse: bool, added: Vec<String>, agent_thread: String, thread: String) -> Self {
        LangGraphParser {
            sse: sse.then(SseParser::new),
            raw: Vec::new(),
            added,
            agent_thread,
            thread,
            before: None,
            last_values: None,
            graph_id: None,
            failed: false,
        }
    }

    fn event(&mut self, name: &str, data: &str, out: &mut Vec<Output>) {
        let data = data.replace(&self.agent_thread, &self.thread);
        let data: Value = serde_json::from_str(&data).unwrap_or(Value::String(data));
        let mode = name.split('|').next().unwrap_or(name);
        let added = self.added.iter().any(|a| a == mode);
        out.push(Output::Frame(frame(name, data.clone(), added)));
        match name {
            "metadata" => {
                if let Some(run) = data["run_id"].as_str() {
                    out.push(Output::AgentRef(run.to_owned()));
                }
            }
            "values" => {
                let count = data["messages"].as_array().map_or(0, Vec::len);
                self.before.get_or_insert(count);
                self.last_values = Some(data);
            }
            "messages" => {
                let (chunk, meta) = (&data[0], &data[1]);
                if let Some(graph) = meta["graph_id"].as_str() {
                    self.graph_id.get_or_insert_with(|| graph.to_owned());
                }
                if chunk["type"] == "AIMessageChunk" {
                    let text = content_text(&chunk["content"]);
                    if !text.is_empty() {
                        out.push(Output::TextDelta(text));
                    }
                }
            }
            "error" => {
                let message = data["message"]
                    .as_str()
                    .or_else(|| data["error"].as_str())
                    .or_else(|| data.as_str())
                    .unwrap_or("The graph failed.");
                out.push(error(GRAPH_ERROR, message));
                self.failed = true;
            }
            _ => {}
        }
    }

    /// The run's new messages (after its input) as transcript items, each with the
    /// message's id and the graph beside it, for a later restore.
    fn transcript(&self, out: &mut Vec<Output>) {
        let Some(values) = &self.last_values else {
            return;
        };
        let messages = values["messages"].as_array().cloned().unwrap_or_default();
        for message in messages.iter().skip(self.before.unwrap_or(messages.len())) {
            for item in message_items(message) {
                if matches!(&item, Item::Message { role, .. } if role == "user") {
                    continue;
                }
                let meta = json!({ "langgraph": {
                    "message_id": message["id"],
                    "graph_id": self.graph_id,
                }});
                out.push(Output::ItemWith(item, meta));
            }
        }
    }

    /// A JSON answer: the agent refused the run.
    fn refusal(&mut self, out: &mut Vec<Output>) {
        let raw = std::mem::take(&mut self.raw);
        let doc: Value = serde_json::from_slice(raw.trim_ascii()).unwrap_or(Value::Null);
        let (code, message) = match &doc["detail"] {
            Value::String(d) if d.contains("not found") => (NOT_FOUND, d.clone()),
            Value::String(d) if d.contains("already") || d.contains("busy") => {
                (CONFLICT, d.clone())
            }
            Value::String(d) => (REFUSED, d.clone()),
            Value::Array(_) => (INVALID, doc["detail"].to_string()),
            _ => {
                let preview: String = String::from_utf8_lossy(&raw).chars().take(200).collect();
                (
                    REFUSED,
                    format!("The agent's answer is not a LangGraph stream: {preview}"),
                )
            }
        };
        out.push(error(code, message));
    }
}

fn error(code: &str, message: impl Into<String>) -> Output {
    Output::Error {
        code: code.to_owned(),
        message: message.into(),
    }
}

impl StreamParser for LangGraphParser {
    fn feed(&mut self, bytes: &[u8]) -> Vec<Output> {
        let mut out = Vec::new();
        let Some(sse) = &mut self.sse else {
            self.raw.extend_from_slice(bytes);
            return out;
        };
        for frame in sse.feed(bytes) {
            let name = frame.event.as_deref().unwrap_or("message").to_owned();
            self.event(&name, &frame.data, &mut out);
        }
        out
    }

    /// The stream ended whole (a cut one is not finished): the run is over.
    fn finish(&mut self) -> Vec<Output> {
        let mut out = Vec::new();
        match self.sse.as_mut().map(SseParser::finish) {
            Some(Some(frame)) => {
                let name = frame.event.as_deref().unwrap_or("message").to_owned();
                self.event(&name, &frame.data, &mut out);
            }
            Some(None) => {}
            None => {
                self.refusal(&mut out);
                return out;
            }
        }
        if !self.failed {
            self.transcript(&mut out);
            out.push(Output::Done { usage: None });
        }
        out
    }
}
