//! The three spellings of A2A's objects on the wire, and frames converted between them
//! through v1.0's form (Tether's canonical one): what a frame is about, and whether it
//! ends the task's turn.

use serde_json::{json, Map, Value};

/// How tasks, messages and events are spelled on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Dialect {
    /// v0.3 JSON-RPC: objects tagged with `kind`, `role: "user"`, `state: "completed"`,
    /// parts `{"kind":"text","text":…}`, `final` on status updates.
    Kinded,
    /// v1.0 on both transports (protobuf JSON): results wrapped as `{"task": …}`,
    /// `{"statusUpdate": …}`…, `ROLE_USER`, `TASK_STATE_COMPLETED`, parts `{"text": …}`.
    /// Tether's canonical form.
    Proto,
    /// v0.3 HTTP+JSON (the v0.3 protobuf's JSON): like `Proto`, but message parts under
    /// `content`, `TASK_STATE_CANCELLED`, file parts nested, and `final` on status updates.
    Proto03,
}

/// Task states (short form) after which the agent waits for nothing more in this task:
/// the turn is over.
const TERMINAL_STATES: &[&str] = &[
    "completed",
    "failed",
    "canceled",
    "rejected",
    "input-required",
    "auth-required",
];

/// A file part's fields in v1.0 (flat in the part) and nested under `file` in v0.3
/// JSON-RPC and in v0.3 protobuf JSON.
const KINDED_FILE: [(&str, &str); 4] = [
    ("url", "uri"),
    ("raw", "bytes"),
    ("filename", "name"),
    ("mediaType", "mimeType"),
];
const PROTO03_FILE: [(&str, &str); 4] = [
    ("url", "fileWithUri"),
    ("raw", "fileWithBytes"),
    ("filename", "name"),
    ("mediaType", "mimeType"),
];

/// The task a frame is about.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct TaskIds {
    pub(super) id: String,
    /// Its `contextId` as the agent sent it (`null` when it sent none).
    pub(super) context: Value,
}

// ---------------------------------------------------------------------------------------
// States
// ---------------------------------------------------------------------------------------

/// A state in short form, whatever the spelling: `TASK_STATE_INPUT_REQUIRED` and
/// `input-required` are both `input-required`; v0.3 protobuf's `CANCELLED` is `canceled`.
pub(super) fn short_state(state: &str) -> String {
    let s = state
        .strip_prefix("TASK_STATE_")
        .unwrap_or(state)
        .to_ascii_lowercase()
        .replace('_', "-");
    match s.as_str() {
        "cancelled" => "canceled".into(),
        "unspecified" | "" => "unknown".into(),
        _ => s,
    }
}

pub(super) fn state_to_v10(state: &str) -> String {
    match short_state(state).as_str() {
        "unknown" => "TASK_STATE_UNSPECIFIED".into(),
        s => format!("TASK_STATE_{}", s.to_ascii_uppercase().replace('-', "_")),
    }
}

pub(super) fn state_from_v10(state: &str, dialect: Dialect) -> String {
    match dialect {
        Dialect::Proto => state.to_owned(),
        Dialect::Kinded => short_state(state),
        Dialect::Proto03 if short_state(state) == "canceled" => "TASK_STATE_CANCELLED".into(),
        Dialect::Proto03 => state.to_owned(),
    }
}

pub(super) fn is_terminal_state(state: &str) -> bool {
    TERMINAL_STATES.contains(&short_state(state).as_str())
}

/// The state of a task, or of a status update.
pub(super) fn state_of(task: &Value) -> &str {
    task["status"]["state"].as_str().unwrap_or("")
}

// ---------------------------------------------------------------------------------------
// Objects to and from v1.0's form
// ---------------------------------------------------------------------------------------

/// `value` with `f` applied to its fields; anything but an object stays as it is.
fn reshape(value: &Value, f: impl FnOnce(&mut Map<String, Value>)) -> Value {
    let Value::Object(obj) = value else {
        return value.clone();
    };
    let mut out = obj.clone();
    f(&mut out);
    Value::Object(out)
}

