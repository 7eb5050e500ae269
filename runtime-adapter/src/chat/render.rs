//! Committed events of a run rendered for a Chat Completions client: `chat.completion.chunk`
//! frames while it streams, the `chat.completion` body when it is done.

use serde_json::{json, Value};
use session_log::{Event, EventType, RunStatus};

use super::wire::tool_call_json;
use crate::sse::SseFrame;
use crate::surface::{RunInfo, StreamRenderer};
use crate::usage::Usage;

/// The `chat.completion` body of a finished run, answered under the response id `id`.
pub(super) fn final_body(run: &RunInfo, id: String, events: &[Event]) -> Value {
    let mut out = RunOutput::default();
    for event in events.iter().filter(|e| in_run(e, run)) {
        out.add(event);
    }
    let text = out.text();
    let mut message =
        json!({ "role": "assistant", "content": text, "refusal": null, "annotations": [] });
    if text.is_empty() && !out.tool_calls.is_empty() {
        message["content"] = Value::Null;
    }
    if !out.tool_calls.is_empty() {
        message["tool_calls"] = Value::Array(
            out.tool_calls
                .iter()
                .map(|(id, name, args)| tool_call_json(id, name, args))
                .collect(),
        );
    }
    let reasoning = out.reasoning();
    if !reasoning.is_empty() {
        message["reasoning_content"] = Value::String(reasoning);
    }
    let finish_reason = if out.tool_calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    json!({
        "id": id,
        "object": "chat.completion",
        "created": run.created_at,
        "model": run.model,
        "choices": [{
            "index": 0,
            "message": message,
            "finish_reason": finish_reason,
            "logprobs": null,
        }],
        "usage": out.usage.as_ref().and_then(chat_usage),
    })
}

/// Whether an event belongs to the run being rendered (events without a run id, such as
/// the user's message recorded before the run started, are let through and then ignored
/// by type/role).
fn in_run(event: &Event, run: &RunInfo) -> bool {
    event.run_id.as_deref().is_none_or(|r| r == run.run_id)
}

fn is_assistant(event: &Event) -> bool {
    event.role.as_deref().is_none_or(|r| r == "assistant")
}

/// Usage in Chat Completions shape, from either Chat or Responses usage, since the run
/// may have been served by either kind of agent.
fn chat_usage(u: &Value) -> Option<Value> {
    Usage::read(u).map(Usage::to_chat)
}

/// Streams a run as `chat.completion.chunk` frames, the way the OpenAI SDK reads them.
pub(super) struct ChatRenderer {
    id: String,
    run_id: String,
    model: String,
    created: i64,
    /// Whether the opening `role: assistant` delta went out.
    started: bool,
    /// Whether an invocation is running. The turn's input is recorded in the run before
    /// `in_progress`, and a client may echo assistant messages or tool calls as input:
    /// only what comes after `in_progress` is the agent's.
    open: bool,
    /// Tool calls rendered so far: the next call's `index`.
    tool_calls: usize,
    /// Per channel, whether deltas were rendered since its last whole event (assistant
    /// message, reasoning): if none, that event's text still has to be sent.
    streamed: [bool; 2],
    /// The message of the last `error` event, for the terminal error frame.
    error: Option<String>,
    failed: bool,
}

impl ChatRenderer {
    pub(super) fn new(run: &RunInfo, id: String) -> Self {
        ChatRenderer {
            id,
            run_id: run.run_id.clone(),
            model: run.model.clone(),
            created: run.created_at,
            started: false,
            open: false,
            tool_calls: 0,
            streamed: [false; 2],
            error: None,
            failed: false,
        }
    }

    fn chunk(&self, delta: Value, finish_reason: Option<&str>, usage: Option<Value>) -> Value {
        let mut chunk = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{
                "index": 0,
                "delta": delta,
                "finish_reason": finish_reason,
                "logprobs": null,
            }],
        });
        if let Some(usage) = usage {
            chunk["usage"] = usage;
        }
        chunk
    }

    fn delta(&mut self, delta: Value) -> Vec<SseFrame> {
        let chunk = self.chunk(delta, None, None);
        vec![SseFrame::json(&chunk)]
    }

    fn status(&mut self, event: &Event, status: RunStatus) -> Vec<SseFrame> {
        match status {
            RunStatus::InProgress => {
                // A resumed invocation starts over: an earlier failure is no longer the
                // run's outcome.
                self.open = true;
                self.failed = false;
                self.error = None;
                self.streamed = [false; 2];
                if self.started {
                    return Vec::new();
                }
                self.started = true;
                let delta = json!({ "role": "assistant", "content": "" });
                let chunk = self.chunk(delta, None, None);
                vec![SseFrame::json(&chunk)]
            }
            RunStatus::Completed | RunStatus::RequiresAction => {
                self.open = false;
                let finish = if self.tool_calls > 0 {
                    "tool_calls"
                } else {
                    "stop"
                };
                let usage = event.metadata.get("usage").and_then(chat_usage);
                let chunk = self.chunk(json!({}), Some(finish), usage);
                vec![SseFrame::json(&chunk)]
            }
            RunStatus::Failed | RunStatus::Cancelled | RunStatus::Interrupted => {
                self.open = false;
                self.failed = true;
                let message = self
                    .error
                    .take()
                    .or_else(|| {
                        event
                            .content
                            .get("reason")
                            .and_then(Value::as_str)
                            .map(str::to_owned)
                    })
                    .unwrap_or_else(|| format!("The run ended with status '{}'.", status.as_str()));
                let kind = if status == RunStatus::Cancelled {
                    "cancelled"
                } else {
                    "server_error"
                };
                let body = json!({ "error": {
                    "message": message,
                    "type": kind,
                    "param": null,
                    "code": status.as_str(),
                }});
                vec![SseFrame::json(&body)]
            }
        }
    }
}

