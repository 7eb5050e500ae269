//! Google ADK `adk api_server`: the client surface (`POST /run`, `POST /run_sse` and the
//! `/apps/{app}/users/{user}/…` session API) and the upstream adapter for agents it serves.
//!
//! ADK keeps each conversation itself, keyed by (app, user, session). Tether binds ADK's
//! user id to the caller's account: the agent only ever sees `<account>~<user>` (the
//! account percent-escaped so it never holds a `~`), in paths and in `/run` bodies, and
//! Tether strips that prefix from what it relays back. Two accounts using the same user
//! and session ids never meet, and no user id a client can send reaches another
//! account's namespace.
//!
//! Turns go to the agent as the client sent them (`/run` answers one JSON array of
//! events, `/run_sse` one `data: <event>` frame per event and no end marker). Each ADK
//! event is recorded verbatim as an `agent_event` and rendered back as it came; the
//! transcript gets the aggregated (non-`partial`) text, tool calls and tool results, with
//! the event's author kept beside them so a session the agent forgot can be re-created
//! with `POST …/sessions {session_id, state, events}`. A session the client deletes is
//! not re-created.
//!
//! Where things are:
//! - `namespace`: the account binding of user ids, and the URL escaping it needs;
//! - `routes`: what the surface claims, and what each client request becomes;
//! - `content`: ADK `Content` parts to transcript items and back;
//! - `request`: what one turn asks of the agent;
//! - `parse`: the agent's `/run` and `/run_sse` answers as outputs;
//! - `restore`: a session the agent forgot, re-created from the history (and a
//!   confirmation it was waiting on, asked for again);
//! - `render`: committed events back as ADK's own answers.

mod content;
mod namespace;
mod parse;
mod render;
mod request;
mod restore;
mod routes;
#[cfg(test)]
mod test_support;

use serde_json::{json, Map, Value};
use session_log::Event;

use crate::protocol::Protocol;
use crate::surface::{ClientRequest, Route, RunInfo, StreamRenderer, Surface};
use crate::turn::{InputError, TurnRequest};
use crate::upstream::{AgentRequest, Restore, StreamParser, TurnCall, Upstream};

pub use namespace::{agent_user_id, client_user_id};

pub struct AdkSurface;
pub struct AdkUpstream;

const RUN: &str = "/run";
const RUN_SSE: &str = "/run_sse";
const RUN_LIVE: &str = "/run_live";
/// Takes a `user_id` in its body, so it is claimed to namespace it like the others.
const FINALIZE_IDENTITY: &str = "/agent-identity/finalize";

/// The user id a turn arriving on a non-ADK surface (an OpenAI client in front of an ADK
/// agent) runs under, inside the account's namespace.
pub(crate) const DEFAULT_USER: &str = "tether";

/// The code Tether gives an agent error that says the session does not exist; a failed
/// run with this code answers 404, as ADK itself would.
const SESSION_NOT_FOUND: &str = "session_not_found";

/// The key a field is given under: ADK accepts its snake_case name or its camelCase
/// alias and, like pydantic, takes the alias when both are given.
fn alias<'k>(obj: &Map<String, Value>, snake: &'k str, camel: &'k str) -> &'k str {
    if obj.contains_key(camel) {
        camel
    } else {
        snake
    }
}

/// A field under either of its names (see `alias`).
fn field<'a>(obj: &'a Map<String, Value>, snake: &str, camel: &str) -> Option<&'a Value> {
    obj.get(alias(obj, snake, camel))
}

fn field_str<'a>(obj: &'a Map<String, Value>, snake: &str, camel: &str) -> Option<&'a str> {
    field(obj, snake, camel).and_then(Value::as_str)
}

impl Surface for AdkSurface {
    fn claims(&self, method: &str, path: &str) -> bool {
        routes::claims(method, path)
    }

    fn route(&self, req: &ClientRequest) -> Route {
        routes::route(req)
    }

    /// A `/run` body (the gateway routes through `route`, which knows the path).
    fn parse_request(&self, body: &[u8], _h: Option<&str>) -> Result<TurnRequest, InputError> {
        routes::parse_request(body)
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

    /// `DELETE /apps/{app}/users/{user}/sessions/{id}`.
    fn deletes_session(&self, req: &ClientRequest) -> Option<String> {
        routes::deletes_session(req)
    }

    fn rewrite_forwarded(&self, req: &ClientRequest, _public_url: &str, body: Value) -> Value {
        namespace::unscope(body, req.account_id)
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

impl Upstream for AdkUpstream {
    fn protocol(&self) -> Protocol {
        Protocol::Adk
    }

    /// The client's body, addressed to the caller's namespaced user and to the session.
    fn request(&self, call: &TurnCall) -> AgentRequest {
        request::AdkTurn::of(call).request(call.account_id)
    }

    fn parser(&self, call: &TurnCall, content_type: &str) -> Box<dyn StreamParser> {
        parse::parser(call, content_type)
    }

    fn forgot(&self, status: u16, body: &[u8]) -> bool {
        restore::forgot(status, body)
    }

    fn restore(&self, call: &TurnCall) -> Option<Restore> {
        restore::restore(call)
    }

    fn readdress(&self, call: &TurnCall, asked: &Value) -> Option<AgentRequest> {
        restore::readdress(call, asked)
    }
}
