//! The client side of an adapter: parsing a client's request into a `TurnRequest`, and
//! rendering committed log events back in the client's own wire format.

use serde_json::Value;
use session_log::Event;

use crate::sse::SseFrame;
use crate::turn::{InputError, TurnRequest};

/// What a renderer needs to know about the run it renders.
#[derive(Clone, Debug)]
pub struct RunInfo {
    pub run_id: String,
    pub session_id: String,
    pub model: String,
    /// Unix seconds.
    pub created_at: i64,
}

/// Renders a run's committed events as SSE frames. Every frame carries `id: <seq>` of the
/// event it came from. Stateful: feed events in seq order (a reconnecting client's
/// renderer is fed the earlier events and their frames discarded).
pub trait StreamRenderer: Send {
    fn render(&mut self, event: &Event) -> Vec<SseFrame>;
    /// Frames that end the stream after the terminal event (e.g. `data: [DONE]`).
    fn end(&mut self) -> Vec<SseFrame>;
}

pub trait Surface: Send + Sync {
    /// Parses a request body (`session_header` is the `x-session-id` request header).
    fn parse_request(
        &self,
        body: &[u8],
        session_header: Option<&str>,
    ) -> Result<TurnRequest, InputError>;

    fn stream_renderer(&self, run: &RunInfo) -> Box<dyn StreamRenderer>;

    /// The whole non-streaming response body for a finished run's events.
    fn final_body(&self, run: &RunInfo, events: &[Event]) -> Value;

    /// The surface's error body (`{"error": {"message", "type", "param", "code"}}`).
    fn error_body(
        &self,
        message: &str,
        kind: &str,
        param: Option<&str>,
        code: Option<&str>,
    ) -> Value {
        serde_json::json!({ "error": { "message": message, "type": kind, "param": param, "code": code } })
    }

    /// The client-visible id of a run (`resp_…`, `chatcmpl-…`).
    fn response_id(&self, run_id: &str) -> String;

    /// The run id behind a client-visible response id, if it is one of ours.
    fn run_id(&self, response_id: &str) -> Option<String>;
}
