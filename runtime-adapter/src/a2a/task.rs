//! The task, folded from the agent's frames the way the agent's own task store folds its
//! events; a run's events as A2A sees them; and the answer's text for the transcript.

use chrono::SecondsFormat;
use serde_json::{json, Value};
use session_log::{Event, EventType, RunStatus};

use crate::surface::RunInfo;

use super::wire::{canonical, ends_turn, TaskIds};

/// The agent's answer so far, folded from canonical frames.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Fold {
    /// The task (v1.0 form), from its first frame or the first update naming it.
    pub(super) task: Option<Value>,
    /// The agent's reply when it answered with a message and no task.
    pub(super) message: Option<Value>,
}

impl Fold {
    pub(super) fn apply(&mut self, canon: &Value) {
        if let Some(task) = canon.get("task") {
            // A task frame is a whole snapshot; frames of another task are not this run's.
            if self.is_other(task.get("id")) {
                return;
            }
            self.task = Some(task.clone());
        } else if let Some(update) = canon.get("statusUpdate") {
            if let Some(task) = self.task_for(update) {
                task["status"] = update.get("status").cloned().unwrap_or_else(|| json!({}));
            }
        } else if let Some(update) = canon.get("artifactUpdate") {
            if let Some(task) = self.task_for(update) {
                merge_artifact(task, update);
            }
        } else if let Some(message) = canon.get("message") {
            let for_task = message.get("taskId");
            match &mut self.task {
                Some(task) if for_task.is_none() || for_task == task.get("id") => {
                    array_at(task, "history").push(message.clone());
                }
                Some(_) => {}
                None => self.message = Some(message.clone()),
            }
        }
    }

    fn is_other(&self, id: Option<&Value>) -> bool {
        match (&self.task, id) {
            (Some(task), Some(id)) => task.get("id") != Some(id),
            _ => false,
        }
    }

    /// The task an update is about, started from the update when no task frame came first.
    fn task_for(&mut self, update: &Value) -> Option<&mut Value> {
        let id = update.get("taskId")?;
        if self.is_other(Some(id)) {
            return None;
        }
        Some(self.task.get_or_insert_with(|| {
            json!({
                "id": id,
                "contextId": update.get("contextId").cloned().unwrap_or(Value::Null),
                "status": { "state": "TASK_STATE_SUBMITTED" },
            })
        }))
    }
}

/// The array at `key` of an object, made one when it is missing or not an array.
fn array_at<'v>(object: &'v mut Value, key: &str) -> &'v mut Vec<Value> {
    if !object[key].is_array() {
        object[key] = json!([]);
    }
    object[key]
        .as_array_mut()
        .expect("an array was just put there")
}

/// Adds a streamed artifact chunk: `append` extends the artifact's parts, otherwise the
/// chunk replaces the artifact with its id.
fn merge_artifact(task: &mut Value, update: &Value) {
    let Some(artifact) = update.get("artifact").filter(|a| a.is_object()) else {
        return;
    };
    let append = update.get("append").and_then(Value::as_bool) == Some(true);
    let artifacts = array_at(task, "artifacts");
    let id = artifact.get("artifactId");
    let existing = artifacts
        .iter_mut()
        .find(|a| id.is_some() && a.get("artifactId") == id);
    match existing {
        Some(current) if append => {
            let new_parts = artifact["parts"].as_array().cloned().unwrap_or_default();
            array_at(current, "parts").extend(new_parts);
        }
        Some(current) => *current = artifact.clone(),
        None => artifacts.push(artifact.clone()),
    }
}

/// A task's `history` cut to its last `n` messages, as the SDK applies `historyLength`.
pub(super) fn apply_history_length(task: &Value, n: Option<i64>) -> Value {
    let mut task = task.clone();
    match n {
        Some(0) => {
            if let Some(obj) = task.as_object_mut() {
                obj.remove("history");
            }
        }
        Some(n) if n > 0 => {
            if let Some(history) = task["history"].as_array_mut() {
                let keep = n as usize;
                if history.len() > keep {
                    history.drain(..history.len() - keep);
                }
            }
        }
        _ => {}
    }
    task
}

// ---------------------------------------------------------------------------------------
// The answer's text
// ---------------------------------------------------------------------------------------

