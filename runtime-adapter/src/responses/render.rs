//! The Responses rendering state machine: committed log events of one run in, Responses
//! SSE frames and the `response` object out.
//!
//! One machine serves both the stream and the non-streaming body, so item ids, output
//! indices and the final object are the same whichever way (and however often, after a
//! reconnect) a client reads the run.

use serde_json::{json, Map, Value};
use session_log::{Event, EventType, RunStatus};

use crate::item::Item;
use crate::sse::SseFrame;
use crate::surface::{RunInfo, StreamRenderer};
use crate::turn::REQUEST_PARAMS;
use crate::upstream::AGENT_PARAMS;
use crate::usage::Usage;

/// The run an output item id names (`msg_`, `rs_`, `fc_` or `mcpr_`, then the run's hex and
/// the item's output index in 8 hex digits: see `Renderer::push`), if it is one Tether gave.
pub(crate) fn item_run_id(item_id: &str) -> Option<String> {
    let (prefix, rest) = item_id.split_once('_')?;
    let ours = matches!(prefix, "msg" | "rs" | "fc" | "mcpr")
        && rest.len() == 40
        && rest
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    ours.then(|| format!("run_{}", &rest[..32]))
}

/// The hex part shared by a run id and its response id (`run_<hex>` ↔ `resp_<hex>`).
pub(crate) fn run_hex(run_id: &str) -> &str {
    run_id.strip_prefix("run_").unwrap_or(run_id)
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Message,
    Reasoning,
    FunctionCall,
    Approval,
}

/// One output item of the response, as far as it has been rendered.
#[derive(Clone, Debug)]
struct OutItem {
    kind: Kind,
    id: String,
    status: &'static str,
    /// Message text, reasoning text or function arguments.
    text: String,
    call_id: String,
    name: String,
    /// An approval request, verbatim.
    raw: Value,
    /// Left unfinished by an invocation that a later one replaced: not part of the
    /// response any more, though its output index stays taken.
    superseded: bool,
}

impl OutItem {
    fn to_json(&self) -> Value {
        match self.kind {
            Kind::Message => json!({
                "id": self.id,
                "type": "message",
                "role": "assistant",
                "status": self.status,
                "content": [output_text_part(&self.text)],
            }),
            Kind::Reasoning => json!({
                "id": self.id,
                "type": "reasoning",
                "status": self.status,
                "summary": [],
                "content": [{ "type": "reasoning_text", "text": self.text }],
            }),
            Kind::FunctionCall => json!({
                "id": self.id,
                "type": "function_call",
                "status": self.status,
                "call_id": self.call_id,
                "name": self.name,
                "arguments": self.text,
            }),
            Kind::Approval => self.raw.clone(),
        }
    }

    /// The history item this output item is (what an `item_reference` to it stands for).
    fn to_item(&self) -> Item {
        match self.kind {
            Kind::Message => Item::assistant_text(&self.text),
            Kind::Reasoning => Item::Reasoning {
                text: self.text.clone(),
            },
            Kind::FunctionCall => Item::ToolCall {
                call_id: self.call_id.clone(),
                name: self.name.clone(),
                arguments: self.text.clone(),
            },
            Kind::Approval => Item::Approval(self.raw.clone()),
        }
    }

    /// The item as `response.output_item.added` shows it: nothing produced yet.
    fn added_json(&self) -> Value {
        let mut v = self.to_json();
        match self.kind {
            Kind::Message | Kind::Reasoning => v["content"] = json!([]),
            Kind::FunctionCall => v["arguments"] = json!(""),
            Kind::Approval => {}
        }
        if self.kind != Kind::Approval {
            v["status"] = json!("in_progress");
        }
        v
    }
}

/// The request's tools as a response shows them: a function tool with every field of
/// its schema, null where the request left one out.
fn shown_tools(tools: Value) -> Value {
    let Value::Array(tools) = tools else {
        return json!([]);
    };
    let shown = tools.into_iter().map(|mut tool| {
        if let Some(fields) = tool
            .as_object_mut()
            .filter(|t| t.get("type").and_then(Value::as_str) == Some("function"))
        {
            for k in ["description", "parameters", "strict"] {
                fields.entry(k).or_insert(Value::Null);
            }
        }
        tool
    });
    Value::Array(shown.collect())
}

