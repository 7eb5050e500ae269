//! OpenAI Chat Completions: the client surface at `POST /v1/chat/completions` (request
//! parsing, `chat.completion.chunk` streaming, the `chat.completion` body) and the upstream
//! adapter for agents that speak Chat Completions (request building, stream parsing).

use serde_json::{json, Map, Value};
use session_log::{Event, EventType, RunStatus};

use crate::item::{Block, Item};
use crate::protocol::Protocol;
use crate::sse::{SseFrame, SseParser};
use crate::surface::{RunInfo, StreamRenderer, Surface};
use crate::turn::{InputError, SessionRef, Tool, TurnRequest};
use crate::upstream::{AgentRequest, Output, StreamParser, TurnCall, Upstream};

/// Where the agent serves this protocol.
const PATH: &str = "/v1/chat/completions";
use crate::usage::Usage;

pub struct ChatSurface;
pub struct ChatUpstream;

const RUN_PREFIX: &str = "run_";
const CHAT_PREFIX: &str = "chatcmpl-";

// ---------------------------------------------------------------------------------------
// Client surface: request parsing
// ---------------------------------------------------------------------------------------

/// Top-level fields Tether interprets itself; everything else travels in `extra`.
const HANDLED_FIELDS: &[&str] = &[
    "model",
    "messages",
    "stream",
    "stream_options",
    "session_id",
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "tools",
    "tool_choice",
];

impl Surface for ChatSurface {
    fn parse_request(
        &self,
        body: &[u8],
        session_header: Option<&str>,
    ) -> Result<TurnRequest, InputError> {
        let body: Value = serde_json::from_slice(body).map_err(|e| {
            InputError::new(
                "invalid_json",
                None,
                format!("The request body is not valid JSON: {e}."),
            )
        })?;
        let Value::Object(obj) = body else {
            return Err(InputError::new(
                "invalid_type",
                None,
                format!(
                    "The request body must be a JSON object, but got {} instead.",
                    kind(&body)
                ),
            ));
        };

        let mut turn = TurnRequest::new(Protocol::OpenAiChat);
        turn.input = match obj.get("messages") {
            None | Some(Value::Null) => return Err(missing("messages")),
            Some(messages) => parse_messages(messages)?,
        };
        turn.model = opt_str(&obj, "model")?.filter(|m| !m.is_empty());
        turn.stream = opt_bool(&obj, "stream")?.unwrap_or(false);
        if let Some(v) = field(&obj, "stream_options") {
            if !v.is_object() {
                return Err(invalid_type("stream_options", "an object", v));
            }
        }
        turn.temperature = opt_f64(&obj, "temperature")?;
        if let Some(t) = turn.temperature {
            if !(0.0..=2.0).contains(&t) {
                return Err(invalid_value(
                    "temperature",
                    format!("Invalid 'temperature': {t} is out of range; expected a number between 0 and 2."),
                ));
            }
        }
        turn.top_p = opt_f64(&obj, "top_p")?;
        if let Some(p) = turn.top_p {
            if !(0.0..=1.0).contains(&p) {
                return Err(invalid_value(
                    "top_p",
                    format!(
                        "Invalid 'top_p': {p} is out of range; expected a number between 0 and 1."
                    ),
                ));
            }
        }
        // `max_completion_tokens` supersedes the deprecated `max_tokens`.
        let max_tokens = opt_max_tokens(&obj, "max_tokens")?;
        let max_completion_tokens = opt_max_tokens(&obj, "max_completion_tokens")?;
        turn.max_output_tokens = max_completion_tokens.or(max_tokens);
        if let Some(tools) = field(&obj, "tools") {
            turn.tools = parse_tools(tools)?;
        }
        if let Some(choice) = field(&obj, "tool_choice") {
            turn.tool_choice = Some(parse_tool_choice(choice)?);
        }
        // Tether produces exactly one choice; asking for more would be silently ignored.
        if let Some(n) = field(&obj, "n") {
            match n.as_u64() {
                Some(1) => {}
                Some(_) => {
                    return Err(invalid_value(
                        "n",
                        "Invalid 'n': Tether returns a single choice per turn; 'n' must be 1.",
                    ))
                }
                None => return Err(invalid_type("n", "an integer", n)),
            }
        }

        let body_session = opt_str(&obj, "session_id")?;
        if body_session.as_deref() == Some("") {
            return Err(invalid_value(
                "session_id",
                "Invalid 'session_id': expected a non-empty string.",
            ));
        }
        let header_session = session_header.map(str::trim).filter(|s| !s.is_empty());
        turn.session = match (body_session, header_session) {
            (Some(b), Some(h)) if b != h => {
                return Err(invalid_value(
                    "session_id",
                    format!(
                        "The body's 'session_id' ('{b}') and the x-session-id header ('{h}') name different sessions."
                    ),
                ))
            }
            (Some(id), _) => SessionRef::Named(id),
            (None, Some(h)) => SessionRef::Named(h.to_owned()),
            (None, None) => SessionRef::New,
        };

        turn.extra = obj
            .into_iter()
            .filter(|(k, _)| !HANDLED_FIELDS.contains(&k.as_str()))
            .collect();
        Ok(turn)
    }

    fn stream_renderer(&self, run: &RunInfo) -> Box<dyn StreamRenderer> {
        Box::new(ChatRenderer::new(run, self.response_id(&run.run_id)))
    }

    fn final_body(&self, run: &RunInfo, events: &[Event]) -> Value {
        let mut out = RunOutput::default();
        for event in events.iter().filter(|e| in_run(e, run)) {
            out.add(event);
        }
        let text = out.text();
        let mut message = json!({ "role": "assistant", "content": text, "refusal": null });
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
            "id": self.response_id(&run.run_id),
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

    fn response_id(&self, run_id: &str) -> String {
        format!(
            "{CHAT_PREFIX}{}",
            run_id.strip_prefix(RUN_PREFIX).unwrap_or(run_id)
        )
    }

    fn run_id(&self, response_id: &str) -> Option<String> {
        let hex = response_id.strip_prefix(CHAT_PREFIX)?;
        (hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| format!("{RUN_PREFIX}{hex}"))
    }
}

/// A present, non-null field: OpenAI treats an explicit `null` as "not given".
fn field<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn invalid_type(param: &str, expected: &str, got: &Value) -> InputError {
    InputError::new(
        "invalid_type",
        Some(param),
        format!(
            "Invalid type for '{param}': expected {expected}, but got {} instead.",
            kind(got)
        ),
    )
}

fn missing(param: &str) -> InputError {
    InputError::new(
        "missing_required_parameter",
        Some(param),
        format!("Missing required parameter: '{param}'."),
    )
}

fn invalid_value(param: &str, message: impl Into<String>) -> InputError {
    InputError::new("invalid_value", Some(param), message)
}

fn opt_str(obj: &Map<String, Value>, key: &str) -> Result<Option<String>, InputError> {
    match field(obj, key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(invalid_type(key, "a string", v)),
    }
}

fn opt_bool(obj: &Map<String, Value>, key: &str) -> Result<Option<bool>, InputError> {
    match field(obj, key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(invalid_type(key, "a boolean", v)),
    }
}

fn opt_f64(obj: &Map<String, Value>, key: &str) -> Result<Option<f64>, InputError> {
    match field(obj, key) {
        None => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| invalid_type(key, "a number", v)),
    }
}

fn opt_max_tokens(obj: &Map<String, Value>, key: &str) -> Result<Option<u64>, InputError> {
    match field(obj, key) {
        None => Ok(None),
        Some(v) => match v.as_u64() {
            Some(0) => Err(invalid_value(
                key,
                format!("Invalid '{key}': expected an integer of at least 1, but got 0 instead."),
            )),
            Some(n) => Ok(Some(n)),
            None if v.is_i64() => Err(invalid_value(
                key,
                format!("Invalid '{key}': expected an integer of at least 1, but got {v} instead."),
            )),
            None => Err(invalid_type(key, "an integer", v)),
        },
    }
}

fn parse_messages(v: &Value) -> Result<Vec<Item>, InputError> {
    let Some(messages) = v.as_array() else {
        return Err(invalid_type("messages", "an array", v));
    };
    if messages.is_empty() {
        return Err(invalid_value(
            "messages",
            "Invalid 'messages': expected a non-empty array, but got an empty array instead.",
        ));
    }
    let mut items = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        parse_message(m, &format!("messages[{i}]"), &mut items)?;
    }
    Ok(items)
}

fn parse_message(m: &Value, p: &str, items: &mut Vec<Item>) -> Result<(), InputError> {
    let Some(obj) = m.as_object() else {
        return Err(invalid_type(p, "an object", m));
    };
    let role_param = format!("{p}.role");
    let role = match field(obj, "role") {
        None => return Err(missing(&role_param)),
        Some(Value::String(r)) => r.as_str(),
        Some(v) => return Err(invalid_type(&role_param, "a string", v)),
    };
    let content_param = format!("{p}.content");
    match role {
        "system" | "developer" | "user" => {
            let content = match field(obj, "content") {
                None => return Err(missing(&content_param)),
                Some(c) => parse_content(c, &content_param)?,
            };
            items.push(Item::Message {
                role: role.to_owned(),
                content,
            });
        }
        "assistant" => parse_assistant(obj, p, items)?,
        "tool" => {
            let id_param = format!("{p}.tool_call_id");
            let call_id = match field(obj, "tool_call_id") {
                None => return Err(missing(&id_param)),
                Some(Value::String(s)) => s.clone(),
                Some(v) => return Err(invalid_type(&id_param, "a string", v)),
            };
            let output = match field(obj, "content") {
                None => return Err(missing(&content_param)),
                Some(c) => text_only(c, &content_param)?,
            };
            items.push(Item::ToolResult { call_id, output });
        }
        other => {
            return Err(invalid_value(
                &role_param,
                format!(
                    "Invalid value for '{role_param}': '{other}'. Supported values are: 'system', 'developer', 'user', 'assistant', and 'tool'."
                ),
            ))
        }
    }
    Ok(())
}

