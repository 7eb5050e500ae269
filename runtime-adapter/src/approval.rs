//! Approvals across protocols: recognising, in an agent's answer, that it ends waiting for
//! a person (an approval request, a question), and writing that person's answer as a
//! request in the agent's own protocol.
//!
//! What is waited for is an *action*, the JSON a `requires_action` run status carries:
//! `{"kind": "approval"|"input"|"auth", "request_id": <the agent's id for the request>,
//! "tool": <name>|null, "arguments": <json>|null, "protocol": <the agent's protocol>,
//! "question": <text>|null, ...}` plus what answering needs (an A2A task id, a LangGraph
//! interrupt id, an ADK function call id).

use serde_json::{json, Value};

use crate::item::Item;
use crate::protocol::Protocol;
use crate::upstream::Output;

/// What one output of the agent says about waiting.
#[derive(Clone, Debug, PartialEq)]
pub enum Waiting {
    /// The answer asks this of a person (the action), unless a later output takes it back.
    Asks(Value),
    /// The agent went on working: what it asked before is settled.
    Goes,
}

/// Whether `output`, from an agent speaking `protocol`, asks a person for something.
pub fn waiting(protocol: Protocol, output: &Output) -> Option<Waiting> {
    match (protocol, output) {
        (Protocol::OpenAiResponses, Output::Item(Item::Approval(v))) => {
            responses_request(v).map(Waiting::Asks)
        }
        (Protocol::A2a, Output::Frame(frame)) => a2a_wait(frame),
        (Protocol::LangGraph, Output::Frame(frame)) => langgraph_interrupt(frame),
        (Protocol::Adk, Output::Frame(event)) => adk_confirmation(event),
        _ => None,
    }
}

/// What an answer ends waiting on after `output`: `waiting` is what it waited on before.
pub fn track(protocol: Protocol, waiting: &mut Option<Value>, output: &Output) {
    match self::waiting(protocol, output) {
        Some(Waiting::Asks(action)) => *waiting = Some(action),
        Some(Waiting::Goes) => *waiting = None,
        None => {}
    }
}

/// Whether `asked` (what an agent asked again) is the request `pending` was: the same
/// kind of request, about the same tool with the same arguments.
pub fn same_request(pending: &Value, asked: &Value) -> bool {
    ["kind", "tool", "arguments"]
        .iter()
        .all(|k| pending.get(*k).unwrap_or(&Value::Null) == asked.get(*k).unwrap_or(&Value::Null))
}

/// The action `{kind, request_id, tool, arguments, protocol, question}` with `extra`'s
/// fields added.
pub fn action(
    kind: &str,
    request_id: &str,
    tool: Option<&str>,
    arguments: Option<Value>,
    protocol: Protocol,
    question: Option<String>,
    extra: Value,
) -> Value {
    let mut action = json!({
        "kind": kind,
        "request_id": request_id,
        "tool": tool,
        "arguments": arguments,
        "protocol": protocol.as_str(),
        "question": question,
    });
    if let (Some(a), Value::Object(extra)) = (action.as_object_mut(), extra) {
        a.extend(extra);
    }
    action
}

/// Tool arguments as JSON: a JSON text is parsed (the OpenAI APIs send text); anything
/// else stays as it is.
fn arguments_json(v: &Value) -> Value {
    match v {
        Value::String(s) => serde_json::from_str(s).unwrap_or_else(|_| v.clone()),
        other => other.clone(),
    }
}

/// A Responses `mcp_approval_request` output item.
fn responses_request(item: &Value) -> Option<Value> {
    if item.get("type").and_then(Value::as_str) != Some("mcp_approval_request") {
        return None;
    }
    let id = item.get("id").and_then(Value::as_str)?;
    Some(action(
        "approval",
        id,
        item.get("name").and_then(Value::as_str),
        item.get("arguments").map(arguments_json),
        Protocol::OpenAiResponses,
        None,
        json!({ "server_label": item.get("server_label") }),
    ))
}

/// An A2A frame that leaves its task waiting for the user, or working again.
fn a2a_wait(frame: &Value) -> Option<Waiting> {
    let wait = crate::a2a::task_wait(frame)?;
    let kind = wait["kind"].as_str()?;
    if kind == "working" {
        return Some(Waiting::Goes);
    }
    Some(Waiting::Asks(action(
        kind,
        wait["request_id"].as_str()?,
        wait["tool"].as_str(),
        Some(wait["arguments"].clone()).filter(|a| !a.is_null()),
        Protocol::A2a,
        wait["question"].as_str().map(str::to_owned),
        json!({ "task_id": wait["task_id"], "context_id": wait["context_id"] }),
    )))
}

