//! OpenAI Responses (`POST /v1/responses`): the client surface (request parsing, stream and
//! body rendering) and the upstream adapter for agents that speak it.

use std::collections::HashSet;

use serde_json::{json, Map, Value};
use session_log::Event;

mod render;

use crate::item::{Block, Item};
use crate::protocol::Protocol;
use crate::sse::{SseFrame, SseParser};
use crate::surface::{RunInfo, StreamRenderer, Surface};
use crate::turn::{InputError, SessionRef, Tool, TurnRequest};
use crate::upstream::{AgentRequest, Output, StreamParser, TurnCall, Upstream};
use render::{run_hex, Renderer};

/// Where the agent serves this protocol.
const PATH: &str = "/v1/responses";

pub struct ResponsesSurface;
pub struct ResponsesUpstream;

impl Surface for ResponsesSurface {
    fn parse_request(
        &self,
        body: &[u8],
        session_header: Option<&str>,
    ) -> Result<TurnRequest, InputError> {
        parse_request(body, session_header)
    }

    fn stream_renderer(&self, run: &RunInfo) -> Box<dyn StreamRenderer> {
        Box::new(Renderer::new(run))
    }

    fn final_body(&self, run: &RunInfo, events: &[Event]) -> Value {
        let mut renderer = Renderer::new(run);
        for event in events {
            renderer.render(event);
        }
        renderer.response()
    }

    fn response_id(&self, run_id: &str) -> String {
        format!("resp_{}", run_hex(run_id))
    }

    fn run_id(&self, response_id: &str) -> Option<String> {
        let hex = response_id.strip_prefix("resp_")?;
        let ours = hex.len() == 32
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        ours.then(|| format!("run_{hex}"))
    }
}

// ---------------------------------------------------------------------------------------
// Request parsing

/// Top-level fields that never reach `extra`: the session is Tether's business, `store` is
/// always Tether's log, and `background` is what Tether's runs already are (a stored,
/// resumable run that outlives the connection); passing it on would ask a store-less
/// agent to keep the response.
const NOT_EXTRA: [&str; 14] = [
    "conversation",
    "session_id",
    "previous_response_id",
    "input",
    "store",
    "background",
    "model",
    "instructions",
    "stream",
    "temperature",
    "top_p",
    "max_output_tokens",
    "tools",
    "tool_choice",
];

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => "a decimal",
        Value::Number(_) => "an integer",
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
            type_name(got)
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

/// A field's value; `null` counts as absent, as it does for OpenAI.
fn field<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

fn opt_str(obj: &Map<String, Value>, key: &str, param: &str) -> Result<Option<String>, InputError> {
    match field(obj, key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(invalid_type(param, "a string", v)),
    }
}

fn req_str(obj: &Map<String, Value>, key: &str, param: &str) -> Result<String, InputError> {
    opt_str(obj, key, param)?.ok_or_else(|| missing(param))
}

fn opt_number(obj: &Map<String, Value>, key: &str, max: f64) -> Result<Option<f64>, InputError> {
    let Some(v) = field(obj, key) else {
        return Ok(None);
    };
    let n = v
        .as_f64()
        .ok_or_else(|| invalid_type(key, "a decimal", v))?;
    if !(0.0..=max).contains(&n) {
        return Err(invalid_value(
            key,
            format!("Invalid value for '{key}': expected a number between 0 and {max}, but got {n} instead."),
        ));
    }
    Ok(Some(n))
}

/// A session id named in the body: a non-empty string.
fn session_str(v: &Value, param: &str) -> Result<String, InputError> {
    match v {
        Value::String(s) if s.is_empty() => Err(invalid_value(
            param,
            format!("Invalid value for '{param}': a session id cannot be empty."),
        )),
        Value::String(s) => Ok(s.clone()),
        v => Err(invalid_type(param, "a string", v)),
    }
}

fn parse_session(obj: &Map<String, Value>, header: Option<&str>) -> Result<SessionRef, InputError> {
    let conversation = match field(obj, "conversation") {
        None => None,
        Some(Value::Object(c)) => match c.get("id") {
            Some(id) => Some(session_str(id, "conversation.id")?),
            None => return Err(missing("conversation.id")),
        },
        Some(v @ Value::String(_)) => Some(session_str(v, "conversation")?),
        Some(v) => {
            return Err(invalid_type(
                "conversation",
                "a string or an object with an 'id'",
                v,
            ))
        }
    };
    let session_id = field(obj, "session_id")
        .map(|v| session_str(v, "session_id"))
        .transpose()?;
    let previous = field(obj, "previous_response_id")
        .map(|v| session_str(v, "previous_response_id"))
        .transpose()?;
    let header = header.map(str::trim).filter(|h| !h.is_empty());

    if let Some(previous) = previous {
        let other = if conversation.is_some() {
            Some("conversation")
        } else if session_id.is_some() {
            Some("session_id")
        } else if header.is_some() {
            Some("x-session-id")
        } else {
            None
        };
        if let Some(other) = other {
            return Err(invalid_value(
                "previous_response_id",
                format!(
                    "Mutually exclusive parameters: provide only one of 'previous_response_id' or '{other}'."
                ),
            ));
        }
        return Ok(SessionRef::AfterResponse(previous));
    }
    let named = match (conversation, session_id) {
        (Some(c), Some(s)) if c != s => {
            return Err(invalid_value(
                "session_id",
                format!(
                "'conversation' ({c}) and 'session_id' ({s}) disagree; name the session one way."
            ),
            ))
        }
        (c, s) => c.or(s),
    };
    match (named, header) {
        (Some(n), Some(h)) if n != h => Err(invalid_value(
            "x-session-id",
            format!(
                "The x-session-id header ({h}) and the session named in the body ({n}) disagree."
            ),
        )),
        (Some(n), _) => Ok(SessionRef::Named(n)),
        (None, Some(h)) => Ok(SessionRef::Named(h.to_owned())),
        (None, None) => Ok(SessionRef::New),
    }
}

fn parse_request(body: &[u8], header: Option<&str>) -> Result<TurnRequest, InputError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        InputError::new(
            "invalid_json",
            None,
            format!("The request body is not valid JSON: {e}."),
        )
    })?;
    let Value::Object(obj) = value else {
        return Err(InputError::new(
            "invalid_type",
            None,
            format!(
                "The request body must be a JSON object, but got {} instead.",
                type_name(&value)
            ),
        ));
    };

    let mut turn = TurnRequest::new(Protocol::OpenAiResponses);
    turn.session = parse_session(&obj, header)?;
    turn.input = match obj.get("input") {
        None | Some(Value::Null) => return Err(missing("input")),
        Some(Value::String(s)) => vec![Item::user_text(s)],
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| parse_input_item(v, &format!("input[{i}]")))
            .collect::<Result<_, _>>()?,
        Some(v) => return Err(invalid_type("input", "a string or an array", v)),
    };
    turn.model = opt_str(&obj, "model", "model")?;
    turn.instructions = opt_str(&obj, "instructions", "instructions")?;
    turn.stream = match field(&obj, "stream") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => return Err(invalid_type("stream", "a boolean", v)),
    };
    turn.temperature = opt_number(&obj, "temperature", 2.0)?;
    turn.top_p = opt_number(&obj, "top_p", 1.0)?;
    turn.max_output_tokens = match field(&obj, "max_output_tokens") {
        None => None,
        Some(v) => match v.as_u64() {
            Some(n) if n >= 1 => Some(n),
            _ if v.is_i64() || v.is_u64() => {
                return Err(invalid_value(
                    "max_output_tokens",
                    "Invalid value for 'max_output_tokens': expected a positive integer.",
                ))
            }
            _ => return Err(invalid_type("max_output_tokens", "an integer", v)),
        },
    };

    let mut extra = Map::new();
    if let Some(tools) = field(&obj, "tools") {
        let Value::Array(tools) = tools else {
            return Err(invalid_type("tools", "an array", tools));
        };
        let mut hosted = Vec::new();
        for (i, t) in tools.iter().enumerate() {
            match parse_tool(t, &format!("tools[{i}]"))? {
                Some(tool) => turn.tools.push(tool),
                None => hosted.push(t.clone()),
            }
        }
        // Hosted tools (web_search, mcp, …) have no place in `Tool`; they ride in `extra`
        // so an agent that speaks Responses still gets them (see `build_request`).
        if !hosted.is_empty() {
            extra.insert("tools".into(), Value::Array(hosted));
        }
    }
    match field(&obj, "tool_choice") {
        None => {}
        Some(Value::String(s)) => match s.as_str() {
            "auto" | "none" | "required" => turn.tool_choice = Some(s.clone()),
            _ => {
                return Err(invalid_value(
                    "tool_choice",
                    format!("Invalid value for 'tool_choice': '{s}'. Supported values are 'auto', 'none' and 'required', or an object."),
                ))
            }
        },
        Some(Value::Object(choice)) => {
            match choice.get("type").and_then(Value::as_str) {
                Some("function") => {
                    turn.tool_choice = Some(req_str(choice, "name", "tool_choice.name")?)
                }
                Some(_) => {
                    extra.insert("tool_choice".into(), Value::Object(choice.clone()));
                }
                None => return Err(missing("tool_choice.type")),
            }
        }
        Some(v) => return Err(invalid_type("tool_choice", "a string or an object", v)),
    }
    for (k, v) in &obj {
        if !NOT_EXTRA.contains(&k.as_str()) {
            extra.insert(k.clone(), v.clone());
        }
    }
    turn.extra = extra;
    Ok(turn)
}

