//! A send's turn: the client's message read into the turn Tether runs, refusing what the
//! SDK would refuse, the way the SDK reports it.

use serde_json::{json, Value};

use crate::item::{Block, Item};
use crate::protocol::Protocol;
use crate::surface::Route;
use crate::turn::{SessionRef, TurnRequest};

use super::client::{
    error_info, Client, Transport, Version, INVALID_PARAMS, INVALID_REQUEST, TASK_NOT_FOUND,
};
use super::wire::{part_to_v10, Dialect};

/// A message the client got wrong, reported the way the SDK reports it.
#[derive(Debug)]
pub(super) struct ParamError {
    field: String,
    description: String,
}

impl ParamError {
    pub(super) fn new(field: &str, description: impl Into<String>) -> Self {
        ParamError {
            field: field.to_owned(),
            description: description.into(),
        }
    }

    /// v0.3 JSON-RPC validates with pydantic (`-32600 Invalid Request`, the reason in
    /// `data`); v1.0 and HTTP+JSON with protobuf (`-32602 Validation failed`, field
    /// violations in the details).
    pub(super) fn reply(&self, client: &Client) -> Route {
        let (status, body) = match (client.transport, client.version) {
            (Transport::JsonRpc, Version::V03) => {
                let reason = format!("{}: {}", self.field, self.description);
                client.error(INVALID_REQUEST, "Invalid Request", Some(json!(reason)))
            }
            _ => client.error(INVALID_PARAMS, "Validation failed", Some(self.details())),
        };
        Route::Reply { status, body }
    }

    fn details(&self) -> Value {
        let errors = json!({ "errors": [{ "field": self.field, "message": self.description }] });
        json!([
            error_info("INVALID_PARAMS", errors),
            {
                "@type": "type.googleapis.com/google.rpc.BadRequest",
                "fieldViolations": [{ "field": self.field, "description": self.description }],
            },
        ])
    }
}

/// A send's route: its turn run in the session its `contextId` names, or, for a message
/// that continues a task by its `taskId` alone, in the session of that task (which the
/// gateway finds in the log, inside the caller's account; an unknown task is not found,
/// as the agent says it).
pub(super) fn send_route(
    client: &Client,
    path: &str,
    headers: &[(String, String)],
    params: &Value,
    stream: bool,
) -> Route {
    let turn = match run_turn(client, path, headers, params, stream) {
        Ok(turn) => turn,
        Err(e) => return e.reply(client),
    };
    let task = params
        .get(message_key(params))
        .and_then(|m| optional_id(m, "taskId").ok().flatten());
    match (&turn.session, task) {
        (SessionRef::New, Some(agent_ref)) => Route::RunInTask {
            agent_ref,
            turn,
            not_found: task_not_found(client),
        },
        _ => Route::Run(turn),
    }
}

/// The surface's own "task not found", in the client's transport and version.
pub(super) fn task_not_found(client: &Client) -> (u16, Value) {
    let data =
        (client.version == Version::V10).then(|| json!([error_info("TASK_NOT_FOUND", json!({}))]));
    client.error(TASK_NOT_FOUND, "Task not found", data)
}

/// A send's turn: the user's message as the input, the session from its `contextId`,
/// and in `extra` what the upstream needs to send the client's own request on.
fn run_turn(
    client: &Client,
    path: &str,
    headers: &[(String, String)],
    params: &Value,
    stream: bool,
) -> Result<TurnRequest, ParamError> {
    let Some(message) = params.get(message_key(params)).filter(|m| m.is_object()) else {
        return Err(ParamError::new("message", "Field is required."));
    };
    let blocks = message_blocks(message, client.dialect())?;
    let context = optional_id(message, "contextId")?;
    optional_id(message, "taskId")?;
    for field in ["configuration", "metadata"] {
        if params
            .get(field)
            .is_some_and(|v| !v.is_object() && !v.is_null())
        {
            return Err(ParamError::new(field, "Expected an object."));
        }
    }

    let mut turn = TurnRequest::new(Protocol::A2a);
    turn.stream = stream;
    turn.session = match context {
        Some(c) => SessionRef::Named(c),
        None => SessionRef::New,
    };
    turn.input = vec![Item::Message {
        role: "user".into(),
        content: blocks,
    }];
    turn.extra.insert("client".into(), client.to_value());
    turn.extra.insert(
        "a2a".into(),
        json!({
            "path": path,
            "params": params,
            "headers": headers.iter().map(|(n, v)| json!([n, v])).collect::<Vec<_>>(),
        }),
    );
    Ok(turn)
}