/// A LangGraph `updates` or `values` event that holds `__interrupt__` (the graph stopped
/// at `interrupt()`): its first interrupt, whose `value` is what the graph asks.
fn langgraph_interrupt(frame: &Value) -> Option<Waiting> {
    let interrupts = frame["data"].get("__interrupt__")?.as_array()?;
    let first = interrupts.first()?;
    let value = &first["value"];
    let id = first
        .get("id")
        .or_else(|| first.get("interrupt_id"))
        .and_then(Value::as_str)
        .unwrap_or("interrupt");
    let tool = value
        .get("tool")
        .or_else(|| value.get("name"))
        .and_then(Value::as_str);
    let arguments = value
        .get("arguments")
        .or_else(|| value.get("args"))
        .map(arguments_json);
    let question = value
        .get("question")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| value.as_str().map(str::to_owned));
    let kind = if tool.is_some() { "approval" } else { "input" };
    Some(Waiting::Asks(action(
        kind,
        id,
        tool,
        arguments,
        Protocol::LangGraph,
        question,
        json!({ "interrupt": value }),
    )))
}

/// An ADK event calling `adk_request_confirmation` (a tool that needs confirmation):
/// the original call's name and arguments, and the confirmation call's id, which the
/// answer's function response names.
fn adk_confirmation(event: &Value) -> Option<Waiting> {
    let parts = event["content"]["parts"].as_array()?;
    let call = parts.iter().find_map(|p| {
        p.get("functionCall")
            .or_else(|| p.get("function_call"))
            .filter(|c| c["name"] == crate::waited::ADK_CONFIRMATION)
    })?;
    let id = call["id"].as_str()?;
    let args = &call["args"];
    let original = args
        .get("originalFunctionCall")
        .or_else(|| args.get("original_function_call"))
        .unwrap_or(&Value::Null);
    let confirmation = args
        .get("toolConfirmation")
        .or_else(|| args.get("tool_confirmation"))
        .unwrap_or(&Value::Null);
    Some(Waiting::Asks(action(
        "approval",
        id,
        original["name"].as_str(),
        original.get("args").cloned(),
        Protocol::Adk,
        confirmation["hint"].as_str().map(str::to_owned),
        json!({ "author": event.get("author") }),
    )))
}

/// What answering an action of this turn's run needs besides the action itself, from
/// the turn, for an agent speaking `protocol`: a LangGraph graph (the run's `model` is
/// its `assistant_id`), an ADK app and user (as the client named them).
pub fn context(protocol: Protocol, turn: &crate::turn::TurnRequest, model: &str) -> Value {
    match protocol {
        Protocol::LangGraph => return json!({ "graph_id": model }),
        Protocol::Adk => {}
        _ => return json!({}),
    }
    let adk = turn.extra.get("adk").and_then(|a| a.get("body"));
    let field = |snake: &str, camel: &str| {
        adk.and_then(|b| b.get(snake).or_else(|| b.get(camel)))
            .cloned()
            .unwrap_or(Value::Null)
    };
    let mut app = field("app_name", "appName");
    if app.is_null() {
        app = json!(model);
    }
    let mut user = field("user_id", "userId");
    if user.is_null() {
        user = json!(crate::adk::DEFAULT_USER);
    }
    json!({ "app_name": app, "user_id": user })
}

/// A person's answer to an action, as a client of the agent's protocol would send it:
/// the request Tether routes through that protocol's surface to start the answer's run.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    pub method: &'static str,
    pub path: String,
    pub body: Value,
    /// `x-session-id` for the surfaces that read the session from it.
    pub session_header: Option<String>,
}

/// What the person decided.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolution<'a> {
    pub approve: bool,
    /// Edited tool arguments, when the person changed them.
    pub arguments: Option<&'a Value>,
    pub comment: Option<&'a str>,
}