/// The two kinds of text a chunk's delta carries.
#[derive(Clone, Copy)]
enum Channel {
    Text,
    Reasoning,
}

impl Channel {
    fn key(self) -> &'static str {
        match self {
            Channel::Text => "content",
            Channel::Reasoning => "reasoning_content",
        }
    }
}

impl ChatRenderer {
    /// A delta of `channel` (`streaming`), or its whole text when none of it was streamed.
    fn text(&mut self, channel: Channel, event: &Event, streaming: bool) -> Vec<SseFrame> {
        let text = event.text();
        let streamed = &mut self.streamed[channel as usize];
        let send = if streaming {
            *streamed |= !text.is_empty();
            !text.is_empty()
        } else {
            !std::mem::take(streamed) && !text.is_empty()
        };
        if !send {
            return Vec::new();
        }
        let mut delta = serde_json::Map::new();
        delta.insert(channel.key().into(), text.into());
        self.delta(Value::Object(delta))
    }
}

impl StreamRenderer for ChatRenderer {
    fn render(&mut self, event: &Event) -> Vec<SseFrame> {
        if event.run_id.as_deref().is_some_and(|r| r != self.run_id) {
            return Vec::new();
        }
        if event.event_type == EventType::RunStatus {
            return match event.run_status() {
                Some(status) => self.status(event, status),
                None => Vec::new(),
            };
        }
        if !self.open {
            return Vec::new();
        }
        match event.event_type {
            EventType::TextDelta => self.text(Channel::Text, event, true),
            EventType::ReasoningDelta => self.text(Channel::Reasoning, event, true),
            EventType::Message if event.role.as_deref() == Some("assistant") => {
                self.text(Channel::Text, event, false)
            }
            EventType::Reasoning if is_assistant(event) => {
                self.text(Channel::Reasoning, event, false)
            }
            EventType::ToolCall => {
                let s = |k: &str| event.content.get(k).and_then(Value::as_str).unwrap_or("");
                let mut call = tool_call_json(s("call_id"), s("name"), s("arguments"));
                call["index"] = json!(self.tool_calls);
                self.tool_calls += 1;
                self.delta(json!({ "tool_calls": [call] }))
            }
            EventType::Error => {
                self.error = event
                    .content
                    .get("message")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                Vec::new()
            }
            _ => Vec::new(),
        }
    }

    fn end(&mut self) -> Vec<SseFrame> {
        // After an error frame the SDK has already raised; `[DONE]` would only be noise.
        if self.failed {
            return Vec::new();
        }
        vec![SseFrame::data("[DONE]")]
    }
}

/// What a run produced, gathered from its events for the non-streaming body.
#[derive(Default)]
struct RunOutput {
    messages: Vec<String>,
    text_deltas: String,
    reasoning: Vec<String>,
    reasoning_deltas: String,
    tool_calls: Vec<(String, String, String)>,
    usage: Option<Value>,
}

impl RunOutput {
    fn add(&mut self, event: &Event) {
        match event.event_type {
            // Only the last invocation's output answers the request: a resumed run
            // starts over.
            EventType::RunStatus => match event.run_status() {
                Some(RunStatus::InProgress) => *self = RunOutput::default(),
                Some(RunStatus::Completed | RunStatus::RequiresAction) => {
                    self.usage = event.metadata.get("usage").cloned()
                }
                _ => {}
            },
            EventType::Message if event.role.as_deref() == Some("assistant") => {
                self.messages.push(event.text().to_owned())
            }
            EventType::Reasoning if is_assistant(event) => {
                self.reasoning.push(event.text().to_owned())
            }
            EventType::TextDelta => self.text_deltas.push_str(event.text()),
            EventType::ReasoningDelta => self.reasoning_deltas.push_str(event.text()),
            EventType::ToolCall => {
                let s = |k: &str| {
                    event
                        .content
                        .get(k)
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned()
                };
                self.tool_calls
                    .push((s("call_id"), s("name"), s("arguments")));
            }
            _ => {}
        }
    }

    /// The assistant's text; the deltas stand in when no message was recorded (a run cut
    /// short before the agent finished its message).
    fn text(&self) -> String {
        if self.messages.is_empty() {
            self.text_deltas.clone()
        } else {
            self.messages.concat()
        }
    }

    fn reasoning(&self) -> String {
        if self.reasoning.is_empty() {
            self.reasoning_deltas.clone()
        } else {
            self.reasoning.concat()
        }
    }
}