fn map_array(v: &mut Map<String, Value>, key: &str, f: impl Fn(&Value) -> Value) {
    if let Some(Value::Array(items)) = v.get_mut(key) {
        for item in items.iter_mut() {
            *item = f(item);
        }
    }
}

fn map_field(v: &mut Map<String, Value>, key: &str, f: impl Fn(&Value) -> Value) {
    if let Some(item) = v.get_mut(key) {
        *item = f(item);
    }
}

fn map_str(v: &mut Map<String, Value>, key: &str, f: impl Fn(&str) -> String) {
    if let Some(Value::String(s)) = v.get_mut(key) {
        *s = f(s);
    }
}

fn rename(v: &mut Map<String, Value>, from: &str, to: &str) {
    if let Some(x) = v.remove(from) {
        v.insert(to.to_owned(), x);
    }
}

/// Moves a v1.0 part's file fields under `file`, as `names` call them there.
fn nest_file(part: &mut Map<String, Value>, names: &[(&str, &str)]) {
    let file: Map<String, Value> = names
        .iter()
        .filter_map(|(flat, nested)| Some(((*nested).to_owned(), part.remove(*flat)?)))
        .collect();
    part.insert("file".into(), Value::Object(file));
}

fn is_file(part: &Map<String, Value>) -> bool {
    part.contains_key("url") || part.contains_key("raw")
}

pub(super) fn part_to_v10(part: &Value) -> Value {
    reshape(part, |out| {
        let kinded = out.remove("kind").is_some();
        if !kinded && !out.get("file").is_some_and(Value::is_object) {
            return;
        }
        if let Some(Value::Object(file)) = out.remove("file") {
            for (flat, nested) in KINDED_FILE.iter().chain(&PROTO03_FILE) {
                if let Some(v) = file.get(*nested) {
                    out.insert((*flat).to_owned(), v.clone());
                }
            }
        }
    })
}

pub(super) fn part_from_v10(part: &Value, dialect: Dialect) -> Value {
    match dialect {
        Dialect::Proto => part.clone(),
        Dialect::Kinded => reshape(part, |out| {
            let kind = if out.contains_key("text") {
                "text"
            } else if is_file(out) {
                nest_file(out, &KINDED_FILE);
                "file"
            } else {
                "data"
            };
            out.insert("kind".into(), json!(kind));
        }),
        Dialect::Proto03 => reshape(part, |out| {
            if is_file(out) {
                nest_file(out, &PROTO03_FILE);
            }
        }),
    }
}

pub(super) fn message_to_v10(message: &Value) -> Value {
    reshape(message, |out| {
        out.remove("kind");
        map_str(out, "role", |role| match role {
            "user" => "ROLE_USER".into(),
            "agent" => "ROLE_AGENT".into(),
            other => other.into(),
        });
        if !out.contains_key("parts") {
            rename(out, "content", "parts");
        }
        map_array(out, "parts", part_to_v10);
    })
}

pub(super) fn message_from_v10(message: &Value, dialect: Dialect) -> Value {
    if dialect == Dialect::Proto {
        return message.clone();
    }
    reshape(message, |out| {
        map_array(out, "parts", |p| part_from_v10(p, dialect));
        if dialect == Dialect::Kinded {
            map_str(out, "role", |role| match role {
                "ROLE_USER" => "user".into(),
                "ROLE_AGENT" => "agent".into(),
                other => other.into(),
            });
            out.insert("kind".into(), json!("message"));
        } else {
            rename(out, "parts", "content");
        }
    })
}

