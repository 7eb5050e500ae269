//! A2A (Agent2Agent): the client surface for A2A clients and the upstream adapter for
//! A2A agents, over both transports (JSON-RPC and HTTP+JSON) and both protocol versions
//! (0.3 and 1.0) that a2a-sdk 1.x serves.
//!
//! An A2A agent keeps its conversations itself (its `contextId` is Tether's session), so
//! Tether forwards the client's own request, addressed to the session, and records every
//! result the agent sends verbatim as an `agent_event`. Answering an A2A client is
//! replaying those frames; a task's state (`tasks/get`, a cancel's answer, a non-streaming
//! send) is folded from them. That is what lets a stream reconnect, `tasks/get` and
//! cancel keep working after the agent forgot the task, and lets Tether put a lost
//! conversation back into the agent from the log before the next turn.
//!
//! The wire has three spellings of the same objects (see [`Dialect`]). Frames are
//! recorded in the agent's spelling and converted through v1.0's form only when a client
//! that speaks another one reads them.

use std::fmt::Write as _;

use chrono::SecondsFormat;
use serde_json::{json, Map, Value};
use session_log::{Event, EventType, RunStatus};

use crate::item::{Block, Item};
use crate::sse::{SseFrame, SseParser};
use crate::surface::{ClientRequest, Route, RunInfo, StreamRenderer, Surface};
use crate::turn::{InputError, SessionRef, TurnRequest};
use crate::upstream::{
    AgentRequest, Output, Probe, Protocol, Restore, StreamParser, TurnCall, Upstream,
};

pub struct A2aSurface;
pub struct A2aUpstream;

const VERSION_HEADER: &str = "A2A-Version";
/// Request headers of the protocol's own, passed on to the agent with the client's request.
const PROTOCOL_HEADERS: &[&str] = &["A2A-Version", "A2A-Extensions", "X-A2A-Extensions"];

// JSON-RPC 2.0 and A2A error codes.
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
const INTERNAL_ERROR: i64 = -32603;
const TASK_NOT_FOUND: i64 = -32001;
const TASK_NOT_CANCELABLE: i64 = -32002;
const UNSUPPORTED_OPERATION: i64 = -32004;
const VERSION_NOT_SUPPORTED: i64 = -32009;

/// Task states (short form) after which the agent waits for nothing more in this task:
/// the turn is over.
const TERMINAL_STATES: &[&str] = &[
    "completed",
    "failed",
    "canceled",
    "rejected",
    "input-required",
    "auth-required",
];

// ---------------------------------------------------------------------------------------
// Who is asking: transport, version, dialect
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Transport {
    JsonRpc,
    Rest,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Version {
    V03,
    V10,
}

impl Version {
    fn as_str(self) -> &'static str {
        match self {
            Version::V03 => "0.3",
            Version::V10 => "1.0",
        }
    }
}

/// How tasks, messages and events are spelled on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dialect {
    /// v0.3 JSON-RPC: objects tagged with `kind`, `role: "user"`, `state: "completed"`,
    /// parts `{"kind":"text","text":…}`, `final` on status updates.
    Kinded,
    /// v1.0 on both transports (protobuf JSON): results wrapped as `{"task": …}`,
    /// `{"statusUpdate": …}`…, `ROLE_USER`, `TASK_STATE_COMPLETED`, parts `{"text": …}`.
    /// Tether's canonical form.
    Proto,
    /// v0.3 HTTP+JSON (the v0.3 protobuf's JSON): like `Proto`, but message parts under
    /// `content`, `TASK_STATE_CANCELLED`, file parts nested, and `final` on status updates.
    Proto03,
}

/// A JSON-RPC operation Tether takes part in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Send,
    Stream,
    Get,
    Cancel,
    Subscribe,
}

/// `(v0.3 method, v1.0 method, operation)`.
const METHODS: &[(&str, &str, Op)] = &[
    ("message/send", "SendMessage", Op::Send),
    ("message/stream", "SendStreamingMessage", Op::Stream),
    ("tasks/get", "GetTask", Op::Get),
    ("tasks/cancel", "CancelTask", Op::Cancel),
    ("tasks/resubscribe", "SubscribeToTask", Op::Subscribe),
];

fn method_op(method: &str) -> Option<(Version, Op)> {
    METHODS.iter().find_map(|(v03, v10, op)| {
        if method == *v03 {
            Some((Version::V03, *op))
        } else if method == *v10 {
            Some((Version::V10, *op))
        } else {
            None
        }
    })
}

fn method_name(version: Version, op: Op) -> &'static str {
    let (v03, v10, _) = METHODS
        .iter()
        .find(|(_, _, o)| *o == op)
        .expect("every operation has a method");
    match version {
        Version::V03 => v03,
        Version::V10 => v10,
    }
}

/// What the surface keeps from a client's request to answer it in kind: `RunInfo::client`.
#[derive(Clone, Debug, PartialEq)]
struct Client {
    transport: Transport,
    version: Version,
    /// The JSON-RPC method, or for HTTP+JSON the operation (`message:send`, `get`, …).
    method: String,
    /// The JSON-RPC request id (`null` for HTTP+JSON).
    id: Value,
    /// `historyLength` of a get: how much of the task's history to show.
    history_length: Option<i64>,
}

impl Client {
    fn new(transport: Transport, version: Version, method: &str, id: Value) -> Self {
        Client {
            transport,
            version,
            method: method.to_owned(),
            id,
            history_length: None,
        }
    }

    fn dialect(&self) -> Dialect {
        match (self.version, self.transport) {
            (Version::V10, _) => Dialect::Proto,
            (Version::V03, Transport::JsonRpc) => Dialect::Kinded,
            (Version::V03, Transport::Rest) => Dialect::Proto03,
        }
    }

    fn to_value(&self) -> Value {
        let mut v = json!({
            "transport": match self.transport { Transport::JsonRpc => "jsonrpc", Transport::Rest => "rest" },
            "version": self.version.as_str(),
            "method": self.method,
            "id": self.id,
        });
        if let Some(n) = self.history_length {
            v["historyLength"] = json!(n);
        }
        v
    }

    /// The client a value describes. A run started by another surface has none: it is
    /// shown as v1.0 JSON-RPC, the current protocol.
    fn from_value(v: &Value) -> Client {
        let s = |k: &str| v.get(k).and_then(Value::as_str);
        Client {
            transport: if s("transport") == Some("rest") {
                Transport::Rest
            } else {
                Transport::JsonRpc
            },
            version: if s("version") == Some("0.3") {
                Version::V03
            } else {
                Version::V10
            },
            method: s("method").unwrap_or("SendMessage").to_owned(),
            id: v.get("id").cloned().unwrap_or(Value::Null),
            history_length: v.get("historyLength").and_then(Value::as_i64),
        }
    }

    /// A result as this client receives it: in a JSON-RPC response, or bare.
    fn response(&self, result: Value) -> Value {
        match self.transport {
            Transport::JsonRpc => json!({ "jsonrpc": "2.0", "id": self.id, "result": result }),
            Transport::Rest => result,
        }
    }

    /// An error as this client receives it, with its HTTP status (JSON-RPC errors travel
    /// in a 200).
    fn error(&self, code: i64, message: &str) -> (u16, Value) {
        match self.transport {
            Transport::JsonRpc => (200, rpc_error(&self.id, code, message, None)),
            Transport::Rest => rest_error(code, message, None),
        }
    }

    fn is_cancel(&self) -> bool {
        matches!(
            self.method.as_str(),
            "tasks/cancel" | "CancelTask" | "cancel"
        )
    }
}

fn rpc_error(id: &Value, code: i64, message: &str, data: Option<Value>) -> Value {
    let mut error = json!({ "code": code, "message": message });
    if let Some(data) = data {
        error["data"] = data;
    }
    json!({ "jsonrpc": "2.0", "id": id, "error": error })
}

/// An HTTP+JSON error in the SDK's shape (`google.rpc.Status` JSON), from the JSON-RPC
/// code that names the same condition.
fn rest_error(code: i64, message: &str, details: Option<Value>) -> (u16, Value) {
    let (http, status) = match code {
        TASK_NOT_FOUND | METHOD_NOT_FOUND => (404, "NOT_FOUND"),
        TASK_NOT_CANCELABLE | UNSUPPORTED_OPERATION | VERSION_NOT_SUPPORTED => {
            (400, "FAILED_PRECONDITION")
        }
        PARSE_ERROR | INVALID_REQUEST | INVALID_PARAMS => (400, "INVALID_ARGUMENT"),
        _ => (500, "INTERNAL"),
    };
    let mut error = json!({ "code": http, "status": status, "message": message });
    if let Some(details) = details {
        error["details"] = details;
    }
    (http, json!({ "error": error }))
}

/// The `google.rpc.ErrorInfo` detail the SDK attaches to v1.0 errors.
fn error_info(reason: &str) -> Value {
    json!([{
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": reason,
        "domain": "a2a-protocol.org",
        "metadata": {},
    }])
}

fn version_message(actual: &str, expected: Version) -> String {
    format!(
        "A2A version '{actual}' is not supported by this handler. Expected version '{}'.",
        expected.as_str()
    )
}

/// The major version an `A2A-Version` header names (`"1.0"` → 1).
fn header_major(header: &str) -> Option<u64> {
    header.trim().split('.').next()?.parse().ok()
}

// ---------------------------------------------------------------------------------------
// Client surface: which requests, and what they ask for
// ---------------------------------------------------------------------------------------

/// An HTTP+JSON operation, with the REST base path before it (`/rest/`, `/rest/v1/`).
#[derive(Clone, Debug, PartialEq)]
enum RestOp {
    Send,
    Stream,
    Get(String),
    Cancel(String),
    Subscribe(String),
}

fn rest_op(method: &str, path: &str) -> Option<(RestOp, String)> {
    if method == "POST" {
        if let Some(base) = path.strip_suffix("message:send") {
            return base.ends_with('/').then(|| (RestOp::Send, base.to_owned()));
        }
        if let Some(base) = path.strip_suffix("message:stream") {
            return base
                .ends_with('/')
                .then(|| (RestOp::Stream, base.to_owned()));
        }
    }
    let i = path.rfind("/tasks/")?;
    let base = &path[..=i];
    let rest = &path[i + "/tasks/".len()..];
    if rest.is_empty() || rest.contains('/') {
        return None;
    }
    let op = if let Some(id) = rest.strip_suffix(":cancel") {
        (method == "POST").then(|| RestOp::Cancel(decode_segment(id)))
    } else if let Some(id) = rest.strip_suffix(":subscribe") {
        matches!(method, "GET" | "POST").then(|| RestOp::Subscribe(decode_segment(id)))
    } else if !rest.contains(':') {
        (method == "GET").then(|| RestOp::Get(decode_segment(rest)))
    } else {
        None
    };
    op.filter(|op| !matches!(op, RestOp::Get(id) | RestOp::Cancel(id) | RestOp::Subscribe(id) if id.is_empty()))
        .map(|op| (op, base.to_owned()))
}

/// Where agent cards are served: the public card and the authenticated extended card.
fn is_card_path(method: &str, path: &str) -> bool {
    method == "GET"
        && (path.ends_with("/.well-known/agent-card.json")
            || path.ends_with("/.well-known/agent.json")
            || path.ends_with("/extendedAgentCard")
            || path.ends_with("/v1/card"))
}

/// The JSON-RPC endpoint: the agent card's `url` is `/` for a2a-sdk servers; `/a2a`,
/// `/jsonrpc` and `/rpc` are the other mount points seen in the wild.
fn is_jsonrpc_path(method: &str, path: &str) -> bool {
    let p = path.trim_end_matches('/');
    method == "POST"
        && (p.is_empty() || p.ends_with("/a2a") || p.ends_with("/jsonrpc") || p.ends_with("/rpc"))
}

fn path_and_query(req: &ClientRequest) -> String {
    match req.query {
        Some(q) if !q.is_empty() => format!("{}?{q}", req.path),
        _ => req.path.to_owned(),
    }
}

fn query_param<'a>(query: Option<&'a str>, name: &str) -> Option<&'a str> {
    query?
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// The client's protocol headers, to send on to the agent.
fn protocol_headers(req: &ClientRequest) -> Vec<(String, String)> {
    PROTOCOL_HEADERS
        .iter()
        .filter_map(|name| req.header(name).map(|v| (name.to_string(), v.to_owned())))
        .collect()
}

fn with_headers(mut request: AgentRequest, headers: &[(String, String)]) -> AgentRequest {
    for (name, value) in headers {
        request = request.with_header(name, value);
    }
    request
}

/// A reconnecting client's cursor: the SSE `Last-Event-ID` Tether put on each frame.
fn last_event_id(req: &ClientRequest) -> Option<i64> {
    req.header("Last-Event-ID")?.trim().parse().ok()
}

fn reply(status: u16, body: Value) -> Route {
    Route::Reply { status, body }
}

/// A message the client got wrong, reported the way the SDK reports it.
#[derive(Debug)]
struct ParamError {
    field: String,
    description: String,
}

impl ParamError {
    fn new(field: &str, description: impl Into<String>) -> Self {
        ParamError {
            field: field.to_owned(),
            description: description.into(),
        }
    }

    /// v0.3 validates with pydantic (`-32600 Invalid Request`, the reason in `data`);
    /// v1.0 with protobuf (`-32602 Validation failed`, field violations in `data`).
    fn to_rpc(&self, id: &Value, version: Version) -> Value {
        match version {
            Version::V03 => rpc_error(
                id,
                INVALID_REQUEST,
                "Invalid Request",
                Some(json!(format!("{}: {}", self.field, self.description))),
            ),
            Version::V10 => rpc_error(
                id,
                INVALID_PARAMS,
                "Validation failed",
                Some(self.details()),
            ),
        }
    }

    fn to_rest(&self) -> Route {
        let (status, body) = rest_error(INVALID_PARAMS, "Validation failed", Some(self.details()));
        reply(status, body)
    }

    fn details(&self) -> Value {
        json!([
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "INVALID_PARAMS",
                "domain": "a2a-protocol.org",
                "metadata": { "errors": [{ "field": self.field, "message": self.description }] },
            },
            {
                "@type": "type.googleapis.com/google.rpc.BadRequest",
                "fieldViolations": [{ "field": self.field, "description": self.description }],
            },
        ])
    }
}

impl Surface for A2aSurface {
    fn claims(&self, method: &str, path: &str) -> bool {
        let path = path.split('?').next().unwrap_or(path);
        is_card_path(method, path)
            || rest_op(method, path).is_some()
            || is_jsonrpc_path(method, path)
    }

    fn route(&self, req: &ClientRequest) -> Route {
        let headers = protocol_headers(req);
        if is_card_path(req.method, req.path) {
            return Route::Forward(with_headers(
                AgentRequest::get(path_and_query(req)),
                &headers,
            ));
        }
        match rest_op(req.method, req.path) {
            Some((op, base)) => route_rest(req, op, &base, &headers),
            None => route_jsonrpc(req, &headers),
        }
    }

    /// For callers holding only a JSON-RPC body: the version is the one its method
    /// belongs to.
    fn parse_request(
        &self,
        body: &[u8],
        _session_header: Option<&str>,
    ) -> Result<TurnRequest, InputError> {
        let method = serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|b| b.get("method").and_then(Value::as_str).map(str::to_owned));
        let v10 = method.as_deref().and_then(method_op).map(|(v, _)| v) == Some(Version::V10);
        let headers: &[(&str, &str)] = if v10 { &[(VERSION_HEADER, "1.0")] } else { &[] };
        let req = ClientRequest {
            method: "POST",
            path: "/",
            query: None,
            headers,
            body,
            account_id: "",
        };
        match self.route(&req) {
            Route::Run(turn) => Ok(turn),
            Route::Reply { body, .. } => Err(InputError::new(
                "invalid_request",
                None,
                body["error"]["message"]
                    .as_str()
                    .unwrap_or("Invalid request"),
            )),
            _ => Err(InputError::new(
                "invalid_request",
                None,
                "The request is not a message send.",
            )),
        }
    }

    fn stream_renderer(&self, run: &RunInfo) -> Box<dyn StreamRenderer> {
        Box::new(A2aRenderer {
            client: Client::from_value(&run.client),
            run_id: run.run_id.clone(),
            task: None,
            ended: false,
            error: None,
        })
    }

    /// The answer to a non-streaming send: the task (or the agent's message reply) as a
    /// send returns it.
    fn final_body(&self, run: &RunInfo, events: &[Event]) -> Value {
        let client = Client::from_value(&run.client);
        let view = RunView::of(run, events);
        let d = client.dialect();
        let result = match (&view.fold.task, &view.fold.message) {
            (Some(task), _) => {
                let task = task_from_v10(&apply_history_length(task, client.history_length), d);
                match d {
                    Dialect::Kinded => task,
                    Dialect::Proto | Dialect::Proto03 => json!({ "task": task }),
                }
            }
            (None, Some(message)) => match d {
                Dialect::Kinded => message_from_v10(message, d),
                Dialect::Proto | Dialect::Proto03 => {
                    json!({ "message": message_from_v10(message, d) })
                }
            },
            (None, None) => Value::Null,
        };
        client.response(result)
    }

    /// A2A answers a send with the task in whatever state it reached (a failed task is a
    /// result, not an error); only a run that produced no task or message is an error,
    /// and JSON-RPC errors travel in an HTTP 200.
    fn final_response(&self, run: &RunInfo, events: &[Event]) -> (u16, Value) {
        let client = Client::from_value(&run.client);
        let view = RunView::of(run, events);
        if view.fold.task.is_some() || view.fold.message.is_some() {
            return (200, self.final_body(run, events));
        }
        let (code, message) = view.error();
        client.error(rpc_code(&code), &message)
    }

    /// The task a get or cancel asks about, from the log.
    fn snapshot(&self, run: &RunInfo, events: &[Event]) -> Value {
        let client = Client::from_value(&run.client);
        let view = RunView::of(run, events);
        let Some(task) = &view.fold.task else {
            return client.error(TASK_NOT_FOUND, "Task not found").1;
        };
        // The agent finished the task before the cancel: as the SDK says, too late.
        let state = short_state(state_of(task));
        if client.is_cancel() && view.agent_ended && state != "canceled" {
            return client
                .error(TASK_NOT_CANCELABLE, "Task cannot be canceled")
                .1;
        }
        let task = task_from_v10(
            &apply_history_length(task, client.history_length),
            client.dialect(),
        );
        client.response(task)
    }

    /// Agent cards name the agent's own address; clients must come back through Tether.
    fn rewrite_forwarded(&self, _req: &ClientRequest, public_url: &str, mut body: Value) -> Value {
        if looks_like_card(&body) {
            rewrite_card(&mut body, public_url);
        } else if let Some(result) = body.get_mut("result").filter(|r| looks_like_card(r)) {
            rewrite_card(result, public_url);
        }
        body
    }

    fn error_body(
        &self,
        message: &str,
        kind: &str,
        param: Option<&str>,
        code: Option<&str>,
    ) -> Value {
        let rpc = if kind == "invalid_request_error" {
            INVALID_REQUEST
        } else {
            INTERNAL_ERROR
        };
        let mut data = json!({ "type": kind, "code": code });
        if let Some(param) = param {
            data["param"] = json!(param);
        }
        rpc_error(&Value::Null, rpc, message, Some(data))
    }

    fn response_id(&self, run_id: &str) -> String {
        run_id.to_owned()
    }

    fn run_id(&self, _response_id: &str) -> Option<String> {
        None
    }
}

/// The JSON-RPC code behind a run's error code (`a2a_error_-32001`, or an HTTP+JSON
/// agent's `a2a_error_404`).
fn rpc_code(code: &str) -> i64 {
    match code
        .strip_prefix("a2a_error_")
        .and_then(|c| c.parse::<i64>().ok())
    {
        Some(c) if c < 0 => c,
        Some(404) => TASK_NOT_FOUND,
        _ => INTERNAL_ERROR,
    }
}

