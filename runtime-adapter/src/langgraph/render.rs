//! The log replayed to a LangGraph client: a run's events as its stream (`event: <mode>`,
//! `id:` the frame's number in the run's stream, the modes it asked for), the final values a `wait` or `join` answers, and
//! the run object of a background run or a run read.

use chrono::{DateTime, SecondsFormat};
use serde_json::{json, Value};
use session_log::{Event, EventType, RunStatus};

use crate::sse::SseFrame;
use crate::surface::{run_error, Numbered, RunInfo, StreamRenderer};

use super::parse::{CONFLICT, GRAPH_ERROR, INVALID, NOT_FOUND, REFUSED};
use super::routes::Mode;

pub(super) struct LangGraphRenderer {
    run_id: String,
    /// Whether the agent's own `error` event was sent (Tether then adds none).
    errored: bool,
    error: Option<(String, String)>,
}

pub(super) fn stream_renderer(run: &RunInfo) -> Box<dyn StreamRenderer> {
    Numbered::boxed(LangGraphRenderer {
        run_id: run.run_id.clone(),
        errored: false,
        error: None,
    })
}

fn in_run(event: &Event, run_id: &str) -> bool {
    event.run_id.as_deref().is_none_or(|r| r == run_id)
}

impl StreamRenderer for LangGraphRenderer {
    fn render(&mut self, event: &Event) -> Vec<SseFrame> {
        if !in_run(event, &self.run_id) {
            return Vec::new();
        }
        match event.event_type {
            EventType::AgentEvent if event.content["added"] != true => {
                let name = event.content["event"].as_str().unwrap_or("message");
                self.errored |= name == "error";
                vec![SseFrame::json(&event.content["data"]).with_event(name)]
            }
            EventType::Error => {
                let s = |k: &str| event.content[k].as_str().unwrap_or_default().to_owned();
                self.error = Some((s("code"), s("message")));
                Vec::new()
            }
            EventType::RunStatus => match event.run_status() {
                Some(RunStatus::InProgress) => {
                    self.errored = false;
                    self.error = None;
                    Vec::new()
                }
                // A run that ended otherwise says so, as LangGraph does, in an `error` event.
                Some(status) if !status.is_answered() && !self.errored => {
                    self.errored = true;
                    let (code, message) = self.error.clone().unwrap_or_else(|| {
                        (
                            status.as_str().to_owned(),
                            format!("The run ended as {}.", status.as_str()),
                        )
                    });
                    let data = json!({ "error": code, "message": message });
                    vec![SseFrame::json(&data).with_event("error")]
                }
                _ => Vec::new(),
            },
            _ => Vec::new(),
        }
    }

    /// LangGraph streams end by closing.
    fn end(&mut self) -> Vec<SseFrame> {
        Vec::new()
    }
}

/// The run's recorded stream events (its last invocation's, a resumed run starting over).
fn frames<'a>(run: &RunInfo, events: &'a [Event]) -> Vec<&'a Value> {
    let mut out = Vec::new();
    for event in events.iter().filter(|e| in_run(e, &run.run_id)) {
        match event.event_type {
            EventType::AgentEvent => out.push(&event.content),
            EventType::RunStatus if event.run_status() == Some(RunStatus::InProgress) => {
                out.clear()
            }
            _ => {}
        }
    }
    out
}

/// The thread's values after the run: its last `values` event.
pub(super) fn final_body(run: &RunInfo, events: &[Event]) -> Value {
    frames(run, events)
        .into_iter()
        .rev()
        .find(|f| f["event"] == "values")
        .map_or_else(|| json!({}), |f| f["data"].clone())
}

/// A finished run's answer: the final values for a `wait` or `join`, the run object for a
/// background run. One that failed: the agent's refusal with its status, a graph's error
/// as `/runs/wait` reports it (`__error__`, in a 200), Tether's own as a 502.
pub(super) fn final_response(run: &RunInfo, events: &[Event]) -> (u16, Value) {
    let terminal = events.iter().rev().find_map(Event::run_status);
    if terminal.is_some_and(RunStatus::is_answered) {
        return (200, answer(run, events));
    }
    let (code, message) = run_error(events, terminal);
    let status = match code.as_str() {
        NOT_FOUND => 404,
        CONFLICT => 409,
        INVALID => 422,
        REFUSED => 400,
        GRAPH_ERROR | "cancelled" => {
            return (
                200,
                json!({ "__error__": { "error": code, "message": message } }),
            )
        }
        _ => 502,
    };
    (status, json!({ "detail": message }))
}

/// What a completed run answers with, as the client asked: the run object for a background
/// run, else the final values.
fn answer(run: &RunInfo, events: &[Event]) -> Value {
    match Mode::of(&run.client) {
        Some(Mode::Background) => run_object(run, events),
        _ => final_body(run, events),
    }
}

/// A background run is answered once the agent named it (its `metadata` event).
pub(super) fn early_response(run: &RunInfo, events: &[Event]) -> Option<(u16, Value)> {
    if Mode::of(&run.client) != Some(Mode::Background) {
        return None;
    }
    agent_run_id(run, events)?;
    Some((200, run_object(run, events)))
}

/// A read of one run: the final values for a join, else the run object.
pub(super) fn snapshot(run: &RunInfo, events: &[Event]) -> Value {
    match run.client["op"].as_str() {
        Some("join") => final_response(run, events).1,
        _ => run_object(run, events),
    }
}

fn agent_run_id(run: &RunInfo, events: &[Event]) -> Option<String> {
    frames(run, events)
        .into_iter()
        .find(|f| f["event"] == "metadata")
        .and_then(|f| f["data"]["run_id"].as_str().map(str::to_owned))
}

/// The run as LangGraph's `Run` shows it, from the log.
fn run_object(run: &RunInfo, events: &[Event]) -> Value {
    let terminal = events
        .iter()
        .rev()
        .filter(|e| in_run(e, &run.run_id))
        .find_map(Event::run_status);
    let status = match terminal {
        Some(RunStatus::Completed | RunStatus::RequiresAction) => "success",
        Some(RunStatus::Failed) => "error",
        Some(RunStatus::Cancelled | RunStatus::Interrupted) => "interrupted",
        _ => "running",
    };
    let created = DateTime::from_timestamp(run.created_at, 0)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Secs, true);
    let updated = events.last().map_or_else(
        || created.clone(),
        |e| e.created_at.to_rfc3339_opts(SecondsFormat::Micros, true),
    );
    json!({
        "run_id": agent_run_id(run, events),
        "thread_id": run.session_id,
        "assistant_id": run.model,
        "created_at": created,
        "updated_at": updated,
        "status": status,
        "metadata": {},
        "kwargs": {},
        "multitask_strategy": "reject",
    })
}
