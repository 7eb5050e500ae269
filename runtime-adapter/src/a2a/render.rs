//! The log replayed to an A2A client: a run's stream, the answer to a non-streaming
//! send, and the task a get or cancel asks about, all in the client's own dialect.

use serde_json::{json, Value};
use session_log::{Event, EventType, RunStatus};

use crate::sse::SseFrame;
use crate::surface::{RunInfo, StreamRenderer};

use super::client::{
    error_info, Client, Op, Version, TASK_NOT_CANCELABLE, TASK_NOT_FOUND, UNSUPPORTED_OPERATION,
};
use super::task::{apply_history_length, error_of, in_run, synthetic_status, RunView};
use super::wire::{
    canonical, dialect_of, ends_turn, frame_ids, from_canonical, short_state, state_of,
    task_from_v10, TaskIds,
};

/// Replays a run's `agent_event`s as the client's stream: each one SSE event holding a
/// JSON-RPC response (or, over HTTP+JSON, the bare event), converted only when the client
/// speaks another dialect than the agent.
pub(super) struct A2aRenderer {
    client: Client,
    run_id: String,
    /// The task the stream is about, once a frame named it.
    task: Option<TaskIds>,
    /// Whether the client has seen the end of the task's turn.
    ended: bool,
    error: Option<(String, String)>,
}

impl A2aRenderer {
    pub(super) fn new(run: &RunInfo) -> Self {
        A2aRenderer {
            client: Client::from_value(&run.client),
            run_id: run.run_id.clone(),
            task: None,
            ended: false,
            error: None,
        }
    }

    /// The end of a run whose frames did not end the task: a final status for the task,
    /// or an error when there never was a task.
    fn close(&mut self, event: &Event, status: RunStatus) -> Vec<SseFrame> {
        if self.ended || status.is_answered() {
            return Vec::new();
        }
        self.ended = true;
        let (code, message) = self.error.clone().unwrap_or_else(|| {
            let reason = event.content["reason"].as_str();
            let message = reason.map(str::to_owned).unwrap_or_else(|| match status {
                RunStatus::Cancelled => "The run was cancelled.".to_owned(),
                s => format!("The run ended as {}.", s.as_str()),
            });
            (status.as_str().to_owned(), message)
        });
        let Some(task) = &self.task else {
            return vec![sse(self.client.run_error(&code, &message).1)];
        };
        let canon = json!({ "statusUpdate": {
            "taskId": task.id,
            "contextId": task.context,
            "status": synthetic_status(status, event, task, &message, &self.run_id),
        }});
        let update = from_canonical(&canon, self.client.dialect());
        let mut frames = vec![sse(self.client.response(update))];
        // The task's last state, then the call's status: the agent was lost, not the task.
        if let Some(error) = self.client.unavailable(&code, &message) {
            frames.push(sse(error));
        }
        frames
    }
}

fn sse(body: Value) -> SseFrame {
    SseFrame::data(body.to_string())
}

impl StreamRenderer for A2aRenderer {
    fn render(&mut self, event: &Event) -> Vec<SseFrame> {
        if !in_run(event, &self.run_id) {
            return Vec::new();
        }
        match event.event_type {
            EventType::AgentEvent => {
                let frame = &event.content;
                let Some(canon) = canonical(frame) else {
                    return vec![sse(self.client.response(frame.clone()))];
                };
                if let Some(ids) = frame_ids(&canon) {
                    self.task.get_or_insert(ids);
                }
                // A message with no task is the agent's whole reply.
                let reply = canon.get("message").is_some() && self.task.is_none();
                self.ended |= reply || ends_turn(frame, &canon);
                let dialect = self.client.dialect();
                let out = if dialect_of(frame) == dialect {
                    frame.clone()
                } else {
                    from_canonical(&canon, dialect)
                };
                vec![sse(self.client.response(out))]
            }
            EventType::Error => {
                self.error = Some(error_of(event));
                Vec::new()
            }
            EventType::RunStatus => match event.run_status() {
                Some(RunStatus::InProgress) => {
                    self.ended = false;
                    self.error = None;
                    Vec::new()
                }
                Some(status) => self.close(event, status),
                None => Vec::new(),
            },
            _ => Vec::new(),
        }
    }