fn route_jsonrpc(req: &ClientRequest, headers: &[(String, String)]) -> Route {
    let body: Value = match serde_json::from_slice(req.body) {
        Ok(body) => body,
        Err(e) => {
            return reply(
                200,
                rpc_error(&Value::Null, PARSE_ERROR, &e.to_string(), None),
            )
        }
    };
    let Value::Object(obj) = &body else {
        let message = if body.is_array() {
            "Batch requests are not supported"
        } else {
            "Invalid Request"
        };
        return reply(200, rpc_error(&Value::Null, INVALID_REQUEST, message, None));
    };
    let id = obj.get("id").cloned().unwrap_or(Value::Null);
    if !(id.is_string() || id.is_i64() || id.is_u64() || id.is_null()) {
        let message = "Invalid request: id must be a string, integer, or null";
        return reply(200, rpc_error(&Value::Null, INVALID_REQUEST, message, None));
    }
    let invalid = |code: i64, message: &str| reply(200, rpc_error(&id, code, message, None));
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid(
            INVALID_REQUEST,
            "Invalid request: 'jsonrpc' must be exactly '2.0'",
        );
    }
    let Some(method) = obj
        .get("method")
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
    else {
        return invalid(INVALID_REQUEST, "Method is required");
    };
    let path = path_and_query(req);
    // Methods Tether has no part in (task lists, push configs, extended card, extensions)
    // go to the agent as they are.
    let Some((version, op)) = method_op(method) else {
        return Route::Forward(with_headers(
            AgentRequest::post(path, body.clone()),
            headers,
        ));
    };

    // The SDK's rule: v1.0 methods need `A2A-Version: 1.x`; without the header a request
    // is v0.3. Refusing here keeps a mismatched request from ever reaching the agent.
    let header = req
        .header(VERSION_HEADER)
        .map(str::trim)
        .filter(|h| !h.is_empty());
    let major = header.and_then(header_major);
    match version {
        Version::V10 if major != Some(1) => {
            let message = version_message(header.unwrap_or("0.3"), Version::V10);
            let data = error_info("VERSION_NOT_SUPPORTED");
            return reply(
                200,
                rpc_error(&id, VERSION_NOT_SUPPORTED, &message, Some(data)),
            );
        }
        Version::V03 if header.is_some() && major != Some(0) => {
            let message = version_message(header.unwrap_or_default(), Version::V03);
            return invalid(INTERNAL_ERROR, &message);
        }
        _ => {}
    }

    let params = obj.get("params").cloned().unwrap_or_else(|| json!({}));
    if !params.is_object() {
        return invalid(INVALID_PARAMS, "Invalid params");
    }
    let mut client = Client::new(Transport::JsonRpc, version, method, id.clone());
    match op {
        Op::Send | Op::Stream => match run_turn(&client, &path, headers, &params, op == Op::Stream)
        {
            Ok(turn) => Route::Run(turn),
            Err(e) => reply(200, e.to_rpc(&id, version)),
        },
        Op::Get | Op::Cancel | Op::Subscribe => {
            let Some(task_id) = params
                .get("id")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
            else {
                let e = ParamError::new("id", "Field is required.");
                return reply(200, e.to_rpc(&id, version));
            };
            client.history_length = params.get("historyLength").and_then(Value::as_i64);
            let fallback = with_headers(AgentRequest::post(path, body.clone()), headers);
            task_route(op, task_id.to_owned(), client, fallback, req)
        }
    }
}

fn task_route(
    op: Op,
    agent_ref: String,
    client: Client,
    fallback: AgentRequest,
    req: &ClientRequest,
) -> Route {
    let client = client.to_value();
    match op {
        Op::Get => Route::Get {
            agent_ref,
            client,
            fallback,
        },
        Op::Cancel => Route::Cancel {
            agent_ref,
            client,
            fallback,
        },
        _ => Route::Subscribe {
            agent_ref,
            after_seq: last_event_id(req),
            client,
        },
    }
}

fn route_rest(req: &ClientRequest, op: RestOp, base: &str, headers: &[(String, String)]) -> Route {
    // v1.0 routes sit at the base, v0.3's under `v1/`; the header decides as in JSON-RPC.
    let header = req
        .header(VERSION_HEADER)
        .map(str::trim)
        .filter(|h| !h.is_empty());
    let version = match header.map(header_major) {
        Some(Some(1)) => Version::V10,
        None | Some(Some(0)) if base.ends_with("/v1/") => Version::V03,
        _ => {
            let message = version_message(header.unwrap_or("0.3"), Version::V10);
            let (status, body) = rest_error(
                VERSION_NOT_SUPPORTED,
                &message,
                Some(error_info("VERSION_NOT_SUPPORTED")),
            );
            return reply(status, body);
        }
    };
    let name = match &op {
        RestOp::Send => "message:send",
        RestOp::Stream => "message:stream",
        RestOp::Get(_) => "get",
        RestOp::Cancel(_) => "cancel",
        RestOp::Subscribe(_) => "subscribe",
    };
    let mut client = Client::new(Transport::Rest, version, name, Value::Null);
    let path = path_and_query(req);
    // The body, or the HTTP+JSON error for one that is not JSON.
    let body = || -> Result<Value, (u16, Value)> {
        if req.body.trim_ascii().is_empty() {
            return Ok(json!({}));
        }
        serde_json::from_slice(req.body)
            .map_err(|e| rest_error(PARSE_ERROR, &format!("Invalid JSON body: {e}"), None))
    };
    match op {
        RestOp::Send | RestOp::Stream => {
            let params = match body() {
                Ok(params @ Value::Object(_)) => params,
                Ok(_) => return ParamError::new("", "The body must be a JSON object.").to_rest(),
                Err((status, body)) => return reply(status, body),
            };
            match run_turn(&client, &path, headers, &params, op == RestOp::Stream) {
                Ok(turn) => Route::Run(turn),
                Err(e) => e.to_rest(),
            }
        }
        RestOp::Get(id) => {
            client.history_length =
                query_param(req.query, "historyLength").and_then(|n| n.parse().ok());
            let fallback = with_headers(AgentRequest::get(path), headers);
            task_route(Op::Get, id, client, fallback, req)
        }
        RestOp::Cancel(id) => {
            let body = match body() {
                Ok(body) => body,
                Err((status, body)) => return reply(status, body),
            };
            let fallback = with_headers(AgentRequest::post(path, body), headers);
            task_route(Op::Cancel, id, client, fallback, req)
        }
        RestOp::Subscribe(id) => {
            let fallback = AgentRequest::get(path);
            task_route(Op::Subscribe, id, client, fallback, req)
        }
    }
}

/// A send's turn: the user's message as the input, the session from its `contextId`,
/// and in `extra` what the upstream needs to send the client's own request on.
fn run_turn(
    client: &Client,
    path: &str,
    headers: &[(String, String)],
    params: &Value,
    stream: bool,
) -> Result<TurnRequest, ParamError> {
    let dialect = client.dialect();
    let key = message_key(params);
    let Some(message) = params.get(key).filter(|m| m.is_object()) else {
        return Err(ParamError::new("message", "Field is required."));
    };
    let blocks = message_blocks(message, dialect)?;
    let context = optional_id(message, "contextId")?;
    let task = optional_id(message, "taskId")?;
    if task.is_some() && context.is_none() {
        // The session is found by contextId; a task alone does not name one here.
        return Err(ParamError::new(
            "message.contextId",
            "Tether needs the contextId of the conversation when a message continues a task.",
        ));
    }
    for field in ["configuration", "metadata"] {
        if params
            .get(field)
            .is_some_and(|v| !v.is_object() && !v.is_null())
        {
            return Err(ParamError::new(field, "Expected an object."));
        }
    }

    let mut turn = TurnRequest::new(Protocol::A2a);
    turn.stream = stream;
    turn.session = match context {
        Some(c) => SessionRef::Named(c),
        None => SessionRef::New,
    };
    turn.input = vec![Item::Message {
        role: "user".into(),
        content: blocks,
    }];
    turn.extra.insert("client".into(), client.to_value());
    turn.extra.insert(
        "a2a".into(),
        json!({
            "path": path,
            "params": params,
            "headers": headers.iter().map(|(n, v)| json!([n, v])).collect::<Vec<_>>(),
        }),
    );
    Ok(turn)
}

/// v0.3's HTTP+JSON body calls the message `request` (its protobuf field name).
fn message_key(params: &Value) -> &'static str {
    if params.get("message").is_none() && params.get("request").is_some() {
        "request"
    } else {
        "message"
    }
}

fn optional_id(message: &Value, field: &str) -> Result<Option<String>, ParamError> {
    match message.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
        Some(Value::String(_)) => Ok(None),
        Some(_) => Err(ParamError::new(
            &format!("message.{field}"),
            "Expected a string.",
        )),
    }
}

/// The user's message as content blocks, checking what the SDK would refuse.
fn message_blocks(message: &Value, dialect: Dialect) -> Result<Vec<Block>, ParamError> {
    if message
        .get("messageId")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return Err(ParamError::new("message.messageId", "Field is required."));
    }
    let role = message.get("role");
    let role_ok = match dialect {
        Dialect::Kinded => matches!(role.and_then(Value::as_str), Some("user" | "agent")),
        Dialect::Proto | Dialect::Proto03 => {
            matches!(
                role.and_then(Value::as_str),
                Some("ROLE_USER" | "ROLE_AGENT")
            ) || matches!(role.and_then(Value::as_i64), Some(1 | 2))
        }
    };
    if !role_ok {
        let expected = match dialect {
            Dialect::Kinded => "Input should be 'agent' or 'user'.",
            _ => "Field is required.",
        };
        return Err(ParamError::new("message.role", expected));
    }
    let parts_key = if dialect == Dialect::Proto03 && message.get("parts").is_none() {
        "content"
    } else {
        "parts"
    };
    let field = format!("message.{parts_key}");
    let parts = match message.get(parts_key) {
        Some(Value::Array(parts)) if !parts.is_empty() => parts,
        Some(Value::Array(_)) | None => {
            return Err(ParamError::new(
                &field,
                "Field must contain at least one element.",
            ))
        }
        Some(_) => return Err(ParamError::new(&field, "Expected a list.")),
    };
    parts
        .iter()
        .enumerate()
        .map(|(i, part)| {
            part_block(part, dialect)
                .ok_or_else(|| ParamError::new(&format!("{field}[{i}]"), "Not a valid part."))
        })
        .collect()
}

/// One part as a content block: text as text, files by URL or inline data, structured
/// data as its JSON text (so the log holds everything the user sent).
fn part_block(part: &Value, dialect: Dialect) -> Option<Block> {
    if dialect == Dialect::Kinded {
        let ok = match part.get("kind").and_then(Value::as_str)? {
            "text" => part.get("text").is_some_and(Value::is_string),
            "file" => part
                .get("file")
                .is_some_and(|f| f.get("uri").is_some() || f.get("bytes").is_some()),
            "data" => part.get("data").is_some(),
            _ => false,
        };
        if !ok {
            return None;
        }
    }
    let part = part_to_v10(part);
    let s = |k: &str| part.get(k).and_then(Value::as_str).map(str::to_owned);
    if let Some(text) = s("text") {
        return Some(Block::Text(text));
    }
    if let Some(url) = s("url") {
        return Some(Block::File {
            filename: s("filename"),
            data: None,
            url: Some(url),
        });
    }
    if let Some(raw) = s("raw") {
        let media = s("mediaType").filter(|m| !m.is_empty());
        let media = media.as_deref().unwrap_or("application/octet-stream");
        return Some(Block::File {
            filename: s("filename"),
            data: Some(format!("data:{media};base64,{raw}")),
            url: None,
        });
    }
    part.get("data").map(|d| Block::Text(d.to_string()))
}

// ---------------------------------------------------------------------------------------
// Frames: conversion to and from v1.0's form
// ---------------------------------------------------------------------------------------

/// A state in short form, whatever the spelling: `TASK_STATE_INPUT_REQUIRED` and
/// `input-required` are both `input-required`; v0.3 protobuf's `CANCELLED` is `canceled`.
fn short_state(state: &str) -> String {
    let s = state
        .strip_prefix("TASK_STATE_")
        .unwrap_or(state)
        .to_ascii_lowercase()
        .replace('_', "-");
    match s.as_str() {
        "cancelled" => "canceled".into(),
        "unspecified" | "" => "unknown".into(),
        _ => s,
    }
}

fn state_to_v10(state: &str) -> String {
    match short_state(state).as_str() {
        "unknown" => "TASK_STATE_UNSPECIFIED".into(),
        s => format!("TASK_STATE_{}", s.to_ascii_uppercase().replace('-', "_")),
    }
}

fn state_from_v10(state: &str, dialect: Dialect) -> String {
    match dialect {
        Dialect::Proto => state.to_owned(),
        Dialect::Kinded => short_state(state),
        Dialect::Proto03 if short_state(state) == "canceled" => "TASK_STATE_CANCELLED".into(),
        Dialect::Proto03 => state.to_owned(),
    }
}

fn is_terminal_state(state: &str) -> bool {
    TERMINAL_STATES.contains(&short_state(state).as_str())
}

fn state_of(task: &Value) -> &str {
    task["status"]["state"].as_str().unwrap_or("")
}

fn map_array(v: &mut Map<String, Value>, key: &str, f: impl Fn(&Value) -> Value) {
    if let Some(Value::Array(items)) = v.get_mut(key) {
        for item in items.iter_mut() {
            *item = f(item);
        }
    }
}

fn map_field(v: &mut Map<String, Value>, key: &str, f: impl Fn(&Value) -> Value) {
    if let Some(item) = v.get_mut(key) {
        *item = f(item);
    }
}

fn rename(v: &mut Map<String, Value>, from: &str, to: &str) {
    if let Some(x) = v.remove(from) {
        v.insert(to.to_owned(), x);
    }
}

fn part_to_v10(part: &Value) -> Value {
    let Some(obj) = part.as_object() else {
        return part.clone();
    };
    let mut out = obj.clone();
    // v0.3 JSON-RPC nests files as {uri|bytes, name, mimeType}; v0.3 protobuf as
    // {fileWithUri|fileWithBytes, name, mimeType}; v1.0 flattens them into the part.
    let nested = out.remove("kind").is_some() || obj.get("file").is_some_and(Value::is_object);
    if nested {
        if let Some(Value::Object(file)) = out.remove("file") {
            for (from, to) in [
                ("uri", "url"),
                ("fileWithUri", "url"),
                ("bytes", "raw"),
                ("fileWithBytes", "raw"),
                ("name", "filename"),
                ("mimeType", "mediaType"),
            ] {
                if let Some(v) = file.get(from) {
                    out.insert(to.to_owned(), v.clone());
                }
            }
        }
    }
    Value::Object(out)
}

fn part_from_v10(part: &Value, dialect: Dialect) -> Value {
    let Some(obj) = part.as_object() else {
        return part.clone();
    };
    let is_file = obj.contains_key("url") || obj.contains_key("raw");
    match dialect {
        Dialect::Proto => part.clone(),
        Dialect::Kinded => {
            let mut out = obj.clone();
            let kind = if obj.contains_key("text") {
                "text"
            } else if is_file {
                let mut file = Map::new();
                for (from, to) in [
                    ("url", "uri"),
                    ("raw", "bytes"),
                    ("filename", "name"),
                    ("mediaType", "mimeType"),
                ] {
                    if let Some(v) = out.remove(from) {
                        file.insert(to.to_owned(), v);
                    }
                }
                out.insert("file".into(), Value::Object(file));
                "file"
            } else {
                "data"
            };
            out.insert("kind".into(), json!(kind));
            Value::Object(out)
        }
        Dialect::Proto03 if is_file => {
            let mut out = obj.clone();
            let mut file = Map::new();
            for (from, to) in [
                ("url", "fileWithUri"),
                ("raw", "fileWithBytes"),
                ("filename", "name"),
                ("mediaType", "mimeType"),
            ] {
                if let Some(v) = out.remove(from) {
                    file.insert(to.to_owned(), v);
                }
            }
            out.insert("file".into(), Value::Object(file));
            Value::Object(out)
        }
        Dialect::Proto03 => part.clone(),
    }
}

fn message_to_v10(message: &Value) -> Value {
    let Some(obj) = message.as_object() else {
        return message.clone();
    };
    let mut out = obj.clone();
    out.remove("kind");
    if let Some(role) = obj.get("role").and_then(Value::as_str) {
        let role = match role {
            "user" => "ROLE_USER",
            "agent" => "ROLE_AGENT",
            other => other,
        };
        out.insert("role".into(), json!(role));
    }
    if !out.contains_key("parts") {
        rename(&mut out, "content", "parts");
    }
    map_array(&mut out, "parts", part_to_v10);
    Value::Object(out)
}

fn message_from_v10(message: &Value, dialect: Dialect) -> Value {
    let Some(obj) = message.as_object() else {
        return message.clone();
    };
    if dialect == Dialect::Proto {
        return message.clone();
    }
    let mut out = obj.clone();
    map_array(&mut out, "parts", |p| part_from_v10(p, dialect));
    match dialect {
        Dialect::Kinded => {
            if let Some(role) = obj.get("role").and_then(Value::as_str) {
                let role = match role {
                    "ROLE_USER" => "user",
                    "ROLE_AGENT" => "agent",
                    other => other,
                };
                out.insert("role".into(), json!(role));
            }
            out.insert("kind".into(), json!("message"));
        }
        _ => rename(&mut out, "parts", "content"),
    }
    Value::Object(out)
}

fn status_to_v10(status: &Value) -> Value {
    let Some(obj) = status.as_object() else {
        return status.clone();
    };
    let mut out = obj.clone();
    if let Some(state) = obj.get("state").and_then(Value::as_str) {
        out.insert("state".into(), json!(state_to_v10(state)));
    }
    map_field(&mut out, "message", message_to_v10);
    Value::Object(out)
}

fn status_from_v10(status: &Value, dialect: Dialect) -> Value {
    let Some(obj) = status.as_object() else {
        return status.clone();
    };
    let mut out = obj.clone();
    if let Some(state) = obj.get("state").and_then(Value::as_str) {
        out.insert("state".into(), json!(state_from_v10(state, dialect)));
    }
    map_field(&mut out, "message", |m| message_from_v10(m, dialect));
    Value::Object(out)
}

fn artifact_to_v10(artifact: &Value) -> Value {
    let Some(obj) = artifact.as_object() else {
        return artifact.clone();
    };
    let mut out = obj.clone();
    map_array(&mut out, "parts", part_to_v10);
    Value::Object(out)
}

fn artifact_from_v10(artifact: &Value, dialect: Dialect) -> Value {
    let Some(obj) = artifact.as_object() else {
        return artifact.clone();
    };
    let mut out = obj.clone();
    map_array(&mut out, "parts", |p| part_from_v10(p, dialect));
    Value::Object(out)
}

fn task_to_v10(task: &Value) -> Value {
    let Some(obj) = task.as_object() else {
        return task.clone();
    };
    let mut out = obj.clone();
    out.remove("kind");
    map_field(&mut out, "status", status_to_v10);
    map_array(&mut out, "artifacts", artifact_to_v10);
    map_array(&mut out, "history", message_to_v10);
    Value::Object(out)
}

/// A task as a get returns it in `dialect` (bare, not wrapped).
fn task_from_v10(task: &Value, dialect: Dialect) -> Value {
    let Some(obj) = task.as_object() else {
        return task.clone();
    };
    if dialect == Dialect::Proto {
        return task.clone();
    }
    let mut out = obj.clone();
    map_field(&mut out, "status", |s| status_from_v10(s, dialect));
    map_array(&mut out, "artifacts", |a| artifact_from_v10(a, dialect));
    map_array(&mut out, "history", |m| message_from_v10(m, dialect));
    if dialect == Dialect::Kinded {
        out.insert("kind".into(), json!("task"));
    }
    Value::Object(out)
}

