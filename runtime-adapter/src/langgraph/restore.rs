//! A thread the agent forgot (`langgraph dev` restarted: `404 Thread with ID … not found`),
//! put back with the API's own means: `POST /threads` under the same id (with its graph in
//! the metadata, which a state update needs), then `POST /threads/{id}/state` with the
//! earlier messages (as the graph's input when the turn answers an `interrupt()`); the
//! turn is then sent again.

use serde_json::{json, Value};

use super::request::LangGraphTurn;
use super::wire::{history_messages, thread_metadata};
use crate::upstream::{AgentRequest, Probe, Restore, TurnCall};

/// A thread with history is asked for before each turn: an agent that restarted has
/// forgotten it. (A run's own 404, `Thread or assistant not found.`, does not say which.)
pub(super) fn probe(call: &TurnCall) -> Probe {
    if call.history.is_empty() {
        return Probe::Skip;
    }
    let agent = LangGraphTurn::of(call).agent_thread;
    Probe::Ask(AgentRequest::get(format!("/threads/{agent}")))
}

/// The agent's 404 for a thread it does not have.
pub(super) fn forgot(status: u16, body: &[u8]) -> bool {
    status == 404
        && serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|v| v["detail"].as_str().map(str::to_owned))
            .is_some_and(|d| d.starts_with("Thread with ID") && d.ends_with("not found"))
}

/// Re-creates the thread (refused if it exists after all: its messages are never added
/// twice), puts the history back as its messages, then sends the turn.
pub(super) fn restore(call: &TurnCall) -> Option<Restore> {
    if call.history.is_empty() {
        return None;
    }
    let t = LangGraphTurn::of(call);
    let mut metadata = thread_metadata(call.account_id, call.session_id);
    metadata["graph_id"] = json!(graph_id(call, &t.assistant));
    let create = AgentRequest::post(
        "/threads",
        json!({ "thread_id": t.agent_thread, "metadata": metadata, "if_exists": "raise" }),
    );
    let mut update = json!({ "values": { "messages": history_messages(call.history) } });
    // A resume (the answer to an `interrupt()`) needs the graph stopped before the node
    // that asked: the messages are put back as the graph's input, so the graph runs from
    // its first node again, and the first `interrupt()` returns the answer (nodes before
    // the one that asked run again too).
    if t.resumes() {
        update["as_node"] = json!("__start__");
    }
    let state = AgentRequest::post(format!("/threads/{}/state", t.agent_thread), update);
    Some(Restore {
        before: vec![create, state],
        request: t.request(call),
        reask: None,
    })
}

/// The graph the thread ran: the assistant named in the run when it names a graph (not an
/// assistant's UUID), else the graph an earlier run's events showed.
fn graph_id(call: &TurnCall, assistant: &str) -> String {
    if uuid::Uuid::parse_str(assistant).is_err() {
        return assistant.to_owned();
    }
    call.events
        .iter()
        .rev()
        .find_map(|e| e.metadata["langgraph"]["graph_id"].as_str())
        .unwrap_or(assistant)
        .to_owned()
}
