//! A run's committed events back as api_server answers: `/run_sse` frames (each recorded
//! ADK event as it came, and api_server's error frame for a run that failed), the `/run`
//! JSON array, and FastAPI's `{"detail"}` for a failure.

use serde_json::{json, Value};
use session_log::{Event, EventType, RunStatus};

use super::SESSION_NOT_FOUND;
use crate::sse::SseFrame;
use crate::surface::{run_error, Numbered, RunInfo, StreamRenderer};

pub(super) fn stream_renderer(run: &RunInfo) -> Box<dyn StreamRenderer> {
    Numbered::boxed(AdkRenderer {
        run_id: run.run_id.clone(),
        error: None,
    })
}

/// The `/run` answer: the agent's events of the run's last invocation, as it sent them.
pub(super) fn final_body(run: &RunInfo, events: &[Event]) -> Value {
    let mut out = Vec::new();
    for e in events.iter().filter(|e| in_run(e, &run.run_id)) {
        match e.event_type {
            // A resumed run starts over.
            EventType::RunStatus if e.run_status() == Some(RunStatus::InProgress) => out.clear(),
            EventType::AgentEvent => out.push(e.content.clone()),
            _ => {}
        }
    }
    Value::Array(out)
}

/// ADK answers a failed `/run` with a 500; an unknown session keeps its own 404.
pub(super) fn final_response(run: &RunInfo, events: &[Event]) -> (u16, Value) {
    let terminal = events.last().and_then(Event::run_status);
    if terminal.is_some_and(RunStatus::is_answered) {
        return (200, final_body(run, events));
    }
    let (code, message) = run_error(events, terminal);
    let status = if code == SESSION_NOT_FOUND { 404 } else { 500 };
    (status, json!({ "detail": message }))
}

/// Events without a run id (input recorded before the run) pass; other runs' do not.
fn in_run(event: &Event, run_id: &str) -> bool {
    event.run_id.as_deref().is_none_or(|r| r == run_id)
}

/// Streams a run as `/run_sse` does: one `data: <ADK event>` frame per recorded event.
struct AdkRenderer {
    run_id: String,
    /// The last `error` event's (code, message), for the terminal error frame.
    error: Option<(String, String)>,
}

impl StreamRenderer for AdkRenderer {
    fn render(&mut self, event: &Event) -> Vec<SseFrame> {
        if !in_run(event, &self.run_id) {
            return Vec::new();
        }
        let body = match event.event_type {
            EventType::AgentEvent => event.content.clone(),
            EventType::Error => {
                self.error = Some(run_error(std::slice::from_ref(event), None));
                return Vec::new();
            }
            EventType::RunStatus => match event.run_status() {
                // A resumed invocation: an earlier failure is no longer the outcome.
                Some(RunStatus::InProgress) => {
                    self.error = None;
                    return Vec::new();
                }
                Some(RunStatus::Completed | RunStatus::RequiresAction) | None => return Vec::new(),
                Some(status) => self.error_frame(event, status),
            },
            _ => return Vec::new(),
        };
        vec![SseFrame::data(body.to_string())]
    }

    /// `/run_sse` has no end marker: the stream just ends.
    fn end(&mut self) -> Vec<SseFrame> {
        Vec::new()
    }
}