fn output_text_part(text: &str) -> Value {
    json!({ "type": "output_text", "text": text, "annotations": [], "logprobs": [] })
}

fn reasoning_part(text: &str) -> Value {
    json!({ "type": "reasoning_text", "text": text })
}

/// Renders one run. Feed events in seq order; transcript events outside an invocation
/// (before its `in_progress`, after its terminal status) are the client's own input and
/// are skipped.
pub(crate) struct Renderer {
    run: RunInfo,
    hex: String,
    next_sequence: u64,
    started: bool,
    /// Inside an invocation: between `in_progress` and a terminal status.
    active: bool,
    status: &'static str,
    items: Vec<OutItem>,
    open_message: Option<usize>,
    open_reasoning: Option<usize>,
    /// The last `error` event of the current invocation.
    error: Option<Value>,
    usage: Option<Value>,
    completed_at: Option<i64>,
    /// What the response repeats of the request (`REQUEST_PARAMS` of its first start),
    /// with what the agent said it used (`AGENT_PARAMS` of a terminal status) over it.
    params: Map<String, Value>,
}

impl Renderer {
    pub(crate) fn new(run: &RunInfo) -> Self {
        Renderer {
            hex: run_hex(&run.run_id).to_owned(),
            run: run.clone(),
            next_sequence: 0,
            started: false,
            active: false,
            status: "in_progress",
            items: Vec::new(),
            open_message: None,
            open_reasoning: None,
            error: None,
            usage: None,
            completed_at: None,
            params: Map::new(),
        }
    }

    /// The response's output items (as `response().output` lists them) with their ids.
    pub(crate) fn output_items(&self) -> Vec<(String, Item)> {
        self.items
            .iter()
            .filter(|i| !i.superseded)
            .map(|i| (i.id.clone(), i.to_item()))
            .collect()
    }

    /// The `response` object as of the events seen so far: every field of the Open
    /// Responses `ResponseResource`, the request's own values where it gave them (recorded
    /// with the run's start, so a replay shows the same), else what Tether and an agent
    /// that was told nothing use.
    pub(crate) fn response(&self) -> Value {
        let error = match self.status {
            "in_progress" | "completed" => Value::Null,
            _ => self.error.clone().unwrap_or(Value::Null),
        };
        let asked = |k: &str, default: Value| self.params.get(k).cloned().unwrap_or(default);
        json!({
            "id": format!("resp_{}", self.hex),
            "object": "response",
            "created_at": self.run.created_at,
            "completed_at": self.completed_at,
            "status": self.status,
            "error": error,
            "incomplete_details": null,
            "instructions": asked("instructions", Value::Null),
            "max_output_tokens": asked("max_output_tokens", Value::Null),
            "max_tool_calls": asked("max_tool_calls", Value::Null),
            "model": self.run.model,
            "output": self
                .items
                .iter()
                .filter(|i| !i.superseded)
                .map(OutItem::to_json)
                .collect::<Vec<_>>(),
            "parallel_tool_calls": asked("parallel_tool_calls", json!(true)),
            "previous_response_id": asked("previous_response_id", Value::Null),
            "temperature": asked("temperature", json!(1.0)),
            "top_p": asked("top_p", json!(1.0)),
            "presence_penalty": asked("presence_penalty", json!(0.0)),
            "frequency_penalty": asked("frequency_penalty", json!(0.0)),
            "top_logprobs": asked("top_logprobs", json!(0)),
            "tool_choice": asked("tool_choice", json!("auto")),
            "tools": shown_tools(asked("tools", json!([]))),
            "truncation": asked("truncation", json!("disabled")),
            "text": asked("text", json!({ "format": { "type": "text" } })),
            "reasoning": asked("reasoning", json!({ "effort": null, "summary": null })),
            // Every response is in Tether's log, whatever the request said, and every run
            // outlives its connection (`background` is repeated as asked).
            "store": true,
            "background": asked("background", json!(false)),
            "service_tier": asked("service_tier", json!("default")),
            "safety_identifier": asked("safety_identifier", Value::Null),
            "prompt_cache_key": asked("prompt_cache_key", Value::Null),
            "user": asked("user", Value::Null),
            "usage": self.usage,
            "metadata": asked("metadata", json!({})),
            "conversation": { "id": self.run.session_id },
        })
    }

