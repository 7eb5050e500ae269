//! The client's `POST /v1/responses` body read into a `TurnRequest`, refused with OpenAI's
//! own error codes and wording when it is wrong.

use serde_json::{Map, Value};

use super::wire::reasoning_text;
use crate::compaction::context_management;
use crate::item::{Block, Item};
use crate::params::{field, invalid_value, missing, Params};
use crate::protocol::Protocol;
use crate::turn::{InputError, ItemReference, SessionRef, Tool, TurnRequest};

/// Responses tells "a decimal" from "an integer" in its errors.
const PARAMS: Params = Params::Responses;

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

/// Request fields a Response object repeats (see `render::Renderer::response`).
const ECHOED: [&str; 21] = [
    "instructions",
    "max_output_tokens",
    "temperature",
    "top_p",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "metadata",
    "truncation",
    "text",
    "reasoning",
    "background",
    "service_tier",
    "presence_penalty",
    "frequency_penalty",
    "top_logprobs",
    "max_tool_calls",
    "safety_identifier",
    "prompt_cache_key",
    "previous_response_id",
    "user",
];

/// A session id named in the body: a non-empty string.
fn session_str(v: &Value, param: &str) -> Result<String, InputError> {
    match v {
        Value::String(s) if s.is_empty() => Err(invalid_value(
            param,
            format!("Invalid value for '{param}': a session id cannot be empty."),
        )),
        Value::String(s) => Ok(s.clone()),
        v => Err(PARAMS.invalid_type(param, "a string", v)),
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
            return Err(PARAMS.invalid_type(
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

/// A client's request body (and its `x-session-id` header) as a turn.
pub(super) fn parse_request(body: &[u8], header: Option<&str>) -> Result<TurnRequest, InputError> {
    let obj = PARAMS.object(body)?;

    let mut turn = TurnRequest::new(Protocol::OpenAiResponses);
    turn.session = parse_session(&obj, header)?;
    turn.input = match obj.get("input") {
        None | Some(Value::Null) => return Err(missing("input")),
        Some(Value::String(s)) => vec![Item::user_text(s)],
        Some(Value::Array(items)) => {
            let mut input = Vec::with_capacity(items.len());
            for (i, v) in items.iter().enumerate() {
                let param = format!("input[{i}]");
                match item_reference(v, &param)? {
                    Some(id) => turn.references.push(ItemReference {
                        position: input.len(),
                        id,
                        param: format!("{param}.id"),
                    }),
                    None => input.push(parse_input_item(v, &param)?),
                }
            }
            input
        }
        Some(v) => return Err(PARAMS.invalid_type("input", "a string or an array", v)),
    };
    turn.model = PARAMS.opt_str(&obj, "model")?;
    turn.instructions = PARAMS.opt_str(&obj, "instructions")?;
    turn.stream = PARAMS.opt_bool(&obj, "stream")?.unwrap_or(false);
    turn.temperature = PARAMS.opt_number(&obj, "temperature", 2.0)?;
    turn.top_p = PARAMS.opt_number(&obj, "top_p", 1.0)?;
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
            _ => return Err(PARAMS.invalid_type("max_output_tokens", "an integer", v)),
        },
    };

    let mut extra = Map::new();
    if let Some(tools) = field(&obj, "tools") {
        let Value::Array(tools) = tools else {
            return Err(PARAMS.invalid_type("tools", "an array", tools));
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
                    turn.tool_choice = Some(PARAMS.req_str(choice, "name", "tool_choice")?)
                }
                Some(_) => {
                    extra.insert("tool_choice".into(), Value::Object(choice.clone()));
                }
                None => return Err(missing("tool_choice.type")),
            }
        }
        Some(v) => return Err(PARAMS.invalid_type("tool_choice", "a string or an object", v)),
    }
    for (k, v) in &obj {
        if !NOT_EXTRA.contains(&k.as_str()) {
            extra.insert(k.clone(), v.clone());
        }
    }
    turn.echo = ECHOED
        .iter()
        .filter_map(|k| Some(((*k).to_owned(), field(&obj, k)?.clone())))
        .collect();
    // Responses' own compaction request: Tether compacts, so the agent never sees it.
    turn.compact_threshold = context_management(&mut extra)?;
    turn.extra = extra;
    Ok(turn)
}

