//! LangGraph's API server (LangGraph Platform, `langgraph dev`): the client surface for its
//! threads and runs, and the upstream adapter for a graph it serves.
//!
//! A LangGraph thread keeps the conversation in the server (in memory under `langgraph
//! dev`), so Tether forwards the client's own requests, with the thread id as the session.
//! Each thread id is put into the caller's account on the agent's side: the agent knows a
//! client's thread by a UUID made from the account and the id (`wire::agent_thread_id`),
//! and Tether turns it back in every answer, so no account reaches another's threads.
//! Threads Tether creates carry the account in their metadata, which thread searches are
//! filtered by.
//!
//! Every run goes to the agent's `/runs/stream` (the client's stream modes, plus `values`
//! for the transcript), each event is recorded as an `agent_event` and streamed back as it
//! came with `id: <seq>`; a `wait` is answered with the final values, a background run
//! with the run object as soon as the agent named the run. A run's join, re-stream (from
//! `Last-Event-ID`), read and cancel are served from the log. When the agent has forgotten
//! a thread (404 after a restart), Tether re-creates it under the same id, puts the earlier
//! messages back as its state, and sends the run again.
//!
//! - `wire`: thread ids on both sides, messages to and from transcript items;
//! - `routes`: what the surface claims, and what each client request becomes;
//! - `request`: a run's request to the agent; `parse`: its answer as outputs;
//! - `restore`: a thread the agent forgot, put back;
//! - `render`: committed events back as LangGraph's own answers.

mod parse;
mod render;
mod request;
mod restore;
mod routes;
mod wire;

#[cfg(test)]
mod tests;

use serde_json::{json, Value};
use session_log::Event;

use crate::protocol::Protocol;
use crate::surface::{ClientRequest, Route, RunInfo, StreamRenderer, Surface};
use crate::turn::{InputError, TurnRequest};
use crate::upstream::{AgentRequest, Cancel, Probe, Restore, StreamParser, TurnCall, Upstream};

pub use wire::agent_thread_id;

pub struct LangGraphSurface;
pub struct LangGraphUpstream;

impl Surface for LangGraphSurface {
    fn claims(&self, method: &str, path: &str) -> bool {
        routes::claims(method, path)
    }

    fn route(&self, req: &ClientRequest) -> Route {
        routes::route(req)
    }

    /// A run body, in the thread the `x-session-id` header names.
    fn parse_request(&self, body: &[u8], session: Option<&str>) -> Result<TurnRequest, InputError> {
        routes::parse_request(body, session)
    }

    fn stream_renderer(&self, run: &RunInfo) -> Box<dyn StreamRenderer> {
        render::stream_renderer(run)
    }

    fn final_body(&self, run: &RunInfo, events: &[Event]) -> Value {
        render::final_body(run, events)
    }

    fn final_response(&self, run: &RunInfo, events: &[Event]) -> (u16, Value) {
        render::final_response(run, events)
    }

    fn early_response(&self, run: &RunInfo, events: &[Event]) -> Option<(u16, Value)> {
        render::early_response(run, events)
    }

    fn snapshot(&self, run: &RunInfo, events: &[Event]) -> Value {
        render::snapshot(run, events)
    }

    /// `DELETE /threads/{id}`.
    fn deletes_session(&self, req: &ClientRequest) -> Option<String> {
        routes::deletes_thread(req)
    }

    /// The agent's thread ids back to the client's, Tether's metadata removed.
    fn rewrite_forwarded(&self, req: &ClientRequest, _public_url: &str, mut body: Value) -> Value {
        match routes::thread_of(req.path) {
            Some(thread) => {
                let agent = agent_thread_id(req.account_id, &thread);
                wire::unscope(&mut body, &agent, &thread);
            }
            None => wire::unscope_threads(&mut body),
        }
        body
    }

    /// FastAPI's error body.
    fn error_body(
        &self,
        message: &str,
        _kind: &str,
        _param: Option<&str>,
        _code: Option<&str>,
    ) -> Value {
        json!({ "detail": message })
    }
}

impl Upstream for LangGraphUpstream {
    fn protocol(&self) -> Protocol {
        Protocol::LangGraph
    }

    fn request(&self, call: &TurnCall) -> AgentRequest {
        request::LangGraphTurn::of(call).request(call)
    }

    fn parser(&self, call: &TurnCall, content_type: &str) -> Box<dyn StreamParser> {
        let t = request::LangGraphTurn::of(call);
        Box::new(parse::LangGraphParser::new(
            content_type.contains("text/event-stream"),
            t.added,
            t.agent_thread,
            call.session_id.to_owned(),
        ))
    }

    fn probe(&self, call: &TurnCall) -> Probe {
        restore::probe(call)
    }

    fn forgot(&self, status: u16, body: &[u8]) -> bool {
        restore::forgot(status, body)
    }

    fn restore(&self, call: &TurnCall) -> Option<Restore> {
        restore::restore(call)
    }

    /// `POST /threads/{id}/runs/{run_id}/cancel` at the agent (for runs a LangGraph client
    /// started: the turn knows the agent's thread).
    fn cancel(&self, turn: &TurnRequest) -> Option<Cancel> {
        let thread = turn.extra.get("langgraph")?["agent_thread"]
            .as_str()?
            .to_owned();
        Some(Box::new(move |run_id| {
            AgentRequest::post(format!("/threads/{thread}/runs/{run_id}/cancel"), json!({}))
        }))
    }
}
