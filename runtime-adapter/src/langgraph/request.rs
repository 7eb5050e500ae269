//! What one run asks of the agent: a LangGraph client's own body, or a turn from another
//! surface put into one, always sent to `/runs/stream` so that every event is recorded
//! (a `wait` or background run is answered by Tether from those events).

use serde_json::{json, Map, Value};

use super::routes::Mode;
use super::wire::{agent_thread_id, stream_modes};
use crate::item::Item;
use crate::upstream::{AgentRequest, TurnCall};

/// Tether's stream modes for a turn from another surface: the state (its transcript) and
/// the model's tokens (its text deltas).
const OWN_MODES: [&str; 2] = ["values", "messages-tuple"];

pub(super) struct LangGraphTurn {
    pub agent_thread: String,
    pub assistant: String,
    /// The body to send, without `stream_mode` (see `modes`).
    body: Map<String, Value>,
    /// The stream modes sent: the client's, plus `values` (the transcript is read from it).
    pub modes: Vec<String>,
    /// The modes in `modes` the client did not ask for.
    pub added: Vec<String>,
}

impl LangGraphTurn {
    pub fn of(call: &TurnCall) -> LangGraphTurn {
        let turn = call.turn;
        let agent_thread = agent_thread_id(call.account_id, call.session_id);
        let client_body = turn
            .extra
            .get("langgraph")
            .and_then(|l| l["body"].as_object());
        let Some(client_body) = client_body else {
            // Another surface's turn, in a thread Tether names.
            let assistant = turn
                .model
                .clone()
                .unwrap_or_else(|| call.default_model.to_owned());
            let messages: Vec<Value> = turn.input.iter().map(input_message).collect();
            let mut body = Map::new();
            body.insert("assistant_id".into(), assistant.clone().into());
            body.insert("input".into(), json!({ "messages": messages }));
            body.insert("if_not_exists".into(), "create".into());
            return LangGraphTurn {
                agent_thread,
                assistant,
                body,
                modes: OWN_MODES.map(str::to_owned).to_vec(),
                added: Vec::new(),
            };
        };
        let client = turn.extra.get("client").cloned().unwrap_or(Value::Null);
        let asked = match Mode::of(&client) {
            // A `wait` answers with the final values only.
            Some(Mode::Wait) => vec!["values".to_owned()],
            _ => stream_modes(client_body),
        };
        let mut modes = asked.clone();
        if !modes.iter().any(|m| m == "values") {
            modes.push("values".into());
        }
        let added = modes
            .iter()
            .filter(|m| !asked.contains(m))
            .cloned()
            .collect();
        let mut body = client_body.clone();
        body.remove("stream_mode");
        LangGraphTurn {
            agent_thread,
            assistant: body["assistant_id"].as_str().unwrap_or_default().to_owned(),
            body,
            modes,
            added,
        }
    }

    /// Whether the run resumes the thread from an `interrupt()` (`command.resume`).
    pub fn resumes(&self) -> bool {
        self.body
            .get("command")
            .is_some_and(|c| c.get("resume").is_some())
    }

    /// The run at the agent's `/runs/stream`. A thread with history must exist: it is not
    /// created empty (`if_not_exists`) but restored when the agent lost it.
    pub fn request(&self, call: &TurnCall) -> AgentRequest {
        let mut body = self.body.clone();
        body.insert("stream_mode".into(), json!(self.modes));
        if !call.history.is_empty() {
            body.remove("if_not_exists");
        }
        AgentRequest::post(
            format!("/threads/{}/runs/stream", self.agent_thread),
            Value::Object(body),
        )
    }
}

/// A user's input item as a LangGraph message.
fn input_message(item: &Item) -> Value {
    match item {
        Item::Message { role, .. } => json!({ "role": role, "content": item.text() }),
        Item::ToolResult { call_id, output } => {
            json!({ "role": "tool", "tool_call_id": call_id, "content": output })
        }
        other => json!({ "role": "user", "content": other.text() }),
    }
}