    /// A frame numbered with the stream's next `sequence_number`. Every frame is made
    /// here, so the numbers are the frame numbers `Numbered` puts in the frames' `id:`s
    /// (`ResponsesSurface::stream_renderer`): a replay of the run numbers frames alike, and
    /// either is a reconnecting client's cursor (`starting_after`, `Last-Event-ID`).
    fn frame(&mut self, _seq: i64, mut body: Value) -> SseFrame {
        let n = self.next_sequence;
        body["sequence_number"] = json!(n);
        self.next_sequence += 1;
        let event = body["type"].as_str().unwrap_or_default().to_owned();
        SseFrame::json(&body).with_event(&event)
    }

    fn push(&mut self, kind: Kind) -> usize {
        let index = self.items.len();
        let prefix = match kind {
            Kind::Message => "msg",
            Kind::Reasoning => "rs",
            Kind::FunctionCall => "fc",
            Kind::Approval => "mcpr",
        };
        self.items.push(OutItem {
            kind,
            id: format!("{prefix}_{}{index:08x}", self.hex),
            status: "in_progress",
            text: String::new(),
            call_id: String::new(),
            name: String::new(),
            raw: Value::Null,
            superseded: false,
        });
        index
    }

    fn item_added(&mut self, seq: i64, index: usize, out: &mut Vec<SseFrame>) {
        let item = self.items[index].added_json();
        let f = self.frame(
            seq,
            json!({ "type": "response.output_item.added", "output_index": index, "item": item }),
        );
        out.push(f);
    }

    fn item_done(&mut self, seq: i64, index: usize, out: &mut Vec<SseFrame>) {
        if self.items[index].kind != Kind::Approval && self.items[index].status == "in_progress" {
            self.items[index].status = "completed";
        }
        let item = self.items[index].to_json();
        let f = self.frame(
            seq,
            json!({ "type": "response.output_item.done", "output_index": index, "item": item }),
        );
        out.push(f);
    }

    fn part_event(&mut self, seq: i64, index: usize, kind: &str, part: Value) -> SseFrame {
        let item_id = self.items[index].id.clone();
        self.frame(
            seq,
            json!({
                "type": kind,
                "item_id": item_id,
                "output_index": index,
                "content_index": 0,
                "part": part,
            }),
        )
    }

    fn open_message(&mut self, seq: i64, out: &mut Vec<SseFrame>) -> usize {
        if let Some(i) = self.open_message {
            return i;
        }
        let i = self.push(Kind::Message);
        self.open_message = Some(i);
        self.item_added(seq, i, out);
        let f = self.part_event(seq, i, "response.content_part.added", output_text_part(""));
        out.push(f);
        i
    }

    fn text_delta(&mut self, seq: i64, delta: &str, out: &mut Vec<SseFrame>) {
        let i = self.open_message(seq, out);
        self.items[i].text.push_str(delta);
        let item_id = self.items[i].id.clone();
        let f = self.frame(
            seq,
            json!({
                "type": "response.output_text.delta",
                "item_id": item_id,
                "output_index": i,
                "content_index": 0,
                "delta": delta,
                "logprobs": [],
            }),
        );
        out.push(f);
    }

    fn close_message(&mut self, seq: i64, text: Option<&str>, out: &mut Vec<SseFrame>) {
        let Some(i) = self.open_message.take() else {
            return;
        };
        if let Some(text) = text {
            self.items[i].text = text.to_owned();
        }
        let text = self.items[i].text.clone();
        let item_id = self.items[i].id.clone();
        let f = self.frame(
            seq,
            json!({
                "type": "response.output_text.done",
                "item_id": item_id,
                "output_index": i,
                "content_index": 0,
                "text": text,
                "logprobs": [],
            }),
        );
        out.push(f);
        let f = self.part_event(
            seq,
            i,
            "response.content_part.done",
            output_text_part(&text),
        );
        out.push(f);
        self.item_done(seq, i, out);
    }