/// A send's params in v1.0's form (a `SendMessageRequest`): v0.3's message converted, and
/// of its configuration what v1.0 has the same way (output modes, history length).
pub(super) fn send_params_to_v10(params: &Value, dialect: Dialect) -> Value {
    if dialect == Dialect::Proto {
        return params.clone();
    }
    let message = params
        .get("message")
        .or_else(|| params.get("request"))
        .map(message_to_v10)
        .unwrap_or(Value::Null);
    let mut out = json!({ "message": message });
    let config = &params["configuration"];
    for key in ["acceptedOutputModes", "historyLength"] {
        if let Some(v) = config.get(key) {
            out["configuration"][key] = v.clone();
        }
    }
    if let Some(metadata) = params.get("metadata").filter(|m| m.is_object()) {
        out["metadata"] = metadata.clone();
    }
    out
}

fn status_to_v10(status: &Value) -> Value {
    reshape(status, |out| {
        map_str(out, "state", state_to_v10);
        map_field(out, "message", message_to_v10);
    })
}

fn status_from_v10(status: &Value, dialect: Dialect) -> Value {
    reshape(status, |out| {
        map_str(out, "state", |s| state_from_v10(s, dialect));
        map_field(out, "message", |m| message_from_v10(m, dialect));
    })
}

fn artifact_to_v10(artifact: &Value) -> Value {
    reshape(artifact, |out| map_array(out, "parts", part_to_v10))
}

fn artifact_from_v10(artifact: &Value, dialect: Dialect) -> Value {
    reshape(artifact, |out| {
        map_array(out, "parts", |p| part_from_v10(p, dialect));
    })
}

fn task_to_v10(task: &Value) -> Value {
    reshape(task, |out| {
        out.remove("kind");
        map_field(out, "status", status_to_v10);
        map_array(out, "artifacts", artifact_to_v10);
        map_array(out, "history", message_to_v10);
    })
}

/// A task as a get returns it in `dialect` (bare, not wrapped).
pub(super) fn task_from_v10(task: &Value, dialect: Dialect) -> Value {
    if dialect == Dialect::Proto {
        return task.clone();
    }
    reshape(task, |out| {
        map_field(out, "status", |s| status_from_v10(s, dialect));
        map_array(out, "artifacts", |a| artifact_from_v10(a, dialect));
        map_array(out, "history", |m| message_from_v10(m, dialect));
        if dialect == Dialect::Kinded {
            out.insert("kind".into(), json!("task"));
        }
    })
}

// ---------------------------------------------------------------------------------------
// Frames
// ---------------------------------------------------------------------------------------

/// A frame (a JSON-RPC result, or an HTTP+JSON body or stream event) in v1.0's form:
/// exactly one of `{"task"}`, `{"statusUpdate"}`, `{"artifactUpdate"}`, `{"message"}`.
/// `None` for anything else.
pub(super) fn canonical(frame: &Value) -> Option<Value> {
    let obj = frame.as_object()?;
    // v0.3 JSON-RPC tags the object itself.
    if let Some(kind) = obj.get("kind").and_then(Value::as_str) {
        let key = match kind {
            "task" => "task",
            "message" => "message",
            "status-update" => "statusUpdate",
            "artifact-update" => "artifactUpdate",
            _ => return None,
        };
        let mut untagged = obj.clone();
        untagged.remove("kind");
        return Some(wrapped_to_v10(key, &Value::Object(untagged)));
    }
    // Protobuf JSON wraps it (v0.3's calls a message `msg` in stream responses).
    for key in ["task", "message", "msg", "statusUpdate", "artifactUpdate"] {
        if let Some(inner) = obj.get(key).filter(|v| v.is_object()) {
            return Some(wrapped_to_v10(key, inner));
        }
    }
    // A bare task: what a get returns.
    (obj.contains_key("id") && obj.contains_key("status")).then(|| wrapped_to_v10("task", frame))
}

/// The object a frame wraps under `key`, in v1.0's form and wrapping.
fn wrapped_to_v10(key: &str, inner: &Value) -> Value {
    match key {
        "task" => json!({ "task": task_to_v10(inner) }),
        "message" | "msg" => json!({ "message": message_to_v10(inner) }),
        "statusUpdate" => json!({ "statusUpdate": reshape(inner, |o| {
            o.remove("final");
            map_field(o, "status", status_to_v10);
        })}),
        _ => json!({ "artifactUpdate": reshape(inner, |o| {
            map_field(o, "artifact", artifact_to_v10);
        })}),
    }
}

