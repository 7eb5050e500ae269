//! The client's requests: which paths the LangGraph surface claims, runs as turns, and the
//! thread API forwarded with each thread id put into the caller's account (see
//! `wire::agent_thread_id`); run reads, joins, re-streams and cancels answered from the log.

use serde_json::{json, Map, Value};

use super::wire::{
    agent_thread_id, canonical_thread_id, input_items, stream_modes, thread_metadata, META_ACCOUNT,
};
use crate::protocol::Protocol;
use crate::surface::{forward, static_method, ClientRequest, Route};
use crate::turn::{InputError, SessionRef, TurnRequest};

const THREADS: &str = "/threads";

/// How a client asked for a run, and so how it is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// `POST /threads/{id}/runs/stream`: the run's events as they come.
    Stream,
    /// `POST /threads/{id}/runs/wait`: the thread's final values.
    Wait,
    /// `POST /threads/{id}/runs`: the run object at once; the run goes on.
    Background,
}

impl Mode {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Mode::Stream => "stream",
            Mode::Wait => "wait",
            Mode::Background => "background",
        }
    }

    pub(super) fn of(client: &Value) -> Option<Mode> {
        match client["mode"].as_str()? {
            "stream" => Some(Mode::Stream),
            "wait" => Some(Mode::Wait),
            "background" => Some(Mode::Background),
            _ => None,
        }
    }
}

pub(super) fn claims(_method: &str, path: &str) -> bool {
    path == THREADS || path.starts_with("/threads/")
}

pub(super) fn route(req: &ClientRequest) -> Route {
    let method = req.method.to_ascii_uppercase();
    match (method.as_str(), req.path) {
        ("POST", THREADS) => create(req),
        ("POST", "/threads/search" | "/threads/count") => search(req),
        (_, "/threads/search" | "/threads/count" | THREADS) => detail(405, "Method Not Allowed"),
        (_, "/threads/prune") => unavailable("Pruning threads"),
        (_, path) => {
            let rest = &path["/threads/".len()..];
            let (id, rest) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            match canonical_thread_id(id) {
                Some(thread) => thread_route(req, &method, &thread, rest),
                None => detail(400, "badly formed hexadecimal UUID string"),
            }
        }
    }
}

/// The thread a request names (`/threads/{id}…`), as the client knows it.
pub(super) fn thread_of(path: &str) -> Option<String> {
    let rest = path.strip_prefix("/threads/")?;
    canonical_thread_id(rest.split('/').next()?)
}

/// `DELETE /threads/{id}`: the thread it deletes.
pub(super) fn deletes_thread(req: &ClientRequest) -> Option<String> {
    let thread = thread_of(req.path)?;
    let whole = req.path.trim_end_matches('/').matches('/').count() == 2;
    (req.method.eq_ignore_ascii_case("DELETE") && whole).then_some(thread)
}

fn thread_route(req: &ClientRequest, method: &str, thread: &str, rest: &str) -> Route {
    let segments: Vec<&str> = rest.trim_matches('/').split('/').collect();
    match (method, segments.as_slice()) {
        ("POST", ["runs", "stream"]) => run(req, thread, Mode::Stream),
        ("POST", ["runs", "wait"]) => run(req, thread, Mode::Wait),
        ("POST", ["runs"]) => run(req, thread, Mode::Background),
        ("GET", ["runs", run_id]) if *run_id != "crons" => run_read(req, run_id, "get"),
        ("GET", ["runs", run_id, "join"]) => run_read(req, run_id, "join"),
        ("GET", ["runs", run_id, "stream"]) => run_read(req, run_id, "stream"),
        ("POST", ["runs", run_id, "cancel"]) => run_read(req, run_id, "cancel"),
        (_, ["copy"]) => unavailable("Copying a thread"),
        _ => {
            let body = match json_body(req.body) {
                Ok(body) => body,
                Err(e) => return detail(422, e),
            };
            let agent = agent_thread_id(req.account_id, thread);
            forward_as(req, method, format!("/threads/{agent}{rest}"), body)
        }
    }
}

// ---------------------------------------------------------------------------------------
// Runs
// ---------------------------------------------------------------------------------------

/// A run as a turn: the input's messages as its input, the thread as its session, and in
/// `extra` the client's own body for the upstream to send on.
fn run(req: &ClientRequest, thread: &str, mode: Mode) -> Route {
    let body = match json_body(req.body) {
        Ok(Some(Value::Object(body))) => body,
        Ok(_) => return detail(422, "The body must be a JSON object."),
        Err(e) => return detail(422, e),
    };
    match parse_run(&body, thread, mode) {
        Ok(mut turn) => {
            // What a cancel needs (it is given the turn only).
            let agent = agent_thread_id(req.account_id, thread);
            turn.extra["langgraph"]["agent_thread"] = agent.into();
            Route::Run(turn)
        }
        Err(e) => detail(422, e.message),
    }
}

fn parse_run(
    body: &Map<String, Value>,
    thread: &str,
    mode: Mode,
) -> Result<TurnRequest, InputError> {
    let assistant = match body.get("assistant_id") {
        Some(Value::String(a)) if !a.is_empty() => a.clone(),
        _ => {
            return Err(InputError::new(
                "invalid_request",
                Some("assistant_id"),
                "assistant_id is required",
            ))
        }
    };
    let mut turn = TurnRequest::new(Protocol::LangGraph);
    turn.model = Some(assistant.clone());
    turn.session = SessionRef::Named(thread.to_owned());
    turn.input = input_items(body.get("input").unwrap_or(&Value::Null));
    turn.stream = mode == Mode::Stream;
    turn.extra.insert(
        "client".into(),
        json!({
            "mode": mode.as_str(),
            "thread_id": thread,
            "assistant_id": assistant,
            "modes": stream_modes(body),
        }),
    );
    turn.extra
        .insert("langgraph".into(), json!({ "body": body }));
    Ok(turn)
}

