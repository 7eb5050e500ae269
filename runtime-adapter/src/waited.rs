//! The session's last run when it ended waiting on a person (`requires_action`), as a
//! restore that must ask the agent again sees it: what it waited on, the history before
//! it, and the message it began with (see `Restore::reask`).

use serde_json::Value;
use session_log::{EventType, RunStatus};

use crate::item::Item;
use crate::upstream::TurnCall;

/// The function call an agent built on ADK asks a tool confirmation with.
pub const ADK_CONFIRMATION: &str = "adk_request_confirmation";

/// Function calls agents built on ADK make themselves for human-in-the-loop flows.
pub const ADK_RESERVED_FUNCTIONS: &[&str] = &[
    "adk_request_credential",
    ADK_CONFIRMATION,
    "adk_request_input",
];

/// The session's last run, which ended waiting on a request (`requires_action`), as a
/// restore that must ask the agent again sees it.
#[derive(Debug)]
pub struct Waited<'a> {
    /// The run's id.
    pub run: &'a str,
    /// What the run ended waiting on.
    pub action: &'a Value,
    /// The history before the run.
    pub before: &'a [Item],
    /// The run's input: the user's message(s) it began with.
    pub input: &'a [Item],
}

/// The session's last run, when it ended waiting on a request, began with the user's
/// message(s) and called no tool but the one it asks about (asking again runs the run's
/// tools again). `None` otherwise: a restore then puts back the conversation only.
pub fn waited<'a>(call: &TurnCall<'a>) -> Option<Waited<'a>> {
    let last = call
        .events
        .iter()
        .rev()
        .filter(|e| e.session_id == call.session_id)
        .find(|e| e.event_type == EventType::RunStatus && e.is_terminal())?;
    if last.run_status() != Some(RunStatus::RequiresAction) {
        return None;
    }
    let action = last.content.get("action")?;
    let run = last.run_id.as_deref()?;
    let items: Vec<Item> = call
        .events
        .iter()
        .filter(|e| e.run_id.as_deref() == Some(run) && e.event_type.is_transcript())
        .filter_map(Item::from_event)
        .collect();
    // The run's items end the history (nothing was said in the session since).
    let start = call.history.len().checked_sub(items.len())?;
    let (before, ran) = call.history.split_at(start);
    if ran != items.as_slice() {
        return None;
    }
    let is_input = |i: &Item| matches!(i, Item::Message { role, .. } if role == "user");
    let inputs = ran.iter().take_while(|i| is_input(i)).count();
    let tool = action["tool"].as_str();
    let other_tool = ran.iter().any(|i| match i {
        Item::ToolCall { name, .. } => {
            Some(name.as_str()) != tool && !ADK_RESERVED_FUNCTIONS.contains(&name.as_str())
        }
        _ => false,
    });
    if inputs == 0 || other_tool {
        return None;
    }
    Some(Waited {
        run,
        action,
        before,
        input: &ran[..inputs],
    })
}