/// The answer to `action` (of a run in `session_id`) in the agent's protocol; `Err` says
/// why this protocol cannot carry it (edited arguments the protocol has no field for).
pub fn answer(session_id: &str, action: &Value, r: &Resolution) -> Result<Answer, String> {
    let request_id = action["request_id"].as_str().unwrap_or_default();
    let decision = if r.approve { "approve" } else { "reject" };
    // The structured answer the stateful protocols carry as data.
    let mut data = json!({ "decision": decision, "approved": r.approve });
    if let Some(a) = r.arguments {
        data["arguments"] = a.clone();
    }
    if let Some(c) = r.comment {
        data["comment"] = json!(c);
    }
    match Protocol::parse(action["protocol"].as_str().unwrap_or_default()) {
        Some(Protocol::OpenAiResponses) => {
            if r.arguments.is_some() {
                return Err("the agent's protocol (a Responses mcp_approval_response) cannot carry edited arguments".into());
            }
            let mut item = json!({
                "type": "mcp_approval_response",
                "approval_request_id": request_id,
                "approve": r.approve,
            });
            if let Some(c) = r.comment {
                item["reason"] = json!(c);
            }
            Ok(Answer {
                method: "POST",
                path: "/v1/responses".into(),
                body: json!({ "input": [item], "stream": true }),
                session_header: Some(session_id.to_owned()),
            })
        }
        Some(Protocol::A2a) => {
            let text = r.comment.map_or_else(|| decision.to_owned(), str::to_owned);
            // kagent's runtimes read a tool decision from `decision_type`.
            data["decision_type"] = json!(decision);
            let message = json!({
                "kind": "message",
                "role": "user",
                "messageId": format!("tether-approval-{}", uuid::Uuid::new_v4().simple()),
                "contextId": session_id,
                "taskId": action["task_id"].as_str().unwrap_or(request_id),
                "parts": [
                    {"kind": "text", "text": text},
                    {"kind": "data", "data": data},
                ],
            });
            Ok(Answer {
                method: "POST",
                path: "/".into(),
                body: json!({
                    "jsonrpc": "2.0",
                    "id": format!("tether-approval-{request_id}"),
                    "method": "message/stream",
                    "params": { "message": message },
                }),
                session_header: None,
            })
        }
        Some(Protocol::LangGraph) => {
            let graph = action["graph_id"].as_str().unwrap_or("agent");
            Ok(Answer {
                method: "POST",
                path: format!("/threads/{session_id}/runs/stream"),
                body: json!({
                    "assistant_id": graph,
                    "command": { "resume": data },
                    "stream_mode": ["values"],
                }),
                session_header: None,
            })
        }
        Some(Protocol::Adk) => {
            let mut response = json!({ "confirmed": r.approve });
            if let Some(a) = r.arguments {
                response["payload"] = json!({ "arguments": a });
            }
            Ok(Answer {
                method: "POST",
                path: "/run_sse".into(),
                body: json!({
                    "app_name": action["app_name"],
                    "user_id": action["user_id"],
                    "session_id": session_id,
                    "new_message": {
                        "role": "user",
                        "parts": [{"function_response": {
                            "id": request_id,
                            "name": "adk_request_confirmation",
                            "response": response,
                        }}],
                    },
                }),
                session_header: None,
            })
        }
        _ => Err(format!(
            "no answer is known for a request of protocol {:?}",
            action["protocol"]
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_responses_approval_request_is_an_action_and_its_answer_a_response_item() {
        let item = json!({"type": "mcp_approval_request", "id": "mcpr_1", "name": "deploy",
            "server_label": "ops", "arguments": "{\"env\": \"prod\"}"});
        let out = Output::Item(Item::Approval(item));
        let Some(Waiting::Asks(action)) = waiting(Protocol::OpenAiResponses, &out) else {
            panic!("not recognised");
        };
        assert_eq!(action["kind"], "approval");
        assert_eq!(action["request_id"], "mcpr_1");
        assert_eq!(action["tool"], "deploy");
        assert_eq!(action["arguments"], json!({"env": "prod"}));
        // An approval response (client input) asks nothing.
        let response = Output::Item(Item::Approval(
            json!({"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": true}),
        ));
        assert_eq!(waiting(Protocol::OpenAiResponses, &response), None);
        let r = Resolution {
            approve: false,
            arguments: None,
            comment: Some("not today"),
        };
        let a = answer("s1", &action, &r).unwrap();
        assert_eq!(a.session_header.as_deref(), Some("s1"));
        assert_eq!(
            a.body["input"][0],
            json!({"type": "mcp_approval_response", "approval_request_id": "mcpr_1",
                "approve": false, "reason": "not today"})
        );
        let edited = json!({"env": "dev"});
        let r = Resolution {
            approve: true,
            arguments: Some(&edited),
            comment: None,
        };
        assert!(answer("s1", &action, &r).is_err());
    }

    #[test]
    fn langgraph_interrupts_and_adk_confirmations_are_actions() {
        let frame = json!({"event": "updates", "data": {"__interrupt__": [
            {"value": {"tool": "deploy", "arguments": {"env": "prod"}}, "id": "int-1"}]}});
        let Some(Waiting::Asks(a)) = waiting(Protocol::LangGraph, &Output::Frame(frame)) else {
            panic!("not recognised");
        };
        assert_eq!(
            (
                a["kind"].as_str(),
                a["request_id"].as_str(),
                a["tool"].as_str()
            ),
            (Some("approval"), Some("int-1"), Some("deploy"))
        );
        let event = json!({"author": "a", "content": {"parts": [{"functionCall": {
            "id": "adk-1", "name": "adk_request_confirmation",
            "args": {"originalFunctionCall": {"name": "deploy", "args": {"env": "prod"}},
                     "toolConfirmation": {"hint": "ok?"}}}}]}});
        let Some(Waiting::Asks(a)) = waiting(Protocol::Adk, &Output::Frame(event)) else {
            panic!("not recognised");
        };
        assert_eq!(a["request_id"], "adk-1");
        assert_eq!(a["arguments"], json!({"env": "prod"}));
        assert_eq!(a["question"], "ok?");
    }
}