impl AdkRenderer {
    /// The frame api_server sends when the agent raises mid-stream, for a run that ended
    /// as `status`: its last error, or the status (and its reason) itself.
    fn error_frame(&mut self, event: &Event, status: RunStatus) -> Value {
        let (code, message) = self.error.take().unwrap_or_else(|| {
            let reason = event.content.get("reason").and_then(Value::as_str);
            let message = reason
                .map(str::to_owned)
                .unwrap_or_else(|| format!("The run ended with status '{}'.", status.as_str()));
            (status.as_str().to_owned(), message)
        });
        let timestamp = event.created_at.timestamp_millis() as f64 / 1000.0;
        json!({
            "error": format!("{code}: {message}"),
            "error_details": {
                "error_type": code,
                "error_message": message,
                "timestamp": timestamp,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use session_log::NewEvent;

    use super::*;
    use crate::adk::test_support::*;
    use crate::adk::AdkSurface;
    use crate::item::Item;
    use crate::surface::Surface;

    struct Log {
        events: Vec<Event>,
    }

    impl Log {
        fn new() -> Self {
            Log { events: Vec::new() }
        }

        fn push(&mut self, new: NewEvent) -> &mut Self {
            let seq = 10 + self.events.len() as i64 + 1;
            self.events.push(event(seq, new));
            self
        }

        fn run(&mut self, t: EventType, content: Value) -> &mut Self {
            self.push(NewEvent::new("acct", "s-run", t, content).in_run(RUN_ID, "inv1"))
        }

        fn status(&mut self, status: RunStatus) -> &mut Self {
            self.run(
                EventType::RunStatus,
                session_log::event::run_status_content(status, None),
            )
        }

        fn render(&self) -> Vec<SseFrame> {
            let mut r = AdkSurface.stream_renderer(&run_info());
            let mut frames: Vec<SseFrame> = self.events.iter().flat_map(|e| r.render(e)).collect();
            frames.extend(r.end());
            frames
        }
    }

    fn run_info() -> RunInfo {
        RunInfo {
            run_id: RUN_ID.into(),
            session_id: "s-run".into(),
            model: "adk_agent".into(),
            created_at: 1_700_000_000,
            client: json!({"path": "/run_sse"}),
        }
    }

    fn sse_events() -> Vec<Value> {
        SSE_SLOW
            .split("\n\n")
            .filter_map(|f| f.strip_prefix("data: "))
            .map(|d| serde_json::from_str(d).unwrap())
            .collect()
    }

    #[test]
    fn renders_each_agent_event_as_it_came() {
        let ev = sse_events();
        let mut log = Log::new();
        log.push(Item::user_text("go").to_event("acct", "s-run")) // 11
            .status(RunStatus::InProgress) // 12
            .run(EventType::AgentEvent, ev[0].clone()) // 13
            .run(EventType::TextDelta, json!({"delta": "w1 "})) // 14
            .run(EventType::AgentEvent, ev[4].clone()) // 15
            .push(
                Item::assistant_text("w1 w2 w3 w4 ")
                    .to_event("acct", "s-run")
                    .in_run(RUN_ID, "inv1"),
            ) // 16
            .push(
                NewEvent::new(
                    "acct",
                    "s-run",
                    EventType::AgentEvent,
                    json!({"other": "run"}),
                )
                .in_run("run_2", "i"),
            ) // 17
            .status(RunStatus::Completed); // 18
        let frames = log.render();
        assert_eq!(
            frames,
            vec![
                SseFrame::data(ev[0].to_string()).with_id(0),
                SseFrame::data(ev[4].to_string()).with_id(1),
            ]
        );
        let mut wire = String::new();
        frames[0].encode(&mut wire);
        assert_eq!(wire, format!("id: 0\ndata: {}\n\n", ev[0]));
    }

    #[test]
    fn a_failed_run_ends_with_adks_error_frame() {
        let mut log = Log::new();
        log.status(RunStatus::InProgress)
            .run(
                EventType::Error,
                json!({"code": "InternalServerError", "message": "Error code: 500 - fake failure"}),
            )
            .status(RunStatus::Failed);
        let frames = log.render();
        assert_eq!(frames.len(), 1);
        assert_eq!(frames[0].id.as_deref(), Some("0"));
        let body: Value = serde_json::from_str(&frames[0].data).unwrap();
        assert_eq!(
            body["error"],
            "InternalServerError: Error code: 500 - fake failure"
        );
        assert_eq!(body["error_details"]["error_type"], "InternalServerError");
        assert_eq!(
            body["error_details"]["error_message"],
            "Error code: 500 - fake failure"
        );

        // Without an error event, the terminal status speaks; a resumed run forgets the
        // earlier failure.
        let mut log = Log::new();
        log.run(EventType::Error, json!({"code": "x", "message": "old"}))
            .status(RunStatus::InProgress)
            .status(RunStatus::Cancelled);
        let body: Value = serde_json::from_str(&log.render()[0].data).unwrap();
        assert_eq!(
            body["error"],
            "cancelled: The run ended with status 'cancelled'."
        );
    }

    #[test]
    fn final_body_is_the_last_invocations_events() {
        let ev = sse_events();
        let mut log = Log::new();
        log.status(RunStatus::InProgress)
            .run(EventType::AgentEvent, json!({"first": "try"}))
            .status(RunStatus::Interrupted)
            .status(RunStatus::InProgress)
            .run(EventType::AgentEvent, ev[4].clone())
            .push(
                Item::assistant_text("w1 w2 w3 w4 ")
                    .to_event("acct", "s-run")
                    .in_run(RUN_ID, "inv1"),
            )
            .status(RunStatus::Completed);
        let run = run_info();
        assert_eq!(AdkSurface.final_body(&run, &log.events), json!([ev[4]]));
        assert_eq!(
            AdkSurface.final_response(&run, &log.events),
            (200, json!([ev[4]]))
        );
    }

    #[test]
    fn failures_answer_like_fastapi() {
        let run = run_info();
        let mut log = Log::new();
        log.status(RunStatus::InProgress)
            .run(
                EventType::Error,
                json!({"code": SESSION_NOT_FOUND, "message": "Session not found: s-run"}),
            )
            .status(RunStatus::Failed);
        assert_eq!(
            AdkSurface.final_response(&run, &log.events),
            (404, json!({"detail": "Session not found: s-run"}))
        );
        let mut log = Log::new();
        log.status(RunStatus::InProgress)
            .run(
                EventType::Error,
                json!({"code": "agent_closed_early", "message": "the agent ended its response"}),
            )
            .status(RunStatus::Failed);
        assert_eq!(
            AdkSurface.final_response(&run, &log.events),
            (500, json!({"detail": "the agent ended its response"}))
        );
        assert_eq!(
            AdkSurface.error_body("Too many requests", "rate_limit", None, Some("x")),
            json!({"detail": "Too many requests"})
        );
        assert_eq!(AdkSurface.response_id("run_1"), "run_1");
        assert_eq!(AdkSurface.run_id("run_1"), None);
    }
}