    fn message(&mut self, seq: i64, text: &str, out: &mut Vec<SseFrame>) {
        if self.open_message.is_none() {
            // An empty message (e.g. beside tool calls) is not worth an output item.
            if text.is_empty() {
                return;
            }
            // The agent answered without streaming: the client still gets the whole
            // added/delta/done sequence so stream consumers see the text.
            self.text_delta(seq, text, out);
        }
        self.close_message(seq, Some(text), out);
    }

    fn reasoning_delta(&mut self, seq: i64, delta: &str, out: &mut Vec<SseFrame>) {
        let i = match self.open_reasoning {
            Some(i) => i,
            None => {
                let i = self.push(Kind::Reasoning);
                self.open_reasoning = Some(i);
                self.item_added(seq, i, out);
                let f = self.part_event(seq, i, "response.content_part.added", reasoning_part(""));
                out.push(f);
                i
            }
        };
        self.items[i].text.push_str(delta);
        let item_id = self.items[i].id.clone();
        let f = self.frame(
            seq,
            json!({
                "type": "response.reasoning_text.delta",
                "item_id": item_id,
                "output_index": i,
                "content_index": 0,
                "delta": delta,
            }),
        );
        out.push(f);
    }

    fn close_reasoning(&mut self, seq: i64, text: Option<&str>, out: &mut Vec<SseFrame>) {
        let Some(i) = self.open_reasoning.take() else {
            return;
        };
        if let Some(text) = text {
            self.items[i].text = text.to_owned();
        }
        let text = self.items[i].text.clone();
        let item_id = self.items[i].id.clone();
        let f = self.frame(
            seq,
            json!({
                "type": "response.reasoning_text.done",
                "item_id": item_id,
                "output_index": i,
                "content_index": 0,
                "text": text,
            }),
        );
        out.push(f);
        let f = self.part_event(seq, i, "response.content_part.done", reasoning_part(&text));
        out.push(f);
        self.item_done(seq, i, out);
    }

    fn reasoning(&mut self, seq: i64, text: &str, out: &mut Vec<SseFrame>) {
        if self.open_reasoning.is_none() {
            if text.is_empty() {
                return;
            }
            self.reasoning_delta(seq, text, out);
        }
        self.close_reasoning(seq, Some(text), out);
    }