fn parse_assistant(
    obj: &Map<String, Value>,
    p: &str,
    items: &mut Vec<Item>,
) -> Result<(), InputError> {
    // Clients of reasoning models (DeepSeek style) echo the reasoning back; keep it as the
    // turn's reasoning item rather than dropping it.
    for key in ["reasoning_content", "reasoning"] {
        match field(obj, key) {
            None => {}
            Some(Value::String(s)) => {
                if !s.is_empty() {
                    items.push(Item::Reasoning { text: s.clone() });
                }
                break;
            }
            Some(v) => return Err(invalid_type(&format!("{p}.{key}"), "a string", v)),
        }
    }

    let content_param = format!("{p}.content");
    let mut content = match field(obj, "content") {
        None => None,
        Some(c) => Some(parse_content(c, &content_param)?),
    };
    if content.is_none() {
        match field(obj, "refusal") {
            None => {}
            Some(Value::String(s)) => content = Some(vec![Block::Text(s.clone())]),
            Some(v) => return Err(invalid_type(&format!("{p}.refusal"), "a string", v)),
        }
    }

    let mut calls = Vec::new();
    if let Some(v) = field(obj, "tool_calls") {
        let tc_param = format!("{p}.tool_calls");
        let Some(arr) = v.as_array() else {
            return Err(invalid_type(&tc_param, "an array", v));
        };
        for (j, call) in arr.iter().enumerate() {
            calls.push(parse_tool_call(call, &format!("{tc_param}[{j}]"))?);
        }
    }

    match content {
        None if calls.is_empty() => return Err(missing(&content_param)),
        None => {}
        Some(content) => {
            // `"content": ""` beside tool calls is the usual way of saying "no text".
            let empty = content
                .iter()
                .all(|b| matches!(b, Block::Text(t) if t.is_empty()));
            if !empty || calls.is_empty() {
                items.push(Item::Message {
                    role: "assistant".into(),
                    content,
                });
            }
        }
    }
    items.extend(calls);
    Ok(())
}

fn parse_tool_call(v: &Value, p: &str) -> Result<Item, InputError> {
    let Some(obj) = v.as_object() else {
        return Err(invalid_type(p, "an object", v));
    };
    let typ_param = format!("{p}.type");
    match field(obj, "type") {
        None | Some(Value::String(_)) => {}
        Some(v) => return Err(invalid_type(&typ_param, "a string", v)),
    }
    if let Some(t) = field(obj, "type").and_then(Value::as_str) {
        if t != "function" {
            return Err(invalid_value(
                &typ_param,
                format!(
                    "Invalid value for '{typ_param}': '{t}'. Supported values are: 'function'."
                ),
            ));
        }
    }
    let call_id = req_str(obj, "id", p)?;
    let fn_param = format!("{p}.function");
    let function = match field(obj, "function") {
        None => return Err(missing(&fn_param)),
        Some(Value::Object(f)) => f,
        Some(v) => return Err(invalid_type(&fn_param, "an object", v)),
    };
    let name = req_str(function, "name", &fn_param)?;
    let arguments = req_str(function, "arguments", &fn_param)?;
    Ok(Item::ToolCall {
        call_id,
        name,
        arguments,
    })
}

fn req_str(obj: &Map<String, Value>, key: &str, p: &str) -> Result<String, InputError> {
    let param = format!("{p}.{key}");
    match field(obj, key) {
        None => Err(missing(&param)),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(v) => Err(invalid_type(&param, "a string", v)),
    }
}

fn opt_str_at(obj: &Map<String, Value>, key: &str, p: &str) -> Result<Option<String>, InputError> {
    match field(obj, key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(invalid_type(&format!("{p}.{key}"), "a string", v)),
    }
}

/// Message content: a string, or an array of content parts.
fn parse_content(v: &Value, p: &str) -> Result<Vec<Block>, InputError> {
    let parts = match v {
        Value::String(s) => return Ok(vec![Block::Text(s.clone())]),
        Value::Array(parts) => parts,
        _ => return Err(invalid_type(p, "a string or an array of content parts", v)),
    };
    let mut blocks = Vec::with_capacity(parts.len());
    for (j, part) in parts.iter().enumerate() {
        let pp = format!("{p}[{j}]");
        let Some(obj) = part.as_object() else {
            return Err(invalid_type(&pp, "an object", part));
        };
        let typ = req_str(obj, "type", &pp)?;
        blocks.push(match typ.as_str() {
            "text" => Block::Text(req_str(obj, "text", &pp)?),
            "refusal" => Block::Text(req_str(obj, "refusal", &pp)?),
            "image_url" => {
                let ip = format!("{pp}.image_url");
                match field(obj, "image_url") {
                    None => return Err(missing(&ip)),
                    // Some clients send the URL bare instead of `{url}`.
                    Some(Value::String(url)) => Block::Image {
                        url: url.clone(),
                        detail: None,
                    },
                    Some(Value::Object(img)) => Block::Image {
                        url: req_str(img, "url", &ip)?,
                        detail: opt_str_at(img, "detail", &ip)?,
                    },
                    Some(v) => return Err(invalid_type(&ip, "an object", v)),
                }
            }
            "file" => {
                let fp = format!("{pp}.file");
                let file = match field(obj, "file") {
                    None => return Err(missing(&fp)),
                    Some(Value::Object(f)) => f,
                    Some(v) => return Err(invalid_type(&fp, "an object", v)),
                };
                let filename = opt_str_at(file, "filename", &fp)?;
                let data = opt_str_at(file, "file_data", &fp)?;
                let url = opt_str_at(file, "file_id", &fp)?;
                if data.is_none() && url.is_none() {
                    return Err(missing(&format!("{fp}.file_data")));
                }
                Block::File {
                    filename,
                    data,
                    url,
                }
            }
            other => {
                return Err(invalid_value(
                    &format!("{pp}.type"),
                    format!(
                        "Invalid value for '{pp}.type': '{other}'. Supported values are: 'text', 'image_url', 'file' and 'refusal'."
                    ),
                ))
            }
        });
    }
    Ok(blocks)
}

/// Content that may only hold text (tool results): a string or text parts, joined.
fn text_only(v: &Value, p: &str) -> Result<String, InputError> {
    let blocks = parse_content(v, p)?;
    let mut text = String::new();
    for (j, b) in blocks.iter().enumerate() {
        match b {
            Block::Text(t) => text.push_str(t),
            _ => {
                return Err(invalid_value(
                    &format!("{p}[{j}].type"),
                    format!(
                        "Invalid value for '{p}[{j}].type': only 'text' parts are supported here."
                    ),
                ))
            }
        }
    }
    Ok(text)
}

fn parse_tools(v: &Value) -> Result<Vec<Tool>, InputError> {
    let Some(arr) = v.as_array() else {
        return Err(invalid_type("tools", "an array", v));
    };
    let mut tools = Vec::with_capacity(arr.len());
    for (i, t) in arr.iter().enumerate() {
        let p = format!("tools[{i}]");
        let Some(obj) = t.as_object() else {
            return Err(invalid_type(&p, "an object", t));
        };
        let typ = req_str(obj, "type", &p)?;
        if typ != "function" {
            return Err(invalid_value(
                &format!("{p}.type"),
                format!("Invalid value for '{p}.type': '{typ}'. Supported values are: 'function'."),
            ));
        }
        let fp = format!("{p}.function");
        let function = match field(obj, "function") {
            None => return Err(missing(&fp)),
            Some(Value::Object(f)) => f,
            Some(v) => return Err(invalid_type(&fp, "an object", v)),
        };
        let name = req_str(function, "name", &fp)?;
        if name.is_empty() {
            return Err(invalid_value(
                &format!("{fp}.name"),
                format!("Invalid '{fp}.name': expected a non-empty string."),
            ));
        }
        let parameters = match field(function, "parameters") {
            None => None,
            Some(v @ Value::Object(_)) => Some(v.clone()),
            Some(v) => return Err(invalid_type(&format!("{fp}.parameters"), "an object", v)),
        };
        let strict = match field(function, "strict") {
            None => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(v) => return Err(invalid_type(&format!("{fp}.strict"), "a boolean", v)),
        };
        tools.push(Tool {
            name,
            description: opt_str_at(function, "description", &fp)?,
            parameters,
            strict,
        });
    }
    Ok(tools)
}