    /// A2A streams end by closing.
    fn end(&mut self) -> Vec<SseFrame> {
        Vec::new()
    }
}

/// What a send returns: the task (or the agent's message reply) in the client's dialect;
/// `None` when the run produced neither.
fn send_result(client: &Client, view: &RunView) -> Option<Value> {
    let canon = match (&view.fold.task, &view.fold.message) {
        (Some(task), _) => json!({ "task": apply_history_length(task, client.history_length) }),
        (None, Some(message)) => json!({ "message": message }),
        (None, None) => return None,
    };
    Some(from_canonical(&canon, client.dialect()))
}

/// The answer to a non-streaming send: the task (or the agent's message reply) as a send
/// returns it.
pub(super) fn final_body(run: &RunInfo, events: &[Event]) -> Value {
    let client = Client::from_value(&run.client);
    let result = send_result(&client, &RunView::of(run, events));
    client.response(result.unwrap_or(Value::Null))
}

/// A2A answers a send with the task in whatever state it reached (a failed task is a
/// result, not an error); only a run that produced no task or message is an error,
/// and JSON-RPC errors travel in an HTTP 200.
pub(super) fn final_response(run: &RunInfo, events: &[Event]) -> (u16, Value) {
    let client = Client::from_value(&run.client);
    let view = RunView::of(run, events);
    match send_result(&client, &view) {
        Some(result) => (200, client.response(result)),
        None => {
            let (code, message) = view.error();
            client.run_error(&code, &message)
        }
    }
}

/// The task a get or cancel asks about, from the log, with the HTTP status it goes in.
pub(super) fn snapshot(run: &RunInfo, events: &[Event]) -> (u16, Value) {
    let client = Client::from_value(&run.client);
    let view = RunView::of(run, events);
    let Some(task) = &view.fold.task else {
        return client.error(TASK_NOT_FOUND, "Task not found", None);
    };
    // The agent finished the task before the cancel: as the SDK says, too late.
    let finished = view.agent_ended && short_state(state_of(task)) != "canceled";
    if client.op() == Some(Op::Cancel) && finished {
        return client.error(TASK_NOT_CANCELABLE, "Task cannot be canceled", None);
    }
    let task = apply_history_length(task, client.history_length);
    (200, client.response(task_from_v10(&task, client.dialect())))
}

/// Whether the run ended with its task waiting for the user (`INPUT_REQUIRED`,
/// `AUTH_REQUIRED`), the task going on with the next message that names it.
pub(super) fn task_waits(run: &RunInfo, events: &[Event]) -> bool {
    let view = RunView::of(run, events);
    let waiting = view.fold.task.as_ref().is_some_and(|task| {
        matches!(
            short_state(state_of(task)).as_str(),
            "input-required" | "auth-required"
        )
    });
    view.agent_ended && waiting
}

/// The frame a subscription to a task waiting for input starts with, as the protocol's
/// own server starts it: the task as it stands.
pub(super) fn waiting_frame(run: &RunInfo, events: &[Event]) -> Option<SseFrame> {
    let client = Client::from_value(&run.client);
    let view = RunView::of(run, events);
    let task = apply_history_length(view.fold.task.as_ref()?, client.history_length);
    let out = from_canonical(&json!({ "task": task }), client.dialect());
    Some(sse(client.response(out)))
}

/// A subscription to a task in a terminal state is refused as the spec says
/// (`UnsupportedOperationError`), unless the client resumes from a cursor: the replay of
/// a finished task is what Tether offers beyond the spec, to whoever asks for it.
pub(super) fn subscribe_refusal(
    run: &RunInfo,
    events: &[Event],
    resuming: bool,
) -> Option<(u16, Value)> {
    let client = Client::from_value(&run.client);
    let view = RunView::of(run, events);
    let state = short_state(state_of(view.fold.task.as_ref()?));
    let terminal = matches!(
        state.as_str(),
        "completed" | "failed" | "canceled" | "rejected"
    );
    (terminal && !resuming).then(|| {
        let message = format!("Task is in terminal state: {state}");
        let data = (client.version == Version::V10)
            .then(|| json!([error_info("UNSUPPORTED_OPERATION", json!({}))]));
        client.error(UNSUPPORTED_OPERATION, &message, data)
    })
}