    fn tool_call(&mut self, seq: i64, content: &Value, out: &mut Vec<SseFrame>) {
        let s = |k: &str| {
            content
                .get(k)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        let i = self.push(Kind::FunctionCall);
        self.items[i].call_id = s("call_id");
        self.items[i].name = s("name");
        self.item_added(seq, i, out);
        let arguments = s("arguments");
        self.items[i].text = arguments.clone();
        let item_id = self.items[i].id.clone();
        if !arguments.is_empty() {
            let f = self.frame(
                seq,
                json!({
                    "type": "response.function_call_arguments.delta",
                    "item_id": item_id,
                    "output_index": i,
                    "delta": arguments,
                }),
            );
            out.push(f);
        }
        let name = self.items[i].name.clone();
        let f = self.frame(
            seq,
            json!({
                "type": "response.function_call_arguments.done",
                "item_id": item_id,
                "output_index": i,
                "name": name,
                "arguments": arguments,
            }),
        );
        out.push(f);
        self.item_done(seq, i, out);
    }

    fn approval(&mut self, seq: i64, content: &Value, out: &mut Vec<SseFrame>) {
        let i = self.push(Kind::Approval);
        let mut raw = content.clone();
        if raw.get("id").and_then(Value::as_str).is_none() {
            raw["id"] = json!(self.items[i].id);
        }
        self.items[i].id = raw["id"].as_str().unwrap_or_default().to_owned();
        self.items[i].raw = raw;
        self.item_added(seq, i, out);
        self.item_done(seq, i, out);
    }

    fn lifecycle(&mut self, seq: i64, kind: &str, out: &mut Vec<SseFrame>) {
        let response = self.response();
        let f = self.frame(seq, json!({ "type": kind, "response": response }));
        out.push(f);
    }

    fn start(&mut self, event: &Event, out: &mut Vec<SseFrame>) {
        let seq = event.seq;
        self.status = "in_progress";
        self.error = None;
        self.active = true;
        if !self.started {
            self.started = true;
            if let Some(Value::Object(params)) = event.metadata.get(REQUEST_PARAMS) {
                self.params = params.clone();
            }
            // From the log, not the clock: the live stream and every replay agree.
            self.run.created_at = event.created_at.timestamp();
            self.lifecycle(seq, "response.created", out);
        } else {
            // What an interrupted invocation left half-written is redone by this one.
            for item in &mut self.items {
                item.superseded |= item.status == "incomplete";
            }
        }
        // A resumed invocation announces itself again with `in_progress` only: the SDK
        // expects exactly one `response.created` per stream.
        self.lifecycle(seq, "response.in_progress", out);
    }

    fn terminal(&mut self, event: &Event, status: RunStatus, out: &mut Vec<SseFrame>) {
        let seq = event.seq;
        if !self.started {
            self.started = true;
            self.lifecycle(seq, "response.created", out);
        }
        self.active = false;
        // What the agent says it used stands over what the request asked for.
        if let Some(Value::Object(answered)) = event.metadata.get(AGENT_PARAMS) {
            for (k, v) in answered {
                self.params.insert(k.clone(), v.clone());
            }
        }
        self.usage = event
            .metadata
            .get("usage")
            .and_then(usage_json)
            .or(self.usage.take());
        // Every added item is finished before the response is (the SDK's stream helper
        // refuses a completed response with unfinished items); what the run did not
        // finish is marked incomplete.
        if !status.is_answered() {
            for i in [self.open_message, self.open_reasoning]
                .into_iter()
                .flatten()
            {
                self.items[i].status = "incomplete";
            }
        }
        self.close_reasoning(seq, None, out);
        self.close_message(seq, None, out);
        if status.is_answered() {
            self.status = "completed";
            self.completed_at = Some(event.created_at.timestamp());
            self.lifecycle(seq, "response.completed", out);
            return;
        }
        let reason = event.content.get("reason").and_then(Value::as_str);
        // A cancelled response is not an error (OpenAI's have `error: null`); the others
        // say why, with `server_error` because the SDK types `error.code` as a closed set.
        let (status, default_message) = match status {
            RunStatus::Cancelled => ("cancelled", None),
            RunStatus::Interrupted => (
                "incomplete",
                Some("The run was interrupted before it finished."),
            ),
            _ => ("failed", Some("The run failed.")),
        };
        self.status = status;
        if let (None, Some(message)) = (&self.error, default_message) {
            self.error = Some(json!({
                "code": "server_error",
                "message": reason.unwrap_or(message),
            }));
        }
        self.lifecycle(seq, "response.failed", out);
    }

    fn record_error(&mut self, content: &Value) {
        let field = |k: &str| content.get(k).and_then(Value::as_str);
        self.error = Some(json!({
            "code": field("code").unwrap_or("server_error"),
            "message": field("message").unwrap_or("The agent reported an error."),
        }));
    }
}

impl StreamRenderer for Renderer {
    fn render(&mut self, event: &Event) -> Vec<SseFrame> {
        let mut out = Vec::new();
        let seq = event.seq;
        let c = &event.content;
        if let Some(status) = event.run_status() {
            match status {
                RunStatus::InProgress => self.start(event, &mut out),
                _ => self.terminal(event, status, &mut out),
            }
            return out;
        }
        if !self.active {
            return out;
        }
        let text = event.text();
        match event.event_type {
            EventType::TextDelta => self.text_delta(seq, text, &mut out),
            EventType::Message if event.role.as_deref() == Some("assistant") => {
                self.message(seq, text, &mut out)
            }
            EventType::ReasoningDelta => self.reasoning_delta(seq, text, &mut out),
            EventType::Reasoning => self.reasoning(seq, text, &mut out),
            EventType::ToolCall => self.tool_call(seq, c, &mut out),
            // Only the agent's requests are output; approval responses are client input.
            EventType::Approval
                if c.get("type").and_then(Value::as_str) == Some("mcp_approval_request") =>
            {
                self.approval(seq, c, &mut out)
            }
            EventType::Error => self.record_error(c),
            _ => {}
        }
        out
    }

    fn end(&mut self) -> Vec<SseFrame> {
        Vec::new()
    }
}

/// Token usage in the Responses shape, from either the Responses or the Chat shape.
pub(crate) fn usage_json(u: &Value) -> Option<Value> {
    Usage::read(u).map(Usage::to_responses)
}