/// A function tool, or `None` for any other (hosted) tool type.
fn parse_tool(v: &Value, param: &str) -> Result<Option<Tool>, InputError> {
    let Value::Object(t) = v else {
        return Err(invalid_type(param, "an object", v));
    };
    let kind = req_str(t, "type", &format!("{param}.type"))?;
    if kind != "function" {
        return Ok(None);
    }
    let parameters = match field(t, "parameters") {
        None => None,
        Some(p @ Value::Object(_)) => Some(p.clone()),
        Some(p) => return Err(invalid_type(&format!("{param}.parameters"), "an object", p)),
    };
    let strict = match field(t, "strict") {
        None => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(s) => return Err(invalid_type(&format!("{param}.strict"), "a boolean", s)),
    };
    Ok(Some(Tool {
        name: req_str(t, "name", &format!("{param}.name"))?,
        description: opt_str(t, "description", &format!("{param}.description"))?,
        parameters,
        strict,
    }))
}

fn parse_input_item(v: &Value, param: &str) -> Result<Item, InputError> {
    let Value::Object(o) = v else {
        return Err(invalid_type(param, "an object", v));
    };
    let kind = opt_str(o, "type", &format!("{param}.type"))?;
    match kind.as_deref() {
        None if o.contains_key("role") => parse_message(o, param),
        None => Err(missing(&format!("{param}.type"))),
        Some("message") => parse_message(o, param),
        Some("function_call") => Ok(Item::ToolCall {
            call_id: req_str(o, "call_id", &format!("{param}.call_id"))?,
            name: req_str(o, "name", &format!("{param}.name"))?,
            arguments: req_str(o, "arguments", &format!("{param}.arguments"))?,
        }),
        Some("function_call_output") => {
            let call_id = req_str(o, "call_id", &format!("{param}.call_id"))?;
            let p = format!("{param}.output");
            let output = match field(o, "output") {
                None => return Err(missing(&p)),
                Some(Value::String(s)) => s.clone(),
                // `ToolResult` holds text only: the text parts are what survives.
                Some(Value::Array(parts)) => parts
                    .iter()
                    .enumerate()
                    .map(|(j, part)| match parse_part(part, &format!("{p}[{j}]"))? {
                        Block::Text(t) => Ok(t),
                        _ => Ok(String::new()),
                    })
                    .collect::<Result<Vec<_>, InputError>>()?
                    .concat(),
                Some(v) => return Err(invalid_type(&p, "a string or an array", v)),
            };
            Ok(Item::ToolResult { call_id, output })
        }
        Some("reasoning") => Ok(Item::Reasoning {
            text: reasoning_text(v),
        }),
        Some("mcp_approval_request" | "mcp_approval_response") => Ok(Item::Approval(v.clone())),
        Some(other) => Err(invalid_value(
            &format!("{param}.type"),
            format!("Invalid value for '{param}.type': input items of type '{other}' are not supported (supported: message, function_call, function_call_output, reasoning, mcp_approval_request, mcp_approval_response)."),
        )),
    }
}

fn parse_message(o: &Map<String, Value>, param: &str) -> Result<Item, InputError> {
    let role_param = format!("{param}.role");
    let role = req_str(o, "role", &role_param)?;
    if !matches!(role.as_str(), "user" | "assistant" | "system" | "developer") {
        return Err(invalid_value(
            &role_param,
            format!("Invalid value for '{role_param}': '{role}'. Supported values are 'user', 'assistant', 'system' and 'developer'."),
        ));
    }
    let p = format!("{param}.content");
    let content = match field(o, "content") {
        None => return Err(missing(&p)),
        Some(Value::String(s)) => vec![Block::Text(s.clone())],
        Some(Value::Array(parts)) => parts
            .iter()
            .enumerate()
            .map(|(j, part)| parse_part(part, &format!("{p}[{j}]")))
            .collect::<Result<_, _>>()?,
        Some(v) => return Err(invalid_type(&p, "a string or an array", v)),
    };
    Ok(Item::Message { role, content })
}

fn parse_part(v: &Value, param: &str) -> Result<Block, InputError> {
    let Value::Object(o) = v else {
        return Err(invalid_type(param, "an object", v));
    };
    let kind = req_str(o, "type", &format!("{param}.type"))?;
    let s = |k: &str| opt_str(o, k, &format!("{param}.{k}"));
    match kind.as_str() {
        "input_text" | "output_text" | "text" => Ok(Block::Text(req_str(
            o,
            "text",
            &format!("{param}.text"),
        )?)),
        "refusal" => Ok(Block::Text(req_str(o, "refusal", &format!("{param}.refusal"))?)),
        // An upload reference has no scheme, which is how `build_request` tells a
        // `file_id` from a URL again.
        "input_image" => Ok(Block::Image {
            url: match (s("image_url")?, s("file_id")?) {
                (Some(url), _) | (None, Some(url)) => url,
                (None, None) => return Err(missing(&format!("{param}.image_url"))),
            },
            detail: s("detail")?,
        }),
        "input_file" => {
            let (data, url, id) = (s("file_data")?, s("file_url")?, s("file_id")?);
            if data.is_none() && url.is_none() && id.is_none() {
                return Err(missing(&format!("{param}.file_data")));
            }
            Ok(Block::File {
                filename: s("filename")?,
                data,
                url: url.or(id),
            })
        }
        other => Err(invalid_value(
            &format!("{param}.type"),
            format!("Invalid value for '{param}.type': content parts of type '{other}' are not supported (supported: input_text, output_text, input_image, input_file)."),
        )),
    }
}

