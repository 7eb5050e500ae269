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
//! with `POST …/sessions {session_id, state, events}`.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use serde_json::{json, Map, Value};
use session_log::{Event, EventType, RunStatus};

use crate::item::{Block, Item};
use crate::sse::{SseFrame, SseParser};
use crate::surface::{run_error, ClientRequest, Route, RunInfo, StreamRenderer, Surface};
use crate::turn::{InputError, SessionRef, TurnRequest};
use crate::upstream::{AgentRequest, Output, Protocol, Restore, StreamParser, TurnCall, Upstream};

pub struct AdkSurface;
pub struct AdkUpstream;

const RUN: &str = "/run";
const RUN_SSE: &str = "/run_sse";
const RUN_LIVE: &str = "/run_live";
/// Takes a `user_id` in its body, so it is claimed to namespace it like the others.
const FINALIZE_IDENTITY: &str = "/agent-identity/finalize";

/// Separates the account from the client's user id in the id the agent sees. Unreserved
/// in URLs (so paths stay readable) and escaped out of the account part.
const SEPARATOR: char = '~';

/// The user id a turn arriving on a non-ADK surface (an OpenAI client in front of an ADK
/// agent) runs under, inside the account's namespace.
const DEFAULT_USER: &str = "tether";

/// Function calls ADK makes itself for human-in-the-loop flows. ADK refuses them in
/// session-creation events (400), so a restore leaves them and their responses out.
const ADK_RESERVED_FUNCTIONS: &[&str] = &[
    "adk_request_credential",
    "adk_request_confirmation",
    "adk_request_input",
];

/// The code Tether gives an agent error that says the session does not exist; a failed
/// run with this code answers 404, as ADK itself would.
const SESSION_NOT_FOUND: &str = "session_not_found";

// ---------------------------------------------------------------------------------------
// Account binding of ADK user ids
// ---------------------------------------------------------------------------------------

/// The user id the agent sees for `user` of `account_id`.
pub fn agent_user_id(account_id: &str, user: &str) -> String {
    format!("{}{user}", user_prefix(account_id))
}

/// The client's user id behind an agent user id, when it is in `account_id`'s namespace.
pub fn client_user_id<'a>(account_id: &str, agent_user: &'a str) -> Option<&'a str> {
    agent_user.strip_prefix(user_prefix(account_id).as_str())
}

/// `<escaped account>~`. The account is escaped down to `[A-Za-z0-9._-]` so the first `~`
/// always ends it: distinct accounts never share a prefix, whatever their ids hold.
fn user_prefix(account_id: &str) -> String {
    let mut p = percent_encode(account_id, |b| {
        b.is_ascii_alphanumeric() || b"-._".contains(&b)
    });
    p.push(SEPARATOR);
    p
}

/// Percent-encodes every byte `keep` refuses.
fn percent_encode(s: &str, keep: impl Fn(u8) -> bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if keep(b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// One path segment for the agent: everything but URL-unreserved bytes escaped.
fn path_segment(s: &str) -> String {
    percent_encode(s, |b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
}

/// Decodes `%XX` escapes the way Starlette does before routing (bad escapes stay as
/// they are, invalid UTF-8 is replaced).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
            if let Some(b) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `/apps/{app}/users/{user}{rest}` split into its raw (still escaped) parts.
fn split_user_path(path: &str) -> Option<(&str, &str, &str)> {
    let rest = path.strip_prefix("/apps/")?;
    let (app, rest) = rest.split_once('/')?;
    let rest = rest.strip_prefix("users/")?;
    let (user, rest) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    Some((app, user, rest))
}

/// Removes the caller's namespace from a relayed answer: the `userId` of session objects
/// (one or a list), and the namespace anywhere in an error `detail`.
fn unscope(value: Value, account_id: &str) -> Value {
    let prefix = user_prefix(account_id);
    match value {
        Value::Array(items) => {
            Value::Array(items.into_iter().map(|v| unscope(v, account_id)).collect())
        }
        Value::Object(mut obj) => {
            for key in ["userId", "user_id"] {
                if let Some(Value::String(user)) = obj.get_mut(key) {
                    if let Some(own) = user.strip_prefix(prefix.as_str()) {
                        *user = own.to_owned();
                    }
                }
            }
            if let Some(Value::String(detail)) = obj.get_mut("detail") {
                *detail = detail.replace(prefix.as_str(), "");
            }
            Value::Object(obj)
        }
        other => other,
    }
}

// ---------------------------------------------------------------------------------------
// Client surface: routing
// ---------------------------------------------------------------------------------------

/// A field that ADK accepts under its snake_case name or its camelCase alias; like
/// pydantic, the alias wins when both are given.
fn field<'a>(obj: &'a Map<String, Value>, snake: &str, camel: &str) -> Option<&'a Value> {
    obj.get(camel).or_else(|| obj.get(snake))
}

fn field_str<'a>(obj: &'a Map<String, Value>, snake: &str, camel: &str) -> Option<&'a str> {
    field(obj, snake, camel).and_then(Value::as_str)
}

/// FastAPI's answer to a path it has no route for.
fn not_found() -> Route {
    Route::Reply {
        status: 404,
        body: json!({ "detail": "Not Found" }),
    }
}

/// FastAPI's 422 answer: `{"detail": [<pydantic error>, …]}`.
fn unprocessable(errors: Vec<Value>) -> Route {
    Route::Reply {
        status: 422,
        body: json!({ "detail": errors }),
    }
}

/// The pydantic error for a body that is not JSON (`loc` holds the byte offset).
fn json_invalid(body: &[u8], e: &serde_json::Error) -> Value {
    let offset: usize = body
        .split(|&b| b == b'\n')
        .take(e.line().saturating_sub(1))
        .map(|l| l.len() + 1)
        .sum::<usize>()
        + e.column().saturating_sub(1);
    json!({
        "type": "json_invalid",
        "loc": ["body", offset],
        "msg": "JSON decode error",
        "input": {},
        "ctx": { "error": e.to_string() },
    })
}

/// A request body for the agent: none when empty, JSON otherwise.
fn json_body(body: &[u8]) -> Result<Option<Value>, Vec<Value>> {
    if body.trim_ascii().is_empty() {
        return Ok(None);
    }
    serde_json::from_slice(body)
        .map(Some)
        .map_err(|e| vec![json_invalid(body, &e)])
}

fn static_method(method: &str) -> Option<&'static str> {
    ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
        .into_iter()
        .find(|m| m.eq_ignore_ascii_case(method))
}

fn with_query(path: String, query: Option<&str>) -> String {
    match query {
        Some(q) if !q.is_empty() => format!("{path}?{q}"),
        _ => path,
    }
}

/// Whether a raw path segment could move the request elsewhere once the agent (or
/// anything between) decodes or normalises it.
fn is_dot_segment(raw: &str) -> bool {
    let decoded = percent_decode(raw);
    decoded == "." || decoded == ".."
}

/// A request under `/apps/{app}/users/{user}/…`, sent on with the user namespaced.
fn session_route(req: &ClientRequest, app: &str, user: &str, rest: &str) -> Route {
    // The app segment comes before the user: an escaped `/` in it would let the decoded
    // path name some other user.
    let decoded_app = percent_decode(app);
    if app.is_empty()
        || user.is_empty()
        || decoded_app.contains(['/', '\\'])
        || is_dot_segment(app)
        || is_dot_segment(user)
        || rest.split('/').any(is_dot_segment)
    {
        return not_found();
    }
    let Some(method) = static_method(req.method) else {
        return Route::Reply {
            status: 405,
            body: json!({ "detail": "Method Not Allowed" }),
        };
    };
    let body = match json_body(req.body) {
        Ok(b) => b,
        Err(errors) => return unprocessable(errors),
    };
    // FastAPI would answer a trailing slash with a redirect naming the namespaced user.
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let user = agent_user_id(req.account_id, &percent_decode(user));
    let path = format!("/apps/{app}/users/{}{rest}", path_segment(&user));
    Route::Forward(AgentRequest {
        method,
        path: with_query(path, req.query),
        headers: Vec::new(),
        body,
    })
}

/// `POST /agent-identity/finalize`: its body names the user.
fn finalize_route(req: &ClientRequest) -> Route {
    let mut body = match json_body(req.body) {
        Ok(b) => b,
        Err(errors) => return unprocessable(errors),
    };
    if let Some(Value::Object(obj)) = &mut body {
        if let Some(user) = field_str(obj, "user_id", "userId").map(str::to_owned) {
            obj.remove("userId");
            obj.insert(
                "user_id".into(),
                agent_user_id(req.account_id, &user).into(),
            );
        }
    }
    Route::Forward(AgentRequest {
        method: "POST",
        path: with_query(FINALIZE_IDENTITY.to_owned(), req.query),
        headers: Vec::new(),
        body,
    })
}

/// A required string field as pydantic checks it (errors name the alias when missing,
/// the key given otherwise).
fn required_str(
    obj: &Map<String, Value>,
    snake: &str,
    camel: &str,
    errors: &mut Vec<Value>,
) -> String {
    let key = if obj.contains_key(camel) {
        camel
    } else {
        snake
    };
    match obj.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(other) => {
            errors.push(json!({ "type": "string_type", "loc": ["body", key], "msg": "Input should be a valid string", "input": other }));
            String::new()
        }
        None => {
            errors.push(json!({ "type": "missing", "loc": ["body", camel], "msg": "Field required", "input": obj }));
            String::new()
        }
    }
}

fn optional_str(
    obj: &Map<String, Value>,
    snake: &str,
    camel: &str,
    errors: &mut Vec<Value>,
) -> Option<String> {
    let key = if obj.contains_key(camel) {
        camel
    } else {
        snake
    };
    match obj.get(key) {
        Some(Value::String(s)) => Some(s.clone()),
        None | Some(Value::Null) => None,
        Some(other) => {
            errors.push(json!({ "type": "string_type", "loc": ["body", key], "msg": "Input should be a valid string", "input": other }));
            None
        }
    }
}