/// A canonical frame as a stream event in `dialect`.
pub(super) fn from_canonical(canon: &Value, dialect: Dialect) -> Value {
    if dialect == Dialect::Proto {
        return canon.clone();
    }
    // v0.3 JSON-RPC tags the object instead of wrapping it.
    let wrap = |key: &str, v: Value| match dialect {
        Dialect::Kinded => v,
        _ => json!({ key: v }),
    };
    if let Some(task) = canon.get("task") {
        return wrap("task", task_from_v10(task, dialect));
    }
    if let Some(message) = canon.get("message") {
        return wrap("message", message_from_v10(message, dialect));
    }
    if let Some(update @ Value::Object(_)) = canon.get("statusUpdate") {
        let terminal = is_terminal_state(state_of(update));
        let update = reshape(update, |o| {
            map_field(o, "status", |s| status_from_v10(s, dialect));
            // Protobuf JSON leaves out a false `final`; v0.3 JSON-RPC always states it.
            if dialect == Dialect::Kinded {
                o.insert("kind".into(), json!("status-update"));
                o.insert("final".into(), json!(terminal));
            } else if terminal {
                o.insert("final".into(), json!(true));
            }
        });
        return wrap("statusUpdate", update);
    }
    if let Some(update @ Value::Object(_)) = canon.get("artifactUpdate") {
        let update = reshape(update, |o| {
            map_field(o, "artifact", |a| artifact_from_v10(a, dialect));
            if dialect == Dialect::Kinded {
                o.insert("kind".into(), json!("artifact-update"));
            }
        });
        return wrap("artifactUpdate", update);
    }
    canon.clone()
}

/// The dialect a recorded frame is spelled in, so a client that speaks it gets it
/// byte for byte.
pub(super) fn dialect_of(frame: &Value) -> Dialect {
    if frame.get("kind").is_some() {
        return Dialect::Kinded;
    }
    let inner = ["task", "statusUpdate", "artifactUpdate", "message", "msg"]
        .iter()
        .find_map(|k| frame.get(*k))
        .unwrap_or(frame);
    let uses_content = |m: &Value| m.get("content").is_some() && m.get("parts").is_none();
    let status = inner.get("status");
    let proto03 = frame.get("msg").is_some()
        || inner.get("final").is_some()
        || status.is_some_and(|s| s["state"] == "TASK_STATE_CANCELLED")
        || status
            .and_then(|s| s.get("message"))
            .is_some_and(uses_content)
        || (frame.get("message").is_some() && uses_content(inner))
        || inner["history"]
            .as_array()
            .is_some_and(|h| h.iter().any(uses_content));
    if proto03 {
        Dialect::Proto03
    } else {
        Dialect::Proto
    }
}

/// The task a canonical frame is about.
pub(super) fn frame_ids(canon: &Value) -> Option<TaskIds> {
    let (about, id_key) = match canon.get("task") {
        Some(task) => (task, "id"),
        None => (
            canon
                .get("statusUpdate")
                .or_else(|| canon.get("artifactUpdate"))?,
            "taskId",
        ),
    };
    Some(TaskIds {
        id: about.get(id_key)?.as_str()?.to_owned(),
        context: about.get("contextId").cloned().unwrap_or(Value::Null),
    })
}

/// Whether a frame ends the task's turn: a terminal (or interrupted) state, or v0.3's
/// `final: true`.
pub(super) fn ends_turn(frame: &Value, canon: &Value) -> bool {
    let explicit_final = frame.get("final").and_then(Value::as_bool) == Some(true)
        || frame["statusUpdate"]["final"].as_bool() == Some(true);
    if explicit_final {
        return true;
    }
    let state = if let Some(task) = canon.get("task") {
        state_of(task)
    } else if let Some(update) = canon.get("statusUpdate") {
        state_of(update)
    } else {
        return false;
    };
    is_terminal_state(state)
}