/// Where a send's params hold the message: v0.3's HTTP+JSON body calls it `request`
/// (its protobuf field name).
pub(super) fn message_key(params: &Value) -> &'static str {
    if params.get("message").is_none() && params.get("request").is_some() {
        "request"
    } else {
        "message"
    }
}

fn optional_id(message: &Value, field: &str) -> Result<Option<String>, ParamError> {
    match message.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
        Some(Value::String(_)) => Ok(None),
        Some(_) => Err(ParamError::new(
            &format!("message.{field}"),
            "Expected a string.",
        )),
    }
}

/// The user's message as content blocks, checking what the SDK would refuse.
fn message_blocks(message: &Value, dialect: Dialect) -> Result<Vec<Block>, ParamError> {
    if message
        .get("messageId")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return Err(ParamError::new("message.messageId", "Field is required."));
    }
    let role = message.get("role");
    let role_ok = match dialect {
        Dialect::Kinded => matches!(role.and_then(Value::as_str), Some("user" | "agent")),
        Dialect::Proto | Dialect::Proto03 => {
            matches!(
                role.and_then(Value::as_str),
                Some("ROLE_USER" | "ROLE_AGENT")
            ) || matches!(role.and_then(Value::as_i64), Some(1 | 2))
        }
    };
    if !role_ok {
        let expected = match dialect {
            Dialect::Kinded => "Input should be 'agent' or 'user'.",
            _ => "Field is required.",
        };
        return Err(ParamError::new("message.role", expected));
    }
    let parts_key = if dialect == Dialect::Proto03 && message.get("parts").is_none() {
        "content"
    } else {
        "parts"
    };
    let field = format!("message.{parts_key}");
    let parts = match message.get(parts_key) {
        Some(Value::Array(parts)) if !parts.is_empty() => parts,
        Some(Value::Array(_)) | None => {
            return Err(ParamError::new(
                &field,
                "Field must contain at least one element.",
            ))
        }
        Some(_) => return Err(ParamError::new(&field, "Expected a list.")),
    };
    parts
        .iter()
        .enumerate()
        .map(|(i, part)| {
            part_block(part, dialect)
                .ok_or_else(|| ParamError::new(&format!("{field}[{i}]"), "Not a valid part."))
        })
        .collect()
}

/// One part as a content block: text as text, files by URL or inline data, structured
/// data as its JSON text (so the log holds everything the user sent).
fn part_block(part: &Value, dialect: Dialect) -> Option<Block> {
    if dialect == Dialect::Kinded {
        let ok = match part.get("kind").and_then(Value::as_str)? {
            "text" => part.get("text").is_some_and(Value::is_string),
            "file" => part
                .get("file")
                .is_some_and(|f| f.get("uri").is_some() || f.get("bytes").is_some()),
            "data" => part.get("data").is_some(),
            _ => false,
        };
        if !ok {
            return None;
        }
    }
    let part = part_to_v10(part);
    let s = |k: &str| part.get(k).and_then(Value::as_str).map(str::to_owned);
    if let Some(text) = s("text") {
        return Some(Block::Text(text));
    }
    if let Some(url) = s("url") {
        return Some(Block::File {
            filename: s("filename"),
            data: None,
            url: Some(url),
        });
    }
    if let Some(raw) = s("raw") {
        let media = s("mediaType").filter(|m| !m.is_empty());
        let media = media.as_deref().unwrap_or("application/octet-stream");
        return Some(Block::File {
            filename: s("filename"),
            data: Some(format!("data:{media};base64,{raw}")),
            url: None,
        });
    }
    part.get("data").map(|d| Block::Text(d.to_string()))
}