/// A frame (a JSON-RPC result, or an HTTP+JSON body or stream event) in v1.0's form:
/// exactly one of `{"task"}`, `{"statusUpdate"}`, `{"artifactUpdate"}`, `{"message"}`.
/// `None` for anything else.
fn canonical(frame: &Value) -> Option<Value> {
    let obj = frame.as_object()?;
    if let Some(kind) = obj.get("kind").and_then(Value::as_str) {
        let without = |drop: &[&str]| {
            let mut o = obj.clone();
            for k in drop {
                o.remove(*k);
            }
            o
        };
        return Some(match kind {
            "task" => json!({ "task": task_to_v10(frame) }),
            "message" => json!({ "message": message_to_v10(frame) }),
            "status-update" => {
                let mut o = without(&["kind", "final"]);
                map_field(&mut o, "status", status_to_v10);
                json!({ "statusUpdate": o })
            }
            "artifact-update" => {
                let mut o = without(&["kind"]);
                map_field(&mut o, "artifact", artifact_to_v10);
                json!({ "artifactUpdate": o })
            }
            _ => return None,
        });
    }
    if let Some(task) = obj.get("task").filter(|t| t.is_object()) {
        return Some(json!({ "task": task_to_v10(task) }));
    }
    if let Some(m) = obj
        .get("message")
        .or_else(|| obj.get("msg"))
        .filter(|m| m.is_object())
    {
        return Some(json!({ "message": message_to_v10(m) }));
    }
    if let Some(Value::Object(update)) = obj.get("statusUpdate") {
        let mut o = update.clone();
        o.remove("final");
        map_field(&mut o, "status", status_to_v10);
        return Some(json!({ "statusUpdate": o }));
    }
    if let Some(Value::Object(update)) = obj.get("artifactUpdate") {
        let mut o = update.clone();
        map_field(&mut o, "artifact", artifact_to_v10);
        return Some(json!({ "artifactUpdate": o }));
    }
    // A bare task: what a get returns.
    if obj.contains_key("id") && obj.contains_key("status") {
        return Some(json!({ "task": task_to_v10(frame) }));
    }
    None
}

/// A canonical frame as a stream event in `dialect`.
fn from_canonical(canon: &Value, dialect: Dialect) -> Value {
    if dialect == Dialect::Proto {
        return canon.clone();
    }
    let wrap = |key: &str, v: Value| match dialect {
        Dialect::Kinded => v,
        _ => json!({ key: v }),
    };
    if let Some(task) = canon.get("task") {
        return wrap("task", task_from_v10(task, dialect));
    }
    if let Some(message) = canon.get("message") {
        return wrap("message", message_from_v10(message, dialect));
    }
    if let Some(Value::Object(update)) = canon.get("statusUpdate") {
        let mut o = update.clone();
        let terminal = is_terminal_state(update.get("status").map(state_of_status).unwrap_or(""));
        map_field(&mut o, "status", |s| status_from_v10(s, dialect));
        // Protobuf JSON leaves out a false `final`; v0.3 JSON-RPC always states it.
        if dialect == Dialect::Kinded {
            o.insert("kind".into(), json!("status-update"));
            o.insert("final".into(), json!(terminal));
        } else if terminal {
            o.insert("final".into(), json!(true));
        }
        return wrap("statusUpdate", Value::Object(o));
    }
    if let Some(Value::Object(update)) = canon.get("artifactUpdate") {
        let mut o = update.clone();
        map_field(&mut o, "artifact", |a| artifact_from_v10(a, dialect));
        if dialect == Dialect::Kinded {
            o.insert("kind".into(), json!("artifact-update"));
        }
        return wrap("artifactUpdate", Value::Object(o));
    }
    canon.clone()
}

fn state_of_status(status: &Value) -> &str {
    status["state"].as_str().unwrap_or("")
}

/// The dialect a recorded frame is spelled in, so a client that speaks it gets it
/// byte for byte.
fn dialect_of(frame: &Value) -> Dialect {
    if frame.get("kind").is_some() {
        return Dialect::Kinded;
    }
    let inner = ["task", "statusUpdate", "artifactUpdate", "message", "msg"]
        .iter()
        .find_map(|k| frame.get(*k))
        .unwrap_or(frame);
    let uses_content = |m: &Value| m.get("content").is_some() && m.get("parts").is_none();
    let status = inner.get("status");
    let proto03 = frame.get("msg").is_some()
        || inner.get("final").is_some()
        || status.is_some_and(|s| s["state"] == "TASK_STATE_CANCELLED")
        || status
            .and_then(|s| s.get("message"))
            .is_some_and(uses_content)
        || (frame.get("message").is_some() && uses_content(inner))
        || inner["history"]
            .as_array()
            .is_some_and(|h| h.iter().any(uses_content));
    if proto03 {
        Dialect::Proto03
    } else {
        Dialect::Proto
    }
}

/// The task id and context id a canonical frame is about.
fn frame_ids(canon: &Value) -> Option<(String, Value)> {
    if let Some(task) = canon.get("task") {
        let id = task.get("id")?.as_str()?;
        return Some((
            id.to_owned(),
            task.get("contextId").cloned().unwrap_or(Value::Null),
        ));
    }
    let update = canon
        .get("statusUpdate")
        .or_else(|| canon.get("artifactUpdate"))?;
    let id = update.get("taskId")?.as_str()?;
    Some((
        id.to_owned(),
        update.get("contextId").cloned().unwrap_or(Value::Null),
    ))
}

/// Whether a frame ends the task's turn: a terminal (or interrupted) state, or v0.3's
/// `final: true`.
fn ends_turn(frame: &Value, canon: &Value) -> bool {
    let explicit_final = frame.get("final").and_then(Value::as_bool) == Some(true)
        || frame["statusUpdate"]["final"].as_bool() == Some(true);
    if explicit_final {
        return true;
    }
    let state = if let Some(task) = canon.get("task") {
        state_of(task)
    } else if let Some(update) = canon.get("statusUpdate") {
        state_of(update)
    } else {
        return false;
    };
    is_terminal_state(state)
}

/// A task's status as of a run's end that the agent never reported (Tether cancelled
/// the run, or the agent died): canceled or failed, in v1.0's form.
fn synthetic_status(
    status: RunStatus,
    at: &Event,
    task: &(String, Value),
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
            "contextId": task.1,
            "taskId": task.0,
            "role": "ROLE_AGENT",
            "parts": [{ "text": error }],
        },
    })
}

// ---------------------------------------------------------------------------------------
// Folding frames into the task
// ---------------------------------------------------------------------------------------

/// The agent's answer so far, folded from canonical frames the way the agent's own task
/// store folds its events.
#[derive(Clone, Debug, Default, PartialEq)]
struct Fold {
    /// The task (v1.0 form), from its first frame or the first update naming it.
    task: Option<Value>,
    /// The agent's reply when it answered with a message and no task.
    message: Option<Value>,
}