fn parse_tool_choice(v: &Value) -> Result<String, InputError> {
    match v {
        Value::String(s) if matches!(s.as_str(), "auto" | "none" | "required") => Ok(s.clone()),
        Value::String(s) => Err(invalid_value(
            "tool_choice",
            format!("Invalid value for 'tool_choice': '{s}'. Supported values are: 'auto', 'none', 'required', or an object naming a function."),
        )),
        Value::Object(obj) => {
            let typ = req_str(obj, "type", "tool_choice")?;
            if typ != "function" {
                return Err(invalid_value(
                    "tool_choice.type",
                    format!("Invalid value for 'tool_choice.type': '{typ}'. Supported values are: 'function'."),
                ));
            }
            let function = match field(obj, "function") {
                None => return Err(missing("tool_choice.function")),
                Some(Value::Object(f)) => f,
                Some(v) => return Err(invalid_type("tool_choice.function", "an object", v)),
            };
            req_str(function, "name", "tool_choice.function")
        }
        _ => Err(invalid_type("tool_choice", "a string or an object", v)),
    }
}

// ---------------------------------------------------------------------------------------
// Client surface: rendering
// ---------------------------------------------------------------------------------------

/// Whether an event belongs to the run being rendered (events without a run id, such as
/// the user's message recorded before the run started, are let through and then ignored
/// by type/role).
fn in_run(event: &Event, run: &RunInfo) -> bool {
    event.run_id.as_deref().is_none_or(|r| r == run.run_id)
}

fn is_assistant(event: &Event) -> bool {
    event.role.as_deref().is_none_or(|r| r == "assistant")
}

fn tool_call_json(id: &str, name: &str, arguments: &str) -> Value {
    json!({ "id": id, "type": "function", "function": { "name": name, "arguments": arguments } })
}

/// Usage in Chat Completions shape, from either Chat or Responses usage, since the run
/// may have been served by either kind of agent.
fn chat_usage(u: &Value) -> Option<Value> {
    Usage::read(u).map(Usage::to_chat)
}

/// Streams a run as `chat.completion.chunk` frames, the way the OpenAI SDK reads them.
struct ChatRenderer {
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
    /// Text (reasoning) deltas rendered since the last assistant message (reasoning)
    /// event: if none, that event's text still has to be sent.
    text_streamed: bool,
    reasoning_streamed: bool,
    /// The message of the last `error` event, for the terminal error frame.
    error: Option<String>,
    failed: bool,
    last_seq: Option<i64>,
}