/// A function tool, or `None` for any other (hosted) tool type.
fn parse_tool(v: &Value, param: &str) -> Result<Option<Tool>, InputError> {
    let Value::Object(t) = v else {
        return Err(PARAMS.invalid_type(param, "an object", v));
    };
    let kind = PARAMS.req_str(t, "type", param)?;
    if kind != "function" {
        return Ok(None);
    }
    let parameters = PARAMS.opt_object_at(t, "parameters", param)?;
    let strict = PARAMS.opt_bool_at(t, "strict", param)?;
    Ok(Some(Tool {
        name: PARAMS.req_str(t, "name", param)?,
        description: PARAMS.opt_str_at(t, "description", param)?,
        parameters,
        strict,
    }))
}

/// The id of an `item_reference` input item (`type` may be left out, as OpenAI allows, when
/// the item is nothing but an `id`); `None` for any other item.
fn item_reference(v: &Value, param: &str) -> Result<Option<String>, InputError> {
    let Value::Object(o) = v else {
        return Ok(None);
    };
    let kind = o.get("type").and_then(Value::as_str);
    let bare = kind.is_none() && !o.contains_key("role") && o.contains_key("id");
    if kind != Some("item_reference") && !bare {
        return Ok(None);
    }
    let id = PARAMS.req_str(o, "id", param)?;
    if id.is_empty() {
        let p = format!("{param}.id");
        return Err(invalid_value(
            &p,
            format!("Invalid value for '{p}': an item id cannot be empty."),
        ));
    }
    Ok(Some(id))
}

/// One Responses input item (`param` names it in errors).
pub(crate) fn parse_input_item(v: &Value, param: &str) -> Result<Item, InputError> {
    let Value::Object(o) = v else {
        return Err(PARAMS.invalid_type(param, "an object", v));
    };
    let kind = PARAMS.opt_str_at(o, "type", param)?;
    match kind.as_deref() {
        None if o.contains_key("role") => parse_message(o, param),
        None => Err(missing(&format!("{param}.type"))),
        Some("message") => parse_message(o, param),
        Some("function_call") => Ok(Item::ToolCall {
            call_id: PARAMS.req_str(o, "call_id", param)?,
            name: PARAMS.req_str(o, "name", param)?,
            arguments: PARAMS.req_str(o, "arguments", param)?,
        }),
        Some("function_call_output") => {
            let call_id = PARAMS.req_str(o, "call_id", param)?;
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
                Some(v) => return Err(PARAMS.invalid_type(&p, "a string or an array", v)),
            };
            Ok(Item::ToolResult { call_id, output })
        }
        Some("reasoning") => Ok(Item::Reasoning {
            text: reasoning_text(v),
        }),
        Some("mcp_approval_request" | "mcp_approval_response") => Ok(Item::Approval(v.clone())),
        Some(other) => Err(invalid_value(
            &format!("{param}.type"),
            format!("Invalid value for '{param}.type': input items of type '{other}' are not supported (supported: message, function_call, function_call_output, reasoning, item_reference, mcp_approval_request, mcp_approval_response)."),
        )),
    }
}

fn parse_message(o: &Map<String, Value>, param: &str) -> Result<Item, InputError> {
    let role_param = format!("{param}.role");
    let role = PARAMS.req_str(o, "role", param)?;
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
        Some(v) => return Err(PARAMS.invalid_type(&p, "a string or an array", v)),
    };
    Ok(Item::Message { role, content })
}

fn parse_part(v: &Value, param: &str) -> Result<Block, InputError> {
    let Value::Object(o) = v else {
        return Err(PARAMS.invalid_type(param, "an object", v));
    };
    let kind = PARAMS.req_str(o, "type", param)?;
    let s = |k: &str| PARAMS.opt_str_at(o, k, param);
    match kind.as_str() {
        "input_text" | "output_text" | "text" => Ok(Block::Text(PARAMS.req_str(o, "text", param)?)),
        "refusal" => Ok(Block::Text(PARAMS.req_str(o, "refusal", param)?)),
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