/// A request about one run, answered from the log: `op` is `get`, `join`, `stream` (with
/// `Last-Event-ID`) or `cancel`.
fn run_read(req: &ClientRequest, run_id: &str, op: &str) -> Route {
    let agent_ref = run_id.to_owned();
    let client = json!({ "op": op });
    let not_found = (404, json!({ "detail": format!("Run {run_id} not found") }));
    match op {
        "join" => Route::Join {
            agent_ref,
            client,
            not_found,
        },
        "stream" => Route::Subscribe {
            agent_ref,
            last_event_id: req.last_event_id(),
            client,
            not_found,
        },
        "cancel" => Route::Cancel {
            agent_ref,
            client,
            not_found,
            ask_agent: None,
        },
        _ => Route::Get {
            agent_ref,
            client,
            not_found,
        },
    }
}

/// A `POST /runs…` body as `Surface::parse_request` gives it: a streamed run in a thread
/// named by the `x-session-id` header.
pub(super) fn parse_request(
    body: &[u8],
    session_header: Option<&str>,
) -> Result<TurnRequest, InputError> {
    let Ok(Value::Object(body)) = serde_json::from_slice::<Value>(body) else {
        return Err(InputError::new(
            "invalid_json",
            None,
            "The body must be a JSON object.",
        ));
    };
    let thread = session_header
        .and_then(canonical_thread_id)
        .ok_or_else(|| InputError::new("invalid_request", None, "a thread id is required"))?;
    parse_run(&body, &thread, Mode::Stream)
}

// ---------------------------------------------------------------------------------------
// Threads
// ---------------------------------------------------------------------------------------

/// `POST /threads`: the thread created under the caller's account (an id Tether picks
/// when the client names none), with Tether's metadata on it.
fn create(req: &ClientRequest) -> Route {
    let mut body = match json_body(req.body) {
        Ok(None) => Map::new(),
        Ok(Some(Value::Object(body))) => body,
        Ok(Some(_)) => return detail(422, "The body must be a JSON object."),
        Err(e) => return detail(422, e),
    };
    let thread = match body.get("thread_id") {
        None | Some(Value::Null) => uuid::Uuid::new_v4().hyphenated().to_string(),
        Some(Value::String(id)) => match canonical_thread_id(id) {
            Some(id) => id,
            None => return detail(422, "thread_id: badly formed hexadecimal UUID string"),
        },
        Some(_) => return detail(422, "thread_id: Input should be a valid UUID"),
    };
    let mut metadata = match body.remove("metadata") {
        Some(Value::Object(m)) => m,
        _ => Map::new(),
    };
    if let Value::Object(ours) = thread_metadata(req.account_id, &thread) {
        metadata.extend(ours);
    }
    body.insert(
        "thread_id".into(),
        agent_thread_id(req.account_id, &thread).into(),
    );
    body.insert("metadata".into(), Value::Object(metadata));
    forward(req, "POST", THREADS.to_owned(), Some(Value::Object(body)))
}

/// `POST /threads/search` and `/count`: only the caller's threads (Tether's metadata as a
/// filter), ids asked for put into the account.
fn search(req: &ClientRequest) -> Route {
    let mut body = match json_body(req.body) {
        Ok(None) => Map::new(),
        Ok(Some(Value::Object(body))) => body,
        Ok(Some(_)) => return detail(422, "The body must be a JSON object."),
        Err(e) => return detail(422, e),
    };
    let mut metadata = match body.remove("metadata") {
        Some(Value::Object(m)) => m,
        _ => Map::new(),
    };
    metadata.insert(META_ACCOUNT.into(), req.account_id.into());
    body.insert("metadata".into(), Value::Object(metadata));
    if let Some(Value::Array(ids)) = body.get_mut("ids") {
        for id in ids.iter_mut() {
            if let Some(thread) = id.as_str().and_then(canonical_thread_id) {
                *id = agent_thread_id(req.account_id, &thread).into();
            }
        }
    }
    forward(req, "POST", req.path.to_owned(), Some(Value::Object(body)))
}

// ---------------------------------------------------------------------------------------
// Forwarding and FastAPI's answers
// ---------------------------------------------------------------------------------------

/// Sends `path` (plus the client's query) to the agent, in the request's method.
fn forward_as(req: &ClientRequest, method: &str, path: String, body: Option<Value>) -> Route {
    match static_method(method) {
        Some(method) => forward(req, method, path, body),
        None => detail(405, "Method Not Allowed"),
    }
}

/// A request body: none when empty, JSON otherwise (the message of FastAPI's 422 when it
/// is not).
fn json_body(body: &[u8]) -> Result<Option<Value>, String> {
    if body.trim_ascii().is_empty() {
        return Ok(None);
    }
    serde_json::from_slice(body)
        .map(Some)
        .map_err(|e| format!("JSON decode error: {e}"))
}

fn detail(status: u16, detail: impl Into<Value>) -> Route {
    Route::Reply {
        status,
        body: json!({ "detail": detail.into() }),
    }
}

/// What Tether does not offer for a thread: an operation that would make (or drop)
/// threads outside the account's.
fn unavailable(what: &str) -> Route {
    detail(501, format!("{what} is not available through Tether."))
}