/// The text of canonical parts: text as is, structured data as JSON (files carry none).
pub(super) fn parts_text(parts: &Value) -> String {
    parts
        .as_array()
        .map(|parts| {
            parts
                .iter()
                .filter_map(|p| match (p.get("text"), p.get("data")) {
                    (Some(Value::String(t)), _) => Some(t.clone()),
                    (_, Some(d)) if p.get("url").is_none() && p.get("raw").is_none() => {
                        Some(d.to_string())
                    }
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

pub(super) fn artifacts_text(task: &Value) -> String {
    task["artifacts"]
        .as_array()
        .map(|artifacts| {
            artifacts
                .iter()
                .map(|a| parts_text(&a["parts"]))
                .filter(|t| !t.is_empty())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// The assistant's answer in a task: its artifacts, plus the final status message when
/// it says something the artifacts do not (agents often repeat the answer there). Without
/// artifacts, the status message (a question when input is required), else the agent's
/// last message.
pub(super) fn answer_text(task: &Value) -> String {
    let artifacts = artifacts_text(task);
    let status = parts_text(&task["status"]["message"]["parts"]);
    let status = status.trim();
    if artifacts.is_empty() {
        if !status.is_empty() {
            return status.to_owned();
        }
        return task["history"]
            .as_array()
            .and_then(|h| h.iter().rev().find(|m| m["role"] == "ROLE_AGENT"))
            .map(|m| parts_text(&m["parts"]))
            .unwrap_or_default();
    }
    if status.is_empty() || artifacts.contains(status) {
        artifacts
    } else {
        format!("{artifacts}\n\n{status}")
    }
}

// ---------------------------------------------------------------------------------------
// A run's events
// ---------------------------------------------------------------------------------------

/// One run's events as A2A sees them.
#[derive(Default)]
pub(super) struct RunView<'a> {
    pub(super) fold: Fold,
    /// Whether the agent itself ended the task's turn (a terminal or interrupted state).
    pub(super) agent_ended: bool,
    terminal: Option<(&'a Event, RunStatus)>,
    error: Option<(String, String)>,
}

impl<'a> RunView<'a> {
    pub(super) fn of(run: &RunInfo, events: &'a [Event]) -> Self {
        let mut view = RunView::default();
        for event in events.iter().filter(|e| in_run(e, &run.run_id)) {
            match event.event_type {
                EventType::AgentEvent => {
                    if let Some(canon) = canonical(&event.content) {
                        view.fold.apply(&canon);
                        view.agent_ended |= ends_turn(&event.content, &canon);
                    }
                }
                EventType::Error => view.error = Some(error_of(event)),
                EventType::RunStatus => match event.run_status() {
                    // A resumed run starts over: its last invocation is the answer.
                    Some(RunStatus::InProgress) => view = RunView::default(),
                    Some(status) => view.terminal = Some((event, status)),
                    None => {}
                },
                _ => {}
            }
        }
        view.settle(&run.run_id);
        view
    }

    /// A run that ended without the agent ending its task shows the run's end as the
    /// task's state: a cancel Tether made shows as canceled.
    fn settle(&mut self, run_id: &str) {
        let Some((event, status)) = self.terminal else {
            return;
        };
        if status.is_answered() || self.agent_ended {
            return;
        }
        let message = self.error().1;
        if let Some(task) = &mut self.fold.task {
            let ids = TaskIds {
                id: task["id"].as_str().unwrap_or_default().to_owned(),
                context: task["contextId"].clone(),
            };
            task["status"] = synthetic_status(status, event, &ids, &message, run_id);
        }
    }

    /// The run's error: its last `error` event, or its terminal status.
    pub(super) fn error(&self) -> (String, String) {
        if let Some(e) = &self.error {
            return e.clone();
        }
        let status = self.terminal.map(|(_, s)| s.as_str()).unwrap_or("failed");
        let reason = self
            .terminal
            .and_then(|(e, _)| e.content["reason"].as_str().map(str::to_owned));
        (
            status.to_owned(),
            reason.unwrap_or_else(|| format!("The run ended as {status}.")),
        )
    }
}

/// Whether an event belongs to the run (events without a run id are let through; only
/// the run's own `agent_event`s and statuses matter).
pub(super) fn in_run(event: &Event, run_id: &str) -> bool {
    event.run_id.as_deref().is_none_or(|r| r == run_id)
}

/// An `error` event's code and message.
pub(super) fn error_of(event: &Event) -> (String, String) {
    let s = |k: &str| event.content[k].as_str().unwrap_or_default().to_owned();
    (s("code"), s("message"))
}

/// A task's status as of a run's end that the agent never reported (Tether cancelled
/// the run, or the agent died): canceled or failed, in v1.0's form.
pub(super) fn synthetic_status(
    status: RunStatus,
    at: &Event,
    task: &TaskIds,
    error: &str,
    run_id: &str,
) -> Value {
    let timestamp = at.created_at.to_rfc3339_opts(SecondsFormat::Micros, true);
    if status == RunStatus::Cancelled {
        return json!({ "state": "TASK_STATE_CANCELED", "timestamp": timestamp });
    }
    json!({
        "state": "TASK_STATE_FAILED",
        "timestamp": timestamp,
        "message": {
            "messageId": format!("{run_id}-{}", at.seq),
            "contextId": task.context,
            "taskId": task.id,
            "role": "ROLE_AGENT",
            "parts": [{ "text": error }],
        },
    })
}