impl ChatRenderer {
    fn new(run: &RunInfo, id: String) -> Self {
        ChatRenderer {
            id,
            run_id: run.run_id.clone(),
            model: run.model.clone(),
            created: run.created_at,
            started: false,
            open: false,
            tool_calls: 0,
            text_streamed: false,
            reasoning_streamed: false,
            error: None,
            failed: false,
            last_seq: None,
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

    fn delta(&self, delta: Value, seq: i64) -> Vec<SseFrame> {
        vec![frame(self.chunk(delta, None, None), seq)]
    }

    fn status(&mut self, event: &Event, status: RunStatus) -> Vec<SseFrame> {
        match status {
            RunStatus::InProgress => {
                // A resumed invocation starts over: an earlier failure is no longer the
                // run's outcome.
                self.open = true;
                self.failed = false;
                self.error = None;
                self.text_streamed = false;
                self.reasoning_streamed = false;
                if self.started {
                    return Vec::new();
                }
                self.started = true;
                let delta = json!({ "role": "assistant", "content": "" });
                vec![frame(self.chunk(delta, None, None), event.seq)]
            }
            RunStatus::Completed => {
                self.open = false;
                let finish = if self.tool_calls > 0 {
                    "tool_calls"
                } else {
                    "stop"
                };
                let usage = event.metadata.get("usage").and_then(chat_usage);
                vec![frame(self.chunk(json!({}), Some(finish), usage), event.seq)]
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
                vec![frame(body, event.seq)]
            }
        }
    }
}

fn frame(body: Value, seq: i64) -> SseFrame {
    SseFrame::json(&body).with_id(seq)
}

impl StreamRenderer for ChatRenderer {
    fn render(&mut self, event: &Event) -> Vec<SseFrame> {
        if event.run_id.as_deref().is_some_and(|r| r != self.run_id) {
            return Vec::new();
        }
        self.last_seq = Some(event.seq);
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
            EventType::TextDelta => {
                let delta = event.text();
                if delta.is_empty() {
                    return Vec::new();
                }
                self.text_streamed = true;
                self.delta(json!({ "content": delta }), event.seq)
            }
            EventType::ReasoningDelta => {
                let delta = event.text();
                if delta.is_empty() {
                    return Vec::new();
                }
                self.reasoning_streamed = true;
                self.delta(json!({ "reasoning_content": delta }), event.seq)
            }
            EventType::Message if event.role.as_deref() == Some("assistant") => {
                let streamed = std::mem::take(&mut self.text_streamed);
                let text = event.text();
                if streamed || text.is_empty() {
                    return Vec::new();
                }
                self.delta(json!({ "content": text }), event.seq)
            }
            EventType::Reasoning if is_assistant(event) => {
                let streamed = std::mem::take(&mut self.reasoning_streamed);
                let text = event.text();
                if streamed || text.is_empty() {
                    return Vec::new();
                }
                self.delta(json!({ "reasoning_content": text }), event.seq)
            }
            EventType::ToolCall => {
                let s = |k: &str| event.content.get(k).and_then(Value::as_str).unwrap_or("");
                let mut call = tool_call_json(s("call_id"), s("name"), s("arguments"));
                call["index"] = json!(self.tool_calls);
                self.tool_calls += 1;
                self.delta(json!({ "tool_calls": [call] }), event.seq)
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
        let done = SseFrame::data("[DONE]");
        vec![match self.last_seq {
            Some(seq) => done.with_id(seq),
            None => done,
        }]
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
                Some(RunStatus::Completed) => self.usage = event.metadata.get("usage").cloned(),
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

// ---------------------------------------------------------------------------------------
// Upstream: request building
// ---------------------------------------------------------------------------------------

/// Fields of `extra` never forwarded: Tether sets them itself, or they name a session the
/// agent must not know about.
const NOT_FORWARDED: &[&str] = &[
    "model",
    "messages",
    "stream",
    "stream_options",
    "session_id",
    "max_completion_tokens",
];

impl Upstream for ChatUpstream {
    fn protocol(&self) -> Protocol {
        Protocol::OpenAiChat
    }

    fn request(&self, call: &TurnCall) -> AgentRequest {
        AgentRequest::post(
            PATH,
            self.build_request(call.history, call.turn, call.default_model),
        )
    }

    fn parser(&self, _call: &TurnCall, content_type: &str) -> Box<dyn StreamParser> {
        self.body_parser(content_type)
    }
}

impl ChatUpstream {
    /// JSON body of the agent request: `history` (the projection) followed by the turn's
    /// new input, always streaming, never naming a stored conversation.
    pub fn build_request(
        &self,
        history: &[Item],
        turn: &TurnRequest,
        default_model: &str,
    ) -> Value {
        let mut body = Map::new();
        if turn.surface == Protocol::OpenAiChat {
            for (k, v) in &turn.extra {
                if !NOT_FORWARDED.contains(&k.as_str()) {
                    body.insert(k.clone(), v.clone());
                }
            }
        }
        let model = turn
            .model
            .as_deref()
            .filter(|m| !m.is_empty())
            .unwrap_or(default_model);
        let mut messages = Vec::new();
        if let Some(instructions) = &turn.instructions {
            messages.push(json!({ "role": "system", "content": instructions }));
        }
        messages.extend(chat_messages(history.iter().chain(&turn.input)));
        body.insert("model".into(), json!(model));
        body.insert("messages".into(), Value::Array(messages));
        body.insert("stream".into(), json!(true));
        body.insert("stream_options".into(), json!({ "include_usage": true }));
        if !turn.tools.is_empty() {
            let tools = turn.tools.iter().map(chat_tool).collect();
            body.insert("tools".into(), Value::Array(tools));
        }
        if let Some(choice) = &turn.tool_choice {
            let choice = match choice.as_str() {
                "auto" | "none" | "required" => json!(choice),
                name => json!({ "type": "function", "function": { "name": name } }),
            };
            body.insert("tool_choice".into(), choice);
        }
        if let Some(t) = turn.temperature {
            body.insert("temperature".into(), json!(t));
        }
        if let Some(p) = turn.top_p {
            body.insert("top_p".into(), json!(p));
        }
        if let Some(m) = turn.max_output_tokens {
            body.insert("max_tokens".into(), json!(m));
        }
        Value::Object(body)
    }

    /// A parser for the agent's response body with the given content type.
    pub fn body_parser(&self, content_type: &str) -> Box<dyn StreamParser> {
        if content_type
            .to_ascii_lowercase()
            .contains("text/event-stream")
        {
            Box::new(ChatSseParser::default())
        } else {
            Box::new(ChatJsonParser::default())
        }
    }
}

fn chat_tool(tool: &Tool) -> Value {
    let mut function = json!({ "name": tool.name });
    if let Some(d) = &tool.description {
        function["description"] = json!(d);
    }
    if let Some(p) = &tool.parameters {
        function["parameters"] = p.clone();
    }
    if let Some(s) = tool.strict {
        function["strict"] = json!(s);
    }
    json!({ "type": "function", "function": function })
}

/// History items as chat messages. Tool calls join the assistant message just before
/// them, because Chat Completions carries a turn's calls on one assistant message.
fn chat_messages<'a>(items: impl Iterator<Item = &'a Item>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    // Whether the last message is an assistant message that tool calls may join.
    let mut open_assistant = false;
    for item in items {
        match item {
            Item::Message { role, content } => {
                out.push(json!({ "role": role, "content": chat_content(content) }));
                open_assistant = role == "assistant";
            }
            Item::ToolCall {
                call_id,
                name,
                arguments,
            } => {
                let call = tool_call_json(call_id, name, arguments);
                match out.last_mut() {
                    Some(last) if open_assistant => match last.get_mut("tool_calls") {
                        Some(Value::Array(calls)) => calls.push(call),
                        _ => last["tool_calls"] = json!([call]),
                    },
                    _ => {
                        out.push(
                            json!({ "role": "assistant", "content": null, "tool_calls": [call] }),
                        );
                        open_assistant = true;
                    }
                }
            }
            Item::ToolResult { call_id, output } => {
                out.push(json!({ "role": "tool", "tool_call_id": call_id, "content": output }));
                open_assistant = false;
            }
            // Chat has no reasoning input, and approvals are another protocol's items;
            // neither interrupts the assistant message tool calls attach to.
            Item::Reasoning { .. } | Item::Approval(_) => {}
        }
    }
    out
}

fn chat_content(blocks: &[Block]) -> Value {
    if blocks.iter().all(|b| matches!(b, Block::Text(_))) {
        let text: String = blocks
            .iter()
            .filter_map(|b| match b {
                Block::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        return Value::String(text);
    }
    Value::Array(
        blocks
            .iter()
            .map(|b| match b {
                Block::Text(t) => json!({ "type": "text", "text": t }),
                Block::Image { url, detail } => {
                    let mut image = json!({ "url": url });
                    if let Some(d) = detail {
                        image["detail"] = json!(d);
                    }
                    json!({ "type": "image_url", "image_url": image })
                }
                Block::File {
                    filename,
                    data,
                    url,
                } => {
                    let mut file = Map::new();
                    if let Some(f) = filename {
                        file.insert("filename".into(), json!(f));
                    }
                    if let Some(d) = data {
                        file.insert("file_data".into(), json!(d));
                    } else if let Some(u) = url {
                        // Chat file parts name stored files by id; that is what a file
                        // reference without inline data is.
                        file.insert("file_id".into(), json!(u));
                    }
                    json!({ "type": "file", "file": file })
                }
            })
            .collect(),
    )
}

// ---------------------------------------------------------------------------------------
// Upstream: response parsing
// ---------------------------------------------------------------------------------------

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

/// Parses a `chat.completion.chunk` SSE stream.
#[derive(Default)]
struct ChatSseParser {
    sse: SseParser,
    gathered: Gathered,
    usage: Option<Value>,
    /// A `finish_reason` was seen: the turn is complete even without `[DONE]`.
    finished: bool,
    /// `Done` went out; nothing follows it.
    done: bool,
    /// Whether any SSE event arrived at all.
    any_frame: bool,
    raw: Vec<u8>,
}

impl ChatSseParser {
    fn frame(&mut self, frame: SseFrame, out: &mut Vec<Output>) {
        if !self.any_frame {
            self.any_frame = true;
            self.raw = Vec::new();
        }
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
            let text = ["content", "refusal"]
                .iter()
                .filter_map(|k| delta.get(*k).and_then(Value::as_str))
                .find(|s| !s.is_empty());
            if let Some(text) = text {
                g.text.push_str(text);
                out.push(Output::TextDelta(text.to_owned()));
            }
            // `reasoning_content` (DeepSeek, older vLLM) or `reasoning` (newer vLLM,
            // OpenRouter); a server sending both means the same text.
            let reasoning = ["reasoning_content", "reasoning"]
                .iter()
                .filter_map(|k| delta.get(*k).and_then(Value::as_str))
                .find(|s| !s.is_empty());
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
}

impl StreamParser for ChatSseParser {
    fn feed(&mut self, bytes: &[u8]) -> Vec<Output> {
        if !self.any_frame && self.raw.len() < SNIFF_LIMIT {
            self.raw.extend_from_slice(bytes);
        }
        let mut out = Vec::new();
        for frame in self.sse.feed(bytes) {
            self.frame(frame, &mut out);
        }
        out
    }

    fn finish(&mut self) -> Vec<Output> {
        let mut out = Vec::new();
        if let Some(frame) = self.sse.finish() {
            self.frame(frame, &mut out);
        }
        let raw = std::mem::take(&mut self.raw);
        if !self.any_frame && raw.trim_ascii_start().starts_with(b"{") {
            // Not SSE after all: an error or a whole completion under the wrong content
            // type. (An empty or comment-only stream is simply an agent closing early.)
            return parse_json_body(&raw);
        }
        if self.done {
            return out;
        }
        out.extend(self.gathered.take_items());
        if self.finished {
            self.done = true;
            out.push(Output::Done {
                usage: self.usage.take(),
            });
        }
        out
    }
}

/// Parses a non-streaming `chat.completion` body, whole, at the end.
#[derive(Default)]
struct ChatJsonParser {
    body: Vec<u8>,
}

impl StreamParser for ChatJsonParser {
    fn feed(&mut self, bytes: &[u8]) -> Vec<Output> {
        self.body.extend_from_slice(bytes);
        Vec::new()
    }

    fn finish(&mut self) -> Vec<Output> {
        let body = std::mem::take(&mut self.body);
        let trimmed = body.trim_ascii_start();
        // An agent that streams despite labelling its body otherwise.
        if trimmed.starts_with(b"data:") || trimmed.starts_with(b"event:") {
            let mut sse = ChatSseParser::default();
            let mut out = sse.feed(&body);
            out.extend(sse.finish());
            return out;
        }
        parse_json_body(&body)
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
        if let Some(r) = ["reasoning_content", "reasoning"]
            .iter()
            .filter_map(|k| message.get(*k).and_then(Value::as_str))
            .find(|s| !s.is_empty())
        {
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

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};
    use session_log::NewEvent;

    const RUN: &str = "run_0123456789abcdef0123456789abcdef";
    const CHAT_ID: &str = "chatcmpl-0123456789abcdef0123456789abcdef";

    fn run_info() -> RunInfo {
        RunInfo {
            run_id: RUN.into(),
            session_id: "s1".into(),
            model: "gpt-test".into(),
            created_at: 1_700_000_000,
            client: Value::Null,
        }
    }

    fn parse(body: Value) -> Result<TurnRequest, InputError> {
        ChatSurface.parse_request(body.to_string().as_bytes(), None)
    }

    fn parse_err(body: Value) -> InputError {
        parse(body).expect_err("request should be refused")
    }

    // --- parse_request ---------------------------------------------------------------

    #[test]
    fn parses_a_full_request() {
        let turn = parse(json!({
            "model": "gpt-4o",
            "stream": true,
            "stream_options": {"include_usage": true},
            "temperature": 0.5,
            "top_p": 0.9,
            "max_completion_tokens": 100,
            "session_id": "sess-1",
            "user": "u-42",
            "parallel_tool_calls": false,
            "tools": [{"type": "function", "function": {
                "name": "get_weather", "description": "Weather", "strict": true,
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}
            }}],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "developer", "content": [{"type": "text", "text": "Dev."}]},
                {"role": "user", "content": [
                    {"type": "text", "text": "What is this?"},
                    {"type": "image_url", "image_url": {"url": "https://x/img.png", "detail": "low"}},
                    {"type": "file", "file": {"filename": "a.pdf", "file_data": "data:application/pdf;base64,QQ=="}},
                    {"type": "file", "file": {"file_id": "file-123"}}
                ]},
                {"role": "assistant", "content": "Checking.", "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                    {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "rain"}, {"type": "text", "text": "y"}]},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_3", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
                ]}
            ]
        }))
        .unwrap();

        assert_eq!(turn.surface, Protocol::OpenAiChat);
        assert_eq!(turn.model.as_deref(), Some("gpt-4o"));
        assert!(turn.stream);
        assert_eq!(turn.temperature, Some(0.5));
        assert_eq!(turn.top_p, Some(0.9));
        assert_eq!(turn.max_output_tokens, Some(100));
        assert_eq!(turn.session, SessionRef::Named("sess-1".into()));
        assert_eq!(turn.tool_choice.as_deref(), Some("get_weather"));
        assert_eq!(
            turn.tools,
            vec![Tool {
                name: "get_weather".into(),
                description: Some("Weather".into()),
                parameters: Some(
                    json!({"type": "object", "properties": {"city": {"type": "string"}}})
                ),
                strict: Some(true),
            }]
        );
        assert_eq!(
            Value::Object(turn.extra.clone()),
            json!({"user": "u-42", "parallel_tool_calls": false})
        );
        let call = |id: &str, args: &str| Item::ToolCall {
            call_id: id.into(),
            name: "get_weather".into(),
            arguments: args.into(),
        };
        assert_eq!(
            turn.input,
            vec![
                Item::Message {
                    role: "system".into(),
                    content: vec![Block::Text("Be brief.".into())]
                },
                Item::Message {
                    role: "developer".into(),
                    content: vec![Block::Text("Dev.".into())]
                },
                Item::Message {
                    role: "user".into(),
                    content: vec![
                        Block::Text("What is this?".into()),
                        Block::Image {
                            url: "https://x/img.png".into(),
                            detail: Some("low".into())
                        },
                        Block::File {
                            filename: Some("a.pdf".into()),
                            data: Some("data:application/pdf;base64,QQ==".into()),
                            url: None
                        },
                        Block::File {
                            filename: None,
                            data: None,
                            url: Some("file-123".into())
                        },
                    ]
                },
                Item::assistant_text("Checking."),
                call("call_1", "{\"city\":\"Paris\"}"),
                call("call_2", "{}"),
                Item::ToolResult {
                    call_id: "call_1".into(),
                    output: "sunny".into()
                },
                Item::ToolResult {
                    call_id: "call_2".into(),
                    output: "rainy".into()
                },
                call("call_3", "{}"),
            ]
        );
    }

    #[test]
    fn max_tokens_and_defaults() {
        let turn = parse(json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 7}))
            .unwrap();
        assert_eq!(turn.max_output_tokens, Some(7));
        assert!(!turn.stream);
        assert_eq!(turn.model, None);
        assert_eq!(turn.session, SessionRef::New);
        assert!(turn.extra.is_empty());
        assert_eq!(turn.input, vec![Item::user_text("hi")]);

        // Explicit nulls mean "not given", as at OpenAI.
        let turn = parse(json!({
            "messages": [{"role": "user", "content": "hi"}],
            "temperature": null, "stream": null, "tools": null, "tool_choice": null, "session_id": null
        }))
        .unwrap();
        assert_eq!(turn.temperature, None);
        assert!(turn.tools.is_empty());
        assert_eq!(turn.session, SessionRef::New);
    }

    #[test]
    fn assistant_reasoning_and_empty_content_beside_tool_calls() {
        let turn = parse(json!({"messages": [
            {"role": "assistant", "content": "", "reasoning_content": "hmm",
             "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
        ]}))
        .unwrap();
        assert_eq!(
            turn.input,
            vec![
                Item::Reasoning { text: "hmm".into() },
                Item::ToolCall {
                    call_id: "c".into(),
                    name: "f".into(),
                    arguments: "{}".into()
                }
            ]
        );
    }

    #[test]
    fn session_from_header_and_conflicts() {
        let body = json!({"messages": [{"role": "user", "content": "hi"}]}).to_string();
        let turn = ChatSurface
            .parse_request(body.as_bytes(), Some("from-header"))
            .unwrap();
        assert_eq!(turn.session, SessionRef::Named("from-header".into()));

        let body =
            json!({"session_id": "a", "messages": [{"role": "user", "content": "hi"}]}).to_string();
        let turn = ChatSurface
            .parse_request(body.as_bytes(), Some("a"))
            .unwrap();
        assert_eq!(turn.session, SessionRef::Named("a".into()));
        assert!(!turn.extra.contains_key("session_id"));

        let err = ChatSurface
            .parse_request(body.as_bytes(), Some("b"))
            .unwrap_err();
        assert_eq!(err.code, "invalid_value");
        assert_eq!(err.param.as_deref(), Some("session_id"));
        assert!(err.message.contains("'a'") && err.message.contains("'b'"));
    }

    #[test]
    fn refuses_bad_input_with_param_and_code() {
        let err = ChatSurface.parse_request(b"{not json", None).unwrap_err();
        assert_eq!((err.code, err.param), ("invalid_json", None));

        let err = ChatSurface.parse_request(b"[1]", None).unwrap_err();
        assert_eq!((err.code, err.param), ("invalid_type", None));

        let hi = json!([{"role": "user", "content": "hi"}]);
        let cases: Vec<(Value, &str, &str)> = vec![
            (json!({}), "missing_required_parameter", "messages"),
            (json!({"messages": "hi"}), "invalid_type", "messages"),
            (json!({"messages": []}), "invalid_value", "messages"),
            (json!({"messages": [1]}), "invalid_type", "messages[0]"),
            (
                json!({"messages": [{"content": "x"}]}),
                "missing_required_parameter",
                "messages[0].role",
            ),
            (
                json!({"messages": [{"role": 3, "content": "x"}]}),
                "invalid_type",
                "messages[0].role",
            ),
            (
                json!({"messages": [{"role": "robot", "content": "x"}]}),
                "invalid_value",
                "messages[0].role",
            ),
            (
                json!({"messages": [{"role": "user"}]}),
                "missing_required_parameter",
                "messages[0].content",
            ),
            (
                json!({"messages": [{"role": "user", "content": 5}]}),
                "invalid_type",
                "messages[0].content",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]}),
                "invalid_value",
                "messages[0].content[0].type",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"type": "text"}]}]}),
                "missing_required_parameter",
                "messages[0].content[0].text",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"detail": "low"}}]}]}),
                "missing_required_parameter",
                "messages[0].content[0].image_url.url",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"type": "file", "file": {"filename": "a"}}]}]}),
                "missing_required_parameter",
                "messages[0].content[0].file.file_data",
            ),
            (
                json!({"messages": [{"role": "assistant"}]}),
                "missing_required_parameter",
                "messages[0].content",
            ),
            (
                json!({"messages": [{"role": "assistant", "tool_calls": {}}]}),
                "invalid_type",
                "messages[0].tool_calls",
            ),
            (
                json!({"messages": [{"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]}]}),
                "missing_required_parameter",
                "messages[0].tool_calls[0].id",
            ),
            (
                json!({"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {}}}]}]}),
                "invalid_type",
                "messages[0].tool_calls[0].function.arguments",
            ),
            (
                json!({"messages": [{"role": "tool", "content": "x"}]}),
                "missing_required_parameter",
                "messages[0].tool_call_id",
            ),
            (
                json!({"messages": [{"role": "tool", "tool_call_id": "c", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}]}),
                "invalid_value",
                "messages[0].content[0].type",
            ),
            (
                json!({"messages": hi, "stream": "yes"}),
                "invalid_type",
                "stream",
            ),
            (
                json!({"messages": hi, "temperature": "hot"}),
                "invalid_type",
                "temperature",
            ),
            (
                json!({"messages": hi, "temperature": 3}),
                "invalid_value",
                "temperature",
            ),
            (
                json!({"messages": hi, "top_p": 1.5}),
                "invalid_value",
                "top_p",
            ),
            (
                json!({"messages": hi, "max_tokens": 1.5}),
                "invalid_type",
                "max_tokens",
            ),
            (
                json!({"messages": hi, "max_completion_tokens": -1}),
                "invalid_value",
                "max_completion_tokens",
            ),
            (json!({"messages": hi, "model": 4}), "invalid_type", "model"),
            (
                json!({"messages": hi, "tools": {}}),
                "invalid_type",
                "tools",
            ),
            (
                json!({"messages": hi, "tools": [{"type": "web_search"}]}),
                "invalid_value",
                "tools[0].type",
            ),
            (
                json!({"messages": hi, "tools": [{"type": "function", "function": {}}]}),
                "missing_required_parameter",
                "tools[0].function.name",
            ),
            (
                json!({"messages": hi, "tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]}),
                "invalid_type",
                "tools[0].function.parameters",
            ),
            (
                json!({"messages": hi, "tool_choice": "sometimes"}),
                "invalid_value",
                "tool_choice",
            ),
            (
                json!({"messages": hi, "tool_choice": 1}),
                "invalid_type",
                "tool_choice",
            ),
            (
                json!({"messages": hi, "tool_choice": {"type": "function", "function": {}}}),
                "missing_required_parameter",
                "tool_choice.function.name",
            ),
            (
                json!({"messages": hi, "session_id": 12}),
                "invalid_type",
                "session_id",
            ),
            (
                json!({"messages": hi, "session_id": ""}),
                "invalid_value",
                "session_id",
            ),
            (
                json!({"messages": hi, "stream_options": true}),
                "invalid_type",
                "stream_options",
            ),
            (json!({"messages": hi, "n": 2}), "invalid_value", "n"),
        ];
        for (body, code, param) in cases {
            let err = parse_err(body.clone());
            assert_eq!(
                (err.code, err.param.as_deref()),
                (code, Some(param)),
                "{body} -> {err:?}"
            );
            assert!(err.message.contains(param), "{body} -> {}", err.message);
        }
    }

    #[test]
    fn error_messages_read_well() {
        let err = parse_err(
            json!({"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}),
        );
        assert_eq!(
            err.message,
            "Invalid type for 'temperature': expected a number, but got a string instead."
        );
        let err = parse_err(json!({"model": "m"}));
        assert_eq!(err.message, "Missing required parameter: 'messages'.");
    }

    #[test]
    fn response_ids_round_trip() {
        assert_eq!(ChatSurface.response_id(RUN), CHAT_ID);
        assert_eq!(ChatSurface.run_id(CHAT_ID).as_deref(), Some(RUN));
        assert_eq!(
            ChatSurface.run_id("resp_0123456789abcdef0123456789abcdef"),
            None
        );
        assert_eq!(ChatSurface.run_id("chatcmpl-abc"), None);
        assert_eq!(
            ChatSurface.run_id("chatcmpl-0123456789abcdef0123456789abcdeg"),
            None
        );
    }

    // --- rendering ---------------------------------------------------------------------

    struct Log {
        seq: i64,
        events: Vec<Event>,
    }

    impl Log {
        fn new() -> Self {
            Log {
                seq: 10,
                events: Vec::new(),
            }
        }

        fn push(&mut self, new: NewEvent) -> &mut Self {
            self.seq += 1;
            let created = Utc.timestamp_opt(1_700_000_000, 0).unwrap();
            self.events.push(Event::committed(new, self.seq, created));
            self
        }

        fn run(&mut self, event_type: EventType, role: Option<&str>, content: Value) -> &mut Self {
            let mut new = NewEvent::new("acct", "s1", event_type, content).in_run(RUN, "inv1");
            new.role = role.map(str::to_owned);
            self.push(new)
        }

        fn item(&mut self, item: Item) -> &mut Self {
            self.push(item.to_event("acct", "s1").in_run(RUN, "inv1"))
        }

        fn status(&mut self, status: RunStatus) -> &mut Self {
            self.run(
                EventType::RunStatus,
                None,
                session_log::event::run_status_content(status, None),
            )
        }

        fn status_with_usage(&mut self, status: RunStatus, usage: Value) -> &mut Self {
            self.push(
                NewEvent::new(
                    "acct",
                    "s1",
                    EventType::RunStatus,
                    session_log::event::run_status_content(status, None),
                )
                .in_run(RUN, "inv1")
                .with_metadata(json!({ "usage": usage })),
            )
        }

        fn delta(&mut self, text: &str) -> &mut Self {
            self.run(EventType::TextDelta, None, json!({ "delta": text }))
        }

        /// (id, data as JSON or the raw string) of every frame, `end()` included.
        fn render(&self) -> Vec<(Option<String>, Value)> {
            let mut r = ChatSurface.stream_renderer(&run_info());
            let mut frames: Vec<SseFrame> = self.events.iter().flat_map(|e| r.render(e)).collect();
            frames.extend(r.end());
            frames
                .into_iter()
                .map(|f| {
                    assert_eq!(f.event, None, "chat frames carry no event: line");
                    let data = serde_json::from_str(&f.data).unwrap_or(Value::String(f.data));
                    (f.id, data)
                })
                .collect()
        }
    }

    fn chunk(delta: Value, finish_reason: Value) -> Value {
        json!({
            "id": CHAT_ID,
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": "gpt-test",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": null}],
        })
    }

    fn id(seq: i64) -> Option<String> {
        Some(seq.to_string())
    }

    #[test]
    fn streams_text_as_the_sdk_expects() {
        let mut log = Log::new();
        log.push(Item::user_text("hi").to_event("acct", "s1")) // 11, no run id
            .status(RunStatus::InProgress) // 12
            .run(EventType::ReasoningDelta, None, json!({"delta": "think"})) // 13
            .item(Item::Reasoning {
                text: "think".into(),
            }) // 14
            .delta("Hel") // 15
            .delta("lo") // 16
            .item(Item::assistant_text("Hello")) // 17
            .push(NewEvent::new(
                "acct",
                "s1",
                EventType::HttpRequest,
                json!({}),
            )) // 18
            .status_with_usage(
                RunStatus::Completed,
                json!({"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}),
            ); // 19
        let mut finish = chunk(json!({}), json!("stop"));
        finish["usage"] = json!({"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7});
        assert_eq!(
            log.render(),
            vec![
                (
                    id(12),
                    chunk(json!({"role": "assistant", "content": ""}), Value::Null)
                ),
                (
                    id(13),
                    chunk(json!({"reasoning_content": "think"}), Value::Null)
                ),
                (id(15), chunk(json!({"content": "Hel"}), Value::Null)),
                (id(16), chunk(json!({"content": "lo"}), Value::Null)),
                (id(19), finish),
                (id(19), json!("[DONE]")),
            ]
        );
    }

    #[test]
    fn wire_form_is_data_and_id_lines_only() {
        let mut r = ChatSurface.stream_renderer(&run_info());
        let mut log = Log::new();
        log.status(RunStatus::InProgress);
        let mut out = String::new();
        for f in r.render(&log.events[0]) {
            f.encode(&mut out);
        }
        assert!(out.starts_with("id: 11\ndata: {"), "{out}");
        assert!(out.ends_with("}\n\n"));
        assert_eq!(out.lines().count(), 3);
    }

    #[test]
    fn a_non_streamed_answer_is_sent_whole_and_tool_calls_are_indexed() {
        let mut log = Log::new();
        log.status(RunStatus::InProgress) // 11
            .item(Item::assistant_text("Let me check.")) // 12: no deltas before it
            .item(Item::ToolCall {
                call_id: "call_a".into(),
                name: "f".into(),
                arguments: "{\"x\":1}".into(),
            }) // 13
            .item(Item::ToolCall {
                call_id: "call_b".into(),
                name: "g".into(),
                arguments: "{}".into(),
            }) // 14
            .status_with_usage(
                RunStatus::Completed,
                json!({"input_tokens": 3, "output_tokens": 4, "total_tokens": 7,
                       "output_tokens_details": {"reasoning_tokens": 1}}),
            ); // 15
        let mut finish = chunk(json!({}), json!("tool_calls"));
        finish["usage"] = json!({"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7,
                                 "completion_tokens_details": {"reasoning_tokens": 1}});
        assert_eq!(
            log.render(),
            vec![
                (
                    id(11),
                    chunk(json!({"role": "assistant", "content": ""}), Value::Null)
                ),
                (
                    id(12),
                    chunk(json!({"content": "Let me check."}), Value::Null)
                ),
                (
                    id(13),
                    chunk(
                        json!({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                                                "function": {"name": "f", "arguments": "{\"x\":1}"}}]}),
                        Value::Null
                    )
                ),
                (
                    id(14),
                    chunk(
                        json!({"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                                                "function": {"name": "g", "arguments": "{}"}}]}),
                        Value::Null
                    )
                ),
                (id(15), finish),
                (id(15), json!("[DONE]")),
            ]
        );
    }

    #[test]
    fn a_failed_run_ends_with_an_error_frame_and_no_done() {
        let mut log = Log::new();
        log.status(RunStatus::InProgress) // 11
            .delta("par") // 12
            .run(
                EventType::Error,
                None,
                json!({"code": "agent_unreachable", "message": "the agent closed the stream"}),
            ) // 13
            .status(RunStatus::Failed); // 14
        let frames = log.render();
        assert_eq!(frames.len(), 3);
        assert_eq!(
            frames[2],
            (
                id(14),
                json!({"error": {"message": "the agent closed the stream", "type": "server_error",
                                 "param": null, "code": "failed"}})
            )
        );

        let mut log = Log::new();
        log.status(RunStatus::InProgress).run(
            EventType::RunStatus,
            None,
            session_log::event::run_status_content(
                RunStatus::Cancelled,
                Some("cancelled by the client"),
            ),
        );
        let frames = log.render();
        assert_eq!(
            frames.last().unwrap(),
            &(
                id(12),
                json!({"error": {"message": "cancelled by the client", "type": "cancelled",
                                 "param": null, "code": "cancelled"}})
            )
        );

        let mut log = Log::new();
        log.status(RunStatus::InProgress)
            .status(RunStatus::Interrupted);
        let frames = log.render();
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[1].1["error"]["code"], "interrupted");
        assert_eq!(frames[1].1["error"]["type"], "server_error");
    }

    #[test]
    fn the_turns_own_input_is_not_rendered() {
        // A client that echoes the assistant's tool calls back with their results: all of
        // it is recorded in this run, before `in_progress`.
        let mut log = Log::new();
        log.item(Item::assistant_text("Checking.")) // 11
            .item(call("call_a", "f", "{}")) // 12
            .item(result("call_a", "42")) // 13
            .item(Item::user_text("so?")) // 14
            .status(RunStatus::InProgress) // 15
            .delta("42.") // 16
            .item(Item::assistant_text("42.")) // 17
            .status(RunStatus::Completed); // 18
        assert_eq!(
            log.render(),
            vec![
                (
                    id(15),
                    chunk(json!({"role": "assistant", "content": ""}), Value::Null)
                ),
                (id(16), chunk(json!({"content": "42."}), Value::Null)),
                (id(18), chunk(json!({}), json!("stop"))),
                (id(18), json!("[DONE]")),
            ]
        );
        let body = ChatSurface.final_body(&run_info(), &log.events);
        assert_eq!(
            body["choices"][0]["message"],
            json!({"role": "assistant", "content": "42.", "refusal": null})
        );
        assert_eq!(body["choices"][0]["finish_reason"], "stop");
    }

    #[test]
    fn a_resumed_run_opens_once_and_keeps_counting_tool_calls() {
        let mut log = Log::new();
        log.status(RunStatus::InProgress) // 11
            .item(call("call_a", "f", "{}")) // 12
            .status(RunStatus::Interrupted) // 13
            .item(result("call_a", "1")) // 14: input of the resume
            .status(RunStatus::InProgress) // 15
            .item(call("call_b", "g", "{}")) // 16
            .status(RunStatus::Completed); // 17
        let frames = log.render();
        let ids: Vec<_> = frames.iter().map(|(id, _)| id.clone()).collect();
        assert_eq!(ids, vec![id(11), id(12), id(13), id(16), id(17), id(17)]);
        assert_eq!(
            frames[3].1["choices"][0]["delta"]["tool_calls"][0]["index"],
            1
        );
        assert_eq!(frames[4].1["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(frames[5].1, json!("[DONE]"));
    }

    #[test]
    fn events_of_other_runs_are_not_rendered() {
        let mut log = Log::new();
        log.push(
            Item::assistant_text("old answer")
                .to_event("acct", "s1")
                .in_run("run_ffffffffffffffffffffffffffffffff", "i0"),
        )
        .status(RunStatus::InProgress)
        .delta("new")
        .status(RunStatus::Completed);
        let frames = log.render();
        assert_eq!(frames.len(), 4);
        assert!(!frames
            .iter()
            .any(|(_, v)| v.to_string().contains("old answer")));
    }

    #[test]
    fn final_body_is_a_chat_completion() {
        let mut log = Log::new();
        log.push(Item::user_text("hi").to_event("acct", "s1"))
            .status(RunStatus::InProgress)
            .run(EventType::ReasoningDelta, None, json!({"delta": "hm"}))
            .item(Item::Reasoning { text: "hm".into() })
            .delta("Hel")
            .delta("lo")
            .item(Item::assistant_text("Hello"))
            .status_with_usage(
                RunStatus::Completed,
                json!({"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}),
            );
        assert_eq!(
            ChatSurface.final_body(&run_info(), &log.events),
            json!({
                "id": CHAT_ID,
                "object": "chat.completion",
                "created": 1_700_000_000,
                "model": "gpt-test",
                "choices": [{
                    "index": 0,
                    "message": {"role": "assistant", "content": "Hello", "refusal": null,
                                "reasoning_content": "hm"},
                    "finish_reason": "stop",
                    "logprobs": null,
                }],
                "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
            })
        );
    }

    #[test]
    fn final_body_with_only_tool_calls_has_null_content() {
        let mut log = Log::new();
        log.status(RunStatus::InProgress)
            .item(Item::ToolCall {
                call_id: "call_a".into(),
                name: "f".into(),
                arguments: "{}".into(),
            })
            .status(RunStatus::Completed);
        let body = ChatSurface.final_body(&run_info(), &log.events);
        assert_eq!(
            body["choices"][0],
            json!({
                "index": 0,
                "message": {"role": "assistant", "content": null, "refusal": null, "tool_calls": [
                    {"id": "call_a", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ]},
                "finish_reason": "tool_calls",
                "logprobs": null,
            })
        );
        assert_eq!(body["usage"], Value::Null);
    }

    #[test]
    fn final_body_keeps_only_the_last_invocation() {
        let mut log = Log::new();
        log.status(RunStatus::InProgress)
            .delta("partial")
            .item(Item::assistant_text("partial"))
            .status(RunStatus::Interrupted)
            .status(RunStatus::InProgress)
            .delta("whole answer")
            .status(RunStatus::Completed);
        let body = ChatSurface.final_body(&run_info(), &log.events);
        assert_eq!(body["choices"][0]["message"]["content"], "whole answer");
    }

    // --- build_request -----------------------------------------------------------------

    fn call(id: &str, name: &str, args: &str) -> Item {
        Item::ToolCall {
            call_id: id.into(),
            name: name.into(),
            arguments: args.into(),
        }
    }

    fn result(id: &str, output: &str) -> Item {
        Item::ToolResult {
            call_id: id.into(),
            output: output.into(),
        }
    }

    #[test]
    fn builds_a_multi_turn_request_with_tool_calls() {
        let history = vec![
            Item::Message {
                role: "system".into(),
                content: vec![Block::Text("summary of earlier turns".into())],
            },
            Item::user_text("weather in Paris and Rome?"),
            Item::Reasoning {
                text: "need two calls".into(),
            },
            Item::assistant_text("Checking both."),
            call("call_1", "weather", "{\"city\":\"Paris\"}"),
            Item::Reasoning {
                text: "and the other".into(),
            },
            call("call_2", "weather", "{\"city\":\"Rome\"}"),
            result("call_1", "sunny"),
            result("call_2", "rain"),
            Item::assistant_text("Paris sunny, Rome rain."),
            Item::user_text("and Oslo?"),
            call("call_3", "weather", "{\"city\":\"Oslo\"}"),
            Item::Approval(json!({"type": "mcp_approval_request"})),
            result("call_3", "snow"),
        ];
        let mut turn = TurnRequest::new(Protocol::OpenAiChat);
        turn.input = vec![Item::Message {
            role: "user".into(),
            content: vec![
                Block::Text("and this?".into()),
                Block::Image {
                    url: "data:image/png;base64,AAAA".into(),
                    detail: Some("high".into()),
                },
                Block::File {
                    filename: Some("a.txt".into()),
                    data: Some("data:text/plain;base64,aGk=".into()),
                    url: None,
                },
                Block::File {
                    filename: None,
                    data: None,
                    url: Some("file-9".into()),
                },
            ],
        }];
        turn.instructions = Some("Be brief.".into());
        turn.session = SessionRef::Named("secret-session".into());
        turn.tools = vec![Tool {
            name: "weather".into(),
            description: Some("Weather by city".into()),
            parameters: Some(json!({"type": "object"})),
            strict: None,
        }];
        turn.tool_choice = Some("weather".into());
        turn.temperature = Some(0.25);
        turn.top_p = Some(0.5);
        turn.max_output_tokens = Some(256);
        turn.extra.insert("user".into(), json!("u-1"));
        turn.extra.insert("session_id".into(), json!("leak"));
        turn.extra.insert("stream".into(), json!(false));

        let body = ChatUpstream.build_request(&history, &turn, "default-model");
        let tc = |id: &str, args: &str| json!({"id": id, "type": "function", "function": {"name": "weather", "arguments": args}});
        assert_eq!(
            body,
            json!({
                "model": "default-model",
                "stream": true,
                "stream_options": {"include_usage": true},
                "user": "u-1",
                "temperature": 0.25,
                "top_p": 0.5,
                "max_tokens": 256,
                "tools": [{"type": "function", "function": {
                    "name": "weather", "description": "Weather by city", "parameters": {"type": "object"}}}],
                "tool_choice": {"type": "function", "function": {"name": "weather"}},
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "system", "content": "summary of earlier turns"},
                    {"role": "user", "content": "weather in Paris and Rome?"},
                    {"role": "assistant", "content": "Checking both.", "tool_calls": [
                        tc("call_1", "{\"city\":\"Paris\"}"), tc("call_2", "{\"city\":\"Rome\"}")]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                    {"role": "tool", "tool_call_id": "call_2", "content": "rain"},
                    {"role": "assistant", "content": "Paris sunny, Rome rain."},
                    {"role": "user", "content": "and Oslo?"},
                    {"role": "assistant", "content": null, "tool_calls": [tc("call_3", "{\"city\":\"Oslo\"}")]},
                    {"role": "tool", "tool_call_id": "call_3", "content": "snow"},
                    {"role": "user", "content": [
                        {"type": "text", "text": "and this?"},
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "high"}},
                        {"type": "file", "file": {"filename": "a.txt", "file_data": "data:text/plain;base64,aGk="}},
                        {"type": "file", "file": {"file_id": "file-9"}},
                    ]},
                ],
            })
        );
        assert!(!body.to_string().contains("secret-session"));
        assert!(!body.to_string().contains("leak"));
    }

    #[test]
    fn extra_only_travels_between_chat_surfaces() {
        let mut turn = TurnRequest::new(Protocol::OpenAiResponses);
        turn.model = Some("m".into());
        turn.input = vec![Item::user_text("hi")];
        turn.extra.insert("store".into(), json!(true));
        turn.tool_choice = Some("required".into());
        let body = ChatUpstream.build_request(&[], &turn, "default");
        assert_eq!(
            body,
            json!({
                "model": "m",
                "stream": true,
                "stream_options": {"include_usage": true},
                "tool_choice": "required",
                "messages": [{"role": "user", "content": "hi"}],
            })
        );
    }

    // --- parsing -----------------------------------------------------------------------

    fn sse_chunk(delta: Value, finish_reason: Value) -> String {
        let c = json!({"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 1,
                       "model": "m", "choices": [{"index": 0, "delta": delta,
                       "finish_reason": finish_reason, "logprobs": null}]});
        format!("data: {c}\n\n")
    }

    fn run_parser(content_type: &str, pieces: &[&[u8]]) -> Vec<Output> {
        let mut p = ChatUpstream.body_parser(content_type);
        let mut out = Vec::new();
        for piece in pieces {
            out.extend(p.feed(piece));
        }
        out.extend(p.finish());
        out
    }

    /// Parses `body` whole and cut into pieces of every size from 1 to 7 bytes (so events,
    /// lines, CRLFs and UTF-8 sequences are all split somewhere); the outputs must agree.
    fn parse_split(body: &str) -> Vec<Output> {
        let whole = run_parser("text/event-stream", &[body.as_bytes()]);
        for size in 1..=7 {
            let pieces: Vec<&[u8]> = body.as_bytes().chunks(size).collect();
            let split = run_parser("Text/Event-Stream; charset=utf-8", &pieces);
            assert_eq!(split, whole, "piece size {size}");
        }
        whole
    }

    #[test]
    fn parses_a_text_stream_split_anywhere() {
        let mut body = String::new();
        body += &sse_chunk(json!({"role": "assistant", "content": ""}), Value::Null);
        body += &sse_chunk(json!({"reasoning_content": "let me "}), Value::Null);
        body += &sse_chunk(json!({"reasoning": "think"}), Value::Null);
        body += &sse_chunk(json!({"content": "Hel"}), Value::Null);
        body += ": keep-alive\n\n";
        body += &sse_chunk(json!({"content": "lo ünïcode"}), Value::Null);
        body += &sse_chunk(json!({}), json!("stop"));
        body += "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2,\"total_tokens\":5}}\r\n\r\n";
        body += "data: [DONE]\n\n";
        assert_eq!(
            parse_split(&body),
            vec![
                Output::ReasoningDelta("let me ".into()),
                Output::ReasoningDelta("think".into()),
                Output::TextDelta("Hel".into()),
                Output::TextDelta("lo ünïcode".into()),
                Output::Item(Item::Reasoning {
                    text: "let me think".into()
                }),
                Output::Item(Item::assistant_text("Hello ünïcode")),
                Output::Done {
                    usage: Some(
                        json!({"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5})
                    )
                },
            ]
        );
    }

    #[test]
    fn reassembles_tool_call_arguments_split_across_chunks() {
        let mut body = String::new();
        body += &sse_chunk(json!({"role": "assistant", "content": null}), Value::Null);
        body += &sse_chunk(json!({"content": "Checking."}), Value::Null);
        body += &sse_chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_p", "type": "function",
                                   "function": {"name": "weather", "arguments": ""}}]}),
            Value::Null,
        );
        body += &sse_chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"ci"}}]}),
            Value::Null,
        );
        body += &sse_chunk(
            json!({"tool_calls": [{"index": 1, "id": "call_r", "type": "function",
                                   "function": {"name": "weather", "arguments": "{\"city\""}}]}),
            Value::Null,
        );
        body += &sse_chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "ty\":\"Paris\"}"}}]}),
            Value::Null,
        );
        body += &sse_chunk(
            json!({"tool_calls": [{"index": 1, "function": {"arguments": ":\"Rome\"}"}}]}),
            Value::Null,
        );
        body += &sse_chunk(json!({}), json!("tool_calls"));
        body += "data: [DONE]\n\n";
        assert_eq!(
            parse_split(&body),
            vec![
                Output::TextDelta("Checking.".into()),
                Output::Item(Item::assistant_text("Checking.")),
                Output::Item(call("call_p", "weather", "{\"city\":\"Paris\"}")),
                Output::Item(call("call_r", "weather", "{\"city\":\"Rome\"}")),
                Output::Done { usage: None },
            ]
        );
    }

    #[test]
    fn repeated_index_with_new_id_is_a_new_call_and_missing_ids_are_made_up() {
        let mut body = String::new();
        body += &sse_chunk(
            json!({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f", "arguments": "{}"}}]}),
            Value::Null,
        );
        body += &sse_chunk(
            json!({"tool_calls": [{"index": 0, "id": "b", "function": {"name": "g", "arguments": "{}"}}]}),
            Value::Null,
        );
        body += &sse_chunk(
            json!({"tool_calls": [{"function": {"name": "h", "arguments": {"k": 1}}}]}),
            Value::Null,
        );
        body += &sse_chunk(json!({}), json!("tool_calls"));
        let out = run_parser("text/event-stream", &[body.as_bytes()]);
        assert_eq!(out.len(), 4);
        assert_eq!(out[0], Output::Item(call("a", "f", "{}")));
        assert_eq!(out[1], Output::Item(call("b", "g", "{}")));
        match &out[2] {
            Output::Item(Item::ToolCall {
                call_id,
                name,
                arguments,
            }) => {
                assert!(
                    call_id.starts_with("call_") && call_id.len() == 37,
                    "{call_id}"
                );
                assert_eq!((name.as_str(), arguments.as_str()), ("h", "{\"k\":1}"));
            }
            other => panic!("{other:?}"),
        }
        // finish_reason without [DONE]: complete at the end of the body.
        assert_eq!(out[3], Output::Done { usage: None });
    }

    #[test]
    fn a_stream_that_closes_early_yields_items_but_no_done() {
        let mut body = String::new();
        body += &sse_chunk(json!({"role": "assistant", "content": ""}), Value::Null);
        body += &sse_chunk(json!({"content": "Half an ans"}), Value::Null);
        body += &sse_chunk(
            json!({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f", "arguments": "{\"a\""}}]}),
            Value::Null,
        );
        body += "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"wer"; // cut mid-event
        let out = run_parser("text/event-stream", &[body.as_bytes()]);
        assert_eq!(
            out,
            vec![
                Output::TextDelta("Half an ans".into()),
                Output::Item(Item::assistant_text("Half an ans")),
                Output::Item(call("c", "f", "{\"a\"")),
            ]
        );
    }

    #[test]
    fn an_empty_stream_is_a_stream_closed_early() {
        assert_eq!(run_parser("text/event-stream", &[]), vec![]);
        assert_eq!(run_parser("text/event-stream", &[b": ping\n\n"]), vec![]);
    }

    #[test]
    fn finish_reason_without_done_completes_at_finish() {
        let mut body = String::new();
        body += &sse_chunk(json!({"content": "ok"}), Value::Null);
        body += &sse_chunk(json!({}), json!("stop"));
        let mut p = ChatUpstream.body_parser("text/event-stream");
        assert_eq!(
            p.feed(body.as_bytes()),
            vec![
                Output::TextDelta("ok".into()),
                Output::Item(Item::assistant_text("ok"))
            ]
        );
        assert_eq!(p.finish(), vec![Output::Done { usage: None }]);
    }

    #[test]
    fn an_error_event_mid_stream_is_an_error() {
        let mut body = String::new();
        body += &sse_chunk(json!({"content": "a"}), Value::Null);
        body += "data: {\"error\": {\"message\": \"overloaded\", \"type\": \"server_error\", \"code\": 529}}\n\n";
        let out = run_parser("text/event-stream", &[body.as_bytes()]);
        assert_eq!(
            out,
            vec![
                Output::TextDelta("a".into()),
                Output::Error {
                    code: "529".into(),
                    message: "overloaded".into()
                },
                Output::Item(Item::assistant_text("a")),
            ]
        );
    }

    #[test]
    fn done_is_emitted_once_and_late_data_ignored() {
        let mut body = String::new();
        body += &sse_chunk(json!({"content": "x"}), json!("stop"));
        body += "data: [DONE]\n\n";
        body += &sse_chunk(json!({"content": "late"}), Value::Null);
        body += "data: [DONE]\n\n";
        let out = run_parser("text/event-stream", &[body.as_bytes()]);
        assert_eq!(
            out,
            vec![
                Output::TextDelta("x".into()),
                Output::Item(Item::assistant_text("x")),
                Output::Done { usage: None },
            ]
        );
    }

    #[test]
    fn parses_a_non_streaming_completion() {
        let body = json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": "Sure.", "reasoning_content": "easy",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                    {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{\"a\":1}"}}
                ]}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
        })
        .to_string();
        let (a, b) = body.as_bytes().split_at(10);
        assert_eq!(
            run_parser("application/json", &[a, b]),
            vec![
                Output::Item(Item::Reasoning {
                    text: "easy".into()
                }),
                Output::Item(Item::assistant_text("Sure.")),
                Output::Item(call("c1", "f", "{}")),
                Output::Item(call("c2", "g", "{\"a\":1}")),
                Output::Done {
                    usage: Some(
                        json!({"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3})
                    )
                },
            ]
        );

        let body = json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": null,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}}]});
        assert_eq!(
            run_parser("application/json", &[body.to_string().as_bytes()]),
            vec![
                Output::Item(call("c1", "f", "{}")),
                Output::Done { usage: None }
            ]
        );
    }

    #[test]
    fn non_streaming_errors() {
        let out = run_parser(
            "application/json",
            &[br#"{"error": {"message": "bad key", "type": "invalid_request_error", "code": "invalid_api_key"}}"#],
        );
        assert_eq!(
            out,
            vec![Output::Error {
                code: "invalid_api_key".into(),
                message: "bad key".into()
            }]
        );
        let out = run_parser("application/json", &[br#"{"error": "boom"}"#]);
        assert_eq!(
            out,
            vec![Output::Error {
                code: "upstream_error".into(),
                message: "boom".into()
            }]
        );
        let out = run_parser("text/html", &[b"<html>502 Bad Gateway</html>"]);
        assert!(matches!(&out[..], [Output::Error { code, .. }] if code == "invalid_response"));
        let out = run_parser("application/json", &[]);
        assert!(matches!(&out[..], [Output::Error { code, .. }] if code == "empty_response"));
    }

    #[test]
    fn mislabelled_bodies_are_still_understood() {
        // A JSON error under an SSE content type.
        let out = run_parser(
            "text/event-stream",
            &[br#"{"error": {"message": "no such model", "code": "model_not_found"}}"#],
        );
        assert_eq!(
            out,
            vec![Output::Error {
                code: "model_not_found".into(),
                message: "no such model".into()
            }]
        );
        // An SSE stream under a JSON content type.
        let body = sse_chunk(json!({"content": "hi"}), json!("stop")) + "data: [DONE]\n\n";
        let out = run_parser("application/json", &[body.as_bytes()]);
        assert_eq!(
            out,
            vec![
                Output::TextDelta("hi".into()),
                Output::Item(Item::assistant_text("hi")),
                Output::Done { usage: None }
            ]
        );
    }

    #[test]
    fn protocol_is_chat() {
        assert_eq!(ChatUpstream.protocol(), Protocol::OpenAiChat);
    }
}
