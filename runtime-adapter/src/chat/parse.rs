//! The client's `POST /v1/chat/completions` body read into a `TurnRequest`, refused with
//! OpenAI's own error codes and wording when it is wrong.

use serde_json::{Map, Value};

use crate::item::{Block, Item};
use crate::params::{field, invalid_value, missing, Params};
use crate::protocol::Protocol;
use crate::turn::{InputError, SessionRef, Tool, TurnRequest};

/// Chat Completions names a number "a number" in its errors.
const PARAMS: Params = Params::Chat;

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

/// A client's request body (and its `x-session-id` header) as a turn.
pub(super) fn parse_request(
    body: &[u8],
    session_header: Option<&str>,
) -> Result<TurnRequest, InputError> {
    let obj = PARAMS.object(body)?;

    let mut turn = TurnRequest::new(Protocol::OpenAiChat);
    turn.input = match obj.get("messages") {
        None | Some(Value::Null) => return Err(missing("messages")),
        Some(messages) => parse_messages(messages)?,
    };
    turn.model = PARAMS.opt_str(&obj, "model")?.filter(|m| !m.is_empty());
    turn.stream = PARAMS.opt_bool(&obj, "stream")?.unwrap_or(false);
    if let Some(v) = field(&obj, "stream_options") {
        if !v.is_object() {
            return Err(PARAMS.invalid_type("stream_options", "an object", v));
        }
    }
    turn.temperature = PARAMS.opt_number(&obj, "temperature", 2.0)?;
    turn.top_p = PARAMS.opt_number(&obj, "top_p", 1.0)?;
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
            None => return Err(PARAMS.invalid_type("n", "an integer", n)),
        }
    }

    let body_session = PARAMS.opt_str(&obj, "session_id")?;
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
            None => Err(PARAMS.invalid_type(key, "an integer", v)),
        },
    }
}

fn parse_messages(v: &Value) -> Result<Vec<Item>, InputError> {
    let Some(messages) = v.as_array() else {
        return Err(PARAMS.invalid_type("messages", "an array", v));
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
        return Err(PARAMS.invalid_type(p, "an object", m));
    };
    let role_param = format!("{p}.role");
    let role = PARAMS.req_str(obj, "role", p)?;
    let content_param = format!("{p}.content");
    match role.as_str() {
        "system" | "developer" | "user" => {
            let content = match field(obj, "content") {
                None => return Err(missing(&content_param)),
                Some(c) => parse_content(c, &content_param)?,
            };
            items.push(Item::Message { role, content });
        }
        "assistant" => parse_assistant(obj, p, items)?,
        "tool" => {
            let call_id = PARAMS.req_str(obj, "tool_call_id", p)?;
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
            Some(v) => return Err(PARAMS.invalid_type(&format!("{p}.{key}"), "a string", v)),
        }
    }

    let content_param = format!("{p}.content");
    let mut content = match field(obj, "content") {
        None => None,
        Some(c) => Some(parse_content(c, &content_param)?),
    };
    if content.is_none() {
        if let Some(refusal) = PARAMS.opt_str_at(obj, "refusal", p)? {
            content = Some(vec![Block::Text(refusal)]);
        }
    }

    let mut calls = Vec::new();
    if let Some(v) = field(obj, "tool_calls") {
        let tc_param = format!("{p}.tool_calls");
        let Some(arr) = v.as_array() else {
            return Err(PARAMS.invalid_type(&tc_param, "an array", v));
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
        return Err(PARAMS.invalid_type(p, "an object", v));
    };
    if let Some(t) = PARAMS.opt_str_at(obj, "type", p)? {
        only_function(&t, p)?;
    }
    let call_id = PARAMS.req_str(obj, "id", p)?;
    let fn_param = format!("{p}.function");
    let function = PARAMS.req_object(obj, "function", p)?;
    let name = PARAMS.req_str(function, "name", &fn_param)?;
    let arguments = PARAMS.req_str(function, "arguments", &fn_param)?;
    Ok(Item::ToolCall {
        call_id,
        name,
        arguments,
    })
}

/// Message content: a string, or an array of content parts.
fn parse_content(v: &Value, p: &str) -> Result<Vec<Block>, InputError> {
    let parts = match v {
        Value::String(s) => return Ok(vec![Block::Text(s.clone())]),
        Value::Array(parts) => parts,
        _ => return Err(PARAMS.invalid_type(p, "a string or an array of content parts", v)),
    };
    let mut blocks = Vec::with_capacity(parts.len());
    for (j, part) in parts.iter().enumerate() {
        let pp = format!("{p}[{j}]");
        let Some(obj) = part.as_object() else {
            return Err(PARAMS.invalid_type(&pp, "an object", part));
        };
        let typ = PARAMS.req_str(obj, "type", &pp)?;
        blocks.push(match typ.as_str() {
            "text" => Block::Text(PARAMS.req_str(obj, "text", &pp)?),
            "refusal" => Block::Text(PARAMS.req_str(obj, "refusal", &pp)?),
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
                        url: PARAMS.req_str(img, "url", &ip)?,
                        detail: PARAMS.opt_str_at(img, "detail", &ip)?,
                    },
                    Some(v) => return Err(PARAMS.invalid_type(&ip, "an object", v)),
                }
            }
            "file" => {
                let fp = format!("{pp}.file");
                let file = PARAMS.req_object(obj, "file", &pp)?;
                let filename = PARAMS.opt_str_at(file, "filename", &fp)?;
                let data = PARAMS.opt_str_at(file, "file_data", &fp)?;
                let url = PARAMS.opt_str_at(file, "file_id", &fp)?;
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
        return Err(PARAMS.invalid_type("tools", "an array", v));
    };
    let mut tools = Vec::with_capacity(arr.len());
    for (i, t) in arr.iter().enumerate() {
        let p = format!("tools[{i}]");
        let Some(obj) = t.as_object() else {
            return Err(PARAMS.invalid_type(&p, "an object", t));
        };
        only_function(&PARAMS.req_str(obj, "type", &p)?, &p)?;
        let fp = format!("{p}.function");
        let function = PARAMS.req_object(obj, "function", &p)?;
        let name = PARAMS.req_str(function, "name", &fp)?;
        if name.is_empty() {
            return Err(invalid_value(
                &format!("{fp}.name"),
                format!("Invalid '{fp}.name': expected a non-empty string."),
            ));
        }
        let parameters = PARAMS.opt_object_at(function, "parameters", &fp)?;
        let strict = PARAMS.opt_bool_at(function, "strict", &fp)?;
        tools.push(Tool {
            name,
            description: PARAMS.opt_str_at(function, "description", &fp)?,
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
            only_function(&PARAMS.req_str(obj, "type", "tool_choice")?, "tool_choice")?;
            let function = PARAMS.req_object(obj, "function", "tool_choice")?;
            PARAMS.req_str(function, "name", "tool_choice.function")
        }
        _ => Err(PARAMS.invalid_type("tool_choice", "a string or an object", v)),
    }
}

/// The `type` of the object at `at`, which Chat Completions allows only as `function`.
fn only_function(typ: &str, at: &str) -> Result<(), InputError> {
    if typ == "function" {
        return Ok(());
    }
    Err(invalid_value(
        &format!("{at}.type"),
        format!("Invalid value for '{at}.type': '{typ}'. Supported values are: 'function'."),
    ))
}