impl Fold {
    fn apply(&mut self, canon: &Value) {
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
                    if !task["history"].is_array() {
                        task["history"] = json!([]);
                    }
                    if let Some(history) = task["history"].as_array_mut() {
                        history.push(message.clone());
                    }
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

/// Adds a streamed artifact chunk: `append` extends the artifact's parts, otherwise the
/// chunk replaces the artifact with its id.
fn merge_artifact(task: &mut Value, update: &Value) {
    let Some(artifact) = update.get("artifact").filter(|a| a.is_object()) else {
        return;
    };
    let append = update.get("append").and_then(Value::as_bool) == Some(true);
    if !task["artifacts"].is_array() {
        task["artifacts"] = json!([]);
    }
    let Some(artifacts) = task["artifacts"].as_array_mut() else {
        return;
    };
    let id = artifact.get("artifactId");
    let existing = artifacts
        .iter_mut()
        .find(|a| id.is_some() && a.get("artifactId") == id);
    match existing {
        Some(current) if append => {
            let new_parts = artifact["parts"].as_array().cloned().unwrap_or_default();
            if !current["parts"].is_array() {
                current["parts"] = json!([]);
            }
            if let Some(parts) = current["parts"].as_array_mut() {
                parts.extend(new_parts);
            }
        }
        Some(current) => *current = artifact.clone(),
        None => artifacts.push(artifact.clone()),
    }
}

/// A task's `history` cut to its last `n` messages, as the SDK applies `historyLength`.
fn apply_history_length(task: &Value, n: Option<i64>) -> Value {
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

/// The text of canonical parts: text as is, structured data as JSON (files carry none).
fn parts_text(parts: &Value) -> String {
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

fn artifacts_text(task: &Value) -> String {
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
fn answer_text(task: &Value) -> String {
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

/// One run's events as A2A sees them.
struct RunView<'a> {
    fold: Fold,
    /// Whether the agent itself ended the task's turn (a terminal or interrupted state).
    agent_ended: bool,
    terminal: Option<(&'a Event, RunStatus)>,
    error: Option<(String, String)>,
}

impl<'a> RunView<'a> {
    fn of(run: &RunInfo, events: &'a [Event]) -> Self {
        let mut view = RunView {
            fold: Fold::default(),
            agent_ended: false,
            terminal: None,
            error: None,
        };
        for event in events.iter().filter(|e| in_run(e, run)) {
            match event.event_type {
                EventType::AgentEvent => {
                    if let Some(canon) = canonical(&event.content) {
                        view.fold.apply(&canon);
                        view.agent_ended |= ends_turn(&event.content, &canon);
                    }
                }
                EventType::Error => {
                    let s = |k: &str| event.content[k].as_str().unwrap_or_default().to_owned();
                    view.error = Some((s("code"), s("message")));
                }
                EventType::RunStatus => match event.run_status() {
                    // A resumed run starts over: its last invocation is the answer.
                    Some(RunStatus::InProgress) => {
                        view = RunView {
                            fold: Fold::default(),
                            agent_ended: false,
                            terminal: None,
                            error: None,
                        }
                    }
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
        if status == RunStatus::Completed || self.agent_ended {
            return;
        }
        let message = self.error().1;
        if let Some(task) = &mut self.fold.task {
            let ids = (
                task["id"].as_str().unwrap_or_default().to_owned(),
                task["contextId"].clone(),
            );
            task["status"] = synthetic_status(status, event, &ids, &message, run_id);
        }
    }

    /// The run's error: its last `error` event, or its terminal status.
    fn error(&self) -> (String, String) {
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
fn in_run(event: &Event, run: &RunInfo) -> bool {
    event.run_id.as_deref().is_none_or(|r| r == run.run_id)
}

// ---------------------------------------------------------------------------------------
// Client surface: streaming
// ---------------------------------------------------------------------------------------

/// Replays a run's `agent_event`s as the client's stream: each one SSE event holding a
/// JSON-RPC response (or, over HTTP+JSON, the bare event), converted only when the client
/// speaks another dialect than the agent.
struct A2aRenderer {
    client: Client,
    run_id: String,
    /// The task the stream is about, once a frame named it.
    task: Option<(String, Value)>,
    /// Whether the client has seen the end of the task's turn.
    ended: bool,
    error: Option<(String, String)>,
}

impl A2aRenderer {
    fn frame(&self, body: Value, seq: i64) -> SseFrame {
        SseFrame::data(body.to_string()).with_id(seq)
    }

    /// The end of a run whose frames did not end the task: a final status for the task,
    /// or an error when there never was a task.
    fn close(&mut self, event: &Event, status: RunStatus) -> Vec<SseFrame> {
        if self.ended || status == RunStatus::Completed {
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
            let body = match self.client.transport {
                Transport::JsonRpc => rpc_error(&self.client.id, rpc_code(&code), &message, None),
                Transport::Rest => rest_error(rpc_code(&code), &message, None).1,
            };
            return vec![self.frame(body, event.seq)];
        };
        let canon = json!({ "statusUpdate": {
            "taskId": task.0,
            "contextId": task.1,
            "status": synthetic_status(status, event, task, &message, &self.run_id),
        }});
        let body = self
            .client
            .response(from_canonical(&canon, self.client.dialect()));
        vec![self.frame(body, event.seq)]
    }
}

impl StreamRenderer for A2aRenderer {
    fn render(&mut self, event: &Event) -> Vec<SseFrame> {
        if event.run_id.as_deref().is_some_and(|r| r != self.run_id) {
            return Vec::new();
        }
        match event.event_type {
            EventType::AgentEvent => {
                let frame = &event.content;
                let dialect = self.client.dialect();
                let Some(canon) = canonical(frame) else {
                    return vec![self.frame(self.client.response(frame.clone()), event.seq)];
                };
                if let Some(ids) = frame_ids(&canon) {
                    self.task.get_or_insert(ids);
                }
                // A message with no task is the agent's whole reply.
                let reply = canon.get("message").is_some() && self.task.is_none();
                self.ended |= reply || ends_turn(frame, &canon);
                let out = if dialect_of(frame) == dialect {
                    frame.clone()
                } else {
                    from_canonical(&canon, dialect)
                };
                vec![self.frame(self.client.response(out), event.seq)]
            }
            EventType::Error => {
                let s = |k: &str| event.content[k].as_str().unwrap_or_default().to_owned();
                self.error = Some((s("code"), s("message")));
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

// ---------------------------------------------------------------------------------------
// Agent cards
// ---------------------------------------------------------------------------------------

fn looks_like_card(v: &Value) -> bool {
    v.is_object()
        && v.get("name").is_some()
        && (v.get("supportedInterfaces").is_some()
            || (v.get("url").is_some()
                && (v.get("capabilities").is_some() || v.get("skills").is_some())))
}

/// Splits `scheme://host:port/path` into its origin and the rest.
fn split_origin(url: &str) -> Option<(&str, &str)> {
    let after_scheme = url.find("://")? + 3;
    let end = url[after_scheme..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| after_scheme + i);
    Some((&url[..end], &url[end..]))
}

/// Points every interface of the agent that Tether carries (JSON-RPC, HTTP+JSON) at
/// `public_url`, keeping paths. The agent's origin is what those interfaces name; gRPC
/// interfaces are left alone, since Tether does not carry gRPC.
fn rewrite_card(card: &mut Value, public_url: &str) {
    let is_grpc = |v: &Value, key: &str| {
        v[key]
            .as_str()
            .is_some_and(|t| t.eq_ignore_ascii_case("GRPC"))
    };
    let mut origins: Vec<String> = Vec::new();
    let mut note = |url: Option<&str>| {
        if let Some((origin, _)) = url.and_then(split_origin) {
            if !origins.iter().any(|o| o == origin) {
                origins.push(origin.to_owned());
            }
        }
    };
    if !is_grpc(card, "preferredTransport") {
        note(card["url"].as_str());
    }
    for iface in card["additionalInterfaces"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if !is_grpc(iface, "transport") {
            note(iface["url"].as_str());
        }
    }
    for iface in card["supportedInterfaces"].as_array().into_iter().flatten() {
        if !is_grpc(iface, "protocolBinding") {
            note(iface["url"].as_str());
        }
    }
    let public = public_url.trim_end_matches('/');
    let rewrite = |url: &mut Value| {
        let Some((origin, rest)) = url.as_str().and_then(split_origin) else {
            return;
        };
        if origins.iter().any(|o| o == origin) {
            let rest = if rest.is_empty() { "/" } else { rest };
            *url = json!(format!("{public}{rest}"));
        }
    };
    if !is_grpc(card, "preferredTransport") {
        if let Some(url) = card.get_mut("url") {
            rewrite(url);
        }
    }
    for (list, key) in [
        ("additionalInterfaces", "transport"),
        ("supportedInterfaces", "protocolBinding"),
    ] {
        if let Some(ifaces) = card.get_mut(list).and_then(Value::as_array_mut) {
            for iface in ifaces.iter_mut().filter(|i| !is_grpc(i, key)) {
                if let Some(url) = iface.get_mut("url") {
                    rewrite(url);
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Upstream: requests to the agent
// ---------------------------------------------------------------------------------------

/// The client's request as the surface kept it, to send on to the agent.
struct Sent {
    client: Client,
    path: String,
    params: Value,
    headers: Vec<(String, String)>,
}

impl Sent {
    /// From a turn the A2A surface parsed; a turn from another surface is sent as a v0.3
    /// JSON-RPC message to `/`, which every A2A agent serves.
    fn of(turn: &TurnRequest, run_id: &str) -> Sent {
        let kept = turn.extra.get("a2a");
        match (turn.extra.get("client"), kept) {
            (Some(client), Some(kept)) => Sent {
                client: Client::from_value(client),
                path: kept["path"].as_str().unwrap_or("/").to_owned(),
                params: kept["params"].clone(),
                headers: kept["headers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|h| Some((h[0].as_str()?.to_owned(), h[1].as_str()?.to_owned())))
                    .collect(),
            },
            _ => {
                let op = if turn.stream { Op::Stream } else { Op::Send };
                let method = method_name(Version::V03, op);
                let parts: Vec<Value> = turn
                    .input
                    .iter()
                    .map(|item| json!({ "kind": "text", "text": item.text() }))
                    .collect();
                Sent {
                    client: Client::new(Transport::JsonRpc, Version::V03, method, Value::Null),
                    path: "/".into(),
                    params: json!({ "message": {
                        "kind": "message",
                        "role": "user",
                        "messageId": format!("{run_id}-input"),
                        "parts": parts,
                    }}),
                    headers: Vec::new(),
                }
            }
        }
    }

    fn is_stream(&self) -> bool {
        matches!(
            self.client.method.as_str(),
            "message/stream" | "SendStreamingMessage" | "message:stream"
        )
    }

    /// The REST base path (`/rest/`) the client's send was made below.
    fn rest_base(&self) -> &str {
        let path = self.path.split('?').next().unwrap_or(&self.path);
        path.strip_suffix("message:send")
            .or_else(|| path.strip_suffix("message:stream"))
            .unwrap_or("/")
    }

    fn post(&self, path: impl Into<String>, body: Value) -> AgentRequest {
        with_headers(AgentRequest::post(path, body), &self.headers)
    }

    fn rpc(&self, id: &str, op: Op, params: Value) -> AgentRequest {
        let body = json!({
            "jsonrpc": "2.0",
            "id": id,
            "method": method_name(self.client.version, op),
            "params": params,
        });
        self.post(&self.path, body)
    }

    /// The client's send, addressed to the session. `keep_task` is false after a restore:
    /// the agent no longer knows the task the message continued.
    fn send(&self, session_id: &str, rpc_id: &str, keep_task: bool) -> AgentRequest {
        let mut params = self.params.clone();
        let key = message_key(&params);
        if let Some(message) = params.get_mut(key).and_then(Value::as_object_mut) {
            message.insert("contextId".into(), json!(session_id));
            if !keep_task {
                message.remove("taskId");
            }
        }
        // Tether answers a non-streaming send when the run ends, so the agent is asked to
        // block too: an early answer would leave the log with a task that never ends.
        if let Some(config) = params
            .get_mut("configuration")
            .and_then(Value::as_object_mut)
        {
            config.remove("returnImmediately");
            if config.get("blocking") == Some(&json!(false)) {
                config.remove("blocking");
            }
        }
        let request = match self.client.transport {
            Transport::JsonRpc => {
                let body = json!({
                    "jsonrpc": "2.0",
                    "id": rpc_id,
                    "method": self.client.method,
                    "params": params,
                });
                self.post(&self.path, body)
            }
            Transport::Rest => self.post(&self.path, params),
        };
        if self.is_stream() {
            request.with_header("Accept", "text/event-stream")
        } else {
            request
        }
    }

    fn get_task(&self, task_id: &str, rpc_id: &str) -> AgentRequest {
        match self.client.transport {
            Transport::JsonRpc => self.rpc(
                rpc_id,
                Op::Get,
                json!({ "id": task_id, "historyLength": 0 }),
            ),
            Transport::Rest => {
                let path = format!(
                    "{}tasks/{}?historyLength=0",
                    self.rest_base(),
                    encode_segment(task_id)
                );
                with_headers(AgentRequest::get(path), &self.headers)
            }
        }
    }

    fn cancel_task(&self, task_id: &str, rpc_id: &str) -> AgentRequest {
        match self.client.transport {
            Transport::JsonRpc => self.rpc(rpc_id, Op::Cancel, json!({ "id": task_id })),
            Transport::Rest => {
                let path = format!(
                    "{}tasks/{}:cancel",
                    self.rest_base(),
                    encode_segment(task_id)
                );
                self.post(path, json!({}))
            }
        }
    }

    /// A non-streaming send of one text message to the session, in the client's dialect.
    fn send_text(
        &self,
        session_id: &str,
        rpc_id: &str,
        message_id: &str,
        text: &str,
    ) -> AgentRequest {
        let message = match self.client.dialect() {
            Dialect::Kinded => json!({
                "kind": "message", "role": "user", "messageId": message_id,
                "contextId": session_id, "parts": [{ "kind": "text", "text": text }],
            }),
            Dialect::Proto => json!({
                "role": "ROLE_USER", "messageId": message_id,
                "contextId": session_id, "parts": [{ "text": text }],
            }),
            Dialect::Proto03 => json!({
                "role": "ROLE_USER", "messageId": message_id,
                "contextId": session_id, "content": [{ "text": text }],
            }),
        };
        match self.client.transport {
            Transport::JsonRpc => self.rpc(rpc_id, Op::Send, json!({ "message": message })),
            Transport::Rest => {
                let key = if self.client.dialect() == Dialect::Proto03 {
                    "request"
                } else {
                    "message"
                };
                self.post(
                    format!("{}message:send", self.rest_base()),
                    json!({ key: message }),
                )
            }
        }
    }
}

/// The earlier turns as one message an agent (or the LLM behind it) can take in.
fn transcript(history: &[Item]) -> String {
    let mut out = String::from(
        "[Tether restored this conversation: the agent had lost it. Earlier turns:]\n",
    );
    for item in history {
        let Item::Message { role, content } = item else {
            continue;
        };
        let who = match role.as_str() {
            "user" => "User",
            "assistant" => "Assistant",
            _ => "System",
        };
        let mut text = item.text();
        for block in content {
            if let Block::File { filename, url, .. } = block {
                let name = filename.as_deref().or(url.as_deref()).unwrap_or("file");
                let _ = write!(text, " [attached: {name}]");
            }
        }
        let _ = writeln!(out, "{who}: {}", text.trim());
    }
    out.push_str("[End of earlier turns. Reply with OK.]");
    out
}

/// Percent-encodes a path segment (task ids are usually UUIDs, but need not be).
fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

fn decode_segment(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = (bytes[i] == b'%')
            .then(|| s.get(i + 1..i + 3))
            .flatten()
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match hex {
            Some(b) => {
                out.push(b);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Upstream for A2aUpstream {
    fn protocol(&self) -> Protocol {
        Protocol::A2a
    }

    /// The client's own send, with the session as its `contextId` so that the agent's
    /// conversation and Tether's session are one.
    fn request(&self, call: &TurnCall) -> AgentRequest {
        Sent::of(call.turn, call.run_id).send(call.session_id, call.run_id, true)
    }

    fn parser(&self, _call: &TurnCall, content_type: &str) -> Box<dyn StreamParser> {
        Box::new(A2aParser::new(content_type.contains("text/event-stream")))
    }

    /// The agent that forgot a session has forgotten its tasks too: asking for the last
    /// task is the cheapest way to know.
    fn probe(&self, call: &TurnCall) -> Probe {
        if call.history.is_empty() {
            return Probe::Skip;
        }
        match call.last_agent_ref() {
            Some(task) => {
                let sent = Sent::of(call.turn, call.run_id);
                Probe::Ask(sent.get_task(task, &format!("tether-probe-{}", call.run_id)))
            }
            None => Probe::Restore,
        }
    }

    /// HTTP 404 (HTTP+JSON), or JSON-RPC `-32001 TaskNotFound` (the same code in v0.3 and
    /// v1.0), also when a stream carries it as its only event.
    fn forgot(&self, status: u16, body: &[u8]) -> bool {
        if status == 404 {
            return true;
        }
        let text = String::from_utf8_lossy(body);
        let doc = match text.trim_start() {
            t if t.starts_with('{') => serde_json::from_str::<Value>(t).ok(),
            t => t
                .lines()
                .find_map(|l| l.strip_prefix("data:"))
                .and_then(|d| serde_json::from_str::<Value>(d.trim()).ok()),
        };
        doc.is_some_and(|d| {
            d["error"]["code"].as_i64() == Some(TASK_NOT_FOUND)
                || d["error"]["status"] == "NOT_FOUND"
        })
    }

    /// One message holding the earlier turns, then the turn itself without the task it
    /// may have continued (the agent lost that too).
    fn restore(&self, call: &TurnCall) -> Option<Restore> {
        let sent = Sent::of(call.turn, call.run_id);
        let mut before = Vec::new();
        if !call.history.is_empty() {
            before.push(sent.send_text(
                call.session_id,
                &format!("tether-restore-{}", call.run_id),
                &format!("{}-restore", call.run_id),
                &transcript(call.history),
            ));
        }
        Some(Restore {
            before,
            request: sent.send(call.session_id, call.run_id, false),
        })
    }

    fn cancel(&self, turn: &TurnRequest, agent_ref: &str) -> Option<AgentRequest> {
        let id = format!("tether-cancel-{}", uuid::Uuid::new_v4().simple());
        Some(Sent::of(turn, "cancel").cancel_task(agent_ref, &id))
    }
}

// ---------------------------------------------------------------------------------------
// Upstream: parsing the agent's answer
// ---------------------------------------------------------------------------------------

/// Parses an A2A answer: an SSE stream whose every event is one JSON-RPC response (or one
/// HTTP+JSON stream event), or one JSON document. Each result is recorded as a `Frame`;
/// the turn ends with the task's end.
struct A2aParser {
    sse: Option<SseParser>,
    /// The JSON body; for a stream, its start until a frame shows it is SSE (an agent may
    /// answer a streaming request with a plain JSON error).
    raw: Vec<u8>,
    any_frame: bool,
    fold: Fold,
    task_id: Option<String>,
    ended: bool,
}

/// How much of a would-be stream is kept in case it is JSON after all.
const SNIFF_LIMIT: usize = 64 * 1024;

impl A2aParser {
    fn new(sse: bool) -> Self {
        A2aParser {
            sse: sse.then(SseParser::new),
            raw: Vec::new(),
            any_frame: false,
            fold: Fold::default(),
            task_id: None,
            ended: false,
        }
    }

    fn data(&mut self, data: &str, out: &mut Vec<Output>) {
        match serde_json::from_str::<Value>(data) {
            Ok(doc) => self.doc(&doc, out),
            Err(_) if self.ended => {}
            Err(_) => {
                let preview: String = data.chars().take(200).collect();
                out.push(Output::Error {
                    code: "invalid_response".into(),
                    message: format!("The agent sent an event that is not JSON: {preview}"),
                });
                self.ended = true;
            }
        }
    }

    fn doc(&mut self, doc: &Value, out: &mut Vec<Output>) {
        if self.ended {
            return;
        }
        if let Some(error) = doc.get("error").filter(|e| e.is_object()) {
            let code = match &error["code"] {
                Value::Number(n) => n.to_string(),
                Value::String(s) => s.clone(),
                _ => "unknown".into(),
            };
            let message = error["message"]
                .as_str()
                .unwrap_or("The agent reported an error.");
            out.push(Output::Error {
                code: format!("a2a_error_{code}"),
                message: message.to_owned(),
            });
            self.ended = true;
            return;
        }
        let frame = if doc.get("jsonrpc").is_some() || doc.get("result").is_some() {
            &doc["result"]
        } else {
            doc
        };
        if !frame.is_object() {
            return;
        }
        out.push(Output::Frame(frame.clone()));
        let Some(canon) = canonical(frame) else {
            return;
        };
        self.fold.apply(&canon);
        if self.task_id.is_none() {
            if let Some((id, _)) = frame_ids(&canon) {
                self.task_id = Some(id.clone());
                out.push(Output::AgentRef(id));
            }
        }
        let reply = canon.get("message").is_some() && self.fold.task.is_none();
        if reply || ends_turn(frame, &canon) {
            self.end(out);
        }
    }

    /// The turn is over: the assistant's answer as a transcript item, then how it ended.
    fn end(&mut self, out: &mut Vec<Output>) {
        self.ended = true;
        if let Some(task) = &self.fold.task {
            let meta = json!({ "a2a": {
                "taskId": task["id"],
                "contextId": task["contextId"],
                "state": short_state(state_of(task)),
            }});
            let state = short_state(state_of(task));
            let failure = match state.as_str() {
                "failed" | "rejected" => Some("agent_task_failed"),
                "canceled" => Some("agent_task_canceled"),
                _ => None,
            };
            // A failed task's status message is the error, not an answer.
            let text = match failure {
                Some(_) => artifacts_text(task),
                None => answer_text(task),
            };
            if !text.is_empty() {
                out.push(Output::ItemWith(Item::assistant_text(&text), meta));
            }
            match failure {
                None => out.push(Output::Done { usage: None }),
                Some(code) => {
                    let message = parts_text(&task["status"]["message"]["parts"]);
                    out.push(Output::Error {
                        code: code.into(),
                        message: if message.is_empty() {
                            format!("The agent's task ended as {state}.")
                        } else {
                            message
                        },
                    });
                }
            }
        } else if let Some(message) = &self.fold.message {
            let meta = json!({ "a2a": {
                "messageId": message["messageId"],
                "contextId": message["contextId"],
            }});
            let text = parts_text(&message["parts"]);
            out.push(Output::ItemWith(Item::assistant_text(&text), meta));
            out.push(Output::Done { usage: None });
        }
    }

    fn json_body(&mut self, out: &mut Vec<Output>) {
        let body = std::mem::take(&mut self.raw);
        let trimmed = body.trim_ascii();
        if trimmed.is_empty() {
            out.push(Output::Error {
                code: "empty_response".into(),
                message: "The agent returned an empty body.".into(),
            });
            return;
        }
        match serde_json::from_slice::<Value>(trimmed) {
            Ok(doc @ Value::Object(_)) => self.doc(&doc, out),
            _ => {
                let preview: String = String::from_utf8_lossy(trimmed).chars().take(200).collect();
                out.push(Output::Error {
                    code: "invalid_response".into(),
                    message: format!("The agent's response is not A2A JSON: {preview}"),
                });
                return;
            }
        }
        // One document is the whole answer, even a task still running (an agent that
        // would not block): the call is complete.
        if !self.ended && (self.fold.task.is_some() || self.fold.message.is_some()) {
            self.end(out);
        }
    }
}

impl StreamParser for A2aParser {
    fn feed(&mut self, bytes: &[u8]) -> Vec<Output> {
        let mut out = Vec::new();
        let Some(sse) = &mut self.sse else {
            self.raw.extend_from_slice(bytes);
            return out;
        };
        if !self.any_frame && self.raw.len() < SNIFF_LIMIT {
            self.raw.extend_from_slice(bytes);
        }
        for frame in sse.feed(bytes) {
            self.any_frame = true;
            self.data(&frame.data, &mut out);
        }
        out
    }

    fn finish(&mut self) -> Vec<Output> {
        let mut out = Vec::new();
        match &mut self.sse {
            Some(sse) => {
                if let Some(frame) = sse.finish() {
                    self.any_frame = true;
                    self.data(&frame.data, &mut out);
                }
                // Not SSE after all: a JSON error (or answer) under a stream's request.
                if !self.any_frame && self.raw.trim_ascii_start().starts_with(b"{") {
                    self.json_body(&mut out);
                }
            }
            None => {
                // An agent that streams despite its content type.
                if self.raw.trim_ascii_start().starts_with(b"data:") {
                    let raw = std::mem::take(&mut self.raw);
                    let mut sse = SseParser::new();
                    let mut frames = sse.feed(&raw);
                    frames.extend(sse.finish());
                    for frame in frames {
                        self.data(&frame.data, &mut out);
                    }
                } else {
                    self.json_body(&mut out);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};
    use session_log::NewEvent;

    const RUN: &str = "run_a2a";
    const V1: &[(&str, &str)] = &[("A2A-Version", "1.0")];

    /// The captures' SSE lines end with CRLF (sse-starlette); they are stored with LF.
    fn crlf(s: &str) -> String {
        s.replace('\n', "\r\n")
    }

    fn json_of(s: &str) -> Value {
        serde_json::from_str(s).expect("capture is JSON")
    }

    /// The `result` of every `data:` line of a captured stream (the whole event for
    /// HTTP+JSON streams).
    fn stream_results(body: &str) -> Vec<Value> {
        body.lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| {
                let doc = json_of(d);
                doc.get("result").cloned().unwrap_or(doc)
            })
            .collect()
    }

    // --- routing -----------------------------------------------------------------------

    fn request<'a>(
        method: &'a str,
        path: &'a str,
        query: Option<&'a str>,
        headers: &'a [(&'a str, &'a str)],
        body: &'a [u8],
    ) -> ClientRequest<'a> {
        ClientRequest {
            method,
            path,
            query,
            headers,
            body,
            account_id: "acct",
        }
    }

    fn route(method: &str, path: &str, headers: &[(&str, &str)], body: &Value) -> Route {
        let bytes = body.to_string();
        A2aSurface.route(&request(method, path, None, headers, bytes.as_bytes()))
    }

    fn rpc(method: &str, params: Value) -> Value {
        json!({ "jsonrpc": "2.0", "id": "req-1", "method": method, "params": params })
    }

    fn v03_message(extra: Value) -> Value {
        let mut m = json!({
            "kind": "message", "role": "user", "messageId": "m1",
            "parts": [{ "kind": "text", "text": "My project is named zebra42." }],
        });
        merge(&mut m, extra);
        m
    }

    fn v10_message(extra: Value) -> Value {
        let mut m = json!({
            "role": "ROLE_USER", "messageId": "m1",
            "parts": [{ "text": "My project is named zebra42." }],
        });
        merge(&mut m, extra);
        m
    }

    fn merge(into: &mut Value, extra: Value) {
        if let (Some(into), Value::Object(extra)) = (into.as_object_mut(), extra) {
            into.extend(extra);
        }
    }

    fn run_of(route: Route) -> TurnRequest {
        match route {
            Route::Run(turn) => turn,
            other => panic!("expected a run, got {other:?}"),
        }
    }

    fn reply_of(route: Route) -> (u16, Value) {
        match route {
            Route::Reply { status, body } => (status, body),
            other => panic!("expected a reply, got {other:?}"),
        }
    }

    #[test]
    fn a_v03_send_is_a_run_in_a_new_session() {
        let body = rpc("message/send", json!({ "message": v03_message(json!({})) }));
        let turn = run_of(route("POST", "/", &[], &body));
        assert_eq!(turn.surface, Protocol::A2a);
        assert!(!turn.stream);
        assert_eq!(turn.session, SessionRef::New);
        assert_eq!(
            turn.input,
            vec![Item::user_text("My project is named zebra42.")]
        );
        assert_eq!(
            turn.extra["client"],
            json!({ "transport": "jsonrpc", "version": "0.3", "method": "message/send", "id": "req-1" })
        );
        assert_eq!(
            turn.extra["a2a"],
            json!({ "path": "/", "params": body["params"], "headers": [] })
        );
    }

    #[test]
    fn a_v10_stream_with_a_context_is_a_streaming_run_in_that_session() {
        let body = rpc(
            "SendStreamingMessage",
            json!({ "message": v10_message(json!({ "contextId": "ctx-1" })), "configuration": {} }),
        );
        let turn = run_of(route("POST", "/", V1, &body));
        assert!(turn.stream);
        assert_eq!(turn.session, SessionRef::Named("ctx-1".into()));
        assert_eq!(turn.extra["client"]["version"], "1.0");
        assert_eq!(turn.extra["client"]["method"], "SendStreamingMessage");
        assert_eq!(
            turn.extra["a2a"]["headers"],
            json!([["A2A-Version", "1.0"]])
        );

        // v0.3's compat client sends `A2A-Version: 0.3`.
        let body = rpc(
            "message/stream",
            json!({ "message": v03_message(json!({})) }),
        );
        let turn = run_of(route("POST", "/", &[("a2a-version", "0.3")], &body));
        assert!(turn.stream);
        assert_eq!(
            turn.extra["a2a"]["headers"],
            json!([["A2A-Version", "0.3"]])
        );
    }

    #[test]
    fn file_and_data_parts_are_recorded() {
        let message = v03_message(json!({ "parts": [
            { "kind": "text", "text": "see" },
            { "kind": "file", "file": { "uri": "https://x/a.pdf", "name": "a.pdf" } },
            { "kind": "file", "file": { "bytes": "aGk=", "mimeType": "text/plain" } },
            { "kind": "data", "data": { "k": 1 } },
        ]}));
        let turn = run_of(route(
            "POST",
            "/",
            &[],
            &rpc("message/send", json!({ "message": message })),
        ));
        let expected = vec![
            Block::Text("see".into()),
            Block::File {
                filename: Some("a.pdf".into()),
                data: None,
                url: Some("https://x/a.pdf".into()),
            },
            Block::File {
                filename: None,
                data: Some("data:text/plain;base64,aGk=".into()),
                url: None,
            },
            Block::Text("{\"k\":1}".into()),
        ];
        assert_eq!(
            turn.input,
            vec![Item::Message {
                role: "user".into(),
                content: expected.clone()
            }]
        );

        let message = v10_message(json!({ "parts": [
            { "text": "see" },
            { "url": "https://x/a.pdf", "filename": "a.pdf" },
            { "raw": "aGk=", "mediaType": "text/plain" },
            { "data": { "k": 1 } },
        ]}));
        let turn = run_of(route(
            "POST",
            "/",
            V1,
            &rpc("SendMessage", json!({ "message": message })),
        ));
        assert_eq!(
            turn.input,
            vec![Item::Message {
                role: "user".into(),
                content: expected
            }]
        );
    }

    #[test]
    fn versions_are_checked_as_the_sdk_checks_them() {
        // a2a_16: a v1.0 method without the header.
        let body = rpc("SendMessage", json!({ "message": v10_message(json!({})) }));
        let (status, body) = reply_of(route("POST", "/", &[], &body));
        assert_eq!(status, 200);
        assert_eq!(
            body,
            json!({ "jsonrpc": "2.0", "id": "req-1", "error": {
                "code": -32009,
                "message": "A2A version '0.3' is not supported by this handler. Expected version '1.0'.",
                "data": [{ "@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "VERSION_NOT_SUPPORTED",
                           "domain": "a2a-protocol.org", "metadata": {} }],
            }})
        );
        // a2a_17/18: a v0.3 method with `A2A-Version: 1.0`.
        let body = rpc("tasks/get", json!({ "id": "t1" }));
        let (_, body) = reply_of(route("POST", "/", V1, &body));
        assert_eq!(
            body["error"],
            json!({ "code": -32603, "message": "A2A version '1.0' is not supported by this handler. Expected version '0.3'." })
        );
    }

    #[test]
    fn bad_json_rpc_gets_json_rpc_errors() {
        let bad = |body: &[u8]| reply_of(A2aSurface.route(&request("POST", "/", None, &[], body)));
        let (status, body) = bad(b"{not json");
        assert_eq!(status, 200);
        assert_eq!(body["error"]["code"], -32700);
        assert_eq!(body["id"], Value::Null);
        assert_eq!(
            bad(b"[]").1["error"]["message"],
            "Batch requests are not supported"
        );
        let (_, body) = bad(br#"{"jsonrpc":"1.0","id":7,"method":"message/send"}"#);
        assert_eq!(
            (body["id"].clone(), body["error"]["code"].clone()),
            (json!(7), json!(-32600))
        );
        let (_, body) = bad(br#"{"jsonrpc":"2.0","id":7}"#);
        assert_eq!(body["error"]["message"], "Method is required");
        let (_, body) = bad(br#"{"jsonrpc":"2.0","id":7,"method":"message/send","params":"x"}"#);
        assert_eq!(body["error"]["code"], -32602);
        let (_, body) = bad(br#"{"jsonrpc":"2.0","id":{"a":1},"method":"message/send"}"#);
        assert_eq!(
            (body["id"].clone(), body["error"]["code"].clone()),
            (Value::Null, json!(-32600))
        );
    }

    #[test]
    fn bad_messages_get_the_sdks_validation_errors() {
        // a2a_19: a v0.3 message under a v1.0 method.
        let body = rpc("SendMessage", json!({ "message": v03_message(json!({})) }));
        let (_, body) = reply_of(route("POST", "/", V1, &body));
        assert_eq!(body["id"], "req-1");
        assert_eq!(body["error"]["code"], -32602);
        assert_eq!(body["error"]["message"], "Validation failed");
        assert_eq!(
            body["error"]["data"][1]["fieldViolations"],
            json!([{ "field": "message.role", "description": "Field is required." }])
        );
        // a2a_20: a v1.0 message under a v0.3 method.
        let body = rpc("message/send", json!({ "message": v10_message(json!({})) }));
        let (_, body) = reply_of(route("POST", "/", &[], &body));
        assert_eq!(body["error"]["code"], -32600);
        assert_eq!(body["error"]["message"], "Invalid Request");

        let refused = |message: Value, field: &str| {
            let body = rpc("SendMessage", json!({ "message": message }));
            let (_, body) = reply_of(route("POST", "/", V1, &body));
            assert_eq!(
                body["error"]["data"][1]["fieldViolations"][0]["field"], field,
                "{body}"
            );
        };
        refused(v10_message(json!({ "parts": [] })), "message.parts");
        refused(
            v10_message(json!({ "parts": [{ "nothing": 1 }] })),
            "message.parts[0]",
        );
        refused(v10_message(json!({ "messageId": "" })), "message.messageId");
        refused(v10_message(json!({ "contextId": 5 })), "message.contextId");
        // Tether finds the session by contextId: a task alone does not name one.
        refused(v10_message(json!({ "taskId": "t1" })), "message.contextId");
        let body = rpc("SendMessage", json!({}));
        let (_, body) = reply_of(route("POST", "/", V1, &body));
        assert_eq!(
            body["error"]["data"][1]["fieldViolations"][0]["field"],
            "message"
        );
        let body = rpc("tasks/get", json!({}));
        let (_, body) = reply_of(route("POST", "/", &[], &body));
        assert_eq!(body["error"]["code"], -32600);
    }

    #[test]
    fn task_methods_route_to_the_log_with_the_request_as_fallback() {
        let body = rpc("tasks/get", json!({ "id": "t1", "historyLength": 1 }));
        assert_eq!(
            route("POST", "/", &[], &body),
            Route::Get {
                agent_ref: "t1".into(),
                client: json!({ "transport": "jsonrpc", "version": "0.3", "method": "tasks/get",
                                "id": "req-1", "historyLength": 1 }),
                fallback: AgentRequest::post("/", body.clone()),
            }
        );
        let body = rpc("GetTask", json!({ "id": "t1" }));
        let Route::Get { fallback, .. } = route("POST", "/", V1, &body) else {
            panic!()
        };
        assert_eq!(
            fallback,
            AgentRequest::post("/", body.clone()).with_header("A2A-Version", "1.0")
        );

        let body = rpc("CancelTask", json!({ "id": "t1" }));
        assert_eq!(
            route("POST", "/", V1, &body),
            Route::Cancel {
                agent_ref: "t1".into(),
                client: json!({ "transport": "jsonrpc", "version": "1.0", "method": "CancelTask", "id": "req-1" }),
                fallback: AgentRequest::post("/", body.clone()).with_header("A2A-Version", "1.0"),
            }
        );
        let body = rpc("tasks/cancel", json!({ "id": "t1" }));
        assert!(matches!(
            route("POST", "/", &[], &body),
            Route::Cancel { .. }
        ));
    }

    #[test]
    fn resubscribe_resumes_after_the_last_event_id() {
        let body = rpc("tasks/resubscribe", json!({ "id": "t1" }));
        let Route::Subscribe {
            agent_ref,
            after_seq,
            client,
        } = route("POST", "/", &[("Last-Event-ID", "42")], &body)
        else {
            panic!()
        };
        assert_eq!((agent_ref.as_str(), after_seq), ("t1", Some(42)));
        assert_eq!(client["method"], "tasks/resubscribe");
        let body = rpc("SubscribeToTask", json!({ "id": "t1" }));
        let headers = [("A2A-Version", "1.0"), ("last-event-id", "x")];
        let Route::Subscribe { after_seq, .. } = route("POST", "/", &headers, &body) else {
            panic!()
        };
        assert_eq!(after_seq, None);
    }

    #[test]
    fn other_methods_go_to_the_agent_as_they_are() {
        let body = rpc("ListTasks", json!({ "contextId": "c" }));
        assert_eq!(
            route("POST", "/", V1, &body),
            Route::Forward(AgentRequest::post("/", body.clone()).with_header("A2A-Version", "1.0"))
        );
        let body = rpc("tasks/pushNotificationConfig/get", json!({ "id": "t" }));
        assert_eq!(
            route("POST", "/", &[], &body),
            Route::Forward(AgentRequest::post("/", body.clone()))
        );
    }

    #[test]
    fn claims_the_a2a_paths_only() {
        for (method, path) in [
            ("POST", "/"),
            ("POST", "/a2a"),
            ("POST", "/api/jsonrpc/"),
            ("GET", "/.well-known/agent-card.json"),
            ("GET", "/.well-known/agent.json"),
            ("GET", "/rest/extendedAgentCard"),
            ("POST", "/rest/message:send"),
            ("POST", "/rest/v1/message:stream"),
            ("POST", "/message:send"),
            ("GET", "/rest/tasks/abc"),
            ("GET", "/rest/tasks/abc?historyLength=1"),
            ("POST", "/rest/tasks/abc:cancel"),
            ("GET", "/rest/tasks/abc:subscribe"),
            ("POST", "/rest/v1/tasks/abc:subscribe"),
        ] {
            assert!(A2aSurface.claims(method, path), "{method} {path}");
        }
        for (method, path) in [
            ("GET", "/"),
            ("GET", "/health"),
            ("POST", "/upload"),
            ("GET", "/rest/tasks"),
            ("GET", "/rest/tasks?contextId=x"),
            ("GET", "/rest/tasks/abc/pushNotificationConfigs"),
            ("POST", "/rest/tasks/abc"),
            ("GET", "/rest/tasks/abc:cancel"),
            ("POST", "/rest/tasks/:cancel"),
            ("POST", "/rest/xmessage:send"),
        ] {
            assert!(!A2aSurface.claims(method, path), "{method} {path}");
        }
    }

    #[test]
    fn cards_are_fetched_from_the_agent() {
        let route = A2aSurface.route(&request(
            "GET",
            "/.well-known/agent-card.json",
            None,
            &[],
            b"",
        ));
        assert_eq!(
            route,
            Route::Forward(AgentRequest::get("/.well-known/agent-card.json"))
        );
    }

    #[test]
    fn rest_requests_route_like_json_rpc() {
        let body = json!({ "message": v10_message(json!({ "contextId": "ctx-1" })) });
        let turn = run_of(route("POST", "/rest/message:stream", V1, &body));
        assert!(turn.stream);
        assert_eq!(turn.session, SessionRef::Named("ctx-1".into()));
        assert_eq!(
            turn.extra["client"],
            json!({ "transport": "rest", "version": "1.0", "method": "message:stream", "id": null })
        );
        assert_eq!(turn.extra["a2a"]["path"], "/rest/message:stream");

        // a2a_rest_03: v1.0 routes need the header.
        let (status, body) = reply_of(route("POST", "/rest/message:send", &[], &body));
        assert_eq!(status, 400);
        assert_eq!(body["error"]["status"], "FAILED_PRECONDITION");
        assert_eq!(
            body["error"]["message"],
            "A2A version '0.3' is not supported by this handler. Expected version '1.0'."
        );

        // a2a_rest_15: v0.3's protobuf JSON under `v1/`.
        let body = json!({ "request": { "messageId": "m", "role": "ROLE_USER", "content": [{ "text": "hi" }] } });
        let turn = run_of(route("POST", "/rest/v1/message:send", &[], &body));
        assert!(!turn.stream);
        assert_eq!(turn.input, vec![Item::user_text("hi")]);
        assert_eq!(turn.extra["client"]["version"], "0.3");

        let (status, body) =
            reply_of(A2aSurface.route(&request("POST", "/rest/message:send", None, V1, b"{")));
        assert_eq!(
            (status, body["error"]["status"].clone()),
            (400, json!("INVALID_ARGUMENT"))
        );
        let (status, body) = reply_of(route(
            "POST",
            "/rest/message:send",
            V1,
            &json!({ "message": {} }),
        ));
        assert_eq!(
            (status, body["error"]["message"].clone()),
            (400, json!("Validation failed"))
        );
    }

    #[test]
    fn rest_task_operations() {
        let get = request("GET", "/rest/tasks/t%201", Some("historyLength=2"), V1, b"");
        assert_eq!(
            A2aSurface.route(&get),
            Route::Get {
                agent_ref: "t 1".into(),
                client: json!({ "transport": "rest", "version": "1.0", "method": "get", "id": null, "historyLength": 2 }),
                fallback: AgentRequest::get("/rest/tasks/t%201?historyLength=2")
                    .with_header("A2A-Version", "1.0"),
            }
        );
        let cancel = request("POST", "/rest/v1/tasks/t1:cancel", None, &[], b"{}");
        assert_eq!(
            A2aSurface.route(&cancel),
            Route::Cancel {
                agent_ref: "t1".into(),
                client: json!({ "transport": "rest", "version": "0.3", "method": "cancel", "id": null }),
                fallback: AgentRequest::post("/rest/v1/tasks/t1:cancel", json!({})),
            }
        );
        let headers = [("A2A-Version", "1.0"), ("Last-Event-ID", "7")];
        let subscribe = request("GET", "/rest/tasks/t1:subscribe", None, &headers, b"");
        let Route::Subscribe {
            agent_ref,
            after_seq,
            ..
        } = A2aSurface.route(&subscribe)
        else {
            panic!()
        };
        assert_eq!((agent_ref.as_str(), after_seq), ("t1", Some(7)));
    }

    #[test]
    fn parse_request_takes_a_bare_json_rpc_body() {
        let body = rpc("SendMessage", json!({ "message": v10_message(json!({})) })).to_string();
        let turn = A2aSurface.parse_request(body.as_bytes(), None).unwrap();
        assert_eq!(turn.extra["client"]["version"], "1.0");
        let body = rpc("tasks/get", json!({ "id": "t" })).to_string();
        assert!(A2aSurface.parse_request(body.as_bytes(), None).is_err());
        assert!(A2aSurface.parse_request(b"nope", None).is_err());
    }

    // --- parsing the agent's answer ------------------------------------------------------

    /// Feeds `body` in chunks of `size` bytes.
    fn parse(sse: bool, body: &[u8], size: usize) -> Vec<Output> {
        let mut parser = A2aParser::new(sse);
        let mut out = Vec::new();
        for chunk in body.chunks(size.max(1)) {
            out.extend(parser.feed(chunk));
        }
        out.extend(parser.finish());
        out
    }

    fn frames(out: &[Output]) -> Vec<Value> {
        out.iter()
            .filter_map(|o| match o {
                Output::Frame(f) => Some(f.clone()),
                _ => None,
            })
            .collect()
    }

    fn others(out: &[Output]) -> Vec<Output> {
        out.iter()
            .filter(|o| !matches!(o, Output::Frame(_)))
            .cloned()
            .collect()
    }

    fn answered(text: &str, task: &str, context: &str, state: &str) -> Output {
        Output::ItemWith(
            Item::assistant_text(text),
            json!({ "a2a": { "taskId": task, "contextId": context, "state": state } }),
        )
    }

    #[test]
    fn parses_a_v03_stream_split_anywhere() {
        let body = crlf(wire::V03_STREAM);
        let task = "fec33ee8-d85e-4039-b755-a15bd9aa5299";
        let context = "326b0b34-2b77-41e8-abae-1cf42b70780d";
        for size in [1, 2, 7, 61, 500, body.len()] {
            let out = parse(true, body.as_bytes(), size);
            assert_eq!(
                frames(&out),
                stream_results(wire::V03_STREAM),
                "chunks of {size}"
            );
            assert_eq!(
                others(&out),
                vec![
                    Output::AgentRef(task.into()),
                    answered(
                        "You said: My project is named zebra42.",
                        task,
                        context,
                        "completed"
                    ),
                    Output::Done { usage: None },
                ],
                "chunks of {size}"
            );
            // The task id is known as soon as the first frame is.
            assert_eq!(out[1], Output::AgentRef(task.into()));
        }
    }

    #[test]
    fn parses_a_v10_stream_split_anywhere() {
        let body = crlf(wire::V10_STREAM);
        let task = "06170946-a53c-4498-9ba8-e9d947eb44b7";
        let context = "632b4b73-3433-4d82-823d-e10e5d2e8957";
        for size in [1, 3, 64, 777, body.len()] {
            let out = parse(true, body.as_bytes(), size);
            assert_eq!(frames(&out).len(), 10);
            assert_eq!(frames(&out), stream_results(wire::V10_STREAM));
            assert_eq!(
                others(&out),
                vec![
                    Output::AgentRef(task.into()),
                    answered(
                        "You said: My project is named zebra42.",
                        task,
                        context,
                        "completed"
                    ),
                    Output::Done { usage: None },
                ]
            );
        }
        // The upstream's parser picks SSE from the content type.
        let turn = TurnRequest::new(Protocol::A2a);
        let call = call(&turn, &[], &[]);
        let mut parser = A2aUpstream.parser(&call, "text/event-stream; charset=utf-8");
        let mut out = parser.feed(body.as_bytes());
        out.extend(parser.finish());
        assert_eq!(out.last(), Some(&Output::Done { usage: None }));
    }

    #[test]
    fn parses_http_json_streams() {
        let out = parse(true, crlf(wire::REST10_STREAM).as_bytes(), 50);
        assert_eq!(frames(&out), stream_results(wire::REST10_STREAM));
        assert_eq!(
            others(&out)[1..],
            [
                answered(
                    "zebra42",
                    "4c21fcae-ec5a-48aa-8c6b-589c4cd20b38",
                    "4c06c2f6-1aad-432b-8fcc-f3a685c1b761",
                    "completed"
                ),
                Output::Done { usage: None },
            ]
        );
        let out = parse(true, crlf(wire::REST03_STREAM).as_bytes(), 50);
        assert_eq!(frames(&out).len(), 4);
        assert_eq!(out.last(), Some(&Output::Done { usage: None }));
    }

    #[test]
    fn parses_a_non_streaming_answer() {
        let out = parse(false, wire::V10_SEND.as_bytes(), 100);
        assert_eq!(
            frames(&out),
            vec![json_of(wire::V10_SEND)["result"].clone()]
        );
        assert_eq!(
            others(&out),
            vec![
                Output::AgentRef("c4227bb9-5139-45fc-850e-a93679687554".into()),
                answered(
                    "You said: My project is named zebra42.",
                    "c4227bb9-5139-45fc-850e-a93679687554",
                    "dc2c1530-bdd9-4d09-a490-8a093190b1d4",
                    "completed"
                ),
                Output::Done { usage: None },
            ]
        );
        let out = parse(false, wire::V03_SEND.as_bytes(), 1);
        assert_eq!(out.len(), 4);
        assert_eq!(out[3], Output::Done { usage: None });
    }

    #[test]
    fn a_message_reply_is_a_whole_answer() {
        let reply = json!({ "jsonrpc": "2.0", "id": 1, "result": {
            "kind": "message", "role": "agent", "messageId": "a1", "contextId": "c1",
            "parts": [{ "kind": "text", "text": "Hello " }, { "kind": "text", "text": "there" }],
        }});
        let out = parse(false, reply.to_string().as_bytes(), 9);
        assert_eq!(
            out,
            vec![
                Output::Frame(reply["result"].clone()),
                Output::ItemWith(
                    Item::assistant_text("Hello there"),
                    json!({ "a2a": { "messageId": "a1", "contextId": "c1" } })
                ),
                Output::Done { usage: None },
            ]
        );
    }

    #[test]
    fn failed_and_canceled_tasks_end_the_turn_with_an_error() {
        let out = parse(true, crlf(wire::V10_FAILED_STREAM).as_bytes(), 33);
        assert_eq!(frames(&out).len(), 3);
        let Some(Output::Error { code, message }) = out.last() else {
            panic!("{out:?}")
        };
        assert_eq!(code, "agent_task_failed");
        assert!(
            message.starts_with("LLM error: Server error '500"),
            "{message}"
        );
        // A failed task's status message is not recorded as an answer.
        assert!(!out.iter().any(|o| matches!(o, Output::ItemWith(..))));

        let out = parse(true, crlf(wire::V03_CANCELED_STREAM).as_bytes(), 100);
        let tail = &others(&out)[1..];
        assert_eq!(
            tail,
            [
                answered(
                    "w1 w2 w3 ",
                    "6b1002dc-fd50-45e7-92ea-ee1d6a99ef3c",
                    "44205b86-0901-4d69-a32d-21ff59ab2c96",
                    "canceled"
                ),
                Output::Error {
                    code: "agent_task_canceled".into(),
                    message: "The agent's task ended as canceled.".into()
                },
            ]
        );
    }

    #[test]
    fn json_rpc_errors_become_errors() {
        let out = parse(false, wire::V10_NOT_FOUND.as_bytes(), 10);
        assert_eq!(
            out,
            vec![Output::Error {
                code: "a2a_error_-32001".into(),
                message: "Task not found".into()
            }]
        );
        // a2a_37: a streaming method answered with plain JSON.
        let out = parse(true, wire::V10_SUBSCRIBE_FINISHED.as_bytes(), 10);
        assert!(matches!(&out[..], [Output::Error { code, .. }] if code == "a2a_error_-32004"));
        // a2a_34: the error as the stream's only event.
        let sse = "data: {\"error\":{\"code\":-32004,\"message\":\"done\"},\"id\":\"x\",\"jsonrpc\":\"2.0\"}\r\n\r\n";
        assert_eq!(
            parse(true, sse.as_bytes(), 5),
            vec![Output::Error {
                code: "a2a_error_-32004".into(),
                message: "done".into()
            }]
        );
        assert!(
            matches!(&parse(false, b"", 1)[..], [Output::Error { code, .. }] if code == "empty_response")
        );
        assert!(
            matches!(&parse(false, b"<html>", 1)[..], [Output::Error { code, .. }] if code == "invalid_response")
        );
    }

    #[test]
    fn a_stream_cut_short_does_not_complete() {
        let body = crlf(wire::V03_STREAM);
        let cut = &body[..body.len() / 2];
        let out = parse(true, cut.as_bytes(), 40);
        assert!(!out.is_empty());
        assert!(!out
            .iter()
            .any(|o| matches!(o, Output::Done { .. } | Output::ItemWith(..))));
        // Frames after the end are not the turn's.
        let twice = format!("{body}{body}");
        let out = parse(true, twice.as_bytes(), 4096);
        assert_eq!(frames(&out).len(), 10);
    }

    // --- dialects --------------------------------------------------------------------------

    #[test]
    fn frames_survive_a_trip_through_v10_form() {
        for (body, dialect) in [
            (wire::V03_STREAM, Dialect::Kinded),
            (wire::V03_CANCELED_STREAM, Dialect::Kinded),
            (wire::V10_STREAM, Dialect::Proto),
            (wire::REST10_STREAM, Dialect::Proto),
            (wire::REST03_STREAM, Dialect::Proto03),
        ] {
            for frame in stream_results(body) {
                let canon = canonical(&frame).expect("a known frame");
                assert_eq!(from_canonical(&canon, dialect), frame);
                // Where the spelling is ambiguous (a v0.3 HTTP+JSON `working` update is
                // also valid v1.0), both spellings are the same bytes.
                assert_eq!(from_canonical(&canon, dialect_of(&frame)), frame);
            }
            let first = &stream_results(body)[0];
            assert_eq!(dialect_of(first), dialect, "{first}");
        }
    }

    #[test]
    fn v03_and_v10_frames_convert_into_each_other() {
        let v03 = stream_results(wire::V03_STREAM);
        let v10: Vec<Value> = v03
            .iter()
            .map(|f| from_canonical(&canonical(f).unwrap(), Dialect::Proto))
            .collect();
        assert_eq!(v10[0]["task"]["status"]["state"], "TASK_STATE_SUBMITTED");
        assert_eq!(v10[0]["task"]["history"][0]["role"], "ROLE_USER");
        assert_eq!(
            v10[0]["task"]["history"][0]["parts"],
            json!([{ "text": "My project is named zebra42." }])
        );
        assert_eq!(
            v10[2]["artifactUpdate"]["artifact"]["parts"],
            json!([{ "text": "You " }])
        );
        assert_eq!(
            v10[9]["statusUpdate"]["status"]["state"],
            "TASK_STATE_COMPLETED"
        );
        assert!(v10[9]["statusUpdate"].get("final").is_none());
        // And back: the SDK's v0.3 frames again.
        for (orig, converted) in v03.iter().zip(&v10) {
            assert_eq!(
                &from_canonical(&canonical(converted).unwrap(), Dialect::Kinded),
                orig
            );
        }
        let file = json!({ "url": "https://x/a", "filename": "a", "mediaType": "text/plain" });
        assert_eq!(
            part_from_v10(&file, Dialect::Kinded),
            json!({ "kind": "file", "file": { "uri": "https://x/a", "name": "a", "mimeType": "text/plain" } })
        );
        assert_eq!(
            part_from_v10(&file, Dialect::Proto03),
            json!({ "file": { "fileWithUri": "https://x/a", "name": "a", "mimeType": "text/plain" } })
        );
        assert_eq!(part_to_v10(&part_from_v10(&file, Dialect::Kinded)), file);
        assert_eq!(part_to_v10(&part_from_v10(&file, Dialect::Proto03)), file);
        assert_eq!(short_state("TASK_STATE_CANCELLED"), "canceled");
        assert_eq!(state_to_v10("input-required"), "TASK_STATE_INPUT_REQUIRED");
        assert_eq!(
            state_from_v10("TASK_STATE_CANCELED", Dialect::Proto03),
            "TASK_STATE_CANCELLED"
        );
    }

    // --- the log: rendering and snapshots ------------------------------------------------------

    struct Log {
        seq: i64,
        events: Vec<Event>,
    }

    impl Log {
        fn new() -> Self {
            let mut log = Log {
                seq: 10,
                events: Vec::new(),
            };
            log.push(
                Item::user_text("hi")
                    .to_event("acct", "s1")
                    .in_run(RUN, "inv1"),
            );
            log.status(RunStatus::InProgress);
            log
        }

        fn push(&mut self, new: NewEvent) -> &mut Self {
            self.seq += 1;
            let at = Utc.timestamp_opt(1_796_221_000 + self.seq, 0).unwrap();
            self.events.push(Event::committed(new, self.seq, at));
            self
        }

        fn run(&mut self, event_type: EventType, content: Value) -> &mut Self {
            self.push(NewEvent::new("acct", "s1", event_type, content).in_run(RUN, "inv1"))
        }

        fn frames(&mut self, frames: &[Value]) -> &mut Self {
            for frame in frames {
                self.run(EventType::AgentEvent, frame.clone());
            }
            self
        }

        fn status(&mut self, status: RunStatus) -> &mut Self {
            self.run(
                EventType::RunStatus,
                session_log::event::run_status_content(status, None),
            )
        }

        fn error(&mut self, code: &str, message: &str) -> &mut Self {
            self.run(
                EventType::Error,
                json!({ "code": code, "message": message }),
            )
        }

        fn render(&self, client: Value) -> Vec<SseFrame> {
            let mut r = A2aSurface.stream_renderer(&run_info(client));
            let mut frames: Vec<SseFrame> = self.events.iter().flat_map(|e| r.render(e)).collect();
            frames.extend(r.end());
            frames
        }

        fn last_time(&self) -> String {
            self.events
                .last()
                .unwrap()
                .created_at
                .to_rfc3339_opts(SecondsFormat::Micros, true)
        }
    }

    fn run_info(client: Value) -> RunInfo {
        RunInfo {
            run_id: RUN.into(),
            session_id: "s1".into(),
            model: String::new(),
            created_at: 1_796_221_000,
            client,
        }
    }

    fn client(transport: &str, version: &str, method: &str, id: Value) -> Value {
        json!({ "transport": transport, "version": version, "method": method, "id": id })
    }

    fn data(frame: &SseFrame) -> Value {
        json_of(&frame.data)
    }

    #[test]
    fn renders_each_frame_as_a_json_rpc_response_with_its_seq() {
        let results = stream_results(wire::V03_STREAM);
        let mut log = Log::new();
        log.frames(&results).status(RunStatus::Completed);
        let frames = log.render(client("jsonrpc", "0.3", "message/stream", json!("c-1")));
        assert_eq!(frames.len(), 10);
        for (i, (frame, result)) in frames.iter().zip(&results).enumerate() {
            assert_eq!(frame.id, Some((13 + i as i64).to_string()));
            assert_eq!(frame.event, None);
            assert_eq!(
                data(frame),
                json!({ "jsonrpc": "2.0", "id": "c-1", "result": result })
            );
        }
        // Byte for byte what the agent sent inside the envelope.
        assert!(frames[0].data.contains(&results[0].to_string()));
    }

    #[test]
    fn renders_bare_events_over_http_json_and_converts_for_other_dialects() {
        let results = stream_results(wire::V10_STREAM);
        let mut log = Log::new();
        log.frames(&results).status(RunStatus::Completed);
        let rest = log.render(client("rest", "1.0", "subscribe", Value::Null));
        assert_eq!(rest.iter().map(data).collect::<Vec<_>>(), results);

        let v03 = log.render(client("jsonrpc", "0.3", "tasks/resubscribe", json!(5)));
        assert_eq!(v03.len(), 10);
        let first = &data(&v03[0])["result"];
        assert_eq!(first["kind"], "task");
        assert_eq!(first["status"]["state"], "submitted");
        assert_eq!(first["history"][0]["role"], "user");
        assert_eq!(first["history"][0]["parts"][0]["kind"], "text");
        let last = &data(&v03[9])["result"];
        assert_eq!(last["kind"], "status-update");
        assert_eq!(last["final"], true);
        assert_eq!(last["status"]["state"], "completed");
        assert_eq!(last["status"]["message"]["role"], "agent");
    }

    #[test]
    fn a_run_tether_cancelled_ends_with_a_canceled_status() {
        let results = stream_results(wire::V03_CANCELED_STREAM);
        let mut log = Log::new();
        log.frames(&results[..5]).status(RunStatus::Cancelled);
        let at = log.last_time();
        let frames = log.render(client("jsonrpc", "0.3", "message/stream", json!("c-1")));
        assert_eq!(frames.len(), 6);
        assert_eq!(frames[5].id, Some(log.seq.to_string()));
        assert_eq!(
            data(&frames[5]),
            json!({ "jsonrpc": "2.0", "id": "c-1", "result": {
                "kind": "status-update",
                "taskId": "6b1002dc-fd50-45e7-92ea-ee1d6a99ef3c",
                "contextId": "44205b86-0901-4d69-a32d-21ff59ab2c96",
                "status": { "state": "canceled", "timestamp": at },
                "final": true,
            }})
        );
        let frames = log.render(client("jsonrpc", "1.0", "SendStreamingMessage", json!(2)));
        assert_eq!(
            data(&frames[5])["result"],
            json!({ "statusUpdate": {
                "taskId": "6b1002dc-fd50-45e7-92ea-ee1d6a99ef3c",
                "contextId": "44205b86-0901-4d69-a32d-21ff59ab2c96",
                "status": { "state": "TASK_STATE_CANCELED", "timestamp": at },
            }})
        );
    }

    #[test]
    fn a_run_that_died_ends_with_a_failed_status() {
        let results = stream_results(wire::V10_STREAM);
        let mut log = Log::new();
        log.frames(&results[..4])
            .error("agent_connection_lost", "connection reset")
            .status(RunStatus::Failed);
        let frames = log.render(client("jsonrpc", "1.0", "SendStreamingMessage", json!(2)));
        assert_eq!(frames.len(), 5);
        let status = &data(&frames[4])["result"]["statusUpdate"]["status"];
        assert_eq!(status["state"], "TASK_STATE_FAILED");
        assert_eq!(
            status["message"]["parts"],
            json!([{ "text": "connection reset" }])
        );
        assert_eq!(status["message"]["role"], "ROLE_AGENT");
    }

    #[test]
    fn the_agents_own_end_is_not_repeated() {
        let mut log = Log::new();
        log.frames(&stream_results(wire::V03_CANCELED_STREAM))
            .error("agent_task_canceled", "canceled")
            .status(RunStatus::Failed);
        assert_eq!(
            log.render(client("jsonrpc", "0.3", "message/stream", json!(1)))
                .len(),
            6
        );
    }

    #[test]
    fn a_run_without_a_task_ends_with_a_json_rpc_error() {
        let mut log = Log::new();
        log.error("a2a_error_-32001", "Task t9 not found")
            .status(RunStatus::Failed);
        let frames = log.render(client("jsonrpc", "1.0", "SendStreamingMessage", json!(3)));
        assert_eq!(frames.len(), 1);
        assert_eq!(
            data(&frames[0]),
            json!({ "jsonrpc": "2.0", "id": 3, "error": { "code": -32001, "message": "Task t9 not found" } })
        );
        let mut log = Log::new();
        log.error("agent_error", "the agent answered HTTP 500")
            .status(RunStatus::Failed);
        let frames = log.render(client("rest", "1.0", "message:stream", Value::Null));
        assert_eq!(data(&frames[0])["error"]["code"], 500);
    }

    #[test]
    fn other_runs_are_not_rendered() {
        let mut log = Log::new();
        log.push(
            NewEvent::new(
                "acct",
                "s1",
                EventType::AgentEvent,
                stream_results(wire::V10_STREAM)[0].clone(),
            )
            .in_run("run_other", "i9"),
        );
        assert!(log
            .render(client("jsonrpc", "1.0", "SendStreamingMessage", json!(1)))
            .is_empty());
    }

    #[test]
    fn the_folded_task_is_what_the_agent_itself_answers_to_a_get() {
        // a2a_22 folded == a2a_24 (v0.3), a2a_28 folded == a2a_30 (v1.0).
        for (stream, get, method) in [
            (
                wire::V03_CANCELED_STREAM,
                wire::V03_GET_AFTER_CANCEL,
                "tasks/get",
            ),
            (
                wire::V10_CANCELED_STREAM,
                wire::V10_GET_AFTER_CANCEL,
                "GetTask",
            ),
        ] {
            let expected = json_of(get);
            let version = if method == "GetTask" { "1.0" } else { "0.3" };
            let mut log = Log::new();
            log.frames(&stream_results(stream))
                .error("agent_task_canceled", "canceled")
                .status(RunStatus::Failed);
            let run = run_info(client("jsonrpc", version, method, expected["id"].clone()));
            assert_eq!(A2aSurface.snapshot(&run, &log.events), expected, "{method}");
        }
    }

    #[test]
    fn a_non_streaming_send_is_answered_as_the_agent_answered() {
        for (body, version, method) in [
            (wire::V10_SEND, "1.0", "SendMessage"),
            (wire::V03_SEND, "0.3", "message/send"),
        ] {
            let expected = json_of(body);
            let mut log = Log::new();
            log.frames(&[expected["result"].clone()])
                .status(RunStatus::Completed);
            let run = run_info(client("jsonrpc", version, method, expected["id"].clone()));
            assert_eq!(
                A2aSurface.final_response(&run, &log.events),
                (200, expected)
            );
        }
        // A streamed run answered to a non-streaming HTTP+JSON client.
        let mut log = Log::new();
        log.frames(&stream_results(wire::V10_STREAM))
            .status(RunStatus::Completed);
        let body = A2aSurface.final_body(
            &run_info(client("rest", "1.0", "message:send", Value::Null)),
            &log.events,
        );
        let task = &body["task"];
        assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED");
        assert_eq!(
            task["artifacts"],
            json!([{ "artifactId": "answer", "name": "answer", "parts": [
                { "text": "You " }, { "text": "said: " }, { "text": "My " }, { "text": "project " },
                { "text": "is " }, { "text": "named " }, { "text": "zebra42." }] }])
        );
    }

    #[test]
    fn failures_answer_in_the_clients_protocol() {
        // A task that failed is still a result.
        let mut log = Log::new();
        log.frames(&stream_results(wire::V10_FAILED_STREAM))
            .error("agent_task_failed", "LLM error")
            .status(RunStatus::Failed);
        let (status, body) = A2aSurface.final_response(
            &run_info(client("jsonrpc", "1.0", "SendMessage", json!(1))),
            &log.events,
        );
        assert_eq!(status, 200);
        assert_eq!(
            body["result"]["task"]["status"]["state"],
            "TASK_STATE_FAILED"
        );

        // No task at all: the agent's error, in a 200 for JSON-RPC.
        let mut log = Log::new();
        log.error("a2a_error_-32001", "Task t1 not found")
            .status(RunStatus::Failed);
        assert_eq!(
            A2aSurface.final_response(
                &run_info(client("jsonrpc", "0.3", "message/send", json!("r"))),
                &log.events
            ),
            (
                200,
                json!({ "jsonrpc": "2.0", "id": "r", "error": { "code": -32001, "message": "Task t1 not found" } })
            )
        );
        let (status, body) = A2aSurface.final_response(
            &run_info(client("rest", "1.0", "message:send", Value::Null)),
            &log.events,
        );
        assert_eq!(
            (status, body["error"]["status"].clone()),
            (404, json!("NOT_FOUND"))
        );
        let mut log = Log::new();
        log.error("agent_connection_lost", "reset")
            .status(RunStatus::Interrupted);
        let (_, body) = A2aSurface.final_response(
            &run_info(client("jsonrpc", "1.0", "SendMessage", json!(1))),
            &log.events,
        );
        assert_eq!(body["error"], json!({ "code": -32603, "message": "reset" }));
    }

    #[test]
    fn snapshots_after_a_cancel_and_with_history_length() {
        let results = stream_results(wire::V10_CANCELED_STREAM);
        let mut log = Log::new();
        log.frames(&results[..5]);
        // Still running: the state so far.
        let run = run_info(client("jsonrpc", "1.0", "GetTask", json!(1)));
        let snap = A2aSurface.snapshot(&run, &log.events);
        assert_eq!(snap["result"]["status"]["state"], "TASK_STATE_WORKING");
        assert_eq!(
            snap["result"]["artifacts"][0]["parts"],
            json!([{ "text": "w1 " }, { "text": "w2 " }, { "text": "w3 " }])
        );
        // Tether cancelled it before the agent said so.
        log.status(RunStatus::Cancelled);
        let at = log.last_time();
        let run = run_info(client("jsonrpc", "1.0", "CancelTask", json!(1)));
        let snap = A2aSurface.snapshot(&run, &log.events);
        assert_eq!(
            snap["result"]["status"],
            json!({ "state": "TASK_STATE_CANCELED", "timestamp": at })
        );
        // historyLength 0 drops the history; 1 keeps the last message.
        let mut c = client("jsonrpc", "0.3", "tasks/get", json!(1));
        c["historyLength"] = json!(0);
        let snap = A2aSurface.snapshot(&run_info(c.clone()), &log.events);
        assert!(snap["result"].get("history").is_none());
        assert_eq!(snap["result"]["status"]["state"], "canceled");
        c["historyLength"] = json!(1);
        let snap = A2aSurface.snapshot(&run_info(c), &log.events);
        assert_eq!(snap["result"]["history"].as_array().map(Vec::len), Some(1));
    }

    #[test]
    fn cancelling_a_finished_task_is_refused_as_the_sdk_refuses_it() {
        let mut log = Log::new();
        log.frames(&stream_results(wire::V03_STREAM))
            .status(RunStatus::Completed);
        let run = run_info(client("jsonrpc", "0.3", "tasks/cancel", json!("x")));
        assert_eq!(
            A2aSurface.snapshot(&run, &log.events),
            json!({ "jsonrpc": "2.0", "id": "x", "error": { "code": -32002, "message": "Task cannot be canceled" } })
        );
        let mut log = Log::new();
        log.status(RunStatus::Failed);
        let run = run_info(client("jsonrpc", "0.3", "tasks/get", json!("x")));
        assert_eq!(
            A2aSurface.snapshot(&run, &log.events)["error"]["code"],
            -32001
        );
    }

    #[test]
    fn a_resumed_run_answers_with_its_last_invocation() {
        let mut log = Log::new();
        log.frames(&stream_results(wire::V03_CANCELED_STREAM)[..3])
            .status(RunStatus::Interrupted);
        log.status(RunStatus::InProgress)
            .frames(&stream_results(wire::V03_STREAM))
            .status(RunStatus::Completed);
        let run = run_info(client("jsonrpc", "0.3", "message/send", json!(1)));
        let body = A2aSurface.final_body(&run, &log.events);
        assert_eq!(body["result"]["id"], "fec33ee8-d85e-4039-b755-a15bd9aa5299");
        assert_eq!(body["result"]["status"]["state"], "completed");
    }

    #[test]
    fn folding_applies_appends_replacements_and_messages() {
        let mut fold = Fold::default();
        let update = |append: bool, id: &str, text: &str| {
            json!({ "artifactUpdate": { "taskId": "t", "contextId": "c", "append": append,
                "artifact": { "artifactId": id, "parts": [{ "text": text }] } } })
        };
        fold.apply(&update(false, "a", "1"));
        fold.apply(&update(true, "a", "2"));
        fold.apply(&update(false, "b", "x"));
        fold.apply(&update(false, "b", "y"));
        fold.apply(&json!({ "message": { "taskId": "t", "role": "ROLE_AGENT", "parts": [{ "text": "thinking" }] } }));
        fold.apply(&json!({ "statusUpdate": { "taskId": "other", "status": { "state": "TASK_STATE_FAILED" } } }));
        let task = fold.task.unwrap();
        assert_eq!(task["id"], "t");
        assert_eq!(task["status"]["state"], "TASK_STATE_SUBMITTED");
        assert_eq!(artifacts_text(&task), "12\ny");
        assert_eq!(task["history"][0]["parts"][0]["text"], "thinking");
        assert_eq!(answer_text(&task), "12\ny");
    }

    #[test]
    fn the_answer_text_does_not_repeat_the_status_message() {
        let task = |artifacts: Value, status: &str| {
            json!({ "artifacts": artifacts,
                    "status": { "state": "TASK_STATE_COMPLETED", "message": { "role": "ROLE_AGENT", "parts": [{ "text": status }] } } })
        };
        let answer =
            json!([{ "artifactId": "a", "parts": [{ "text": "You " }, { "text": "said: hi" }] }]);
        assert_eq!(
            answer_text(&task(answer.clone(), "You said: hi")),
            "You said: hi"
        );
        assert_eq!(answer_text(&task(answer, "Done.")), "You said: hi\n\nDone.");
        assert_eq!(answer_text(&task(json!([]), "Which city?")), "Which city?");
    }

    #[test]
    fn agent_cards_point_at_tether() {
        let card = json_of(wire::CARD);
        let out = A2aSurface.rewrite_forwarded(
            &request("GET", "/.well-known/agent-card.json", None, &[], b""),
            "https://tether.example.com/",
            card.clone(),
        );
        assert_eq!(out["url"], "https://tether.example.com/");
        assert_eq!(
            out["additionalInterfaces"][0]["url"],
            "https://tether.example.com/rest"
        );
        let urls: Vec<&str> = out["supportedInterfaces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["url"].as_str().unwrap())
            .collect();
        assert_eq!(
            urls,
            [
                "https://tether.example.com/",
                "https://tether.example.com/rest",
                "https://tether.example.com/",
                "https://tether.example.com/rest"
            ]
        );
        assert_eq!(out["skills"], card["skills"]);

        // Other origins (documentation, a gRPC port) are left alone; a card in a JSON-RPC
        // result (the extended card) is rewritten too.
        let card = json!({ "name": "x", "documentationUrl": "https://docs.example.com/a",
            "supportedInterfaces": [
                { "url": "http://agent:8000", "protocolBinding": "JSONRPC" },
                { "url": "http://agent:50051", "protocolBinding": "GRPC" },
                { "url": "https://elsewhere.example.com/a2a", "protocolBinding": "HTTP+JSON" }] });
        let out = A2aSurface.rewrite_forwarded(
            &request("POST", "/", None, &[], b""),
            "https://gw.example.com/agent1",
            json!({ "jsonrpc": "2.0", "id": 1, "result": card }),
        );
        let ifaces = &out["result"]["supportedInterfaces"];
        assert_eq!(ifaces[0]["url"], "https://gw.example.com/agent1/");
        assert_eq!(ifaces[1]["url"], "http://agent:50051");
        assert_eq!(ifaces[2]["url"], "https://gw.example.com/agent1/a2a");
        assert_eq!(
            out["result"]["documentationUrl"],
            "https://docs.example.com/a"
        );
        // Not a card: untouched.
        let other =
            json!({ "jsonrpc": "2.0", "id": 1, "result": { "url": "http://agent:8000/x" } });
        assert_eq!(
            A2aSurface.rewrite_forwarded(
                &request("POST", "/", None, &[], b""),
                "https://gw",
                other.clone()
            ),
            other
        );
    }

    #[test]
    fn error_bodies_are_json_rpc_errors() {
        assert_eq!(
            A2aSurface.error_body(
                "Too many requests",
                "rate_limit_error",
                None,
                Some("rate_limited")
            ),
            json!({ "jsonrpc": "2.0", "id": null, "error": { "code": -32603, "message": "Too many requests",
                     "data": { "type": "rate_limit_error", "code": "rate_limited" } } })
        );
        let body = A2aSurface.error_body(
            "Body too large",
            "invalid_request_error",
            Some("body"),
            None,
        );
        assert_eq!(body["error"]["code"], -32600);
        assert_eq!(body["error"]["data"]["param"], "body");
        assert_eq!(A2aSurface.response_id("run_1"), "run_1");
        assert_eq!(A2aSurface.run_id("run_1"), None);
    }

    // --- upstream requests -----------------------------------------------------------------

    fn call<'a>(turn: &'a TurnRequest, history: &'a [Item], events: &'a [Event]) -> TurnCall<'a> {
        TurnCall {
            account_id: "acct",
            session_id: "sess-1",
            run_id: "run-1",
            history,
            events,
            turn,
            default_model: "",
        }
    }

    fn turn_of(method: &str, path: &str, headers: &[(&str, &str)], body: Value) -> TurnRequest {
        run_of(route(method, path, headers, &body))
    }

    fn earlier_run(agent_ref: &str) -> Vec<Event> {
        let new = NewEvent::new(
            "acct",
            "sess-1",
            EventType::RunStatus,
            session_log::event::run_status_content(RunStatus::Completed, None),
        )
        .in_run("run-0", "inv-0")
        .with_metadata(json!({ "agent_ref": agent_ref }));
        vec![Event::committed(
            new,
            5,
            Utc.timestamp_opt(1_796_221_000, 0).unwrap(),
        )]
    }

    #[test]
    fn the_agent_gets_the_clients_request_in_the_session() {
        let params = json!({ "message": v10_message(json!({ "contextId": "ctx-from-client" })),
                             "configuration": { "returnImmediately": true, "historyLength": 2 } });
        let turn = turn_of("POST", "/", V1, rpc("SendMessage", params));
        let request = A2aUpstream.request(&call(&turn, &[], &[]));
        let mut message = v10_message(json!({}));
        message["contextId"] = json!("sess-1");
        assert_eq!(
            request,
            AgentRequest::post(
                "/",
                json!({ "jsonrpc": "2.0", "id": "run-1", "method": "SendMessage",
                "params": { "message": message, "configuration": { "historyLength": 2 } } })
            )
            .with_header("A2A-Version", "1.0")
        );

        let turn = turn_of(
            "POST",
            "/",
            &[],
            rpc(
                "message/stream",
                json!({ "message": v03_message(json!({ "taskId": "t1", "contextId": "c" })) }),
            ),
        );
        let request = A2aUpstream.request(&call(&turn, &[], &[]));
        assert_eq!(
            request.headers,
            vec![("Accept".to_owned(), "text/event-stream".to_owned())]
        );
        let body = request.body.unwrap();
        assert_eq!(body["method"], "message/stream");
        assert_eq!(body["params"]["message"]["contextId"], "sess-1");
        assert_eq!(body["params"]["message"]["taskId"], "t1");

        let turn = turn_of(
            "POST",
            "/rest/v1/message:send",
            &[],
            json!({ "request": {
            "messageId": "m", "role": "ROLE_USER", "content": [{ "text": "hi" }] }, "configuration": { "blocking": false } }),
        );
        let request = A2aUpstream.request(&call(&turn, &[], &[]));
        assert_eq!(
            request,
            AgentRequest::post(
                "/rest/v1/message:send",
                json!({ "request": {
                "messageId": "m", "role": "ROLE_USER", "content": [{ "text": "hi" }], "contextId": "sess-1" },
                "configuration": {} })
            )
        );
    }

    #[test]
    fn a_turn_from_another_surface_is_sent_as_v03_json_rpc() {
        let mut turn = TurnRequest::new(Protocol::OpenAiChat);
        turn.input = vec![Item::user_text("hello")];
        let request = A2aUpstream.request(&call(&turn, &[], &[]));
        assert_eq!(
            request,
            AgentRequest::post(
                "/",
                json!({ "jsonrpc": "2.0", "id": "run-1", "method": "message/send",
                "params": { "message": { "kind": "message", "role": "user", "messageId": "run-1-input",
                    "contextId": "sess-1", "parts": [{ "kind": "text", "text": "hello" }] } } })
            )
        );
    }

    #[test]
    fn probes_ask_for_the_last_task() {
        let turn = turn_of(
            "POST",
            "/",
            V1,
            rpc(
                "SendMessage",
                json!({ "message": v10_message(json!({ "contextId": "c" })) }),
            ),
        );
        let history = [
            Item::user_text("My project is named zebra42."),
            Item::assistant_text("You said so."),
        ];
        assert_eq!(A2aUpstream.probe(&call(&turn, &[], &[])), Probe::Skip);
        assert_eq!(
            A2aUpstream.probe(&call(&turn, &history, &[])),
            Probe::Restore
        );
        let events = earlier_run("t-old");
        assert_eq!(
            A2aUpstream.probe(&call(&turn, &history, &events)),
            Probe::Ask(
                AgentRequest::post(
                    "/",
                    json!({ "jsonrpc": "2.0", "id": "tether-probe-run-1", "method": "GetTask",
                    "params": { "id": "t-old", "historyLength": 0 } })
                )
                .with_header("A2A-Version", "1.0")
            )
        );
        let turn = turn_of(
            "POST",
            "/rest/message:send",
            V1,
            json!({ "message": v10_message(json!({})) }),
        );
        assert_eq!(
            A2aUpstream.probe(&call(&turn, &history, &events)),
            Probe::Ask(
                AgentRequest::get("/rest/tasks/t-old?historyLength=0")
                    .with_header("A2A-Version", "1.0")
            )
        );
    }

    #[test]
    fn forgot_means_task_not_found() {
        assert!(A2aUpstream.forgot(
            404,
            br#"{"error":{"code":404,"status":"NOT_FOUND","message":"Task not found"}}"#
        ));
        assert!(A2aUpstream.forgot(200, wire::V10_NOT_FOUND.as_bytes()));
        assert!(A2aUpstream.forgot(200, br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32001,"data":null,"message":"Task t not found"}}"#));
        assert!(A2aUpstream.forgot(200, b"data: {\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32001,\"message\":\"x\"}}\r\n\r\n"));
        assert!(!A2aUpstream.forgot(200, wire::V10_SEND.as_bytes()));
        assert!(!A2aUpstream.forgot(200, wire::V10_SUBSCRIBE_FINISHED.as_bytes()));
        assert!(!A2aUpstream.forgot(200, crlf(wire::V03_STREAM).as_bytes()));
        assert!(!A2aUpstream.forgot(500, b"oops"));
    }

    #[test]
    fn restore_tells_the_agent_the_earlier_turns_first() {
        let message = v10_message(
            json!({ "contextId": "c", "taskId": "t-old", "parts": [{ "text": "What is my project named?" }] }),
        );
        let turn = turn_of(
            "POST",
            "/",
            V1,
            rpc("SendStreamingMessage", json!({ "message": message })),
        );
        let history = [
            Item::user_text("My project is named zebra42."),
            Item::assistant_text("You said: My project is named zebra42."),
            Item::Reasoning {
                text: "hidden".into(),
            },
        ];
        let restore = A2aUpstream.restore(&call(&turn, &history, &[])).unwrap();
        let text = "[Tether restored this conversation: the agent had lost it. Earlier turns:]\n\
                    User: My project is named zebra42.\n\
                    Assistant: You said: My project is named zebra42.\n\
                    [End of earlier turns. Reply with OK.]";
        assert_eq!(
            restore.before,
            vec![AgentRequest::post("/", json!({ "jsonrpc": "2.0", "id": "tether-restore-run-1", "method": "SendMessage",
                "params": { "message": { "role": "ROLE_USER", "messageId": "run-1-restore", "contextId": "sess-1",
                    "parts": [{ "text": text }] } } }))
            .with_header("A2A-Version", "1.0")]
        );
        // The turn itself, without the task the agent lost.
        let body = restore.request.body.unwrap();
        assert_eq!(body["method"], "SendStreamingMessage");
        assert_eq!(body["params"]["message"]["contextId"], "sess-1");
        assert!(body["params"]["message"].get("taskId").is_none());

        // In v0.3 JSON-RPC and v0.3 HTTP+JSON shapes.
        let turn = turn_of(
            "POST",
            "/",
            &[],
            rpc("message/send", json!({ "message": v03_message(json!({})) })),
        );
        let restore = A2aUpstream.restore(&call(&turn, &history, &[])).unwrap();
        let body = restore.before[0].body.clone().unwrap();
        assert_eq!(body["method"], "message/send");
        assert_eq!(
            body["params"]["message"]["parts"],
            json!([{ "kind": "text", "text": text }])
        );
        let turn = turn_of(
            "POST",
            "/rest/v1/message:stream",
            &[],
            json!({ "request": {
            "messageId": "m", "role": "ROLE_USER", "content": [{ "text": "hi" }] } }),
        );
        let restore = A2aUpstream.restore(&call(&turn, &history, &[])).unwrap();
        assert_eq!(restore.before[0].path, "/rest/v1/message:send");
        assert_eq!(
            restore.before[0].body.as_ref().unwrap()["request"]["content"],
            json!([{ "text": text }])
        );
        // Nothing to tell: just the turn.
        assert!(A2aUpstream
            .restore(&call(&turn, &[], &[]))
            .unwrap()
            .before
            .is_empty());
    }

    #[test]
    fn cancel_names_the_task_in_the_turns_protocol() {
        let id_of = |r: &AgentRequest| r.body.as_ref().unwrap()["id"].as_str().unwrap().to_owned();
        let turn = turn_of(
            "POST",
            "/",
            &[],
            rpc(
                "message/stream",
                json!({ "message": v03_message(json!({})) }),
            ),
        );
        let request = A2aUpstream.cancel(&turn, "t1").unwrap();
        assert_eq!(
            request,
            AgentRequest::post(
                "/",
                json!({ "jsonrpc": "2.0", "id": id_of(&request), "method": "tasks/cancel", "params": { "id": "t1" } })
            )
        );
        let turn = turn_of(
            "POST",
            "/",
            V1,
            rpc(
                "SendStreamingMessage",
                json!({ "message": v10_message(json!({})) }),
            ),
        );
        let request = A2aUpstream.cancel(&turn, "t1").unwrap();
        assert_eq!(request.body.as_ref().unwrap()["method"], "CancelTask");
        assert_eq!(
            request.headers,
            vec![("A2A-Version".to_owned(), "1.0".to_owned())]
        );
        let turn = turn_of(
            "POST",
            "/rest/message:stream",
            V1,
            json!({ "message": v10_message(json!({})) }),
        );
        assert_eq!(
            A2aUpstream.cancel(&turn, "a/b").unwrap(),
            AgentRequest::post("/rest/tasks/a%2Fb:cancel", json!({}))
                .with_header("A2A-Version", "1.0")
        );
    }

    #[test]
    fn path_segments_round_trip() {
        assert_eq!(encode_segment("a b/c"), "a%20b%2Fc");
        assert_eq!(decode_segment("a%20b%2Fc"), "a b/c");
        assert_eq!(decode_segment("100%"), "100%");
    }

    /// Bodies captured from a2a-sdk 1.3.0 agents (uvicorn), byte for byte.
    mod wire {
        /// v0.3 `message/stream`, one turn.
        pub const V03_STREAM: &str = r#"data: {"id":"v03_message_stream_turn1","jsonrpc":"2.0","result":{"contextId":"326b0b34-2b77-41e8-abae-1cf42b70780d","history":[{"contextId":"326b0b34-2b77-41e8-abae-1cf42b70780d","kind":"message","messageId":"c1c1fe40-17f3-4cbb-a0d0-bf9f06265b27","parts":[{"kind":"text","text":"My project is named zebra42."}],"role":"user","taskId":"fec33ee8-d85e-4039-b755-a15bd9aa5299"}],"id":"fec33ee8-d85e-4039-b755-a15bd9aa5299","kind":"task","status":{"state":"submitted"}}}

data: {"id":"v03_message_stream_turn1","jsonrpc":"2.0","result":{"contextId":"326b0b34-2b77-41e8-abae-1cf42b70780d","final":false,"kind":"status-update","status":{"state":"working","timestamp":"2026-12-02T14:22:18.687841Z"},"taskId":"fec33ee8-d85e-4039-b755-a15bd9aa5299"}}

data: {"id":"v03_message_stream_turn1","jsonrpc":"2.0","result":{"append":false,"artifact":{"artifactId":"answer","name":"answer","parts":[{"kind":"text","text":"You "}]},"contextId":"326b0b34-2b77-41e8-abae-1cf42b70780d","kind":"artifact-update","lastChunk":false,"taskId":"fec33ee8-d85e-4039-b755-a15bd9aa5299"}}

data: {"id":"v03_message_stream_turn1","jsonrpc":"2.0","result":{"append":true,"artifact":{"artifactId":"answer","parts":[{"kind":"text","text":"said: "}]},"contextId":"326b0b34-2b77-41e8-abae-1cf42b70780d","kind":"artifact-update","lastChunk":false,"taskId":"fec33ee8-d85e-4039-b755-a15bd9aa5299"}}

data: {"id":"v03_message_stream_turn1","jsonrpc":"2.0","result":{"append":true,"artifact":{"artifactId":"answer","parts":[{"kind":"text","text":"My "}]},"contextId":"326b0b34-2b77-41e8-abae-1cf42b70780d","kind":"artifact-update","lastChunk":false,"taskId":"fec33ee8-d85e-4039-b755-a15bd9aa5299"}}

data: {"id":"v03_message_stream_turn1","jsonrpc":"2.0","result":{"append":true,"artifact":{"artifactId":"answer","parts":[{"kind":"text","text":"project "}]},"contextId":"326b0b34-2b77-41e8-abae-1cf42b70780d","kind":"artifact-update","lastChunk":false,"taskId":"fec33ee8-d85e-4039-b755-a15bd9aa5299"}}

data: {"id":"v03_message_stream_turn1","jsonrpc":"2.0","result":{"append":true,"artifact":{"artifactId":"answer","parts":[{"kind":"text","text":"is "}]},"contextId":"326b0b34-2b77-41e8-abae-1cf42b70780d","kind":"artifact-update","lastChunk":false,"taskId":"fec33ee8-d85e-4039-b755-a15bd9aa5299"}}

data: {"id":"v03_message_stream_turn1","jsonrpc":"2.0","result":{"append":true,"artifact":{"artifactId":"answer","parts":[{"kind":"text","text":"named "}]},"contextId":"326b0b34-2b77-41e8-abae-1cf42b70780d","kind":"artifact-update","lastChunk":false,"taskId":"fec33ee8-d85e-4039-b755-a15bd9aa5299"}}

data: {"id":"v03_message_stream_turn1","jsonrpc":"2.0","result":{"append":true,"artifact":{"artifactId":"answer","parts":[{"kind":"text","text":"zebra42."}]},"contextId":"326b0b34-2b77-41e8-abae-1cf42b70780d","kind":"artifact-update","lastChunk":true,"taskId":"fec33ee8-d85e-4039-b755-a15bd9aa5299"}}

data: {"id":"v03_message_stream_turn1","jsonrpc":"2.0","result":{"contextId":"326b0b34-2b77-41e8-abae-1cf42b70780d","final":true,"kind":"status-update","status":{"message":{"contextId":"326b0b34-2b77-41e8-abae-1cf42b70780d","kind":"message","messageId":"03defe11-cae7-4b6f-8c11-7c1d256305c1","parts":[{"kind":"text","text":"You said: My project is named zebra42."}],"role":"agent","taskId":"fec33ee8-d85e-4039-b755-a15bd9aa5299"},"state":"completed","timestamp":"2026-12-02T14:22:18.718887Z"},"taskId":"fec33ee8-d85e-4039-b755-a15bd9aa5299"}}

"#;
        /// v1.0 `SendStreamingMessage`, one turn.
        pub const V10_STREAM: &str = r#"data: {"result": {"task": {"id": "06170946-a53c-4498-9ba8-e9d947eb44b7", "contextId": "632b4b73-3433-4d82-823d-e10e5d2e8957", "status": {"state": "TASK_STATE_SUBMITTED"}, "history": [{"messageId": "dab650fd-e303-489c-8df1-c1d08ef016f2", "contextId": "632b4b73-3433-4d82-823d-e10e5d2e8957", "taskId": "06170946-a53c-4498-9ba8-e9d947eb44b7", "role": "ROLE_USER", "parts": [{"text": "My project is named zebra42."}]}]}}, "id": "v10_SendStreamingMessage_turn1", "jsonrpc": "2.0"}

data: {"result": {"statusUpdate": {"taskId": "06170946-a53c-4498-9ba8-e9d947eb44b7", "contextId": "632b4b73-3433-4d82-823d-e10e5d2e8957", "status": {"state": "TASK_STATE_WORKING", "timestamp": "2026-12-02T14:22:18.852818Z"}}}, "id": "v10_SendStreamingMessage_turn1", "jsonrpc": "2.0"}

data: {"result": {"artifactUpdate": {"taskId": "06170946-a53c-4498-9ba8-e9d947eb44b7", "contextId": "632b4b73-3433-4d82-823d-e10e5d2e8957", "artifact": {"artifactId": "answer", "name": "answer", "parts": [{"text": "You "}]}}}, "id": "v10_SendStreamingMessage_turn1", "jsonrpc": "2.0"}

data: {"result": {"artifactUpdate": {"taskId": "06170946-a53c-4498-9ba8-e9d947eb44b7", "contextId": "632b4b73-3433-4d82-823d-e10e5d2e8957", "artifact": {"artifactId": "answer", "parts": [{"text": "said: "}]}, "append": true}}, "id": "v10_SendStreamingMessage_turn1", "jsonrpc": "2.0"}

data: {"result": {"artifactUpdate": {"taskId": "06170946-a53c-4498-9ba8-e9d947eb44b7", "contextId": "632b4b73-3433-4d82-823d-e10e5d2e8957", "artifact": {"artifactId": "answer", "parts": [{"text": "My "}]}, "append": true}}, "id": "v10_SendStreamingMessage_turn1", "jsonrpc": "2.0"}

data: {"result": {"artifactUpdate": {"taskId": "06170946-a53c-4498-9ba8-e9d947eb44b7", "contextId": "632b4b73-3433-4d82-823d-e10e5d2e8957", "artifact": {"artifactId": "answer", "parts": [{"text": "project "}]}, "append": true}}, "id": "v10_SendStreamingMessage_turn1", "jsonrpc": "2.0"}

data: {"result": {"artifactUpdate": {"taskId": "06170946-a53c-4498-9ba8-e9d947eb44b7", "contextId": "632b4b73-3433-4d82-823d-e10e5d2e8957", "artifact": {"artifactId": "answer", "parts": [{"text": "is "}]}, "append": true}}, "id": "v10_SendStreamingMessage_turn1", "jsonrpc": "2.0"}

data: {"result": {"artifactUpdate": {"taskId": "06170946-a53c-4498-9ba8-e9d947eb44b7", "contextId": "632b4b73-3433-4d82-823d-e10e5d2e8957", "artifact": {"artifactId": "answer", "parts": [{"text": "named "}]}, "append": true}}, "id": "v10_SendStreamingMessage_turn1", "jsonrpc": "2.0"}

data: {"result": {"artifactUpdate": {"taskId": "06170946-a53c-4498-9ba8-e9d947eb44b7", "contextId": "632b4b73-3433-4d82-823d-e10e5d2e8957", "artifact": {"artifactId": "answer", "parts": [{"text": "zebra42."}]}, "append": true, "lastChunk": true}}, "id": "v10_SendStreamingMessage_turn1", "jsonrpc": "2.0"}

data: {"result": {"statusUpdate": {"taskId": "06170946-a53c-4498-9ba8-e9d947eb44b7", "contextId": "632b4b73-3433-4d82-823d-e10e5d2e8957", "status": {"state": "TASK_STATE_COMPLETED", "message": {"messageId": "8a668897-7484-4710-a96f-0d6d8b745178", "contextId": "632b4b73-3433-4d82-823d-e10e5d2e8957", "taskId": "06170946-a53c-4498-9ba8-e9d947eb44b7", "role": "ROLE_AGENT", "parts": [{"text": "You said: My project is named zebra42."}]}, "timestamp": "2026-12-02T14:22:18.888638Z"}}}, "id": "v10_SendStreamingMessage_turn1", "jsonrpc": "2.0"}

"#;
        /// v0.3 stream of a task the client cancelled.
        pub const V03_CANCELED_STREAM: &str = r#"data: {"id":"v03_message_stream_slow_then_canceled","jsonrpc":"2.0","result":{"contextId":"44205b86-0901-4d69-a32d-21ff59ab2c96","history":[{"contextId":"44205b86-0901-4d69-a32d-21ff59ab2c96","kind":"message","messageId":"5d425745-12da-4c36-bbb6-d0eb97659fcc","parts":[{"kind":"text","text":"slow:20:200 count for me"}],"role":"user","taskId":"6b1002dc-fd50-45e7-92ea-ee1d6a99ef3c"}],"id":"6b1002dc-fd50-45e7-92ea-ee1d6a99ef3c","kind":"task","status":{"state":"submitted"}}}

data: {"id":"v03_message_stream_slow_then_canceled","jsonrpc":"2.0","result":{"contextId":"44205b86-0901-4d69-a32d-21ff59ab2c96","final":false,"kind":"status-update","status":{"state":"working","timestamp":"2026-12-02T14:22:18.957564Z"},"taskId":"6b1002dc-fd50-45e7-92ea-ee1d6a99ef3c"}}

data: {"id":"v03_message_stream_slow_then_canceled","jsonrpc":"2.0","result":{"append":false,"artifact":{"artifactId":"answer","name":"answer","parts":[{"kind":"text","text":"w1 "}]},"contextId":"44205b86-0901-4d69-a32d-21ff59ab2c96","kind":"artifact-update","lastChunk":false,"taskId":"6b1002dc-fd50-45e7-92ea-ee1d6a99ef3c"}}

data: {"id":"v03_message_stream_slow_then_canceled","jsonrpc":"2.0","result":{"append":true,"artifact":{"artifactId":"answer","parts":[{"kind":"text","text":"w2 "}]},"contextId":"44205b86-0901-4d69-a32d-21ff59ab2c96","kind":"artifact-update","lastChunk":false,"taskId":"6b1002dc-fd50-45e7-92ea-ee1d6a99ef3c"}}

data: {"id":"v03_message_stream_slow_then_canceled","jsonrpc":"2.0","result":{"append":true,"artifact":{"artifactId":"answer","parts":[{"kind":"text","text":"w3 "}]},"contextId":"44205b86-0901-4d69-a32d-21ff59ab2c96","kind":"artifact-update","lastChunk":false,"taskId":"6b1002dc-fd50-45e7-92ea-ee1d6a99ef3c"}}

data: {"id":"v03_message_stream_slow_then_canceled","jsonrpc":"2.0","result":{"contextId":"44205b86-0901-4d69-a32d-21ff59ab2c96","final":true,"kind":"status-update","status":{"state":"canceled","timestamp":"2026-12-02T14:22:19.984255Z"},"taskId":"6b1002dc-fd50-45e7-92ea-ee1d6a99ef3c"}}

"#;
        /// v0.3 `tasks/get` of that task afterwards.
        pub const V03_GET_AFTER_CANCEL: &str = r#"{"id":"v03_tasks_get_after_cancel","jsonrpc":"2.0","result":{"artifacts":[{"artifactId":"answer","name":"answer","parts":[{"kind":"text","text":"w1 "},{"kind":"text","text":"w2 "},{"kind":"text","text":"w3 "}]}],"contextId":"44205b86-0901-4d69-a32d-21ff59ab2c96","history":[{"contextId":"44205b86-0901-4d69-a32d-21ff59ab2c96","kind":"message","messageId":"5d425745-12da-4c36-bbb6-d0eb97659fcc","parts":[{"kind":"text","text":"slow:20:200 count for me"}],"role":"user","taskId":"6b1002dc-fd50-45e7-92ea-ee1d6a99ef3c"}],"id":"6b1002dc-fd50-45e7-92ea-ee1d6a99ef3c","kind":"task","status":{"state":"canceled","timestamp":"2026-12-02T14:22:19.984255Z"}}}"#;
        /// v1.0 stream of a task the client cancelled.
        pub const V10_CANCELED_STREAM: &str = r#"data: {"result": {"task": {"id": "7a1ee2a1-8f62-40ca-90ce-e2171c50efcc", "contextId": "293d5160-d90d-4c58-bede-5083776f82fa", "status": {"state": "TASK_STATE_SUBMITTED"}, "history": [{"messageId": "c3607a3c-484b-42b8-8543-14a486bee1ac", "contextId": "293d5160-d90d-4c58-bede-5083776f82fa", "taskId": "7a1ee2a1-8f62-40ca-90ce-e2171c50efcc", "role": "ROLE_USER", "parts": [{"text": "slow:20:200 count for me"}]}]}}, "id": "v10_SendStreamingMessage_slow_then_canceled", "jsonrpc": "2.0"}

data: {"result": {"statusUpdate": {"taskId": "7a1ee2a1-8f62-40ca-90ce-e2171c50efcc", "contextId": "293d5160-d90d-4c58-bede-5083776f82fa", "status": {"state": "TASK_STATE_WORKING", "timestamp": "2026-12-02T14:22:20.301490Z"}}}, "id": "v10_SendStreamingMessage_slow_then_canceled", "jsonrpc": "2.0"}

data: {"result": {"artifactUpdate": {"taskId": "7a1ee2a1-8f62-40ca-90ce-e2171c50efcc", "contextId": "293d5160-d90d-4c58-bede-5083776f82fa", "artifact": {"artifactId": "answer", "name": "answer", "parts": [{"text": "w1 "}]}}}, "id": "v10_SendStreamingMessage_slow_then_canceled", "jsonrpc": "2.0"}

data: {"result": {"artifactUpdate": {"taskId": "7a1ee2a1-8f62-40ca-90ce-e2171c50efcc", "contextId": "293d5160-d90d-4c58-bede-5083776f82fa", "artifact": {"artifactId": "answer", "parts": [{"text": "w2 "}]}, "append": true}}, "id": "v10_SendStreamingMessage_slow_then_canceled", "jsonrpc": "2.0"}

data: {"result": {"artifactUpdate": {"taskId": "7a1ee2a1-8f62-40ca-90ce-e2171c50efcc", "contextId": "293d5160-d90d-4c58-bede-5083776f82fa", "artifact": {"artifactId": "answer", "parts": [{"text": "w3 "}]}, "append": true}}, "id": "v10_SendStreamingMessage_slow_then_canceled", "jsonrpc": "2.0"}

data: {"result": {"statusUpdate": {"taskId": "7a1ee2a1-8f62-40ca-90ce-e2171c50efcc", "contextId": "293d5160-d90d-4c58-bede-5083776f82fa", "status": {"state": "TASK_STATE_CANCELED", "timestamp": "2026-12-02T14:22:21.341398Z"}}}, "id": "v10_SendStreamingMessage_slow_then_canceled", "jsonrpc": "2.0"}

"#;
        /// v1.0 `GetTask` of that task afterwards.
        pub const V10_GET_AFTER_CANCEL: &str = r#"{"result":{"id":"7a1ee2a1-8f62-40ca-90ce-e2171c50efcc","contextId":"293d5160-d90d-4c58-bede-5083776f82fa","status":{"state":"TASK_STATE_CANCELED","timestamp":"2026-12-02T14:22:21.341398Z"},"artifacts":[{"artifactId":"answer","name":"answer","parts":[{"text":"w1 "},{"text":"w2 "},{"text":"w3 "}]}],"history":[{"messageId":"c3607a3c-484b-42b8-8543-14a486bee1ac","contextId":"293d5160-d90d-4c58-bede-5083776f82fa","taskId":"7a1ee2a1-8f62-40ca-90ce-e2171c50efcc","role":"ROLE_USER","parts":[{"text":"slow:20:200 count for me"}]}]},"id":"v10_GetTask_after_cancel","jsonrpc":"2.0"}"#;
        /// v0.3 `message/send`.
        pub const V03_SEND: &str = r#"{"id":"v03_message_send_turn1","jsonrpc":"2.0","result":{"artifacts":[{"artifactId":"answer","name":"answer","parts":[{"kind":"text","text":"You "},{"kind":"text","text":"said: "},{"kind":"text","text":"My "},{"kind":"text","text":"project "},{"kind":"text","text":"is "},{"kind":"text","text":"named "},{"kind":"text","text":"zebra42."}]}],"contextId":"947dcfa1-61ec-46d2-9271-28ef90d74e0c","history":[{"contextId":"947dcfa1-61ec-46d2-9271-28ef90d74e0c","kind":"message","messageId":"db5e0908-7a71-42d8-aa04-2607b65670aa","parts":[{"kind":"text","text":"My project is named zebra42."}],"role":"user","taskId":"56a56506-cc71-4034-bd12-3fbf3948a024"}],"id":"56a56506-cc71-4034-bd12-3fbf3948a024","kind":"task","status":{"message":{"contextId":"947dcfa1-61ec-46d2-9271-28ef90d74e0c","kind":"message","messageId":"e39086da-dd38-4af9-81a6-3ed8baf15628","parts":[{"kind":"text","text":"You said: My project is named zebra42."}],"role":"agent","taskId":"56a56506-cc71-4034-bd12-3fbf3948a024"},"state":"completed","timestamp":"2026-12-02T14:22:18.647056Z"}}}"#;
        /// v1.0 `SendMessage`.
        pub const V10_SEND: &str = r#"{"result":{"task":{"id":"c4227bb9-5139-45fc-850e-a93679687554","contextId":"dc2c1530-bdd9-4d09-a490-8a093190b1d4","status":{"state":"TASK_STATE_COMPLETED","message":{"messageId":"bd94c50f-f28c-495f-900b-d99aef8b0e9f","contextId":"dc2c1530-bdd9-4d09-a490-8a093190b1d4","taskId":"c4227bb9-5139-45fc-850e-a93679687554","role":"ROLE_AGENT","parts":[{"text":"You said: My project is named zebra42."}]},"timestamp":"2026-12-02T14:22:18.801113Z"},"artifacts":[{"artifactId":"answer","name":"answer","parts":[{"text":"You "},{"text":"said: "},{"text":"My "},{"text":"project "},{"text":"is "},{"text":"named "},{"text":"zebra42."}]}],"history":[{"messageId":"f085c257-ff19-44ca-b09c-9aaca8ef32b7","contextId":"dc2c1530-bdd9-4d09-a490-8a093190b1d4","taskId":"c4227bb9-5139-45fc-850e-a93679687554","role":"ROLE_USER","parts":[{"text":"My project is named zebra42."}]}]}},"id":"v10_SendMessage_turn1","jsonrpc":"2.0"}"#;
        /// v1.0 stream of a task that failed (the agent's LLM answered 500).
        pub const V10_FAILED_STREAM: &str = r#"data: {"result": {"task": {"id": "5625027d-8a82-47ba-9bb6-55d8f0328d66", "contextId": "803141c8-6293-491c-bf72-db7b5816e3b0", "status": {"state": "TASK_STATE_SUBMITTED"}, "history": [{"messageId": "m-err2", "contextId": "803141c8-6293-491c-bf72-db7b5816e3b0", "taskId": "5625027d-8a82-47ba-9bb6-55d8f0328d66", "role": "ROLE_USER", "parts": [{"text": "please error"}]}]}}, "id": 1, "jsonrpc": "2.0"}

data: {"result": {"statusUpdate": {"taskId": "5625027d-8a82-47ba-9bb6-55d8f0328d66", "contextId": "803141c8-6293-491c-bf72-db7b5816e3b0", "status": {"state": "TASK_STATE_WORKING", "timestamp": "2026-12-02T14:22:30.585270Z"}}}, "id": 1, "jsonrpc": "2.0"}

data: {"result": {"statusUpdate": {"taskId": "5625027d-8a82-47ba-9bb6-55d8f0328d66", "contextId": "803141c8-6293-491c-bf72-db7b5816e3b0", "status": {"state": "TASK_STATE_FAILED", "message": {"messageId": "2fa913b7-1903-41d3-90cf-799bf268fa4d", "contextId": "803141c8-6293-491c-bf72-db7b5816e3b0", "taskId": "5625027d-8a82-47ba-9bb6-55d8f0328d66", "role": "ROLE_AGENT", "parts": [{"text": "LLM error: Server error '500 Internal Server Error' for url 'http://127.0.0.1:42927/v1/chat/completions'\nFor more information check: https://developer.mozilla.org/en-US/docs/Web/HTTP/Status/500"}]}, "timestamp": "2026-12-02T14:22:30.620922Z"}}}, "id": 1, "jsonrpc": "2.0"}

"#;
        /// v1.0 `GetTask` of an unknown task.
        pub const V10_NOT_FOUND: &str = r#"{"error":{"code":-32001,"message":"Task not found","data":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"TASK_NOT_FOUND","domain":"a2a-protocol.org","metadata":{}}]},"id":"v10_GetTask_unknown","jsonrpc":"2.0"}"#;
        /// v1.0 `SubscribeToTask` of a finished task: JSON, not SSE.
        pub const V10_SUBSCRIBE_FINISHED: &str = r#"{"error":{"code":-32004,"message":"Task 4c71c714-2e87-4cd4-816e-07512230289f is in terminal state: TASK_STATE_COMPLETED","data":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"UNSUPPORTED_OPERATION","domain":"a2a-protocol.org","metadata":{}}]},"id":"v10_SubscribeToTask_finished","jsonrpc":"2.0"}"#;
        /// v1.0 HTTP+JSON `message:stream`.
        pub const REST10_STREAM: &str = r#"data: {"task": {"id": "4c21fcae-ec5a-48aa-8c6b-589c4cd20b38", "contextId": "4c06c2f6-1aad-432b-8fcc-f3a685c1b761", "status": {"state": "TASK_STATE_SUBMITTED"}, "history": [{"messageId": "ecc5873c-cdd0-40ba-8b77-009a5869fbb9", "contextId": "4c06c2f6-1aad-432b-8fcc-f3a685c1b761", "taskId": "4c21fcae-ec5a-48aa-8c6b-589c4cd20b38", "role": "ROLE_USER", "parts": [{"text": "What is my project named?"}]}]}}

data: {"statusUpdate": {"taskId": "4c21fcae-ec5a-48aa-8c6b-589c4cd20b38", "contextId": "4c06c2f6-1aad-432b-8fcc-f3a685c1b761", "status": {"state": "TASK_STATE_WORKING", "timestamp": "2026-12-02T14:22:27.462161Z"}}}

data: {"artifactUpdate": {"taskId": "4c21fcae-ec5a-48aa-8c6b-589c4cd20b38", "contextId": "4c06c2f6-1aad-432b-8fcc-f3a685c1b761", "artifact": {"artifactId": "answer", "name": "answer", "parts": [{"text": "zebra42"}]}, "lastChunk": true}}

data: {"statusUpdate": {"taskId": "4c21fcae-ec5a-48aa-8c6b-589c4cd20b38", "contextId": "4c06c2f6-1aad-432b-8fcc-f3a685c1b761", "status": {"state": "TASK_STATE_COMPLETED", "message": {"messageId": "bc559071-134d-4f72-adf8-97bc15d04f94", "contextId": "4c06c2f6-1aad-432b-8fcc-f3a685c1b761", "taskId": "4c21fcae-ec5a-48aa-8c6b-589c4cd20b38", "role": "ROLE_AGENT", "parts": [{"text": "zebra42"}]}, "timestamp": "2026-12-02T14:22:27.495234Z"}}}

"#;
        /// v0.3 HTTP+JSON `v1/message:stream`.
        pub const REST03_STREAM: &str = r#"data: {"task": {"id": "98643f83-eee4-4160-9383-41b16e5740cc", "contextId": "c479e649-6224-44c1-be0e-a6da6dc02dd1", "status": {"state": "TASK_STATE_SUBMITTED"}, "history": [{"messageId": "ada43a33-d739-4ffe-816a-1aa7cb4f79e8", "contextId": "c479e649-6224-44c1-be0e-a6da6dc02dd1", "taskId": "98643f83-eee4-4160-9383-41b16e5740cc", "role": "ROLE_USER", "content": [{"text": "What is my project named?"}]}]}}

data: {"statusUpdate": {"taskId": "98643f83-eee4-4160-9383-41b16e5740cc", "contextId": "c479e649-6224-44c1-be0e-a6da6dc02dd1", "status": {"state": "TASK_STATE_WORKING", "timestamp": "2026-12-02T14:22:29.043056Z"}}}

data: {"artifactUpdate": {"taskId": "98643f83-eee4-4160-9383-41b16e5740cc", "contextId": "c479e649-6224-44c1-be0e-a6da6dc02dd1", "artifact": {"artifactId": "answer", "name": "answer", "parts": [{"text": "zebra42"}]}, "lastChunk": true}}

data: {"statusUpdate": {"taskId": "98643f83-eee4-4160-9383-41b16e5740cc", "contextId": "c479e649-6224-44c1-be0e-a6da6dc02dd1", "status": {"state": "TASK_STATE_COMPLETED", "message": {"messageId": "8920a1bc-b86e-4fba-ae43-16247eeb60e0", "contextId": "c479e649-6224-44c1-be0e-a6da6dc02dd1", "taskId": "98643f83-eee4-4160-9383-41b16e5740cc", "role": "ROLE_AGENT", "content": [{"text": "zebra42"}]}, "timestamp": "2026-12-02T14:22:29.070375Z"}, "final": true}}

"#;
        /// the agent card.
        pub const CARD: &str = r#"{"name":"Tether test A2A agent","description":"Answers from the conversation of its contextId, kept in memory only.","supportedInterfaces":[{"url":"http://127.0.0.1:47001/","protocolBinding":"JSONRPC","protocolVersion":"1.0"},{"url":"http://127.0.0.1:47001/rest","protocolBinding":"HTTP+JSON","protocolVersion":"1.0"},{"url":"http://127.0.0.1:47001/","protocolBinding":"JSONRPC","protocolVersion":"0.3"},{"url":"http://127.0.0.1:47001/rest","protocolBinding":"HTTP+JSON","protocolVersion":"0.3"}],"version":"1.0.0","capabilities":{"streaming":true,"pushNotifications":false},"defaultInputModes":["text/plain"],"defaultOutputModes":["text/plain"],"skills":[{"id":"chat","name":"Chat","description":"Remembers 'My project is named X'; answers 'What is my project named?'","tags":["test"],"examples":["My project is named zebra42.","What is my project named?"]}],"additionalInterfaces":[{"transport":"HTTP+JSON","url":"http://127.0.0.1:47001/rest"}],"preferredTransport":"JSONRPC","protocolVersion":"0.3","url":"http://127.0.0.1:47001/"}"#;
    }
}
