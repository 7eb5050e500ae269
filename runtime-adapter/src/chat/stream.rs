//! The agent's Chat Completions answer read into outputs: a `chat.completion.chunk` stream,
//! or one `chat.completion` (or error) document, whichever the agent sent.

use serde_json::{json, Value};

use crate::body_parser::{BodyParser, BodyReader};
use crate::item::Item;
use crate::sse::SseFrame;
use crate::upstream::{Output, StreamParser};

/// A tool call being reassembled from stream pieces.
#[derive(Default)]
struct PartialCall {
    index: Option<i64>,
    id: String,
    name: String,
    arguments: String,
}

/// The output of one assistant turn gathered from deltas, emitted as items at its end.
#[derive(Default)]
struct Gathered {
    text: String,
    reasoning: String,
    calls: Vec<PartialCall>,
}

impl Gathered {
    /// The turn's items, in the order the log records them.
    fn take_items(&mut self) -> Vec<Output> {
        let g = std::mem::take(self);
        let mut out = Vec::new();
        if !g.reasoning.is_empty() {
            out.push(Output::Item(Item::Reasoning { text: g.reasoning }));
        }
        if !g.text.is_empty() {
            out.push(Output::Item(Item::assistant_text(&g.text)));
        }
        for call in g.calls {
            out.push(Output::Item(Item::ToolCall {
                call_id: if call.id.is_empty() {
                    new_call_id()
                } else {
                    call.id
                },
                name: call.name,
                arguments: call.arguments,
            }));
        }
        out
    }

    fn add_tool_call_delta(&mut self, tc: &Value) {
        let index = tc.get("index").and_then(Value::as_i64);
        let id = tc
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        let named = tc
            .get("function")
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
        // Some servers repeat index 0 for every call (a different id means another call),
        // or send neither index nor id (a piece naming a function starts another call).
        let same = |c: &PartialCall| match (index, id) {
            (Some(i), id) => {
                c.index == Some(i) && !id.is_some_and(|id| !c.id.is_empty() && c.id != id)
            }
            (None, Some(id)) => c.id == id,
            (None, None) => !named || c.name.is_empty(),
        };
        let pos = match self.calls.iter().rposition(same) {
            Some(pos) => pos,
            None => {
                self.calls.push(PartialCall {
                    index,
                    ..Default::default()
                });
                self.calls.len() - 1
            }
        };
        let call = &mut self.calls[pos];
        if let (true, Some(id)) = (call.id.is_empty(), id) {
            call.id = id.to_owned();
        }
        let function = tc.get("function");
        if let Some(name) = function.and_then(|f| f.get("name")).and_then(Value::as_str) {
            if call.name.is_empty() {
                call.name = name.to_owned();
            }
        }
        match function.and_then(|f| f.get("arguments")) {
            Some(Value::String(piece)) => call.arguments.push_str(piece),
            // Some servers send the arguments as a JSON object, whole.
            Some(v @ Value::Object(_)) => call.arguments = v.to_string(),
            _ => {}
        }
    }
}

fn new_call_id() -> String {
    format!("call_{}", uuid::Uuid::new_v4().simple())
}

/// `Output::Error` for an `{"error": …}` body, whatever shape the error takes.
fn upstream_error(error: &Value) -> Output {
    let code = error
        .get("code")
        .and_then(|c| match c {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        })
        .or_else(|| error.get("type").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_else(|| "upstream_error".into());
    let message = match error {
        Value::String(s) => s.clone(),
        _ => error
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| error.to_string()),
    };
    Output::Error { code, message }
}

fn error_of(doc: &Value) -> Option<&Value> {
    doc.get("error").filter(|e| !e.is_null())
}

/// Where a delta or message carries reasoning: `reasoning_content` (DeepSeek, older vLLM)
/// or `reasoning` (newer vLLM, OpenRouter); a server sending both means the same text.
const REASONING_KEYS: [&str; 2] = ["reasoning_content", "reasoning"];

/// The first of `keys` whose value is a non-empty string.
fn first_text<'a>(v: &'a Value, keys: &[&str]) -> Option<&'a str> {
    keys.iter()
        .filter_map(|k| v.get(*k).and_then(Value::as_str))
        .find(|s| !s.is_empty())
}

/// The choice Tether follows (index 0; Tether never asks for more).
fn first_choice(doc: &Value) -> Option<&Value> {
    let choices = doc.get("choices")?.as_array()?;
    choices
        .iter()
        .find(|c| c.get("index").and_then(Value::as_i64).unwrap_or(0) == 0)
}