/// The text of a reasoning item: its full reasoning content when there is any, else its
/// summaries (an OpenAI model shows only those), one paragraph each.
fn reasoning_text(item: &Value) -> String {
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

// ---------------------------------------------------------------------------------------
// Upstream: building the agent's request

/// Fields Tether decides for the agent request whatever the client sent: the agent gets
/// the whole history each turn and must not keep (or look up) any of its own.
const RESERVED_UPSTREAM: [&str; 6] = [
    "model",
    "input",
    "stream",
    "store",
    "previous_response_id",
    "conversation",
];

fn item_json(item: &Item) -> Option<Value> {
    Some(match item {
        Item::Message { role, content } => {
            let assistant = role == "assistant";
            let parts: Vec<Value> = content
                .iter()
                .filter_map(|b| match b {
                    Block::Text(t) if assistant => {
                        Some(json!({ "type": "output_text", "text": t }))
                    }
                    Block::Text(t) => Some(json!({ "type": "input_text", "text": t })),
                    // Assistant messages take output parts only.
                    _ if assistant => None,
                    Block::Image { url, detail } => {
                        let mut part = json!({
                            "type": "input_image",
                            "detail": detail.as_deref().unwrap_or("auto"),
                        });
                        part[if is_url(url) { "image_url" } else { "file_id" }] = json!(url);
                        Some(part)
                    }
                    Block::File {
                        filename,
                        data,
                        url,
                    } => {
                        let mut part = json!({ "type": "input_file" });
                        if let Some(f) = filename {
                            part["filename"] = json!(f);
                        }
                        if let Some(d) = data {
                            part["file_data"] = json!(d);
                        }
                        if let Some(u) = url {
                            part[if is_url(u) { "file_url" } else { "file_id" }] = json!(u);
                        }
                        Some(part)
                    }
                })
                .collect();
            json!({ "type": "message", "role": role, "content": parts })
        }
        Item::ToolCall {
            call_id,
            name,
            arguments,
        } => {
            json!({ "type": "function_call", "call_id": call_id, "name": name, "arguments": arguments })
        }
        Item::ToolResult { call_id, output } => {
            json!({ "type": "function_call_output", "call_id": call_id, "output": output })
        }
        // Upstream reasoning items need their original ids or encrypted content, which
        // the log does not keep; the model does fine without its old reasoning.
        Item::Reasoning { .. } => return None,
        Item::Approval(v) => v.clone(),
    })
}

fn is_url(s: &str) -> bool {
    s.contains(':')
}

fn tool_json(t: &Tool) -> Value {
    let mut v = json!({ "type": "function", "name": t.name });
    if let Some(d) = &t.description {
        v["description"] = json!(d);
    }
    if let Some(p) = &t.parameters {
        v["parameters"] = p.clone();
    }
    if let Some(s) = t.strict {
        v["strict"] = json!(s);
    }
    v
}

impl Upstream for ResponsesUpstream {
    fn protocol(&self) -> Protocol {
        Protocol::OpenAiResponses
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

impl ResponsesUpstream {
    /// JSON body of the agent request: `history` (the projection) followed by the turn's
    /// new input, always streaming, never naming a stored conversation.
    pub fn build_request(
        &self,
        history: &[Item],
        turn: &TurnRequest,
        default_model: &str,
    ) -> Value {
        let input: Vec<Value> = history
            .iter()
            .chain(&turn.input)
            .filter_map(item_json)
            .collect();
        let mut body = json!({
            "model": turn.model.as_deref().unwrap_or(default_model),
            "input": input,
            "stream": true,
            "store": false,
        });
        if let Some(i) = &turn.instructions {
            body["instructions"] = json!(i);
        }
        let mut tools: Vec<Value> = turn.tools.iter().map(tool_json).collect();
        if let Some(choice) = &turn.tool_choice {
            body["tool_choice"] = match choice.as_str() {
                "auto" | "none" | "required" => json!(choice),
                name => json!({ "type": "function", "name": name }),
            };
        }
        if let Some(t) = turn.temperature {
            body["temperature"] = json!(t);
        }
        if let Some(p) = turn.top_p {
            body["top_p"] = json!(p);
        }
        if let Some(m) = turn.max_output_tokens {
            body["max_output_tokens"] = json!(m);
        }
        if turn.surface == Protocol::OpenAiResponses {
            for (k, v) in &turn.extra {
                match k.as_str() {
                    k if RESERVED_UPSTREAM.contains(&k) => {}
                    "tools" => tools.extend(v.as_array().into_iter().flatten().cloned()),
                    _ if body.get(k).is_some() => {}
                    _ => body[k] = v.clone(),
                }
            }
        }
        if !tools.is_empty() {
            body["tools"] = Value::Array(tools);
        }
        body
    }

    /// A parser for the agent's response body with the given content type.
    pub fn body_parser(&self, content_type: &str) -> Box<dyn StreamParser> {
        let sse = content_type
            .to_ascii_lowercase()
            .contains("text/event-stream");
        Box::new(ResponsesParser {
            sse: sse.then(SseParser::new),
            body: Vec::new(),
            state: ParseState::default(),
        })
    }
}

// ---------------------------------------------------------------------------------------
// Upstream: parsing the agent's response

struct ResponsesParser {
    /// `None` for a plain JSON body, buffered whole in `body`.
    sse: Option<SseParser>,
    body: Vec<u8>,
    state: ParseState,
}

#[derive(Default)]
struct ParseState {
    /// `response.completed` or an error was seen: the turn is decided.
    finished: bool,
    /// Output items already emitted (by id, or by output index when there is none).
    emitted: HashSet<String>,
    /// Text deltas since the last emitted message, kept in case the agent never sends
    /// the finished message item.
    pending_text: String,
}

const UPSTREAM_ERROR: &str = "upstream_error";

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

impl ParseState {
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

impl StreamParser for ResponsesParser {
    fn feed(&mut self, bytes: &[u8]) -> Vec<Output> {
        let mut out = Vec::new();
        match &mut self.sse {
            Some(sse) => {
                for frame in sse.feed(bytes) {
                    self.state.frame(frame, &mut out);
                }
            }
            None => self.body.extend_from_slice(bytes),
        }
        out
    }

    fn finish(&mut self) -> Vec<Output> {
        let mut out = Vec::new();
        match &mut self.sse {
            Some(sse) => {
                if let Some(frame) = sse.finish() {
                    self.state.frame(frame, &mut out);
                }
            }
            None => {
                let body = std::mem::take(&mut self.body);
                match serde_json::from_slice::<Value>(&body) {
                    // A failed response object carries `error` too: its status decides.
                    Ok(v) if v.get("output").is_some_and(Value::is_array) => {
                        self.state.response(&v, &mut out)
                    }
                    Ok(v) if v.get("error").is_some_and(|e| !e.is_null()) => {
                        out.push(error_output(
                            v.get("error"),
                            UPSTREAM_ERROR,
                            "The agent reported an error.",
                        ))
                    }
                    _ => out.push(Output::Error {
                        code: "invalid_upstream_response".into(),
                        message: "The agent's response is not a Responses API response object."
                            .into(),
                    }),
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};
    use session_log::event::run_status_content;
    use session_log::{EventType, NewEvent, RunStatus};

    const HEX: &str = "0123456789abcdef0123456789abcdef";
    const RESP: &str = "resp_0123456789abcdef0123456789abcdef";

    fn run() -> RunInfo {
        RunInfo {
            run_id: format!("run_{HEX}"),
            session_id: "sess-1".into(),
            model: "my-agent".into(),
            created_at: 1_700_000_000,
            client: Value::Null,
        }
    }

    fn item_id(prefix: &str, index: u32) -> String {
        format!("{prefix}_{HEX}{index:08x}")
    }

    /// A committed event of the test run.
    fn ev(seq: i64, new: NewEvent) -> Event {
        let new = new.in_run(&format!("run_{HEX}"), "inv_1");
        Event::committed(new, seq, Utc.timestamp_opt(1_700_000_100, 0).unwrap())
    }

    fn control(seq: i64, t: EventType, content: Value) -> Event {
        ev(seq, NewEvent::new("acct", "sess-1", t, content))
    }

    fn status(seq: i64, s: RunStatus) -> Event {
        control(seq, EventType::RunStatus, run_status_content(s, None))
    }

    fn item(seq: i64, item: Item) -> Event {
        ev(seq, item.to_event("acct", "sess-1"))
    }

    fn render_all(events: &[Event]) -> Vec<SseFrame> {
        let mut r = ResponsesSurface.stream_renderer(&run());
        let mut frames: Vec<SseFrame> = events.iter().flat_map(|e| r.render(e)).collect();
        frames.extend(r.end());
        frames
    }

    /// Frames as `(id, event, data)`, checking the invariants every frame must hold:
    /// `event:` equals the data's `type` and `sequence_number` counts from 0 without gaps.
    fn decode(frames: &[SseFrame]) -> Vec<(i64, String, Value)> {
        frames
            .iter()
            .enumerate()
            .map(|(n, f)| {
                let data: Value = serde_json::from_str(&f.data).unwrap();
                assert_eq!(data["sequence_number"], json!(n), "frame {n}");
                assert_eq!(f.event.as_deref(), data["type"].as_str(), "frame {n}");
                let id =
                    f.id.as_deref()
                        .expect("every frame has an id")
                        .parse()
                        .unwrap();
                (id, f.event.clone().unwrap(), data)
            })
            .collect()
    }

    fn response_obj(status: &str, output: Value, usage: Value) -> Value {
        json!({
            "id": RESP,
            "object": "response",
            "created_at": 1_700_000_000,
            "completed_at": if status == "completed" { json!(1_700_000_100) } else { Value::Null },
            "status": status,
            "error": null,
            "incomplete_details": null,
            "instructions": null,
            "max_output_tokens": null,
            "model": "my-agent",
            "output": output,
            "parallel_tool_calls": true,
            "previous_response_id": null,
            "temperature": null,
            "tool_choice": "auto",
            "tools": [],
            "top_p": null,
            "usage": usage,
            "metadata": {},
            "conversation": { "id": "sess-1" },
        })
    }

    fn text_part(text: &str) -> Value {
        json!({ "type": "output_text", "text": text, "annotations": [], "logprobs": [] })
    }

    fn message_item(index: u32, status: &str, text: Option<&str>) -> Value {
        json!({
            "id": item_id("msg", index),
            "type": "message",
            "role": "assistant",
            "status": status,
            "content": match text { Some(t) => json!([text_part(t)]), None => json!([]) },
        })
    }

    // -----------------------------------------------------------------------------------
    // Rendering

    fn streamed_run() -> Vec<Event> {
        vec![
            item(1, Item::user_text("Say hello")),
            status(2, RunStatus::InProgress),
            control(3, EventType::TextDelta, json!({"delta": "Hel"})),
            control(4, EventType::TextDelta, json!({"delta": "lo!"})),
            item(5, Item::assistant_text("Hello!")),
            ev(
                6,
                NewEvent::new(
                    "acct",
                    "sess-1",
                    EventType::RunStatus,
                    run_status_content(RunStatus::Completed, None),
                )
                .with_metadata(
                    json!({"usage": {"input_tokens": 12, "output_tokens": 3, "total_tokens": 15}}),
                ),
            ),
        ]
    }

    #[test]
    fn a_streamed_run_renders_the_official_event_sequence() {
        let frames = decode(&render_all(&streamed_run()));
        let msg = item_id("msg", 0);
        let usage = json!({
            "input_tokens": 12,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": 3,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 15,
        });
        let expected = vec![
            (
                2,
                json!({"type": "response.created", "sequence_number": 0,
                "response": response_obj("in_progress", json!([]), Value::Null)}),
            ),
            (
                2,
                json!({"type": "response.in_progress", "sequence_number": 1,
                "response": response_obj("in_progress", json!([]), Value::Null)}),
            ),
            (
                3,
                json!({"type": "response.output_item.added", "sequence_number": 2, "output_index": 0,
                "item": message_item(0, "in_progress", None)}),
            ),
            (
                3,
                json!({"type": "response.content_part.added", "sequence_number": 3, "item_id": msg,
                "output_index": 0, "content_index": 0, "part": text_part("")}),
            ),
            (
                3,
                json!({"type": "response.output_text.delta", "sequence_number": 4, "item_id": msg,
                "output_index": 0, "content_index": 0, "delta": "Hel", "logprobs": []}),
            ),
            (
                4,
                json!({"type": "response.output_text.delta", "sequence_number": 5, "item_id": msg,
                "output_index": 0, "content_index": 0, "delta": "lo!", "logprobs": []}),
            ),
            (
                5,
                json!({"type": "response.output_text.done", "sequence_number": 6, "item_id": msg,
                "output_index": 0, "content_index": 0, "text": "Hello!", "logprobs": []}),
            ),
            (
                5,
                json!({"type": "response.content_part.done", "sequence_number": 7, "item_id": msg,
                "output_index": 0, "content_index": 0, "part": text_part("Hello!")}),
            ),
            (
                5,
                json!({"type": "response.output_item.done", "sequence_number": 8, "output_index": 0,
                "item": message_item(0, "completed", Some("Hello!"))}),
            ),
            (
                6,
                json!({"type": "response.completed", "sequence_number": 9,
                "response": response_obj("completed", json!([message_item(0, "completed", Some("Hello!"))]), usage)}),
            ),
        ];
        assert_eq!(frames.len(), expected.len());
        for ((id, _, data), (want_id, want)) in frames.iter().zip(&expected) {
            assert_eq!((id, data), (want_id, want));
        }
    }

    #[test]
    fn the_final_body_is_the_completed_response_of_the_stream() {
        let events = streamed_run();
        let frames = decode(&render_all(&events));
        let completed = &frames.last().unwrap().2["response"];
        assert_eq!(&ResponsesSurface.final_body(&run(), &events), completed);
    }

    #[test]
    fn a_reconnecting_renderer_continues_the_same_stream() {
        let events = streamed_run();
        let all = render_all(&events);
        // A client that saw events up to seq 3 gets the frames of seq 4.. from a renderer
        // that was fed everything: same ids, same sequence numbers.
        let mut r = ResponsesSurface.stream_renderer(&run());
        let resumed: Vec<SseFrame> = events
            .iter()
            .flat_map(|e| {
                let f = r.render(e);
                if e.seq > 3 {
                    f
                } else {
                    vec![]
                }
            })
            .collect();
        let tail: Vec<SseFrame> = all
            .into_iter()
            .filter(|f| f.id.as_deref().unwrap().parse::<i64>().unwrap() > 3)
            .collect();
        assert_eq!(resumed, tail);
    }

    #[test]
    fn a_non_streamed_answer_still_gets_a_delta() {
        let events = vec![
            status(1, RunStatus::InProgress),
            item(2, Item::assistant_text("Whole answer")),
            status(3, RunStatus::Completed),
        ];
        let kinds: Vec<(i64, String)> = decode(&render_all(&events))
            .into_iter()
            .map(|(id, kind, _)| (id, kind))
            .collect();
        let expected = [
            (1, "response.created"),
            (1, "response.in_progress"),
            (2, "response.output_item.added"),
            (2, "response.content_part.added"),
            (2, "response.output_text.delta"),
            (2, "response.output_text.done"),
            (2, "response.content_part.done"),
            (2, "response.output_item.done"),
            (3, "response.completed"),
        ];
        assert_eq!(kinds, expected.map(|(i, k)| (i, k.to_owned())).to_vec());
        let body = ResponsesSurface.final_body(&run(), &events);
        assert_eq!(
            body["output"],
            json!([message_item(0, "completed", Some("Whole answer"))])
        );
        assert_eq!(body["usage"], Value::Null);
    }

    #[test]
    fn a_tool_call_run_renders_reasoning_and_function_call_items() {
        let events = vec![
            item(1, Item::user_text("Weather in Paris?")),
            status(2, RunStatus::InProgress),
            control(3, EventType::ReasoningDelta, json!({"delta": "Need "})),
            control(4, EventType::ReasoningDelta, json!({"delta": "weather."})),
            item(5, Item::Reasoning { text: "Need weather.".into() }),
            item(
                6,
                Item::ToolCall {
                    call_id: "call_1".into(),
                    name: "get_weather".into(),
                    arguments: "{\"city\":\"Paris\"}".into(),
                },
            ),
            ev(
                7,
                NewEvent::new("acct", "sess-1", EventType::RunStatus, run_status_content(RunStatus::Completed, None))
                    .with_metadata(json!({"usage": {"prompt_tokens": 20, "completion_tokens": 9, "completion_tokens_details": {"reasoning_tokens": 4}}})),
            ),
        ];
        let frames = decode(&render_all(&events));
        let rs = item_id("rs", 0);
        let fc = item_id("fc", 1);
        let reasoning_done = json!({"id": rs, "type": "reasoning", "status": "completed", "summary": [],
            "content": [{"type": "reasoning_text", "text": "Need weather."}]});
        let call_done = json!({"id": fc, "type": "function_call", "status": "completed", "call_id": "call_1",
            "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"});
        let expected = vec![
            (
                2,
                json!({"type": "response.created", "sequence_number": 0,
                "response": response_obj("in_progress", json!([]), Value::Null)}),
            ),
            (
                2,
                json!({"type": "response.in_progress", "sequence_number": 1,
                "response": response_obj("in_progress", json!([]), Value::Null)}),
            ),
            (
                3,
                json!({"type": "response.output_item.added", "sequence_number": 2, "output_index": 0,
                "item": {"id": rs, "type": "reasoning", "status": "in_progress", "summary": [], "content": []}}),
            ),
            (
                3,
                json!({"type": "response.content_part.added", "sequence_number": 3, "item_id": rs,
                "output_index": 0, "content_index": 0, "part": {"type": "reasoning_text", "text": ""}}),
            ),
            (
                3,
                json!({"type": "response.reasoning_text.delta", "sequence_number": 4, "item_id": rs,
                "output_index": 0, "content_index": 0, "delta": "Need "}),
            ),
            (
                4,
                json!({"type": "response.reasoning_text.delta", "sequence_number": 5, "item_id": rs,
                "output_index": 0, "content_index": 0, "delta": "weather."}),
            ),
            (
                5,
                json!({"type": "response.reasoning_text.done", "sequence_number": 6, "item_id": rs,
                "output_index": 0, "content_index": 0, "text": "Need weather."}),
            ),
            (
                5,
                json!({"type": "response.content_part.done", "sequence_number": 7, "item_id": rs,
                "output_index": 0, "content_index": 0, "part": {"type": "reasoning_text", "text": "Need weather."}}),
            ),
            (
                5,
                json!({"type": "response.output_item.done", "sequence_number": 8, "output_index": 0,
                "item": reasoning_done}),
            ),
            (
                6,
                json!({"type": "response.output_item.added", "sequence_number": 9, "output_index": 1,
                "item": {"id": fc, "type": "function_call", "status": "in_progress", "call_id": "call_1",
                    "name": "get_weather", "arguments": ""}}),
            ),
            (
                6,
                json!({"type": "response.function_call_arguments.delta", "sequence_number": 10, "item_id": fc,
                "output_index": 1, "delta": "{\"city\":\"Paris\"}"}),
            ),
            (
                6,
                json!({"type": "response.function_call_arguments.done", "sequence_number": 11, "item_id": fc,
                "output_index": 1, "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}),
            ),
            (
                6,
                json!({"type": "response.output_item.done", "sequence_number": 12, "output_index": 1,
                "item": call_done}),
            ),
            (
                7,
                json!({"type": "response.completed", "sequence_number": 13,
                "response": response_obj("completed", json!([reasoning_done, call_done]), json!({
                    "input_tokens": 20,
                    "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                    "output_tokens": 9,
                    "output_tokens_details": {"reasoning_tokens": 4},
                    "total_tokens": 29,
                }))}),
            ),
        ];
        assert_eq!(frames.len(), expected.len());
        for ((id, _, data), (want_id, want)) in frames.iter().zip(&expected) {
            assert_eq!((id, data), (want_id, want));
        }
    }

    #[test]
    fn a_failed_run_renders_response_failed_with_the_agents_error() {
        let events = vec![
            item(1, Item::user_text("hi")),
            status(2, RunStatus::InProgress),
            control(3, EventType::TextDelta, json!({"delta": "Partial"})),
            control(
                4,
                EventType::Error,
                json!({"code": "agent_unreachable", "message": "connection refused"}),
            ),
            status(5, RunStatus::Failed),
        ];
        let frames = decode(&render_all(&events));
        let mut failed = response_obj(
            "failed",
            json!([message_item(0, "incomplete", Some("Partial"))]),
            Value::Null,
        );
        failed["error"] = json!({"code": "agent_unreachable", "message": "connection refused"});
        let kinds: Vec<&str> = frames.iter().map(|(_, k, _)| k.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.failed",
            ]
        );
        assert_eq!(
            frames[7],
            (
                5,
                "response.output_item.done".into(),
                json!({"type": "response.output_item.done", "sequence_number": 7, "output_index": 0,
                    "item": message_item(0, "incomplete", Some("Partial"))})
            )
        );
        let (id, _, last) = frames.last().unwrap();
        assert_eq!(*id, 5);
        assert_eq!(
            last,
            &json!({"type": "response.failed", "sequence_number": 8, "response": failed})
        );
        assert_eq!(ResponsesSurface.final_body(&run(), &events), failed);
    }

    #[test]
    fn cancelled_and_interrupted_runs_have_their_own_status() {
        let body = |s: RunStatus, reason: Option<&str>| {
            let events = vec![
                status(1, RunStatus::InProgress),
                control(2, EventType::RunStatus, run_status_content(s, reason)),
            ];
            let frames = decode(&render_all(&events));
            assert_eq!(frames.last().unwrap().1, "response.failed");
            ResponsesSurface.final_body(&run(), &events)
        };
        let cancelled = body(RunStatus::Cancelled, None);
        assert_eq!(cancelled["status"], "cancelled");
        assert_eq!(cancelled["error"], Value::Null);
        let interrupted = body(RunStatus::Interrupted, Some("gateway restarted"));
        assert_eq!(interrupted["status"], "incomplete");
        assert_eq!(
            interrupted["error"],
            json!({"code": "server_error", "message": "gateway restarted"})
        );
        let failed = body(RunStatus::Failed, None);
        assert_eq!(
            failed["error"],
            json!({"code": "server_error", "message": "The run failed."})
        );
    }

    #[test]
    fn client_input_and_control_events_are_not_output() {
        let events = vec![
            // A client replaying history sends assistant items of its own: they are input.
            item(1, Item::assistant_text("earlier answer")),
            item(
                2,
                Item::ToolCall {
                    call_id: "c0".into(),
                    name: "f".into(),
                    arguments: "{}".into(),
                },
            ),
            item(
                3,
                Item::ToolResult {
                    call_id: "c0".into(),
                    output: "1".into(),
                },
            ),
            status(4, RunStatus::InProgress),
            control(5, EventType::HttpRequest, json!({"method": "POST"})),
            control(6, EventType::RunCheckpoint, json!({})),
            item(7, Item::user_text("not output either")),
            item(
                8,
                Item::Approval(
                    json!({"type": "mcp_approval_response", "approve": true, "approval_request_id": "a"}),
                ),
            ),
            item(
                9,
                Item::Approval(
                    json!({"type": "mcp_approval_request", "id": "mcpr_x", "name": "t", "server_label": "s", "arguments": "{}"}),
                ),
            ),
            status(10, RunStatus::Completed),
        ];
        let body = ResponsesSurface.final_body(&run(), &events);
        assert_eq!(
            body["output"],
            json!([{"type": "mcp_approval_request", "id": "mcpr_x", "name": "t", "server_label": "s", "arguments": "{}"}])
        );
        let kinds: Vec<String> = decode(&render_all(&events))
            .into_iter()
            .map(|f| f.1)
            .collect();
        assert_eq!(
            kinds,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.output_item.done",
                "response.completed"
            ]
        );
    }

    #[test]
    fn a_resumed_run_is_one_stream_with_one_created_event() {
        let events = vec![
            status(1, RunStatus::InProgress),
            control(2, EventType::TextDelta, json!({"delta": "Hal"})),
            status(3, RunStatus::Interrupted),
            status(4, RunStatus::InProgress),
            item(5, Item::assistant_text("Hello")),
            status(6, RunStatus::Completed),
        ];
        let frames = decode(&render_all(&events));
        let kinds: Vec<&str> = frames.iter().map(|f| f.1.as_str()).collect();
        assert_eq!(
            kinds.iter().filter(|k| **k == "response.created").count(),
            1
        );
        assert_eq!(
            kinds
                .iter()
                .filter(|k| **k == "response.in_progress")
                .count(),
            2
        );
        let body = ResponsesSurface.final_body(&run(), &events);
        assert_eq!(body["status"], "completed");
        assert_eq!(body["error"], Value::Null);
        // The interrupted half-answer is redone, not part of the answer; its index stays
        // taken so indices never repeat within the stream.
        assert_eq!(
            body["output"],
            json!([message_item(1, "completed", Some("Hello"))])
        );
        let interrupted = frames.iter().find(|f| f.1 == "response.failed").unwrap();
        assert_eq!(
            interrupted.2["response"]["output"],
            json!([message_item(0, "incomplete", Some("Hal"))])
        );
    }

    #[test]
    fn open_items_are_finished_before_completion() {
        let events = vec![
            status(1, RunStatus::InProgress),
            control(2, EventType::TextDelta, json!({"delta": "cut"})),
            status(3, RunStatus::Completed),
        ];
        let frames = decode(&render_all(&events));
        let kinds: Vec<&str> = frames.iter().map(|f| f.1.as_str()).collect();
        assert_eq!(
            &kinds[kinds.len() - 4..],
            [
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.completed"
            ]
        );
        assert_eq!(
            frames.last().unwrap().2["response"]["output"],
            json!([message_item(0, "completed", Some("cut"))])
        );
    }

    #[test]
    fn responses_streams_have_no_end_marker() {
        assert!(ResponsesSurface.stream_renderer(&run()).end().is_empty());
    }

    #[test]
    fn response_ids_map_to_run_ids_and_back() {
        let s = ResponsesSurface;
        assert_eq!(s.response_id(&format!("run_{HEX}")), RESP);
        assert_eq!(s.run_id(RESP), Some(format!("run_{HEX}")));
        assert_eq!(s.run_id("resp_abc"), None);
        assert_eq!(s.run_id(&format!("chatcmpl-{HEX}")), None);
        assert_eq!(s.run_id("resp_0123456789ABCDEF0123456789ABCDEF"), None);
        assert_eq!(s.run_id("resp_0123456789abcdef0123456789abcdeg"), None);
    }

    // -----------------------------------------------------------------------------------
    // Request parsing

    fn parse(body: Value) -> Result<TurnRequest, InputError> {
        ResponsesSurface.parse_request(body.to_string().as_bytes(), None)
    }

    fn parse_with_header(body: Value, header: &str) -> Result<TurnRequest, InputError> {
        ResponsesSurface.parse_request(body.to_string().as_bytes(), Some(header))
    }

    fn err(body: Value) -> (&'static str, Option<String>, String) {
        let e = parse(body).unwrap_err();
        (e.code, e.param, e.message)
    }

    #[test]
    fn a_string_input_is_one_user_message() {
        let t = parse(json!({"model": "m", "input": "hi", "stream": true})).unwrap();
        assert_eq!(t.surface, Protocol::OpenAiResponses);
        assert_eq!(t.input, vec![Item::user_text("hi")]);
        assert_eq!(t.model.as_deref(), Some("m"));
        assert!(t.stream);
        assert_eq!(t.session, SessionRef::New);
        assert!(t.extra.is_empty());
    }

    #[test]
    fn every_input_item_kind_is_parsed() {
        let t = parse(json!({"input": [
            {"role": "developer", "content": "be brief"},
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "look: "},
                {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "low"},
                {"type": "input_image", "file_id": "file-img"},
                {"type": "input_file", "filename": "a.txt", "file_data": "data:text/plain;base64,aGk="},
                {"type": "input_file", "file_id": "file-1"},
                {"type": "input_file", "file_url": "https://x/y.pdf"},
            ]},
            {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
             "content": [{"type": "output_text", "text": "ok", "annotations": []}]},
            {"type": "reasoning", "id": "rs_1", "summary": [
                {"type": "summary_text", "text": "one"}, {"type": "summary_text", "text": "two"}]},
            {"type": "reasoning", "id": "rs_2", "summary": [],
             "content": [{"type": "reasoning_text", "text": "raw"}]},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{\"a\":1}"},
            {"type": "function_call_output", "call_id": "c1", "output": "42"},
            {"type": "function_call_output", "call_id": "c2", "output": [
                {"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
            {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": true},
        ]}))
        .unwrap();
        assert_eq!(
            t.input,
            vec![
                Item::Message {
                    role: "developer".into(),
                    content: vec![Block::Text("be brief".into())]
                },
                Item::Message {
                    role: "user".into(),
                    content: vec![
                        Block::Text("look: ".into()),
                        Block::Image {
                            url: "data:image/png;base64,AAAA".into(),
                            detail: Some("low".into())
                        },
                        Block::Image {
                            url: "file-img".into(),
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
                            url: Some("file-1".into())
                        },
                        Block::File {
                            filename: None,
                            data: None,
                            url: Some("https://x/y.pdf".into())
                        },
                    ]
                },
                Item::assistant_text("ok"),
                Item::Reasoning {
                    text: "one\n\ntwo".into()
                },
                Item::Reasoning { text: "raw".into() },
                Item::ToolCall {
                    call_id: "c1".into(),
                    name: "f".into(),
                    arguments: "{\"a\":1}".into()
                },
                Item::ToolResult {
                    call_id: "c1".into(),
                    output: "42".into()
                },
                Item::ToolResult {
                    call_id: "c2".into(),
                    output: "ab".into()
                },
                Item::Approval(
                    json!({"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": true})
                ),
            ]
        );
    }

    #[test]
    fn known_fields_are_typed_and_the_rest_is_extra() {
        let t = parse(json!({
            "model": "m", "input": "x", "instructions": "Talk like a pirate.",
            "temperature": 0.5, "top_p": 1, "max_output_tokens": 100,
            "tools": [
                {"type": "function", "name": "get_weather", "description": "d",
                 "parameters": {"type": "object"}, "strict": true},
                {"type": "function", "name": "bare"},
                {"type": "web_search"},
            ],
            "tool_choice": {"type": "function", "name": "get_weather"},
            "store": true, "background": true, "parallel_tool_calls": false,
            "reasoning": {"effort": "low"}, "metadata": {"k": "v"},
        }))
        .unwrap();
        assert_eq!(t.instructions.as_deref(), Some("Talk like a pirate."));
        assert_eq!(t.temperature, Some(0.5));
        assert_eq!(t.top_p, Some(1.0));
        assert_eq!(t.max_output_tokens, Some(100));
        assert_eq!(
            t.tools,
            vec![
                Tool {
                    name: "get_weather".into(),
                    description: Some("d".into()),
                    parameters: Some(json!({"type": "object"})),
                    strict: Some(true)
                },
                Tool {
                    name: "bare".into(),
                    description: None,
                    parameters: None,
                    strict: None
                },
            ]
        );
        assert_eq!(t.tool_choice.as_deref(), Some("get_weather"));
        assert_eq!(
            Value::Object(t.extra),
            json!({
                "tools": [{"type": "web_search"}],
                "parallel_tool_calls": false,
                "reasoning": {"effort": "low"},
                "metadata": {"k": "v"},
            })
        );
        let t =
            parse(json!({"input": "x", "tool_choice": "required", "temperature": null})).unwrap();
        assert_eq!(t.tool_choice.as_deref(), Some("required"));
        assert_eq!(t.temperature, None);
        let t = parse(json!({"input": "x", "tool_choice": {"type": "web_search"}})).unwrap();
        assert_eq!(t.tool_choice, None);
        assert_eq!(t.extra["tool_choice"], json!({"type": "web_search"}));
    }

    #[test]
    fn sessions_are_named_by_conversation_session_id_or_header() {
        let named = |s: &str| SessionRef::Named(s.into());
        assert_eq!(
            parse(json!({"input": "x", "conversation": "c1"}))
                .unwrap()
                .session,
            named("c1")
        );
        assert_eq!(
            parse(json!({"input": "x", "conversation": {"id": "c1"}}))
                .unwrap()
                .session,
            named("c1")
        );
        assert_eq!(
            parse(json!({"input": "x", "session_id": "s1"}))
                .unwrap()
                .session,
            named("s1")
        );
        assert_eq!(
            parse(json!({"input": "x", "conversation": {"id": "c1"}, "session_id": "c1"}))
                .unwrap()
                .session,
            named("c1")
        );
        assert_eq!(
            parse_with_header(json!({"input": "x"}), "h1")
                .unwrap()
                .session,
            named("h1")
        );
        assert_eq!(
            parse_with_header(json!({"input": "x", "conversation": "h1"}), "h1")
                .unwrap()
                .session,
            named("h1")
        );
        assert_eq!(
            parse_with_header(json!({"input": "x"}), " ")
                .unwrap()
                .session,
            SessionRef::New
        );
        assert_eq!(
            parse(json!({"input": "x", "previous_response_id": RESP}))
                .unwrap()
                .session,
            SessionRef::AfterResponse(RESP.into())
        );
        assert_eq!(
            parse(json!({"input": "x", "conversation": null, "session_id": null}))
                .unwrap()
                .session,
            SessionRef::New
        );
    }

    #[test]
    fn conflicting_session_names_are_rejected() {
        let (code, param, message) =
            err(json!({"input": "x", "conversation": {"id": "a"}, "session_id": "b"}));
        assert_eq!(
            (code, param.as_deref()),
            ("invalid_value", Some("session_id"))
        );
        assert!(message.contains("disagree"), "{message}");
        for other in [json!({"conversation": "a"}), json!({"session_id": "a"})] {
            let mut body = json!({"input": "x", "previous_response_id": RESP});
            body.as_object_mut()
                .unwrap()
                .extend(other.as_object().unwrap().clone());
            let (code, param, _) = err(body);
            assert_eq!(
                (code, param.as_deref()),
                ("invalid_value", Some("previous_response_id"))
            );
        }
        let e = parse_with_header(json!({"input": "x", "previous_response_id": RESP}), "h")
            .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("previous_response_id"));
        let e = parse_with_header(json!({"input": "x", "session_id": "a"}), "b").unwrap_err();
        assert_eq!(
            (e.code, e.param.as_deref()),
            ("invalid_value", Some("x-session-id"))
        );
    }

    #[test]
    fn malformed_requests_get_precise_errors() {
        let e = ResponsesSurface
            .parse_request(b"{\"input\": ", None)
            .unwrap_err();
        assert_eq!((e.code, e.param), ("invalid_json", None));
        let e = ResponsesSurface.parse_request(b"[1]", None).unwrap_err();
        assert_eq!((e.code, e.param), ("invalid_type", None));

        let cases = [
            (json!({}), "missing_required_parameter", "input"),
            (json!({"input": 3}), "invalid_type", "input"),
            (
                json!({"input": "x", "stream": "yes"}),
                "invalid_type",
                "stream",
            ),
            (
                json!({"input": "x", "temperature": "hot"}),
                "invalid_type",
                "temperature",
            ),
            (
                json!({"input": "x", "temperature": 3}),
                "invalid_value",
                "temperature",
            ),
            (
                json!({"input": "x", "top_p": 1.5}),
                "invalid_value",
                "top_p",
            ),
            (
                json!({"input": "x", "max_output_tokens": 1.5}),
                "invalid_type",
                "max_output_tokens",
            ),
            (
                json!({"input": "x", "max_output_tokens": -1}),
                "invalid_value",
                "max_output_tokens",
            ),
            (json!({"input": "x", "model": 1}), "invalid_type", "model"),
            (
                json!({"input": "x", "instructions": []}),
                "invalid_type",
                "instructions",
            ),
            (json!({"input": "x", "tools": {}}), "invalid_type", "tools"),
            (
                json!({"input": "x", "tools": [{"type": "function"}]}),
                "missing_required_parameter",
                "tools[0].name",
            ),
            (
                json!({"input": "x", "tools": [{"name": "f"}]}),
                "missing_required_parameter",
                "tools[0].type",
            ),
            (
                json!({"input": "x", "tools": [{"type": "function", "name": "f", "strict": "no"}]}),
                "invalid_type",
                "tools[0].strict",
            ),
            (
                json!({"input": "x", "tool_choice": "sometimes"}),
                "invalid_value",
                "tool_choice",
            ),
            (
                json!({"input": "x", "tool_choice": {"type": "function"}}),
                "missing_required_parameter",
                "tool_choice.name",
            ),
            (
                json!({"input": "x", "tool_choice": 1}),
                "invalid_type",
                "tool_choice",
            ),
            (
                json!({"input": "x", "conversation": 5}),
                "invalid_type",
                "conversation",
            ),
            (
                json!({"input": "x", "conversation": {}}),
                "missing_required_parameter",
                "conversation.id",
            ),
            (
                json!({"input": "x", "conversation": {"id": 5}}),
                "invalid_type",
                "conversation.id",
            ),
            (
                json!({"input": "x", "conversation": ""}),
                "invalid_value",
                "conversation",
            ),
            (
                json!({"input": "x", "session_id": 5}),
                "invalid_type",
                "session_id",
            ),
            (
                json!({"input": "x", "previous_response_id": false}),
                "invalid_type",
                "previous_response_id",
            ),
            (json!({"input": [1]}), "invalid_type", "input[0]"),
            (
                json!({"input": [{"content": "hi"}]}),
                "missing_required_parameter",
                "input[0].type",
            ),
            (
                json!({"input": [{"role": "robot", "content": "hi"}]}),
                "invalid_value",
                "input[0].role",
            ),
            (
                json!({"input": [{"role": "user"}]}),
                "missing_required_parameter",
                "input[0].content",
            ),
            (
                json!({"input": [{"role": "user", "content": 1}]}),
                "invalid_type",
                "input[0].content",
            ),
            (
                json!({"input": [{"role": "user", "content": [{"type": "input_audio"}]}]}),
                "invalid_value",
                "input[0].content[0].type",
            ),
            (
                json!({"input": [{"role": "user", "content": [{"type": "input_text"}]}]}),
                "missing_required_parameter",
                "input[0].content[0].text",
            ),
            (
                json!({"input": [{"role": "user", "content": [{"type": "input_image"}]}]}),
                "missing_required_parameter",
                "input[0].content[0].image_url",
            ),
            (
                json!({"input": [{"role": "user", "content": [{"type": "input_file", "filename": "a"}]}]}),
                "missing_required_parameter",
                "input[0].content[0].file_data",
            ),
            (
                json!({"input": [{"type": "item_reference", "id": "msg_1"}]}),
                "invalid_value",
                "input[0].type",
            ),
            (
                json!({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}),
                "missing_required_parameter",
                "input[0].call_id",
            ),
            (
                json!({"input": [{"type": "function_call_output", "call_id": "c"}]}),
                "missing_required_parameter",
                "input[0].output",
            ),
            (
                json!({"input": [{"type": "function_call_output", "call_id": "c", "output": 1}]}),
                "invalid_type",
                "input[0].output",
            ),
        ];
        for (body, code, param) in cases {
            let (got_code, got_param, message) = err(body.clone());
            assert_eq!(
                (got_code, got_param.as_deref()),
                (code, Some(param)),
                "{body}: {message}"
            );
            assert!(message.contains(param), "{message}");
        }
    }

    // -----------------------------------------------------------------------------------
    // Upstream request

    #[test]
    fn build_request_sends_the_whole_history_and_never_a_stored_conversation() {
        let history = vec![
            Item::Message {
                role: "system".into(),
                content: vec![Block::Text("summary".into())],
            },
            Item::user_text("Weather in Paris?"),
            Item::Reasoning {
                text: "think".into(),
            },
            Item::ToolCall {
                call_id: "c1".into(),
                name: "get_weather".into(),
                arguments: "{}".into(),
            },
            Item::ToolResult {
                call_id: "c1".into(),
                output: "sunny".into(),
            },
            Item::assistant_text("It is sunny."),
            Item::Approval(
                json!({"type": "mcp_approval_request", "id": "mcpr_1", "name": "t", "server_label": "s", "arguments": "{}"}),
            ),
        ];
        let mut turn = parse(json!({
            "model": "client-model",
            "conversation": "sess-1",
            "input": [{"role": "user", "content": [
                {"type": "input_text", "text": "And this?"},
                {"type": "input_image", "image_url": "https://x/a.png"},
                {"type": "input_image", "file_id": "file-9", "detail": "high"},
                {"type": "input_file", "filename": "n.txt", "file_data": "data:text/plain;base64,aGk="},
                {"type": "input_file", "file_id": "file-2"},
            ]}],
            "instructions": "Be brief.",
            "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}, {"type": "web_search"}],
            "tool_choice": "auto",
            "temperature": 0.2,
            "max_output_tokens": 50,
            "store": true,
            "reasoning": {"effort": "low"},
        }))
        .unwrap();
        let body = ResponsesUpstream.build_request(&history, &turn, "default");
        assert_eq!(
            body,
            json!({
                "model": "client-model",
                "stream": true,
                "store": false,
                "instructions": "Be brief.",
                "tools": [
                    {"type": "function", "name": "get_weather", "parameters": {"type": "object"}},
                    {"type": "web_search"},
                ],
                "tool_choice": "auto",
                "temperature": 0.2,
                "max_output_tokens": 50,
                "reasoning": {"effort": "low"},
                "input": [
                    {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "summary"}]},
                    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
                    {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
                    {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
                    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "It is sunny."}]},
                    {"type": "mcp_approval_request", "id": "mcpr_1", "name": "t", "server_label": "s", "arguments": "{}"},
                    {"type": "message", "role": "user", "content": [
                        {"type": "input_text", "text": "And this?"},
                        {"type": "input_image", "image_url": "https://x/a.png", "detail": "auto"},
                        {"type": "input_image", "file_id": "file-9", "detail": "high"},
                        {"type": "input_file", "filename": "n.txt", "file_data": "data:text/plain;base64,aGk="},
                        {"type": "input_file", "file_id": "file-2"},
                    ]},
                ],
            })
        );

        // Another surface's extras are not Responses fields; the typed fields still go.
        turn.surface = Protocol::OpenAiChat;
        turn.model = None;
        turn.tool_choice = Some("get_weather".into());
        turn.extra
            .insert("previous_response_id".into(), json!("resp_x"));
        let body = ResponsesUpstream.build_request(&[], &turn, "default");
        assert_eq!(body["model"], "default");
        assert_eq!(
            body["tool_choice"],
            json!({"type": "function", "name": "get_weather"})
        );
        assert_eq!(body["tools"].as_array().unwrap().len(), 1);
        assert!(body.get("reasoning").is_none());
        assert!(body.get("previous_response_id").is_none());

        // Even from this surface, extras cannot name a stored conversation.
        turn.surface = Protocol::OpenAiResponses;
        turn.extra.insert("conversation".into(), json!("c"));
        let body = ResponsesUpstream.build_request(&[], &turn, "default");
        assert!(body.get("previous_response_id").is_none());
        assert!(body.get("conversation").is_none());
        assert_eq!(body["store"], false);
        assert_eq!(ResponsesUpstream.protocol(), Protocol::OpenAiResponses);
    }

    // -----------------------------------------------------------------------------------
    // Upstream response

    fn sse(events: &[Value]) -> String {
        events
            .iter()
            .map(|e| format!("event: {}\ndata: {}\n\n", e["type"].as_str().unwrap(), e))
            .collect()
    }

    fn parse_stream(body: &str, chunk: usize) -> Vec<Output> {
        let mut p = ResponsesUpstream.body_parser("text/event-stream; charset=utf-8");
        let mut out: Vec<Output> = body
            .as_bytes()
            .chunks(chunk)
            .flat_map(|c| p.feed(c))
            .collect();
        out.extend(p.finish());
        out
    }

    fn upstream_text_run() -> Vec<Value> {
        let msg = json!({"id": "msg_u1", "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": "Hi there", "annotations": []}]});
        vec![
            json!({"type": "response.created", "sequence_number": 0, "response": {"id": "resp_u", "status": "in_progress", "output": []}}),
            json!({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0,
                "item": {"id": "rs_u1", "type": "reasoning", "summary": []}}),
            json!({"type": "response.reasoning_summary_part.added", "sequence_number": 2, "item_id": "rs_u1", "output_index": 0, "summary_index": 0}),
            json!({"type": "response.reasoning_summary_text.delta", "sequence_number": 3, "item_id": "rs_u1", "output_index": 0, "summary_index": 0, "delta": "Greet"}),
            json!({"type": "response.reasoning_summary_part.added", "sequence_number": 4, "item_id": "rs_u1", "output_index": 0, "summary_index": 1}),
            json!({"type": "response.reasoning_summary_text.delta", "sequence_number": 5, "item_id": "rs_u1", "output_index": 0, "summary_index": 1, "delta": "Briefly"}),
            json!({"type": "response.output_item.done", "sequence_number": 6, "output_index": 0,
                "item": {"id": "rs_u1", "type": "reasoning", "summary": [
                    {"type": "summary_text", "text": "Greet"}, {"type": "summary_text", "text": "Briefly"}]}}),
            json!({"type": "response.output_item.added", "sequence_number": 7, "output_index": 1,
                "item": {"id": "msg_u1", "type": "message", "role": "assistant", "status": "in_progress", "content": []}}),
            json!({"type": "response.output_text.delta", "sequence_number": 8, "item_id": "msg_u1", "output_index": 1, "content_index": 0, "delta": "Hi "}),
            json!({"type": "response.output_text.delta", "sequence_number": 9, "item_id": "msg_u1", "output_index": 1, "content_index": 0, "delta": "there"}),
            json!({"type": "response.output_text.done", "sequence_number": 10, "item_id": "msg_u1", "output_index": 1, "content_index": 0, "text": "Hi there"}),
            json!({"type": "response.output_item.done", "sequence_number": 11, "output_index": 1, "item": msg}),
            json!({"type": "response.completed", "sequence_number": 12, "response": {"id": "resp_u", "status": "completed",
                "output": [{"id": "rs_u1", "type": "reasoning", "summary": []}, msg],
                "usage": {"input_tokens": 5, "output_tokens": 2, "total_tokens": 7}}}),
        ]
    }

    #[test]
    fn an_upstream_stream_split_anywhere_parses_the_same() {
        let body = sse(&upstream_text_run());
        let expected = vec![
            Output::ReasoningDelta("Greet".into()),
            Output::ReasoningDelta("\n\n".into()),
            Output::ReasoningDelta("Briefly".into()),
            Output::Item(Item::Reasoning {
                text: "Greet\n\nBriefly".into(),
            }),
            Output::TextDelta("Hi ".into()),
            Output::TextDelta("there".into()),
            Output::Item(Item::assistant_text("Hi there")),
            Output::Done {
                usage: Some(json!({"input_tokens": 5, "output_tokens": 2, "total_tokens": 7})),
            },
        ];
        for chunk in [1, 2, 7, 13, 64, body.len()] {
            assert_eq!(parse_stream(&body, chunk), expected, "chunk size {chunk}");
        }
        // CRLF line ends, no `event:` lines.
        let crlf: String = upstream_text_run()
            .iter()
            .map(|e| format!("data: {e}\r\n\r\n"))
            .collect();
        assert_eq!(parse_stream(&crlf, 5), expected);
    }

    #[test]
    fn function_calls_come_from_the_finished_item() {
        let call = json!({"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "get_weather",
            "arguments": "{\"city\":\"Paris\"}", "status": "completed"});
        let body = sse(&[
            json!({"type": "response.output_item.added", "output_index": 0,
                "item": {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": ""}}),
            json!({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 0, "delta": "{\"city\":"}),
            json!({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 0, "delta": "\"Paris\"}"}),
            json!({"type": "response.function_call_arguments.done", "item_id": "fc_1", "output_index": 0, "arguments": "{\"city\":\"Paris\"}"}),
            json!({"type": "response.output_item.done", "output_index": 0, "item": call}),
            json!({"type": "response.output_item.added", "output_index": 1,
                "item": {"id": "mcpr_1", "type": "mcp_approval_request", "name": "t", "server_label": "s", "arguments": "{}"}}),
            json!({"type": "response.output_item.done", "output_index": 1,
                "item": {"id": "mcpr_1", "type": "mcp_approval_request", "name": "t", "server_label": "s", "arguments": "{}"}}),
            json!({"type": "response.output_item.done", "output_index": 2,
                "item": {"id": "ws_1", "type": "web_search_call", "status": "completed"}}),
            json!({"type": "response.completed", "response": {"status": "completed", "output": [call], "usage": null}}),
        ]);
        assert_eq!(
            parse_stream(&body, 10),
            vec![
                Output::Item(Item::ToolCall {
                    call_id: "call_1".into(),
                    name: "get_weather".into(),
                    arguments: "{\"city\":\"Paris\"}".into()
                }),
                Output::Item(Item::Approval(
                    json!({"id": "mcpr_1", "type": "mcp_approval_request", "name": "t", "server_label": "s", "arguments": "{}"})
                )),
                Output::Done { usage: None },
            ]
        );
    }

    #[test]
    fn upstream_failures_are_errors_without_done() {
        let failed = sse(&[
            json!({"type": "response.output_text.delta", "delta": "par"}),
            json!({"type": "response.failed", "response": {"status": "failed",
                "error": {"code": "server_error", "message": "boom"}}}),
        ]);
        assert_eq!(
            parse_stream(&failed, 3),
            vec![
                Output::TextDelta("par".into()),
                Output::Error {
                    code: "server_error".into(),
                    message: "boom".into()
                },
            ]
        );
        // An `error` event is usually followed by `response.failed`: one error only.
        let error = sse(&[
            json!({"type": "error", "code": "rate_limit_exceeded", "message": "slow down", "param": null}),
            json!({"type": "response.failed", "response": {"status": "failed", "error": {"code": "server_error", "message": "x"}}}),
        ]);
        assert_eq!(
            parse_stream(&error, 100),
            vec![Output::Error {
                code: "rate_limit_exceeded".into(),
                message: "slow down".into()
            }]
        );
        let incomplete = sse(&[
            json!({"type": "response.incomplete", "response": {"status": "incomplete",
            "incomplete_details": {"reason": "max_output_tokens"}}}),
        ]);
        assert_eq!(
            parse_stream(&incomplete, 100),
            vec![Output::Error {
                code: "incomplete".into(),
                message: "The agent's response is incomplete (max_output_tokens).".into()
            }]
        );
        // The SDK's convention: a data object with `error` and no `type`.
        let bare =
            "data: {\"error\": {\"message\": \"bad key\", \"code\": \"invalid_api_key\"}}\n\n";
        assert_eq!(
            parse_stream(bare, 100),
            vec![Output::Error {
                code: "invalid_api_key".into(),
                message: "bad key".into()
            }]
        );
    }

    #[test]
    fn a_stream_cut_short_yields_no_done() {
        let mut body = sse(&upstream_text_run()[..9]);
        // The last event arrives without its blank line.
        body.push_str("data: {\"type\":\"response.output_text.delta\",\"delta\":\"!\"}");
        let out = parse_stream(&body, 4);
        assert_eq!(out.last(), Some(&Output::TextDelta("!".into())));
        assert!(!out
            .iter()
            .any(|o| matches!(o, Output::Done { .. } | Output::Error { .. })));
        // Keep-alives and junk between events are harmless.
        let noisy = format!(
            ": ping\n\ndata: not json\n\ndata: [DONE]\n\n{}",
            sse(&upstream_text_run())
        );
        assert!(matches!(
            parse_stream(&noisy, 9).last(),
            Some(Output::Done { .. })
        ));
    }

    #[test]
    fn a_completed_response_fills_in_items_the_stream_did_not_finish() {
        let body = sse(&[
            json!({"type": "response.output_text.delta", "item_id": "m", "output_index": 0, "delta": "Hi"}),
            json!({"type": "response.completed", "response": {"status": "completed", "output": [
                {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}]}}),
        ]);
        assert_eq!(
            parse_stream(&body, 100),
            vec![
                Output::TextDelta("Hi".into()),
                Output::Item(Item::ToolCall {
                    call_id: "c".into(),
                    name: "f".into(),
                    arguments: "{}".into()
                }),
                Output::Item(Item::assistant_text("Hi")),
                Output::Done { usage: None },
            ]
        );
    }

    #[test]
    fn a_json_body_is_parsed_at_finish() {
        let body = json!({"id": "resp_1", "object": "response", "status": "completed", "error": null,
            "output": [
                {"id": "rs_1", "type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "hmm"}]},
                {"id": "msg_1", "type": "message", "role": "assistant",
                 "content": [{"type": "output_text", "text": "Hello", "annotations": []}]},
            ],
            "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}});
        let mut p = ResponsesUpstream.body_parser("application/json");
        let bytes = body.to_string();
        let (a, b) = bytes.as_bytes().split_at(10);
        assert!(p.feed(a).is_empty());
        assert!(p.feed(b).is_empty());
        assert_eq!(
            p.finish(),
            vec![
                Output::Item(Item::Reasoning { text: "hmm".into() }),
                Output::Item(Item::assistant_text("Hello")),
                Output::Done {
                    usage: Some(json!({"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}))
                },
            ]
        );

        let mut p = ResponsesUpstream.body_parser("application/json");
        p.feed(br#"{"error": {"message": "Invalid model", "type": "invalid_request_error", "code": "model_not_found"}}"#);
        assert_eq!(
            p.finish(),
            vec![Output::Error {
                code: "model_not_found".into(),
                message: "Invalid model".into()
            }]
        );

        let mut p = ResponsesUpstream.body_parser("text/html");
        p.feed(b"<html>bad gateway</html>");
        assert!(
            matches!(&p.finish()[..], [Output::Error { code, .. }] if code == "invalid_upstream_response")
        );
    }

    #[test]
    fn what_the_upstream_parser_reads_the_renderer_can_write() {
        // Tether in front of Tether: a rendered stream parses back into the same items.
        let frames = render_all(&streamed_run());
        let mut wire = String::new();
        for f in &frames {
            f.encode(&mut wire);
        }
        let out = parse_stream(&wire, 11);
        assert_eq!(
            out,
            vec![
                Output::TextDelta("Hel".into()),
                Output::TextDelta("lo!".into()),
                Output::Item(Item::assistant_text("Hello!")),
                Output::Done {
                    usage: Some(json!({
                        "input_tokens": 12,
                        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                        "output_tokens": 3,
                        "output_tokens_details": {"reasoning_tokens": 0},
                        "total_tokens": 15,
                    }))
                },
            ]
        );
    }
}