/// A `/run` or `/run_sse` body as a turn, or pydantic's errors for it.
fn parse_run(body: &[u8], path: &'static str) -> Result<TurnRequest, Vec<Value>> {
    if body.trim_ascii().is_empty() {
        return Err(vec![
            json!({ "type": "missing", "loc": ["body"], "msg": "Field required", "input": null }),
        ]);
    }
    let doc: Value = serde_json::from_slice(body).map_err(|e| vec![json_invalid(body, &e)])?;
    let Value::Object(obj) = &doc else {
        return Err(vec![json!({
            "type": "model_attributes_type",
            "loc": ["body"],
            "msg": "Input should be a valid dictionary or object to extract fields from",
            "input": doc,
        })]);
    };
    let mut errors = Vec::new();
    let app = optional_str(obj, "app_name", "appName", &mut errors);
    let user = required_str(obj, "user_id", "userId", &mut errors);
    let session = required_str(obj, "session_id", "sessionId", &mut errors);
    let message = field(obj, "new_message", "newMessage").filter(|m| !m.is_null());
    if let Some(m) = message.filter(|m| !m.is_object()) {
        let key = if obj.contains_key("newMessage") {
            "newMessage"
        } else {
            "new_message"
        };
        errors.push(json!({
            "type": "model_attributes_type",
            "loc": ["body", key],
            "msg": "Input should be a valid dictionary or object to extract fields from",
            "input": m,
        }));
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let mut turn = TurnRequest::new(Protocol::Adk);
    turn.model = app.clone();
    turn.session = SessionRef::Named(session.clone());
    turn.input = message.map(message_items).unwrap_or_default();
    turn.stream = path == RUN_SSE;
    turn.extra.insert(
        "client".into(),
        json!({ "path": path, "app_name": app, "user_id": user, "session_id": session }),
    );
    // The client's own body (its own user id): the upstream namespaces it per call.
    turn.extra
        .insert("adk".into(), json!({ "path": path, "body": doc }));
    Ok(turn)
}

/// The transcript items of a `new_message` Content: its text and media as one user
/// message, function responses (a client answering a long-running tool) as tool results.
fn message_items(content: &Value) -> Vec<Item> {
    let parts = content.get("parts").and_then(Value::as_array);
    let mut blocks = Vec::new();
    let mut results = Vec::new();
    for part in parts.into_iter().flatten() {
        if let Some(block) = part_block(part) {
            blocks.push(block);
        } else if let Some(fr) = part
            .as_object()
            .and_then(|p| field(p, "function_response", "functionResponse"))
        {
            results.push(tool_result(fr, ""));
        }
    }
    let mut items = Vec::new();
    if !blocks.is_empty() {
        items.push(Item::Message {
            role: "user".into(),
            content: blocks,
        });
    }
    items.extend(results);
    items
}

/// A Content part as a message block: text (not thoughts), inline data, file data.
fn part_block(part: &Value) -> Option<Block> {
    let p = part.as_object()?;
    if let Some(text) = p.get("text").and_then(Value::as_str) {
        let thought = p.get("thought").and_then(Value::as_bool).unwrap_or(false);
        return (!thought).then(|| Block::Text(text.to_owned()));
    }
    let name =
        |o: &Map<String, Value>| field_str(o, "display_name", "displayName").map(str::to_owned);
    if let Some(Value::Object(blob)) = field(p, "inline_data", "inlineData") {
        let mime = field_str(blob, "mime_type", "mimeType").unwrap_or("application/octet-stream");
        let url = format!(
            "data:{mime};base64,{}",
            blob.get("data").and_then(Value::as_str).unwrap_or("")
        );
        return Some(if mime.starts_with("image/") {
            Block::Image { url, detail: None }
        } else {
            Block::File {
                filename: name(blob),
                data: Some(url),
                url: None,
            }
        });
    }
    if let Some(Value::Object(file)) = field(p, "file_data", "fileData") {
        let uri = field_str(file, "file_uri", "fileUri")?.to_owned();
        let mime = field_str(file, "mime_type", "mimeType").unwrap_or("");
        return Some(if mime.starts_with("image/") {
            Block::Image {
                url: uri,
                detail: None,
            }
        } else {
            Block::File {
                filename: name(file),
                data: None,
                url: Some(uri),
            }
        });
    }
    None
}

fn tool_result(fr: &Value, fallback_id: &str) -> Item {
    Item::ToolResult {
        call_id: fr
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or(fallback_id)
            .to_owned(),
        output: fr
            .get("response")
            .map(Value::to_string)
            .unwrap_or_else(|| "{}".into()),
    }
}

impl Surface for AdkSurface {
    fn claims(&self, method: &str, path: &str) -> bool {
        match path {
            RUN | RUN_SSE | FINALIZE_IDENTITY => method.eq_ignore_ascii_case("POST"),
            // A websocket naming its user in the query: claimed only to be refused.
            RUN_LIVE => true,
            _ => split_user_path(path).is_some(),
        }
    }

    fn route(&self, req: &ClientRequest) -> Route {
        let path = match req.path {
            RUN => RUN,
            RUN_SSE => RUN_SSE,
            RUN_LIVE => {
                return Route::Reply {
                    status: 501,
                    body: json!({ "detail": "Live runs (/run_live) are not available through Tether; use /run or /run_sse." }),
                }
            }
            FINALIZE_IDENTITY => return finalize_route(req),
            other => {
                return match split_user_path(other) {
                    Some((app, user, rest)) => session_route(req, app, user, rest),
                    None => not_found(),
                }
            }
        };
        if !req.method.eq_ignore_ascii_case("POST") {
            return Route::Reply {
                status: 405,
                body: json!({ "detail": "Method Not Allowed" }),
            };
        }
        match parse_run(req.body, path) {
            Ok(turn) => Route::Run(turn),
            Err(errors) => unprocessable(errors),
        }
    }

    /// A `/run` body (the gateway routes through `route`, which knows the path).
    fn parse_request(&self, body: &[u8], _h: Option<&str>) -> Result<TurnRequest, InputError> {
        parse_run(body, RUN).map_err(|errors| {
            let first = errors.first().cloned().unwrap_or(Value::Null);
            let param = first["loc"]
                .get(1)
                .and_then(Value::as_str)
                .map(str::to_owned);
            InputError {
                message: first["msg"]
                    .as_str()
                    .unwrap_or("Invalid request")
                    .to_owned(),
                param,
                code: "invalid_request",
            }
        })
    }

    fn stream_renderer(&self, run: &RunInfo) -> Box<dyn StreamRenderer> {
        Box::new(AdkRenderer {
            run_id: run.run_id.clone(),
            error: None,
        })
    }

    /// The `/run` answer: the agent's events of the run's last invocation, as it sent them.
    fn final_body(&self, run: &RunInfo, events: &[Event]) -> Value {
        let mut out = Vec::new();
        for e in events.iter().filter(|e| in_run(e, run)) {
            match e.event_type {
                // A resumed run starts over.
                EventType::RunStatus if e.run_status() == Some(RunStatus::InProgress) => {
                    out.clear()
                }
                EventType::AgentEvent => out.push(e.content.clone()),
                _ => {}
            }
        }
        Value::Array(out)
    }

    /// ADK answers a failed `/run` with a 500; an unknown session keeps its own 404.
    fn final_response(&self, run: &RunInfo, events: &[Event]) -> (u16, Value) {
        let terminal = events.last().and_then(Event::run_status);
        if terminal == Some(RunStatus::Completed) {
            return (200, self.final_body(run, events));
        }
        let (code, message) = run_error(events, terminal);
        let status = if code == SESSION_NOT_FOUND { 404 } else { 500 };
        (status, json!({ "detail": message }))
    }

    fn rewrite_forwarded(&self, req: &ClientRequest, _public_url: &str, body: Value) -> Value {
        unscope(body, req.account_id)
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

    fn response_id(&self, run_id: &str) -> String {
        run_id.to_owned()
    }

    fn run_id(&self, _response_id: &str) -> Option<String> {
        None
    }
}

// ---------------------------------------------------------------------------------------
// Client surface: rendering
// ---------------------------------------------------------------------------------------

/// Events without a run id (input recorded before the run) pass; other runs' do not.
fn in_run(event: &Event, run: &RunInfo) -> bool {
    event.run_id.as_deref().is_none_or(|r| r == run.run_id)
}

/// Streams a run as `/run_sse` does: one `data: <ADK event>` frame per recorded event.
struct AdkRenderer {
    run_id: String,
    /// The last `error` event's (code, message), for the terminal error frame.
    error: Option<(String, String)>,
}

impl StreamRenderer for AdkRenderer {
    fn render(&mut self, event: &Event) -> Vec<SseFrame> {
        if event.run_id.as_deref().is_some_and(|r| r != self.run_id) {
            return Vec::new();
        }
        let frame = |body: Value| vec![SseFrame::data(body.to_string()).with_id(event.seq)];
        match event.event_type {
            EventType::AgentEvent => frame(event.content.clone()),
            EventType::Error => {
                let s = |k: &str| {
                    event
                        .content
                        .get(k)
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned()
                };
                self.error = Some((s("code"), s("message")));
                Vec::new()
            }
            EventType::RunStatus => match event.run_status() {
                // A resumed invocation: an earlier failure is no longer the outcome.
                Some(RunStatus::InProgress) => {
                    self.error = None;
                    Vec::new()
                }
                Some(RunStatus::Completed) | None => Vec::new(),
                Some(status) => {
                    let (code, message) = self.error.take().unwrap_or_else(|| {
                        let reason = event.content.get("reason").and_then(Value::as_str);
                        let message = reason.map(str::to_owned).unwrap_or_else(|| {
                            format!("The run ended with status '{}'.", status.as_str())
                        });
                        (status.as_str().to_owned(), message)
                    });
                    // The frame api_server sends when the agent raises mid-stream.
                    let timestamp = event.created_at.timestamp_millis() as f64 / 1000.0;
                    frame(json!({
                        "error": format!("{code}: {message}"),
                        "error_details": {
                            "error_type": code,
                            "error_message": message,
                            "timestamp": timestamp,
                        },
                    }))
                }
            },
            _ => Vec::new(),
        }
    }

    /// `/run_sse` has no end marker: the stream just ends.
    fn end(&mut self) -> Vec<SseFrame> {
        Vec::new()
    }
}

// ---------------------------------------------------------------------------------------
// Upstream: requests
// ---------------------------------------------------------------------------------------

/// What the agent is asked in one turn.
struct AdkTurn {
    /// `/run` or `/run_sse`.
    path: String,
    app: Option<String>,
    /// The client's user id (before namespacing).
    user: String,
    /// The ADK session id.
    session: String,
    /// The body to send, before the user and session are set.
    body: Map<String, Value>,
    /// Whether the turn came from an ADK client (which names its own session in ADK)
    /// rather than from a surface Tether translates (whose session Tether owns).
    from_client: bool,
}

impl AdkTurn {
    fn of(call: &TurnCall) -> AdkTurn {
        let turn = call.turn;
        let adk = turn.extra.get("adk");
        if let Some(Value::Object(body)) = adk.and_then(|a| a.get("body")) {
            let path = adk.and_then(|a| a.get("path")).and_then(Value::as_str);
            return AdkTurn {
                path: if path == Some(RUN) { RUN } else { RUN_SSE }.to_owned(),
                app: field_str(body, "app_name", "appName").map(str::to_owned),
                user: field_str(body, "user_id", "userId")
                    .unwrap_or(DEFAULT_USER)
                    .to_owned(),
                // The id the client created the session under (the same as Tether's
                // session id today, and still right if Tether ever scopes its own).
                session: field_str(body, "session_id", "sessionId")
                    .unwrap_or(call.session_id)
                    .to_owned(),
                body: body.clone(),
                from_client: true,
            };
        }
        // Another surface's turn (an OpenAI client): streamed, in a session Tether names.
        let app = turn
            .model
            .clone()
            .unwrap_or_else(|| call.default_model.to_owned());
        let parts: Vec<Value> = turn
            .input
            .iter()
            .flat_map(|item| item_parts(item, &HashMap::new()))
            .collect();
        let mut body = Map::new();
        body.insert("app_name".into(), app.clone().into());
        body.insert(
            "new_message".into(),
            json!({ "role": "user", "parts": parts }),
        );
        body.insert("streaming".into(), turn.stream.into());
        AdkTurn {
            path: RUN_SSE.to_owned(),
            app: Some(app),
            user: DEFAULT_USER.to_owned(),
            session: call.session_id.to_owned(),
            body,
            from_client: false,
        }
    }
}

impl Upstream for AdkUpstream {
    fn protocol(&self) -> Protocol {
        Protocol::Adk
    }

    /// The client's body, addressed to the caller's namespaced user and to the session.
    fn request(&self, call: &TurnCall) -> AgentRequest {
        let t = AdkTurn::of(call);
        let mut body = t.body;
        for key in ["userId", "user_id", "sessionId", "session_id"] {
            body.remove(key);
        }
        body.insert(
            "user_id".into(),
            agent_user_id(call.account_id, &t.user).into(),
        );
        body.insert("session_id".into(), t.session.into());
        AgentRequest::post(t.path, Value::Object(body))
    }

    fn parser(&self, call: &TurnCall, content_type: &str) -> Box<dyn StreamParser> {
        let reader = EventReader::new(call);
        if content_type.contains("text/event-stream") {
            Box::new(AdkSseParser {
                sse: SseParser::new(),
                reader,
                cut: false,
            })
        } else {
            Box::new(AdkJsonParser {
                body: Vec::new(),
                reader: Some(reader),
            })
        }
    }

    /// ADK's 404 for an unknown session: `Session not found: <id>` from `/run` and
    /// `/run_sse`, plain `Session not found` from `GET …/sessions/{id}`.
    fn forgot(&self, status: u16, body: &[u8]) -> bool {
        status == 404
            && serde_json::from_slice::<Value>(body)
                .ok()
                .and_then(|v| v.get("detail").and_then(Value::as_str).map(str::to_owned))
                .is_some_and(|d| d.starts_with("Session not found"))
    }

    /// Re-creates the session with `POST …/sessions {session_id, state, events}` from the
    /// history, then sends the turn.
    fn restore(&self, call: &TurnCall) -> Option<Restore> {
        let t = AdkTurn::of(call);
        let app = t.app.clone()?;
        let recorded: Vec<&Map<String, Value>> = call
            .events
            .iter()
            .filter_map(|e| e.metadata.get("adk").and_then(Value::as_object))
            .collect();
        // A session the agent never answered in is one the client never had: ADK's own
        // 404 stands, rather than Tether creating sessions on a typo.
        let answered = !recorded.is_empty()
            || call
                .events
                .iter()
                .any(|e| e.run_status() == Some(RunStatus::Completed));
        if t.from_client && !answered {
            return None;
        }
        // The same session id used by another ADK app or user of the account: not this
        // conversation, so nothing to restore.
        if let Some(last) = recorded.iter().rev().find(|m| m.contains_key("user_id")) {
            let same =
                |k: &str, v: &str| last.get(k).and_then(Value::as_str).is_none_or(|x| x == v);
            if !same("app_name", &app) || !same("user_id", &t.user) {
                return None;
            }
        }
        let mut authors = HashMap::new();
        for e in call.events {
            let author = e
                .metadata
                .get("adk")
                .and_then(|a| a.get("author"))
                .and_then(Value::as_str);
            if let (Some(author), EventType::Message) = (author, e.event_type) {
                authors.insert(e.text().to_owned(), author.to_owned());
            }
        }
        let agent = recorded
            .iter()
            .rev()
            .find_map(|m| m.get("author").and_then(Value::as_str))
            .unwrap_or(&app)
            .to_owned();
        let state = recorded
            .iter()
            .rev()
            .find_map(|m| m.get("state").filter(|s| s.is_object()))
            .cloned()
            .unwrap_or_else(|| json!({}));
        let events = history_events(call.history, &authors, &agent);
        let user = agent_user_id(call.account_id, &t.user);
        let create = AgentRequest::post(
            format!(
                "/apps/{}/users/{}/sessions",
                path_segment(&app),
                path_segment(&user)
            ),
            json!({ "session_id": t.session, "state": state, "events": events }),
        );
        Some(Restore {
            before: vec![create],
            request: self.request(call),
        })
    }
}

/// ADK session-creation events for a history. Messages keep their roles (system
/// messages, such as a compaction summary, go in as the user's: ADK sessions have no
/// system turn); assistant messages carry the author that said them; tool calls and
/// results become `functionCall`/`functionResponse` parts, grouped as ADK groups them;
/// reasoning and approvals are left out, as are ADK's own protocol calls (refused).
fn history_events(history: &[Item], authors: &HashMap<String, String>, agent: &str) -> Vec<Value> {
    let mut names = HashMap::new();
    let mut reserved = HashSet::new();
    for item in history {
        if let Item::ToolCall { call_id, name, .. } = item {
            names.insert(call_id.as_str(), name.as_str());
            if ADK_RESERVED_FUNCTIONS.contains(&name.as_str()) {
                reserved.insert(call_id.as_str());
            }
        }
    }
    // (author, role, parts, whether tool calls/results may join it)
    let mut events: Vec<(String, &str, Vec<Value>, Option<&str>)> = Vec::new();
    for item in history {
        let (author, role, joins) = match item {
            Item::Message { role, .. } if role == "assistant" => {
                let author = authors
                    .get(&item.text())
                    .map(String::as_str)
                    .unwrap_or(agent);
                (author.to_owned(), "model", Some("call"))
            }
            Item::Message { .. } => ("user".to_owned(), "user", None),
            Item::ToolCall { call_id, .. } if !reserved.contains(call_id.as_str()) => {
                (agent.to_owned(), "model", Some("call"))
            }
            Item::ToolResult { call_id, .. }
                if !reserved.contains(call_id.as_str()) && names.contains_key(call_id.as_str()) =>
            {
                (agent.to_owned(), "user", Some("result"))
            }
            _ => continue,
        };
        let parts = item_parts(item, &names);
        if parts.is_empty() {
            continue;
        }
        let is_tool = matches!(item, Item::ToolCall { .. } | Item::ToolResult { .. });
        match events.last_mut() {
            // Parallel calls (and text before them) share one model event, their results
            // one response event, as ADK records them.
            Some((a, _, p, j)) if is_tool && *j == joins && *a == author => p.extend(parts),
            _ => events.push((author, role, parts, joins)),
        }
    }
    events
        .into_iter()
        .map(|(author, role, parts, _)| json!({ "author": author, "content": { "role": role, "parts": parts } }))
        .collect()
}

/// Content parts for one history item (`names`: tool names by call id, for responses).
fn item_parts(item: &Item, names: &HashMap<&str, &str>) -> Vec<Value> {
    match item {
        Item::Message { content, .. } => content.iter().filter_map(block_part).collect(),
        Item::ToolCall {
            call_id,
            name,
            arguments,
        } => {
            let args = match serde_json::from_str::<Value>(arguments) {
                Ok(v @ Value::Object(_)) => v,
                Ok(Value::Null) => json!({}),
                Err(_) if arguments.trim().is_empty() => json!({}),
                Ok(v) => json!({ "value": v }),
                Err(_) => json!({ "arguments": arguments }),
            };
            vec![json!({ "functionCall": { "id": call_id, "name": name, "args": args } })]
        }
        Item::ToolResult { call_id, output } => {
            // ADK wraps a tool's non-dict return as {"result": …}; so does this.
            let response = match serde_json::from_str::<Value>(output) {
                Ok(v @ Value::Object(_)) => v,
                Ok(v) => json!({ "result": v }),
                Err(_) => json!({ "result": output }),
            };
            let name = names.get(call_id.as_str()).copied().unwrap_or("");
            vec![
                json!({ "functionResponse": { "id": call_id, "name": name, "response": response } }),
            ]
        }
        _ => Vec::new(),
    }
}

fn block_part(block: &Block) -> Option<Value> {
    // A `data:` URL travels inline; anything else by reference.
    let media = |url: &str| match url
        .strip_prefix("data:")
        .and_then(|r| r.split_once(";base64,"))
    {
        Some((mime, data)) => json!({ "inlineData": { "mimeType": mime, "data": data } }),
        None => json!({ "fileData": { "fileUri": url } }),
    };
    match block {
        Block::Text(t) => Some(json!({ "text": t })),
        Block::Image { url, .. } => Some(media(url)),
        Block::File { data: Some(d), .. } => Some(media(d)),
        Block::File { url: Some(u), .. } => Some(media(u)),
        Block::File { .. } => None,
    }
}

// ---------------------------------------------------------------------------------------
// Upstream: parsing
// ---------------------------------------------------------------------------------------

/// Token counts summed over the turn's model responses (Gemini `usageMetadata`).
#[derive(Default)]
struct UsageSum {
    seen: bool,
    prompt: u64,
    candidates: u64,
    thoughts: u64,
    cached: u64,
    total: u64,
}

impl UsageSum {
    fn add(&mut self, u: &Value) {
        let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
        self.seen = true;
        self.prompt += n("promptTokenCount");
        self.candidates += n("candidatesTokenCount");
        self.thoughts += n("thoughtsTokenCount");
        self.cached += n("cachedContentTokenCount");
        self.total += n("totalTokenCount");
    }

    /// Chat Completions shape, which `Usage::read` understands.
    fn to_chat(&self) -> Option<Value> {
        if !self.seen {
            return None;
        }
        let completion = self.candidates + self.thoughts;
        let mut u = json!({
            "prompt_tokens": self.prompt,
            "completion_tokens": completion,
            "total_tokens": self.total.max(self.prompt + completion),
        });
        if self.cached > 0 {
            u["prompt_tokens_details"] = json!({ "cached_tokens": self.cached });
        }
        if self.thoughts > 0 {
            u["completion_tokens_details"] = json!({ "reasoning_tokens": self.thoughts });
        }
        Some(u)
    }
}

/// ADK's `Event.is_final_response()`: whether an event ends the agent's answer.
fn is_final_response(event: &Map<String, Value>) -> bool {
    let actions = event.get("actions");
    let skip = actions
        .and_then(|a| {
            a.get("skipSummarization")
                .or_else(|| a.get("skip_summarization"))
        })
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let long_running = field(event, "long_running_tool_ids", "longRunningToolIds")
        .and_then(Value::as_array)
        .is_some_and(|ids| !ids.is_empty());
    if skip || long_running {
        return true;
    }
    let parts: &[Value] = event
        .get("content")
        .and_then(|c| c.get("parts"))
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let has = |snake: &str, camel: &str| {
        parts
            .iter()
            .any(|p| p.as_object().and_then(|p| field(p, snake, camel)).is_some())
    };
    let calls = has("function_call", "functionCall");
    let partial = event
        .get("partial")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if field_str(event, "error_code", "errorCode").is_some() && !partial && !calls {
        return true;
    }
    let trailing_code_result = parts
        .last()
        .and_then(Value::as_object)
        .is_some_and(|p| field(p, "code_execution_result", "codeExecutionResult").is_some());
    !calls && !has("function_response", "functionResponse") && !partial && !trailing_code_result
}

/// Turns ADK events into outputs; shared by the JSON and SSE parsers.
struct EventReader {
    app: Option<String>,
    user: String,
    /// Session-scoped state as the turn leaves it (earlier turns' recorded state plus this
    /// turn's deltas), recorded on the next transcript item after it changes so a restore
    /// can put it back.
    state: Map<String, Value>,
    state_recorded: bool,
    /// Whether the last event ends the agent's answer (ADK's `is_final_response`).
    last_final: bool,
    failed: bool,
    usage: UsageSum,
}

impl EventReader {
    fn new(call: &TurnCall) -> EventReader {
        let t = AdkTurn::of(call);
        let state = call
            .events
            .iter()
            .rev()
            .find_map(|e| {
                e.metadata
                    .get("adk")
                    .and_then(|a| a.get("state"))
                    .and_then(Value::as_object)
            })
            .cloned()
            .unwrap_or_default();
        let mut reader = EventReader {
            app: t.app,
            user: t.user,
            state,
            state_recorded: true,
            last_final: false,
            failed: false,
            usage: UsageSum::default(),
        };
        // The user's event (not echoed by ADK) carries the request's state_delta.
        if let Some(delta) = field(&t.body, "state_delta", "stateDelta") {
            reader.apply_state(delta);
        }
        reader
    }

    /// `app:` state is shared by every user of the app (every account), and `temp:` is
    /// never persisted: only session and `user:` state is kept.
    fn apply_state(&mut self, delta: &Value) {
        for (k, v) in delta.as_object().into_iter().flatten() {
            if k.starts_with("app:") || k.starts_with("temp:") {
                continue;
            }
            if self.state.get(k) != Some(v) {
                self.state.insert(k.clone(), v.clone());
                self.state_recorded = false;
            }
        }
    }

    fn metadata(&mut self, author: &str, obj: &Map<String, Value>) -> Value {
        let mut adk = json!({
            "author": author,
            "invocation_id": field(obj, "invocation_id", "invocationId"),
            "app_name": self.app,
            "user_id": self.user,
        });
        if !self.state_recorded {
            adk["state"] = Value::Object(self.state.clone());
            self.state_recorded = true;
        }
        json!({ "adk": adk })
    }

    fn fail(&mut self, out: &mut Vec<Output>, code: &str, message: String) {
        self.failed = true;
        out.push(Output::Error {
            code: code.to_owned(),
            message,
        });
    }

    fn read(&mut self, event: Value, out: &mut Vec<Output>) {
        let Value::Object(obj) = &event else {
            let preview: String = event.to_string().chars().take(200).collect();
            return self.fail(
                out,
                "invalid_response",
                format!("The agent sent something that is not an ADK event: {preview}"),
            );
        };
        // api_server's frame for an exception mid-stream; not an ADK event.
        if let Some(error) = obj.get("error") {
            let details = obj.get("error_details");
            let detail = |k: &str| details.and_then(|d| d.get(k)).and_then(Value::as_str);
            let code = detail("error_type").unwrap_or("agent_error");
            let message = detail("error_message")
                .map(str::to_owned)
                .or_else(|| error.as_str().map(str::to_owned))
                .unwrap_or_else(|| error.to_string());
            return self.fail(out, code, message);
        }
        let partial = obj.get("partial").and_then(Value::as_bool).unwrap_or(false);
        self.last_final = is_final_response(obj);
        out.push(Output::Frame(event.clone()));
        let author = obj.get("author").and_then(Value::as_str).unwrap_or("");
        let from_agent = author != "user";
        let parts: &[Value] = obj
            .get("content")
            .and_then(|c| c.get("parts"))
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice);
        if partial {
            // Fragments are display hints: deltas only; the aggregated event follows.
            for part in parts.iter().filter(|_| from_agent) {
                if let Some(text) = part
                    .get("text")
                    .and_then(Value::as_str)
                    .filter(|t| !t.is_empty())
                {
                    out.push(
                        if part.get("thought").and_then(Value::as_bool) == Some(true) {
                            Output::ReasoningDelta(text.to_owned())
                        } else {
                            Output::TextDelta(text.to_owned())
                        },
                    );
                }
            }
            return;
        }
        if let Some(delta) = obj
            .get("actions")
            .and_then(|a| field(a.as_object()?, "state_delta", "stateDelta"))
        {
            self.apply_state(delta);
        }
        if let Some(u) = field(obj, "usage_metadata", "usageMetadata") {
            self.usage.add(u);
        }
        let event_id = obj.get("id").and_then(Value::as_str).unwrap_or("");
        let (mut text, mut thought) = (String::new(), String::new());
        for (i, part) in parts.iter().enumerate() {
            let Some(p) = part.as_object() else { continue };
            if let Some(t) = p.get("text").and_then(Value::as_str) {
                // The user's own words are recorded as the turn's input, not here.
                if from_agent && p.get("thought").and_then(Value::as_bool) == Some(true) {
                    thought.push_str(t);
                } else if from_agent {
                    text.push_str(t);
                }
            } else if let Some(fc) = field(p, "function_call", "functionCall") {
                self.flush(author, obj, &mut thought, &mut text, out);
                let id = fc.get("id").and_then(Value::as_str).map(str::to_owned);
                out.push(Output::Item(Item::ToolCall {
                    call_id: id.unwrap_or_else(|| format!("{event_id}-{i}")),
                    name: fc
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned(),
                    arguments: fc
                        .get("args")
                        .map(Value::to_string)
                        .unwrap_or_else(|| "{}".into()),
                }));
            } else if let Some(fr) = field(p, "function_response", "functionResponse") {
                self.flush(author, obj, &mut thought, &mut text, out);
                out.push(Output::Item(tool_result(fr, &format!("{event_id}-{i}"))));
            }
        }
        self.flush(author, obj, &mut thought, &mut text, out);
        if let Some(code) = field_str(obj, "error_code", "errorCode") {
            let message = field_str(obj, "error_message", "errorMessage")
                .unwrap_or(code)
                .to_owned();
            self.fail(out, code, message);
        }
    }

    /// Emits the reasoning and text gathered so far, in that order.
    fn flush(
        &mut self,
        author: &str,
        obj: &Map<String, Value>,
        thought: &mut String,
        text: &mut String,
        out: &mut Vec<Output>,
    ) {
        if !thought.is_empty() {
            out.push(Output::Item(Item::Reasoning {
                text: std::mem::take(thought),
            }));
        }
        if !text.is_empty() {
            let meta = self.metadata(author, obj);
            out.push(Output::ItemWith(
                Item::assistant_text(&std::mem::take(text)),
                meta,
            ));
        }
    }

    fn done(&self) -> Output {
        Output::Done {
            usage: self.usage.to_chat(),
        }
    }
}

/// `/run_sse`: `data: <event>` frames. There is no end marker, so the turn is complete
/// when the body ends, without an error, right after an event ADK itself counts as a
/// final response: not a fragment (ADK follows those with their aggregate) and not a
/// tool call or result (the model has yet to answer it). A stream cut anywhere else is
/// not done, and the gateway reports it as closed early.
struct AdkSseParser {
    sse: SseParser,
    reader: EventReader,
    /// A frame was left unfinished by the end of the body.
    cut: bool,
}

impl AdkSseParser {
    fn frame(&mut self, frame: SseFrame, out: &mut Vec<Output>) {
        if frame.data.trim().is_empty() {
            return;
        }
        match serde_json::from_str(&frame.data) {
            Ok(event) => self.reader.read(event, out),
            Err(e) => self.reader.fail(
                out,
                "invalid_response",
                format!("The agent sent a frame that is not JSON: {e}"),
            ),
        }
    }
}

impl StreamParser for AdkSseParser {
    fn feed(&mut self, bytes: &[u8]) -> Vec<Output> {
        let mut out = Vec::new();
        for frame in self.sse.feed(bytes) {
            self.frame(frame, &mut out);
        }
        out
    }

    fn finish(&mut self) -> Vec<Output> {
        let mut out = Vec::new();
        // A last frame without its blank line counts if it is whole JSON; if not, the
        // connection was cut inside it.
        if let Some(frame) = self.sse.finish() {
            match serde_json::from_str::<Value>(&frame.data) {
                Ok(event) => self.reader.read(event, &mut out),
                Err(_) => self.cut = true,
            }
        }
        let r = &self.reader;
        if !self.cut && !r.failed && r.last_final {
            out.push(r.done());
        }
        out
    }
}

/// `/run`: one JSON array of events, parsed at the end; or an error body.
struct AdkJsonParser {
    body: Vec<u8>,
    reader: Option<EventReader>,
}

impl StreamParser for AdkJsonParser {
    fn feed(&mut self, bytes: &[u8]) -> Vec<Output> {
        self.body.extend_from_slice(bytes);
        Vec::new()
    }

    fn finish(&mut self) -> Vec<Output> {
        let Some(mut reader) = self.reader.take() else {
            return Vec::new();
        };
        let body = std::mem::take(&mut self.body);
        let mut out = Vec::new();
        // An agent that streams despite its content type.
        if body.trim_ascii_start().starts_with(b"data:") {
            let mut sse = AdkSseParser {
                sse: SseParser::new(),
                reader,
                cut: false,
            };
            out = sse.feed(&body);
            out.extend(sse.finish());
            return out;
        }
        match serde_json::from_slice::<Value>(&body) {
            Ok(Value::Array(events)) => {
                for event in events {
                    reader.read(event, &mut out);
                }
                if !reader.failed {
                    out.push(reader.done());
                }
            }
            Ok(Value::Object(obj)) if obj.contains_key("detail") => {
                let (code, message) = agent_error(&obj["detail"]);
                out.push(Output::Error {
                    code: code.to_owned(),
                    message,
                });
            }
            Ok(doc @ Value::Object(_)) if doc.get("error").is_some() => reader.read(doc, &mut out),
            _ if body.trim_ascii().is_empty() => out.push(Output::Error {
                code: "empty_response".into(),
                message: "The agent returned an empty body.".into(),
            }),
            _ => {
                let preview: String = String::from_utf8_lossy(&body).chars().take(200).collect();
                out.push(Output::Error {
                    code: "invalid_response".into(),
                    message: format!("The agent's answer is not a list of ADK events: {preview}"),
                });
            }
        }
        out
    }
}

/// The code and message of a FastAPI error `detail`: a string, or a list of pydantic
/// errors (a 422).
fn agent_error(detail: &Value) -> (&'static str, String) {
    match detail {
        Value::String(s) if s.starts_with("Session not found") => (SESSION_NOT_FOUND, s.clone()),
        Value::String(s) => ("agent_error", s.clone()),
        Value::Array(errors) => {
            let each = errors.iter().map(|e| {
                let loc: Vec<String> = e["loc"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|l| {
                        l.as_str()
                            .map(str::to_owned)
                            .unwrap_or_else(|| l.to_string())
                    })
                    .collect();
                format!(
                    "{}: {}",
                    loc.join("."),
                    e["msg"].as_str().unwrap_or("invalid")
                )
            });
            ("agent_error", each.collect::<Vec<_>>().join("; "))
        }
        other => ("agent_error", other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};
    use session_log::NewEvent;

    // Bodies captured from google-adk 2.13.0 `adk api_server` (see /tmp/wire).

    /// `adk_07_run_turn1.http`.
    const RUN_TURN1: &str = r#"[{"content":{"parts":[{"text":"You said: My project is named zebra42."}],"role":"model"},"finishReason":"STOP","usageMetadata":{"candidatesTokenCount":7,"promptTokenCount":19,"totalTokenCount":26},"invocationId":"e-0b366c9a-36e7-4dee-99b7-52508e5cbe43","author":"assistant","actions":{"stateDelta":{},"artifactDelta":{},"requestedAuthConfigs":{},"requestedToolConfirmations":{}},"nodeInfo":{"path":"assistant@1"},"id":"f5659ecf-1927-4097-9cf1-f03973698d67","timestamp":1796221359.734756}]"#;

    /// `adk_16_run_sse_streaming_true_slow.http`.
    const SSE_SLOW: &str = r#"data: {"content":{"parts":[{"text":"w1 "}],"role":"model"},"partial":true,"invocationId":"e-e1acd8e9-7f69-48e1-afb1-577a53b745f8","author":"assistant","actions":{"stateDelta":{},"artifactDelta":{},"requestedAuthConfigs":{},"requestedToolConfirmations":{}},"nodeInfo":{"path":"assistant@1"},"id":"61793950-e704-47aa-8339-61e07b58261a","timestamp":1796221360.2725186}

data: {"content":{"parts":[{"text":"w2 "}],"role":"model"},"partial":true,"invocationId":"e-e1acd8e9-7f69-48e1-afb1-577a53b745f8","author":"assistant","actions":{"stateDelta":{},"artifactDelta":{},"requestedAuthConfigs":{},"requestedToolConfirmations":{}},"nodeInfo":{"path":"assistant@1"},"id":"61793950-e704-47aa-8339-61e07b58261a","timestamp":1796221360.4294786}

data: {"content":{"parts":[{"text":"w3 "}],"role":"model"},"partial":true,"invocationId":"e-e1acd8e9-7f69-48e1-afb1-577a53b745f8","author":"assistant","actions":{"stateDelta":{},"artifactDelta":{},"requestedAuthConfigs":{},"requestedToolConfirmations":{}},"nodeInfo":{"path":"assistant@1"},"id":"61793950-e704-47aa-8339-61e07b58261a","timestamp":1796221360.5805273}

data: {"content":{"parts":[{"text":"w4 "}],"role":"model"},"partial":true,"invocationId":"e-e1acd8e9-7f69-48e1-afb1-577a53b745f8","author":"assistant","actions":{"stateDelta":{},"artifactDelta":{},"requestedAuthConfigs":{},"requestedToolConfirmations":{}},"nodeInfo":{"path":"assistant@1"},"id":"61793950-e704-47aa-8339-61e07b58261a","timestamp":1796221360.7307417}

data: {"content":{"parts":[{"text":"w1 w2 w3 w4 "}],"role":"model"},"partial":false,"finishReason":"STOP","usageMetadata":{"candidatesTokenCount":4,"promptTokenCount":34,"totalTokenCount":38},"invocationId":"e-e1acd8e9-7f69-48e1-afb1-577a53b745f8","author":"assistant","actions":{"stateDelta":{},"artifactDelta":{},"requestedAuthConfigs":{},"requestedToolConfirmations":{}},"nodeInfo":{"path":"assistant@1"},"id":"61793950-e704-47aa-8339-61e07b58261a","timestamp":1796221360.8810155}

"#;

    /// `adk_39_run_sse_llm_error.http`.
    const SSE_LLM_ERROR: &str = r#"data: {"errorCode":"InternalServerError","errorMessage":"Error code: 500 - fake failure","invocationId":"e-24184d5d-c325-4148-be9c-7707cd113bb6","author":"assistant","actions":{"stateDelta":{},"artifactDelta":{},"requestedAuthConfigs":{},"requestedToolConfirmations":{}},"nodeInfo":{"path":"assistant@1"},"id":"6cfd4578-49ce-4d77-af90-fde7a679ad21","timestamp":1796221398.406569}

data: {"error": "InternalServerError: Error code: 500 - fake failure", "error_details": {"error_type": "InternalServerError", "error_message": "Error code: 500 - fake failure", "timestamp": 1796221398.422432}}

"#;

    /// `adk_12_run_unknown_session.http`.
    const RUN_UNKNOWN_SESSION: &str = r#"{"detail":"Session not found: no-such-session"}"#;

    /// `adk_11_list_sessions.http`.
    const LIST_SESSIONS: &str = r#"[{"id":"s-camel","appName":"adk_agent","userId":"u1","state":{},"events":[],"lastUpdateTime":1796221359.1136792},{"id":"bdf105b6-a7fe-4de3-ac00-1824191e29c0","appName":"adk_agent","userId":"u1","state":{},"events":[],"lastUpdateTime":1796221359.1156495},{"id":"1c0374db-2d8b-493e-a06c-6048867925ed","appName":"adk_agent","userId":"u1","state":{},"events":[],"lastUpdateTime":1796221359.1173806},{"id":"s-run","appName":"adk_agent","userId":"u1","state":{},"events":[],"lastUpdateTime":1796221360.0770285}]"#;

    const RUN_ID: &str = "run_1";

    fn request<'a>(
        method: &'a str,
        path: &'a str,
        body: &'a [u8],
        account: &'a str,
    ) -> ClientRequest<'a> {
        ClientRequest {
            method,
            path,
            query: None,
            headers: &[],
            body,
            account_id: account,
        }
    }

    fn route(method: &str, path: &str, body: &str, account: &str) -> Route {
        AdkSurface.route(&request(method, path, body.as_bytes(), account))
    }

    fn run_turn(path: &str, body: Value) -> TurnRequest {
        match route("POST", path, &body.to_string(), "acct") {
            Route::Run(turn) => turn,
            other => panic!("expected a run, got {other:?}"),
        }
    }

    fn forward(method: &str, path: &str, body: &str, account: &str) -> AgentRequest {
        match route(method, path, body, account) {
            Route::Forward(req) => req,
            other => panic!("expected a forward, got {other:?}"),
        }
    }

    fn body(sid: &str, text: &str) -> Value {
        json!({"app_name": "adk_agent", "user_id": "u1", "session_id": sid,
               "new_message": {"role": "user", "parts": [{"text": text}]}})
    }

    fn call<'a>(turn: &'a TurnRequest, history: &'a [Item], events: &'a [Event]) -> TurnCall<'a> {
        TurnCall {
            account_id: "acct",
            session_id: "s-run",
            run_id: RUN_ID,
            history,
            events,
            turn,
            default_model: "default_app",
        }
    }

    fn event(seq: i64, new: NewEvent) -> Event {
        Event::committed(new, seq, Utc.timestamp_opt(1_700_000_000, 0).unwrap())
    }

    // --- claims and routing --------------------------------------------------------------

    #[test]
    fn claims_runs_and_everything_under_a_user() {
        let s = AdkSurface;
        assert!(s.claims("POST", "/run"));
        assert!(s.claims("POST", "/run_sse"));
        assert!(!s.claims("GET", "/run"));
        assert!(s.claims("GET", "/run_live"));
        assert!(s.claims("POST", "/agent-identity/finalize"));
        for m in ["GET", "POST", "DELETE", "PATCH"] {
            assert!(s.claims(m, "/apps/a/users/u/sessions"));
            assert!(s.claims(m, "/apps/a/users/u/sessions/s1"));
        }
        assert!(s.claims("GET", "/apps/a/users/u/sessions/s1/artifacts/x/versions"));
        assert!(s.claims("PATCH", "/apps/a/users/u/memory"));
        assert!(!s.claims("GET", "/list-apps"));
        assert!(!s.claims("GET", "/apps/a/app-info"));
        assert!(!s.claims("GET", "/health"));
        assert!(!s.claims("POST", "/v1/chat/completions"));
    }

    #[test]
    fn a_run_body_becomes_a_turn() {
        let turn = run_turn("/run", body("s-run", "My project is named zebra42."));
        assert_eq!(turn.surface, Protocol::Adk);
        assert_eq!(turn.session, SessionRef::Named("s-run".into()));
        assert_eq!(
            turn.input,
            vec![Item::user_text("My project is named zebra42.")]
        );
        assert!(!turn.stream);
        assert_eq!(turn.model.as_deref(), Some("adk_agent"));
        assert_eq!(
            turn.extra["client"],
            json!({"path": "/run", "app_name": "adk_agent", "user_id": "u1", "session_id": "s-run"})
        );
        assert_eq!(turn.extra["adk"]["path"], "/run");
        assert_eq!(
            turn.extra["adk"]["body"],
            body("s-run", "My project is named zebra42.")
        );

        let turn = run_turn("/run_sse", body("s-sse", "hi"));
        assert!(turn.stream);
        assert_eq!(turn.extra["client"]["path"], "/run_sse");
    }

    #[test]
    fn camel_case_bodies_are_read_and_the_alias_wins() {
        let turn = run_turn(
            "/run",
            json!({"appName": "adk_agent", "userId": "u1", "sessionId": "s-run",
                   "newMessage": {"role": "user", "parts": [{"text": "Reply with OK"}]}}),
        );
        assert_eq!(turn.session, SessionRef::Named("s-run".into()));
        assert_eq!(turn.input, vec![Item::user_text("Reply with OK")]);
        assert_eq!(turn.extra["client"]["user_id"], "u1");
        assert_eq!(turn.extra["client"]["app_name"], "adk_agent");

        // pydantic takes the alias when both spellings are given.
        let turn = run_turn(
            "/run",
            json!({"user_id": "a", "userId": "b", "session_id": "s", "sessionId": "t"}),
        );
        assert_eq!(turn.session, SessionRef::Named("t".into()));
        assert_eq!(turn.extra["client"]["user_id"], "b");
        assert!(turn.input.is_empty());
    }

    #[test]
    fn new_message_parts_become_items() {
        let turn = run_turn(
            "/run",
            json!({"user_id": "u", "session_id": "s", "new_message": {"role": "user", "parts": [
                {"text": "look "},
                {"text": "secret plan", "thought": true},
                {"inlineData": {"mimeType": "image/png", "data": "AAAA"}},
                {"inline_data": {"mime_type": "text/plain", "data": "aGk=", "display_name": "a.txt"}},
                {"fileData": {"fileUri": "gs://b/doc.pdf", "mimeType": "application/pdf"}},
                {"functionResponse": {"id": "c1", "name": "f", "response": {"ok": true}}}
            ]}}),
        );
        assert_eq!(
            turn.input,
            vec![
                Item::Message {
                    role: "user".into(),
                    content: vec![
                        Block::Text("look ".into()),
                        Block::Image {
                            url: "data:image/png;base64,AAAA".into(),
                            detail: None
                        },
                        Block::File {
                            filename: Some("a.txt".into()),
                            data: Some("data:text/plain;base64,aGk=".into()),
                            url: None
                        },
                        Block::File {
                            filename: None,
                            data: None,
                            url: Some("gs://b/doc.pdf".into())
                        },
                    ]
                },
                Item::ToolResult {
                    call_id: "c1".into(),
                    output: r#"{"ok":true}"#.into()
                },
            ]
        );
    }

    fn reply(r: Route) -> (u16, Value) {
        match r {
            Route::Reply { status, body } => (status, body),
            other => panic!("expected a reply, got {other:?}"),
        }
    }

    #[test]
    fn bad_run_bodies_get_fastapi_422s() {
        let (status, b) = reply(route(
            "POST",
            "/run",
            r#"{"app_name": "a", "user_id": "u1"}"#,
            "acct",
        ));
        assert_eq!(status, 422);
        assert_eq!(
            b,
            json!({"detail": [{"type": "missing", "loc": ["body", "sessionId"], "msg": "Field required",
                               "input": {"app_name": "a", "user_id": "u1"}}]})
        );

        let (status, b) = reply(route("POST", "/run_sse", r#"{"user_id": 5}"#, "acct"));
        assert_eq!(status, 422);
        let errors = b["detail"].as_array().unwrap();
        assert_eq!(errors.len(), 2);
        assert_eq!(errors[0]["type"], "string_type");
        assert_eq!(errors[0]["loc"], json!(["body", "user_id"]));
        assert_eq!(errors[1]["loc"], json!(["body", "sessionId"]));

        let (status, b) = reply(route("POST", "/run", "{\"user_id\": ", "acct"));
        assert_eq!(status, 422);
        assert_eq!(b["detail"][0]["type"], "json_invalid");
        assert_eq!(b["detail"][0]["msg"], "JSON decode error");

        let (_, b) = reply(route("POST", "/run", "", "acct"));
        assert_eq!(
            b["detail"][0],
            json!({"type": "missing", "loc": ["body"], "msg": "Field required", "input": null})
        );

        let (_, b) = reply(route("POST", "/run", "[1]", "acct"));
        assert_eq!(b["detail"][0]["type"], "model_attributes_type");

        let (_, b) = reply(route(
            "POST",
            "/run",
            r#"{"user_id": "u", "session_id": "s", "newMessage": "hi"}"#,
            "acct",
        ));
        assert_eq!(b["detail"][0]["loc"], json!(["body", "newMessage"]));

        let e = AdkSurface
            .parse_request(br#"{"user_id": "u"}"#, None)
            .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("sessionId"));
        assert_eq!(e.message, "Field required");
    }

    #[test]
    fn run_live_is_refused_rather_than_passed_through() {
        // It names its user in the query string, where Tether cannot bind it.
        let (status, b) = reply(route("GET", "/run_live", "", "acct"));
        assert_eq!(status, 501);
        assert!(b["detail"].as_str().unwrap().contains("/run_sse"));
    }

    #[test]
    fn session_requests_are_forwarded_to_the_namespaced_user() {
        let req = forward(
            "POST",
            "/apps/adk_agent/users/u1/sessions",
            r#"{"session_id": "s-run"}"#,
            "acct",
        );
        assert_eq!(req.method, "POST");
        assert_eq!(req.path, "/apps/adk_agent/users/acct~u1/sessions");
        assert_eq!(req.body, Some(json!({"session_id": "s-run"})));

        let req = forward("POST", "/apps/adk_agent/users/u1/sessions", "", "acct");
        assert_eq!(req.body, None);

        let req = forward("GET", "/apps/adk_agent/users/u1/sessions/s-run", "", "acct");
        assert_eq!(
            (req.method, req.path.as_str()),
            ("GET", "/apps/adk_agent/users/acct~u1/sessions/s-run")
        );

        let req = forward(
            "DELETE",
            "/apps/adk_agent/users/u1/sessions/s-run/",
            "",
            "acct",
        );
        assert_eq!(
            (req.method, req.path.as_str()),
            ("DELETE", "/apps/adk_agent/users/acct~u1/sessions/s-run")
        );

        let raw = request(
            "GET",
            "/apps/a/users/u%201/sessions/s1/artifacts/dir/f.txt",
            b"",
            "acct",
        );
        let raw = ClientRequest {
            query: Some("version=2"),
            ..raw
        };
        let Route::Forward(req) = AdkSurface.route(&raw) else {
            panic!()
        };
        assert_eq!(
            req.path,
            "/apps/a/users/acct~u%201/sessions/s1/artifacts/dir/f.txt?version=2"
        );

        let (status, b) = reply(route("POST", "/apps/a/users/u/sessions", "{nope", "acct"));
        assert_eq!(status, 422);
        assert_eq!(b["detail"][0]["type"], "json_invalid");
        assert_eq!(
            reply(route("TRACE", "/apps/a/users/u/sessions", "", "acct")).0,
            405
        );
    }

    #[test]
    fn user_ids_round_trip_whatever_the_account_holds() {
        for account in ["acct", "a~b", "a%7Eb", "auth0|123", "x/y", "", "ü"] {
            for user in ["u1", "", "~", "a~b~c", "acct~u1", "x/y z"] {
                let agent = agent_user_id(account, user);
                assert_eq!(
                    client_user_id(account, &agent),
                    Some(user),
                    "{account:?} {user:?}"
                );
            }
        }
        assert_eq!(agent_user_id("acct", "u1"), "acct~u1");
        assert_eq!(agent_user_id("a~b", "u1"), "a%7Eb~u1");
        // Distinct accounts never produce the same agent user id.
        assert_ne!(agent_user_id("a~b", "c"), agent_user_id("a", "b~c"));
        assert_ne!(agent_user_id("a%7Eb", "c"), agent_user_id("a~b", "c"));
        assert_eq!(client_user_id("other", "acct~u1"), None);
    }

    #[test]
    fn no_path_reaches_another_accounts_user() {
        // Two accounts with the same user and session ids go to different agent users.
        let a = forward("GET", "/apps/app/users/u1/sessions/s1", "", "alice");
        let b = forward("GET", "/apps/app/users/u1/sessions/s1", "", "bob");
        assert_ne!(a.path, b.path);
        // Naming another account's namespaced user lands inside one's own.
        let req = forward("GET", "/apps/app/users/alice~u1/sessions/s1", "", "bob");
        assert_eq!(req.path, "/apps/app/users/bob~alice~u1/sessions/s1");
        let req = forward("GET", "/apps/app/users/alice%7Eu1/sessions", "", "bob");
        assert_eq!(req.path, "/apps/app/users/bob~alice~u1/sessions");
        // A slash smuggled into the user stays inside the segment.
        let req = forward(
            "GET",
            "/apps/app/users/x%2F..%2F..%2Fusers%2Falice~u1/sessions",
            "",
            "bob",
        );
        assert_eq!(
            req.path,
            "/apps/app/users/bob~x%2F..%2F..%2Fusers%2Falice~u1/sessions"
        );
        // Paths that would move the user once decoded or normalised are refused.
        for path in [
            "/apps/x%2Fusers%2Falice~u1%2Fsessions%2Fs1%2Fartifacts/users/u/f",
            "/apps/../users/u/sessions",
            "/apps/app/users/../sessions",
            "/apps/app/users/u/sessions/%2e%2e/%2E%2E/x",
            "/apps/app/users//sessions",
            "/apps//users/u/sessions",
        ] {
            assert_eq!(
                reply(route("GET", path, "", "bob")),
                (404, json!({"detail": "Not Found"})),
                "{path}"
            );
        }
        // The finalize body's user is bound too.
        let req = forward(
            "POST",
            "/agent-identity/finalize",
            r#"{"userId": "alice~u1", "user_id": "x", "consent_nonce": "n"}"#,
            "bob",
        );
        assert_eq!(
            req.body,
            Some(json!({"user_id": "bob~alice~u1", "consent_nonce": "n"}))
        );
    }

    #[test]
    fn the_run_request_carries_the_namespaced_user() {
        let turn = run_turn(
            "/run_sse",
            json!({"appName": "adk_agent", "userId": "u1", "user_id": "other", "sessionId": "s-run",
                   "newMessage": {"role": "user", "parts": [{"text": "hi"}]}, "streaming": true}),
        );
        let req = AdkUpstream.request(&call(&turn, &[], &[]));
        assert_eq!(req.method, "POST");
        assert_eq!(req.path, "/run_sse");
        assert_eq!(
            req.body,
            Some(
                json!({"appName": "adk_agent", "user_id": "acct~u1", "session_id": "s-run",
                        "newMessage": {"role": "user", "parts": [{"text": "hi"}]}, "streaming": true})
            )
        );
        let turn = run_turn("/run", body("s-run", "hi"));
        let req = AdkUpstream.request(&call(&turn, &[], &[]));
        assert_eq!(req.path, "/run");
        assert_eq!(req.body.unwrap()["user_id"], "acct~u1");
    }

    #[test]
    fn a_turn_from_another_surface_gets_a_streamed_adk_request() {
        let mut turn = TurnRequest::new(Protocol::OpenAiChat);
        turn.input = vec![Item::user_text("hello")];
        turn.stream = false;
        let req = AdkUpstream.request(&call(&turn, &[], &[]));
        assert_eq!(req.path, "/run_sse");
        assert_eq!(
            req.body,
            Some(
                json!({"app_name": "default_app", "user_id": "acct~tether", "session_id": "s-run",
                        "new_message": {"role": "user", "parts": [{"text": "hello"}]}, "streaming": false})
            )
        );
        // Tether owns that session, so even its first turn may create it in the agent.
        let restore = AdkUpstream.restore(&call(&turn, &[], &[])).unwrap();
        assert_eq!(
            restore.before[0].path,
            "/apps/default_app/users/acct~tether/sessions"
        );
    }

    #[test]
    fn forwarded_answers_lose_the_namespace() {
        let req = request("GET", "/apps/adk_agent/users/u1/sessions", b"", "acct");
        let scoped = LIST_SESSIONS.replace(r#""userId":"u1""#, r#""userId":"acct~u1""#);
        let out = AdkSurface.rewrite_forwarded(
            &req,
            "http://tether",
            serde_json::from_str(&scoped).unwrap(),
        );
        assert_eq!(out, serde_json::from_str::<Value>(LIST_SESSIONS).unwrap());

        let one =
            json!({"id": "s", "appName": "a", "user_id": "acct~u~2", "state": {}, "events": []});
        let out = AdkSurface.rewrite_forwarded(&req, "", one);
        assert_eq!(out["user_id"], "u~2");
        // Not the caller's namespace: left alone (never sent by a namespaced path).
        let out = AdkSurface.rewrite_forwarded(&req, "", json!({"userId": "other~u1"}));
        assert_eq!(out["userId"], "other~u1");
        let out = AdkSurface.rewrite_forwarded(&req, "", json!({"detail": "No user acct~u1"}));
        assert_eq!(out, json!({"detail": "No user u1"}));
        assert_eq!(
            AdkSurface.rewrite_forwarded(&req, "", Value::Null),
            Value::Null
        );
    }

    // --- parsing ------------------------------------------------------------------------

    fn parse_whole(turn: &TurnRequest, content_type: &str, body: &[u8]) -> Vec<Output> {
        let mut p = AdkUpstream.parser(&call(turn, &[], &[]), content_type);
        let mut out = p.feed(body);
        out.extend(p.finish());
        out
    }

    /// The outputs are the same however the body is cut into chunks.
    fn parse_split(turn: &TurnRequest, content_type: &str, body: &[u8]) -> Vec<Output> {
        let whole = parse_whole(turn, content_type, body);
        for size in [1, 2, 3, 7, 64, 370, 371] {
            let mut p = AdkUpstream.parser(&call(turn, &[], &[]), content_type);
            let mut out: Vec<Output> = body.chunks(size).flat_map(|c| p.feed(c)).collect();
            out.extend(p.finish());
            assert_eq!(out, whole, "chunks of {size}");
        }
        whole
    }

    fn adk_meta(author: &str, invocation: &str) -> Value {
        json!({"adk": {"author": author, "invocation_id": invocation, "app_name": "adk_agent", "user_id": "u1"}})
    }

    #[test]
    fn parses_a_run_answer() {
        let turn = run_turn("/run", body("s-run", "My project is named zebra42."));
        let out = parse_split(&turn, "application/json", RUN_TURN1.as_bytes());
        let events: Value = serde_json::from_str(RUN_TURN1).unwrap();
        assert_eq!(
            out,
            vec![
                Output::Frame(events[0].clone()),
                Output::ItemWith(
                    Item::assistant_text("You said: My project is named zebra42."),
                    adk_meta("assistant", "e-0b366c9a-36e7-4dee-99b7-52508e5cbe43"),
                ),
                Output::Done {
                    usage: Some(
                        json!({"prompt_tokens": 19, "completion_tokens": 7, "total_tokens": 26})
                    )
                },
            ]
        );
        // No events is still a complete answer.
        assert_eq!(
            parse_whole(&turn, "application/json", b"[]"),
            vec![Output::Done { usage: None }]
        );
    }

    #[test]
    fn parses_a_streamed_answer_keeping_only_the_aggregate_in_the_transcript() {
        let turn = run_turn("/run_sse", body("s-sse", "slow:4:150 go"));
        let out = parse_split(
            &turn,
            "text/event-stream; charset=utf-8",
            SSE_SLOW.as_bytes(),
        );
        let frames: Vec<&Output> = out
            .iter()
            .filter(|o| matches!(o, Output::Frame(_)))
            .collect();
        assert_eq!(frames.len(), 5);
        assert!(matches!(frames[0], Output::Frame(e) if e["partial"] == true));
        let rest: Vec<&Output> = out
            .iter()
            .filter(|o| !matches!(o, Output::Frame(_)))
            .collect();
        assert_eq!(
            rest,
            vec![
                &Output::TextDelta("w1 ".into()),
                &Output::TextDelta("w2 ".into()),
                &Output::TextDelta("w3 ".into()),
                &Output::TextDelta("w4 ".into()),
                &Output::ItemWith(
                    Item::assistant_text("w1 w2 w3 w4 "),
                    adk_meta("assistant", "e-e1acd8e9-7f69-48e1-afb1-577a53b745f8"),
                ),
                &Output::Done {
                    usage: Some(
                        json!({"prompt_tokens": 34, "completion_tokens": 4, "total_tokens": 38})
                    )
                },
            ]
        );
        // Each frame is its event verbatim, in order.
        assert_eq!(
            out[0],
            Output::Frame(
                serde_json::from_str(
                    SSE_SLOW
                        .split("\n\n")
                        .next()
                        .unwrap()
                        .strip_prefix("data: ")
                        .unwrap()
                )
                .unwrap()
            )
        );
    }

    #[test]
    fn a_stream_cut_short_is_not_done() {
        let turn = run_turn("/run_sse", body("s-sse", "x"));
        let sse = "text/event-stream";
        // Cut after the fragments, before the aggregated event.
        let cut = SSE_SLOW.rfind("data: ").unwrap();
        let out = parse_whole(&turn, sse, &SSE_SLOW.as_bytes()[..cut]);
        assert!(!out.iter().any(|o| matches!(o, Output::Done { .. })));
        assert!(!out.iter().any(|o| matches!(o, Output::ItemWith(..))));
        // Cut inside the last event.
        let out = parse_whole(&turn, sse, &SSE_SLOW.as_bytes()[..SSE_SLOW.len() - 20]);
        assert!(!out.iter().any(|o| matches!(o, Output::Done { .. })));
        // Nothing at all.
        assert_eq!(parse_whole(&turn, sse, b""), vec![]);
        // Cut after a tool call or its result: the model has yet to answer.
        let call = json!({"content": {"role": "model", "parts": [{"functionCall": {"id": "c1", "name": "f", "args": {}}}]}, "author": "assistant"});
        let result = json!({"content": {"role": "user", "parts": [{"functionResponse": {"id": "c1", "name": "f", "response": {}}}]}, "author": "assistant"});
        let answer = json!({"content": {"role": "model", "parts": [{"text": "done"}]}, "author": "assistant"});
        let stream = |events: &[&Value]| {
            events
                .iter()
                .map(|e| format!("data: {e}\n\n"))
                .collect::<String>()
        };
        for cut in [stream(&[&call]), stream(&[&call, &result])] {
            let out = parse_whole(&turn, sse, cut.as_bytes());
            assert!(
                !out.iter().any(|o| matches!(o, Output::Done { .. })),
                "{cut}"
            );
        }
        let out = parse_whole(&turn, sse, stream(&[&call, &result, &answer]).as_bytes());
        assert!(matches!(out.last(), Some(Output::Done { .. })));
        // A long-running tool call does end the turn (the client answers it later).
        let mut waiting = call.clone();
        waiting["longRunningToolIds"] = json!(["c1"]);
        let out = parse_whole(&turn, sse, stream(&[&waiting]).as_bytes());
        assert!(matches!(out.last(), Some(Output::Done { .. })));
        // The last event whole but without its blank line: complete.
        let out = parse_whole(&turn, sse, SSE_SLOW.trim_end().as_bytes());
        assert!(matches!(out.last(), Some(Output::Done { .. })));
    }

    #[test]
    fn an_agent_failure_mid_stream_is_an_error() {
        let turn = run_turn("/run_sse", body("s-err", "please error"));
        let out = parse_split(
            &turn,
            "text/event-stream; charset=utf-8",
            SSE_LLM_ERROR.as_bytes(),
        );
        assert_eq!(out.len(), 3, "{out:?}");
        assert!(matches!(&out[0], Output::Frame(e) if e["errorCode"] == "InternalServerError"));
        let error = Output::Error {
            code: "InternalServerError".into(),
            message: "Error code: 500 - fake failure".into(),
        };
        // From the errorCode event, then from api_server's error frame (not recorded as
        // an agent event: the renderer writes its own at the end).
        assert_eq!(out[1], error);
        assert_eq!(out[2], error);
    }

    #[test]
    fn error_bodies_become_errors() {
        let turn = run_turn("/run", body("no-such-session", "x"));
        assert_eq!(
            parse_whole(&turn, "application/json", RUN_UNKNOWN_SESSION.as_bytes()),
            vec![Output::Error {
                code: SESSION_NOT_FOUND.into(),
                message: "Session not found: no-such-session".into()
            }]
        );
        assert_eq!(
            parse_whole(
                &turn,
                "application/json",
                br#"{"detail":"Session already exists: s"}"#
            ),
            vec![Output::Error {
                code: "agent_error".into(),
                message: "Session already exists: s".into()
            }]
        );
        let out = parse_whole(
            &turn,
            "application/json",
            br#"{"detail":[{"type":"missing","loc":["body","userId"],"msg":"Field required"}]}"#,
        );
        assert_eq!(
            out,
            vec![Output::Error {
                code: "agent_error".into(),
                message: "body.userId: Field required".into()
            }]
        );
        // api_server's 500 on an exception in /run.
        let out = parse_whole(&turn, "text/plain; charset=utf-8", b"Internal Server Error");
        assert!(
            matches!(&out[..], [Output::Error { code, message }] if code == "invalid_response" && message.ends_with("Internal Server Error"))
        );
        let out = parse_whole(&turn, "application/json", b"");
        assert!(matches!(&out[..], [Output::Error { code, .. }] if code == "empty_response"));
    }

    #[test]
    fn tool_calls_results_and_thoughts_are_transcript_items() {
        let turn = run_turn("/run", body("s", "weather?"));
        let answer = json!([
            {"content": {"role": "model", "parts": [
                {"text": "thinking…", "thought": true},
                {"text": "Let me check."},
                {"functionCall": {"id": "adk-1", "name": "get_weather", "args": {"city": "Paris"}}},
                {"functionCall": {"id": "adk-2", "name": "get_time", "args": {}}}]},
             "author": "assistant", "invocationId": "e-1", "id": "ev1",
             "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "thoughtsTokenCount": 2, "totalTokenCount": 17}},
            {"content": {"role": "user", "parts": [
                {"functionResponse": {"id": "adk-1", "name": "get_weather", "response": {"temp": 20}}},
                {"functionResponse": {"id": "adk-2", "name": "get_time", "response": {"result": "noon"}}}]},
             "author": "assistant", "invocationId": "e-1", "id": "ev2", "actions": {"stateDelta": {"city": "Paris", "temp:x": 1, "app:y": 2}}},
            {"content": {"role": "model", "parts": [{"text": "20C at noon."}]},
             "author": "assistant", "invocationId": "e-1", "id": "ev3",
             "usageMetadata": {"promptTokenCount": 30, "candidatesTokenCount": 4, "cachedContentTokenCount": 8, "totalTokenCount": 34}}
        ]);
        let out = parse_whole(&turn, "application/json", answer.to_string().as_bytes());
        let items: Vec<Output> = out
            .into_iter()
            .filter(|o| !matches!(o, Output::Frame(_)))
            .collect();
        let mut with_state = adk_meta("assistant", "e-1");
        with_state["adk"]["state"] = json!({"city": "Paris"});
        assert_eq!(
            items,
            vec![
                Output::Item(Item::Reasoning {
                    text: "thinking…".into()
                }),
                Output::ItemWith(
                    Item::assistant_text("Let me check."),
                    adk_meta("assistant", "e-1")
                ),
                Output::Item(Item::ToolCall {
                    call_id: "adk-1".into(),
                    name: "get_weather".into(),
                    arguments: r#"{"city":"Paris"}"#.into()
                }),
                Output::Item(Item::ToolCall {
                    call_id: "adk-2".into(),
                    name: "get_time".into(),
                    arguments: "{}".into()
                }),
                Output::Item(Item::ToolResult {
                    call_id: "adk-1".into(),
                    output: r#"{"temp":20}"#.into()
                }),
                Output::Item(Item::ToolResult {
                    call_id: "adk-2".into(),
                    output: r#"{"result":"noon"}"#.into()
                }),
                Output::ItemWith(Item::assistant_text("20C at noon."), with_state),
                Output::Done {
                    usage: Some(json!({
                        "prompt_tokens": 40, "completion_tokens": 11, "total_tokens": 51,
                        "prompt_tokens_details": {"cached_tokens": 8},
                        "completion_tokens_details": {"reasoning_tokens": 2}
                    }))
                },
            ]
        );
    }

    #[test]
    fn state_carries_over_from_earlier_turns_and_the_request() {
        let turn = run_turn(
            "/run",
            json!({"user_id": "u1", "app_name": "adk_agent", "session_id": "s", "state_delta": {"mood": "good"}}),
        );
        let earlier = [event(
            3,
            Item::assistant_text("hi")
                .to_event("acct", "s")
                .with_metadata(json!({"adk": {"author": "assistant", "state": {"city": "Paris"}}})),
        )];
        let mut p = AdkUpstream.parser(&call(&turn, &[], &earlier), "application/json");
        p.feed(json!([{"content": {"role": "model", "parts": [{"text": "ok"}]}, "author": "assistant"}]).to_string().as_bytes());
        let out = p.finish();
        let Output::ItemWith(_, meta) = &out[1] else {
            panic!("{out:?}")
        };
        assert_eq!(
            meta["adk"]["state"],
            json!({"city": "Paris", "mood": "good"})
        );
    }

    #[test]
    fn forgot_is_adks_session_not_found() {
        let up = AdkUpstream;
        assert!(up.forgot(404, RUN_UNKNOWN_SESSION.as_bytes()));
        assert!(up.forgot(404, br#"{"detail":"Session not found"}"#));
        assert!(!up.forgot(404, br#"{"detail":"Not Found"}"#));
        assert!(!up.forgot(409, br#"{"detail":"Session already exists: s-run"}"#));
        assert!(!up.forgot(200, RUN_TURN1.as_bytes()));
        assert!(!up.forgot(404, b"Session not found"));
    }

    // --- restore ------------------------------------------------------------------------

    fn answered(seq: i64, text: &str, meta: Value) -> Event {
        event(
            seq,
            Item::assistant_text(text)
                .to_event("acct", "s-run")
                .in_run("r0", "i0")
                .with_metadata(meta),
        )
    }

    #[test]
    fn restore_recreates_the_session_from_history() {
        let turn = run_turn("/run", body("s-run", "What is my project named?"));
        let history = vec![
            Item::Message {
                role: "system".into(),
                content: vec![Block::Text("Earlier: greetings.".into())],
            },
            Item::user_text("My project is named zebra42."),
            Item::assistant_text("Noted: zebra42."),
            Item::Reasoning { text: "hmm".into() },
            Item::assistant_text("Handing over."),
            Item::ToolCall {
                call_id: "c1".into(),
                name: "lookup".into(),
                arguments: r#"{"q":"zebra"}"#.into(),
            },
            Item::ToolCall {
                call_id: "c2".into(),
                name: "adk_request_confirmation".into(),
                arguments: "{}".into(),
            },
            Item::ToolCall {
                call_id: "c3".into(),
                name: "count".into(),
                arguments: "[1]".into(),
            },
            Item::ToolResult {
                call_id: "c1".into(),
                output: r#"{"hits":1}"#.into(),
            },
            Item::ToolResult {
                call_id: "c2".into(),
                output: r#"{"confirmed":true}"#.into(),
            },
            Item::ToolResult {
                call_id: "c3".into(),
                output: "3".into(),
            },
            Item::ToolResult {
                call_id: "orphan".into(),
                output: "x".into(),
            },
            Item::Message {
                role: "user".into(),
                content: vec![
                    Block::Text("see".into()),
                    Block::Image {
                        url: "data:image/png;base64,AAAA".into(),
                        detail: None,
                    },
                ],
            },
        ];
        let meta = |author: &str| json!({"adk": {"author": author, "invocation_id": "e-1", "app_name": "adk_agent", "user_id": "u1"}});
        let mut with_state = meta("helper");
        with_state["adk"]["state"] = json!({"k": 1});
        let events = vec![
            answered(2, "Noted: zebra42.", meta("assistant")),
            answered(5, "Handing over.", with_state),
        ];
        let restore = AdkUpstream
            .restore(&call(&turn, &history, &events))
            .unwrap();
        assert_eq!(
            restore.request,
            AdkUpstream.request(&call(&turn, &history, &events))
        );
        assert_eq!(restore.before.len(), 1);
        let create = &restore.before[0];
        assert_eq!(create.method, "POST");
        assert_eq!(create.path, "/apps/adk_agent/users/acct~u1/sessions");
        assert_eq!(
            create.body,
            Some(json!({
                "session_id": "s-run",
                "state": {"k": 1},
                "events": [
                    {"author": "user", "content": {"role": "user", "parts": [{"text": "Earlier: greetings."}]}},
                    {"author": "user", "content": {"role": "user", "parts": [{"text": "My project is named zebra42."}]}},
                    {"author": "assistant", "content": {"role": "model", "parts": [{"text": "Noted: zebra42."}]}},
                    {"author": "helper", "content": {"role": "model", "parts": [
                        {"text": "Handing over."},
                        {"functionCall": {"id": "c1", "name": "lookup", "args": {"q": "zebra"}}},
                        {"functionCall": {"id": "c3", "name": "count", "args": {"value": [1]}}}]}},
                    {"author": "helper", "content": {"role": "user", "parts": [
                        {"functionResponse": {"id": "c1", "name": "lookup", "response": {"hits": 1}}},
                        {"functionResponse": {"id": "c3", "name": "count", "response": {"result": 3}}}]}},
                    {"author": "user", "content": {"role": "user", "parts": [
                        {"text": "see"}, {"inlineData": {"mimeType": "image/png", "data": "AAAA"}}]}}
                ]
            }))
        );
    }

    #[test]
    fn restore_falls_back_to_the_app_name_and_empty_state() {
        let turn = run_turn("/run_sse", body("s-run", "next"));
        let history = vec![Item::user_text("a"), Item::assistant_text("b")];
        let events = vec![event(
            1,
            NewEvent::new(
                "acct",
                "s-run",
                EventType::RunStatus,
                json!({"status": "completed"}),
            ),
        )];
        let restore = AdkUpstream
            .restore(&call(&turn, &history, &events))
            .unwrap();
        let body = restore.before[0].body.clone().unwrap();
        assert_eq!(body["state"], json!({}));
        assert_eq!(body["events"][1]["author"], "adk_agent");
        assert_eq!(restore.request.path, "/run_sse");
    }

    #[test]
    fn restore_declines_what_the_agent_never_had() {
        // The agent never answered in this session: ADK's own 404 stands.
        let turn = run_turn("/run", body("typo", "hi"));
        assert_eq!(AdkUpstream.restore(&call(&turn, &[], &[])), None);
        let failed = [event(
            1,
            NewEvent::new(
                "acct",
                "typo",
                EventType::RunStatus,
                json!({"status": "failed"}),
            ),
        )];
        assert_eq!(
            AdkUpstream.restore(&call(&turn, &[Item::user_text("hi")], &failed)),
            None
        );
        // The same session id used earlier by another user of the account.
        let history = [Item::user_text("a"), Item::assistant_text("b")];
        let theirs = [answered(
            2,
            "b",
            json!({"adk": {"author": "assistant", "app_name": "adk_agent", "user_id": "u2"}}),
        )];
        assert_eq!(AdkUpstream.restore(&call(&turn, &history, &theirs)), None);
        // No app name anywhere: no path to create the session under.
        let turn = run_turn("/run", json!({"user_id": "u1", "session_id": "s"}));
        let ours = [answered(
            2,
            "b",
            json!({"adk": {"author": "assistant", "user_id": "u1"}}),
        )];
        assert_eq!(AdkUpstream.restore(&call(&turn, &history, &ours)), None);
    }

    // --- rendering ----------------------------------------------------------------------

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
                SseFrame::data(ev[0].to_string()).with_id(13),
                SseFrame::data(ev[4].to_string()).with_id(15),
            ]
        );
        let mut wire = String::new();
        frames[0].encode(&mut wire);
        assert_eq!(wire, format!("id: 13\ndata: {}\n\n", ev[0]));
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
        assert_eq!(frames[0].id.as_deref(), Some("13"));
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