/// Longest prefix of a streamed body kept in case it turns out to be a plain JSON error
/// document sent under an SSE content type.
const SNIFF_LIMIT: usize = 1 << 20;

/// A parser for the agent's response body with the given content type.
pub(super) fn body_parser(content_type: &str) -> Box<dyn StreamParser> {
    Box::new(BodyParser::lenient(
        content_type,
        SNIFF_LIMIT,
        ChatReader::default(),
    ))
}

/// Reads a `chat.completion.chunk` stream, or one `chat.completion` (or error) document.
#[derive(Default)]
struct ChatReader {
    gathered: Gathered,
    usage: Option<Value>,
    /// A `finish_reason` was seen: the turn is complete even without `[DONE]`.
    finished: bool,
    /// `Done` went out; nothing follows it.
    done: bool,
}

impl BodyReader for ChatReader {
    fn frame(&mut self, frame: SseFrame, out: &mut Vec<Output>) {
        if self.done {
            return;
        }
        let data = frame.data.trim();
        if data.is_empty() {
            return;
        }
        if data == "[DONE]" {
            out.extend(self.gathered.take_items());
            self.done = true;
            out.push(Output::Done {
                usage: self.usage.take(),
            });
            return;
        }
        // Anything that is not JSON (keep-alive text, say) carries nothing for us.
        let Ok(chunk) = serde_json::from_str::<Value>(data) else {
            return;
        };
        if let Some(error) = error_of(&chunk) {
            out.push(upstream_error(error));
            return;
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(usage.clone());
        }
        let Some(choice) = first_choice(&chunk) else {
            return;
        };
        if let Some(delta) = choice.get("delta") {
            let g = &mut self.gathered;
            let text = first_text(delta, &["content", "refusal"]);
            if let Some(text) = text {
                g.text.push_str(text);
                out.push(Output::TextDelta(text.to_owned()));
            }
            let reasoning = first_text(delta, &REASONING_KEYS);
            if let Some(reasoning) = reasoning {
                g.reasoning.push_str(reasoning);
                out.push(Output::ReasoningDelta(reasoning.to_owned()));
            }
            if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
                for tc in calls {
                    g.add_tool_call_delta(tc);
                }
            }
        }
        if choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .is_some()
        {
            self.finished = true;
            out.extend(self.gathered.take_items());
        }
    }

    fn end(&mut self, out: &mut Vec<Output>) {
        if self.done {
            return;
        }
        out.extend(self.gathered.take_items());
        if self.finished {
            self.done = true;
            out.push(Output::Done {
                usage: self.usage.take(),
            });
        }
    }

    fn document(&mut self, body: &[u8], out: &mut Vec<Output>) {
        out.extend(parse_json_body(body));
    }
}

fn parse_json_body(body: &[u8]) -> Vec<Output> {
    if body.trim_ascii().is_empty() {
        return vec![Output::Error {
            code: "empty_response".into(),
            message: "The agent returned an empty body.".into(),
        }];
    }
    let doc: Value = match serde_json::from_slice(body) {
        Ok(doc @ Value::Object(_)) => doc,
        _ => {
            let preview: String = String::from_utf8_lossy(body).chars().take(200).collect();
            return vec![Output::Error {
                code: "invalid_response".into(),
                message: format!("The agent's response is not a chat completion: {preview}"),
            }];
        }
    };
    if let Some(error) = error_of(&doc) {
        return vec![upstream_error(error)];
    }
    let mut g = Gathered::default();
    if let Some(message) = first_choice(&doc).and_then(|c| c.get("message")) {
        if let Some(r) = first_text(message, &REASONING_KEYS) {
            g.reasoning = r.to_owned();
        }
        g.text = match message.get("content") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(parts)) => parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect(),
            _ => String::new(),
        };
        if g.text.is_empty() {
            if let Some(refusal) = message.get("refusal").and_then(Value::as_str) {
                g.text = refusal.to_owned();
            }
        }
        if let Some(calls) = message.get("tool_calls").and_then(Value::as_array) {
            for (i, tc) in calls.iter().enumerate() {
                let mut tc = tc.clone();
                tc["index"] = json!(i);
                g.add_tool_call_delta(&tc);
            }
        }
    }
    let mut out = g.take_items();
    out.push(Output::Done {
        usage: doc.get("usage").filter(|u| u.is_object()).cloned(),
    });
    out
}
