//! Which requests are A2A's and where each goes: agent cards and the methods Tether has no
//! part in go to the agent as they are, sends become runs, and gets, cancels and
//! resubscribes are answered from the log. Requests the SDK would refuse get its errors.

use serde_json::{json, Value};

use crate::grpc;
use crate::percent::{decode_segment, encode_segment};
use crate::surface::{ClientRequest, Route, UNOWNED_TASK};
use crate::turn::{InputError, TurnRequest};
use crate::upstream::AgentRequest;

use super::client::{
    error_info, method_op, rest_error, rpc_error, unimplemented, Client, Op, Transport, Version,
    INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, VERSION_NOT_SUPPORTED,
};
use super::message::{send_route, task_not_found, ParamError};
use super::proto;

const VERSION_HEADER: &str = "A2A-Version";
/// Request headers of the protocol's own, passed on to the agent with the client's request.
const PROTOCOL_HEADERS: &[&str] = &["A2A-Version", "A2A-Extensions", "X-A2A-Extensions"];

pub(super) fn claims(method: &str, path: &str) -> bool {
    let path = path.split('?').next().unwrap_or(path);
    is_card_path(method, path)
        || rest_op(method, path).is_some()
        || rest_scoped(method, path).is_some()
        || is_jsonrpc_path(method, path)
        || (method == "POST" && proto::method(path).is_some())
}

pub(super) fn route(req: &ClientRequest) -> Route {
    let headers = protocol_headers(req);
    if is_grpc(req) {
        return route_grpc(req, &headers);
    }
    if is_card_path(req.method, req.path) {
        let request = AgentRequest::get(path_and_query(req));
        return Route::Forward(with_headers(request, &headers));
    }
    if let Some(scoped) = rest_scoped(req.method, req.path) {
        return route_rest_scoped(req, scoped, &headers);
    }
    match rest_op(req.method, req.path) {
        Some((op, task_id, base)) => route_rest(req, op, task_id, base, &headers),
        None => route_jsonrpc(req, &headers),
    }
}

/// A bare JSON-RPC body as a send's turn; the version is the one its method belongs to.
pub(super) fn parse_request(body: &[u8]) -> Result<TurnRequest, InputError> {
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
    match route(&req) {
        Route::Run(turn) | Route::RunInTask { turn, .. } => Ok(turn),
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

/// A JSON-RPC request: the envelope checked as the SDK checks it, and the method's
/// version against the client's `A2A-Version`.
fn route_jsonrpc(req: &ClientRequest, headers: &[(String, String)]) -> Route {
    let body: Value = match serde_json::from_slice(req.body) {
        Ok(body) => body,
        Err(e) => return rpc_reply(&Value::Null, PARSE_ERROR, &e.to_string()),
    };
    let Value::Object(obj) = &body else {
        let message = if body.is_array() {
            "Batch requests are not supported"
        } else {
            "Invalid Request"
        };
        return rpc_reply(&Value::Null, INVALID_REQUEST, message);
    };
    let id = obj.get("id").cloned().unwrap_or(Value::Null);
    if !(id.is_string() || id.is_i64() || id.is_u64() || id.is_null()) {
        let message = "Invalid request: id must be a string, integer, or null";
        return rpc_reply(&Value::Null, INVALID_REQUEST, message);
    }
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        let message = "Invalid request: 'jsonrpc' must be exactly '2.0'";
        return rpc_reply(&id, INVALID_REQUEST, message);
    }
    let Some(method) = obj
        .get("method")
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
    else {
        return rpc_reply(&id, INVALID_REQUEST, "Method is required");
    };
    // Params are ProtoJSON in v1.0, whose parsers take a field's proto name (`task_id`)
    // as well as its JSON name: read (and sent on) in the JSON name.
    let mut params = obj.get("params").cloned().unwrap_or_else(|| json!({}));
    camel_case_fields(&mut params);
    let path = path_and_query(req);
    // Task lists and push configs go to the agent, scoped to the caller's account.
    if let Some((version, scope)) = scoped_method(method) {
        let client = Client::new(Transport::JsonRpc, version, Op::Get, id);
        let mut body = body.clone();
        body["params"] = params.clone();
        let request = with_headers(AgentRequest::post(path, body), headers);
        return scoped_forward(&client, scope, &params, request);
    }
    // Methods Tether has no part in (extended card, extensions) go to the agent as they
    // are.
    let Some((version, op)) = method_op(method) else {
        return Route::Forward(with_headers(AgentRequest::post(path, body), headers));
    };
    let mut client = Client::new(Transport::JsonRpc, version, op, id);

    // The SDK's rule: v1.0 methods need `A2A-Version: 1.x`; without the header a request
    // is v0.3. Refusing here keeps a mismatched request from ever reaching the agent.
    let header = version_header(req);
    let major = header.and_then(header_major);
    match (version, header) {
        (Version::V10, _) if major != Some(1) => return needs_v10(&client, header),
        (Version::V03, Some(header)) if major != Some(0) => {
            let message = version_message(header, Version::V03);
            return reply(client.error(INTERNAL_ERROR, &message, None));
        }
        _ => {}
    }

    if !params.is_object() {
        return reply(client.error(INVALID_PARAMS, "Invalid params", None));
    }
    match op {
        Op::Send | Op::Stream => send_route(&client, &path, headers, &params, op == Op::Stream),
        Op::Get | Op::Cancel | Op::Subscribe => {
            let Some(task_id) = params
                .get("id")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
            else {
                return ParamError::new("id", "Field is required.").reply(&client);
            };
            client.history_length = params.get("historyLength").and_then(Value::as_i64);
            let request = with_headers(AgentRequest::post(path, body.clone()), headers);
            task_route(op, task_id.to_owned(), &client, req, request)
        }
    }
}

/// A gRPC call: its request message in JSON form is the params of the v1.0 JSON-RPC
/// method of the same name, and it is routed as that method is. What goes to the agent
/// for it is that JSON-RPC request (the upstream adapter calls a gRPC agent over gRPC).
fn route_grpc(req: &ClientRequest, headers: &[(String, String)]) -> Route {
    let Some(method) = proto::method(req.path) else {
        let message = format!("{} has no method {}", proto::SERVICE, req.path);
        return reply(unimplemented(&message));
    };
    let op = method_op(method.name()).map(|(_, op)| op);
    let mut client = Client::new(
        Transport::Grpc,
        Version::V10,
        op.unwrap_or(Op::Send),
        Value::Null,
    );
    // gRPC is v1.0 only: metadata naming another major version is refused as in JSON-RPC.
    if let Some(header) = version_header(req).filter(|h| header_major(h) != Some(1)) {
        return needs_v10(&client, Some(header));
    }
    let params = match proto::decode(&method.input(), req.body) {
        Ok(params) => params,
        Err(e) => return reply(client.error(PARSE_ERROR, &format!("Invalid request: {e}"), None)),
    };
    let mut headers = headers.to_vec();
    if !headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case(VERSION_HEADER))
    {
        headers.push((VERSION_HEADER.to_owned(), Version::V10.as_str().to_owned()));
    }
    match op {
        // Methods Tether has no part in go to the agent as the v1.0 JSON-RPC call, at `/`
        // (a2a-sdk's mount); the upstream adapter makes it a gRPC call to a gRPC agent.
        // Task lists and push configs are scoped to the caller's account.
        None => {
            let body = json!({ "jsonrpc": "2.0", "id": Value::Null, "method": method.name(), "params": params });
            let request = with_headers(AgentRequest::post("/", body), &headers);
            match scoped_method(method.name()) {
                Some((_, scope)) => scoped_forward(&client, scope, &params, request),
                None => Route::Forward(request),
            }
        }
        Some(op @ (Op::Send | Op::Stream)) => {
            send_route(&client, req.path, &headers, &params, op == Op::Stream)
        }
        Some(op) => {
            let Some(task_id) = params["id"].as_str().filter(|t| !t.is_empty()) else {
                return ParamError::new("id", "Field is required.").reply(&client);
            };
            client.history_length = params.get("historyLength").and_then(Value::as_i64);
            let body = json!({ "jsonrpc": "2.0", "id": Value::Null, "method": method.name(), "params": params });
            let request = with_headers(AgentRequest::post("/", body), &headers);
            task_route(op, task_id.to_owned(), &client, req, request)
        }
    }
}

/// Whether a request is a gRPC call (the gateway only hands over calls of the service).
pub(super) fn is_grpc(req: &ClientRequest) -> bool {
    req.header("content-type").is_some_and(grpc::is_grpc)
}

/// An HTTP+JSON request for `op` (on the task `task_id`, for a task operation).
fn route_rest(
    req: &ClientRequest,
    op: Op,
    task_id: String,
    base: &str,
    headers: &[(String, String)],
) -> Route {
    // v1.0 routes sit at the base, v0.3's under `v1/`; the header decides as in JSON-RPC.
    let header = version_header(req);
    let version = match header.map(header_major) {
        Some(Some(1)) => Version::V10,
        None | Some(Some(0)) if base.ends_with("/v1/") => Version::V03,
        _ => {
            let asked = Client::new(Transport::Rest, Version::V10, op, Value::Null);
            return needs_v10(&asked, header);
        }
    };
    let mut client = Client::new(Transport::Rest, version, op, Value::Null);
    let path = path_and_query(req);
    let request = with_headers(AgentRequest::post(path.clone(), json!({})), headers);
    // The body, or the HTTP+JSON error for one that is not JSON.
    let body = || -> Result<Value, (u16, Value)> {
        if req.body.trim_ascii().is_empty() {
            return Ok(json!({}));
        }
        let mut body: Value = serde_json::from_slice(req.body)
            .map_err(|e| rest_error(PARSE_ERROR, &format!("Invalid JSON body: {e}"), None))?;
        camel_case_fields(&mut body);
        Ok(body)
    };
    match op {
        Op::Send | Op::Stream => {
            let params = match body() {
                Ok(params @ Value::Object(_)) => params,
                Ok(_) => {
                    return ParamError::new("", "The body must be a JSON object.").reply(&client)
                }
                Err(error) => return reply(error),
            };
            send_route(&client, &path, headers, &params, op == Op::Stream)
        }
        Op::Get => {
            client.history_length = req
                .query_param("historyLength")
                .and_then(|n| n.parse().ok());
            task_route(op, task_id, &client, req, request)
        }
        Op::Cancel => match body() {
            Ok(_) => task_route(op, task_id, &client, req, request),
            Err(error) => reply(error),
        },
        Op::Subscribe => task_route(op, task_id, &client, req, request),
    }
}

// ---------------------------------------------------------------------------------------
// Methods the agent answers, scoped to the caller's account
// ---------------------------------------------------------------------------------------

/// How a method Tether forwards is scoped: a listing of tasks keeps the caller's own; a
/// push-notification config method names one task, which must be the caller's.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Scope {
    Listing,
    /// Where the params name the task: v1.0's `taskId`; v0.3's set has `taskId`, its get,
    /// list and delete `id`.
    Task(&'static str),
}

/// The scoped methods, by JSON-RPC name (v1.0's are the gRPC service's too).
#[rustfmt::skip]
const SCOPED_METHODS: &[(&str, Version, Scope)] = &[
    ("ListTasks",                          Version::V10, Scope::Listing),
    ("tasks/list",                         Version::V03, Scope::Listing),
    ("CreateTaskPushNotificationConfig",   Version::V10, Scope::Task("taskId")),
    ("GetTaskPushNotificationConfig",      Version::V10, Scope::Task("taskId")),
    ("ListTaskPushNotificationConfigs",    Version::V10, Scope::Task("taskId")),
    ("DeleteTaskPushNotificationConfig",   Version::V10, Scope::Task("taskId")),
    ("tasks/pushNotificationConfig/set",    Version::V03, Scope::Task("taskId")),
    ("tasks/pushNotificationConfig/get",    Version::V03, Scope::Task("id")),
    ("tasks/pushNotificationConfig/list",   Version::V03, Scope::Task("id")),
    ("tasks/pushNotificationConfig/delete", Version::V03, Scope::Task("id")),
];

fn scoped_method(method: &str) -> Option<(Version, Scope)> {
    SCOPED_METHODS
        .iter()
        .find(|(name, _, _)| *name == method)
        .map(|&(_, version, scope)| (version, scope))
}

/// `request` to the agent, scoped: a listing is filtered to the caller's tasks; a task's
/// push configs are asked for only when the task is the caller's, and otherwise the task
/// is not found, as `GetTask` says it.
fn scoped_forward(client: &Client, scope: Scope, params: &Value, request: AgentRequest) -> Route {
    match scope {
        Scope::Listing => Route::ForwardListing(request),
        Scope::Task(field) => match params.get(field).and_then(Value::as_str) {
            Some(task_id) if !task_id.is_empty() => {
                let mut unowned = request.clone();
                if let Some(params) = unowned.body.as_mut().map(|b| &mut b["params"]) {
                    params[field] = json!(UNOWNED_TASK);
                }
                Route::ForwardOwned {
                    agent_ref: task_id.to_owned(),
                    request,
                    unowned,
                    not_found: task_not_found(client),
                }
            }
            _ => ParamError::new(field, "Field is required.").reply(client),
        },
    }
}

/// An HTTP+JSON path `…/tasks/{id}/…` naming the task `task_id` instead.
fn with_task(path: &str, task_id: &str) -> String {
    let Some(i) = path.rfind("/tasks/") else {
        return path.to_owned();
    };
    let start = i + "/tasks/".len();
    let end = path[start..].find('/').map_or(path.len(), |j| start + j);
    format!(
        "{}{}{}",
        &path[..start],
        encode_segment(task_id),
        &path[end..]
    )
}

/// An HTTP+JSON request Tether forwards scoped: `GET …/tasks` (a listing), or a task's
/// `…/tasks/{id}/pushNotificationConfigs[/{config}]`, with the task's id.
fn rest_scoped(method: &str, path: &str) -> Option<Option<String>> {
    if method == "GET" && path.trim_end_matches('/').ends_with("/tasks") {
        return Some(None);
    }
    if !matches!(method, "GET" | "POST" | "DELETE") {
        return None;
    }
    let i = path.rfind("/tasks/")?;
    let rest = &path[i + "/tasks/".len()..];
    let (task_id, configs) = rest.split_once('/')?;
    let config_path = configs.strip_prefix("pushNotificationConfigs")?;
    let ok = match config_path {
        "" | "/" => matches!(method, "GET" | "POST"),
        named => {
            let named = named.strip_prefix('/')?;
            !named.is_empty() && !named.contains('/') && matches!(method, "GET" | "DELETE")
        }
    };
    (ok && !task_id.is_empty()).then(|| Some(decode_segment(task_id)))
}

/// A scoped HTTP+JSON request: forwarded as it came (method, path and query, body).
fn route_rest_scoped(
    req: &ClientRequest,
    task_id: Option<String>,
    headers: &[(String, String)],
) -> Route {
    let version = match version_header(req).map(header_major) {
        Some(Some(1)) => Version::V10,
        _ if req.path.contains("/v1/") => Version::V03,
        _ => Version::V10,
    };
    let client = Client::new(Transport::Rest, version, Op::Get, Value::Null);
    let body = match req.body.trim_ascii() {
        [] => None,
        bytes => match serde_json::from_slice::<Value>(bytes) {
            Ok(body) => Some(body),
            Err(e) => {
                let message = format!("Invalid JSON body: {e}");
                return reply(rest_error(PARSE_ERROR, &message, None));
            }
        },
    };
    let method = match req.method {
        "POST" => "POST",
        "DELETE" => "DELETE",
        _ => "GET",
    };
    let request = with_headers(
        AgentRequest {
            method,
            path: path_and_query(req),
            headers: Vec::new(),
            body,
            grpc: None,
        },
        headers,
    );
    match task_id {
        None => Route::ForwardListing(request),
        Some(agent_ref) => {
            let mut unowned = request.clone();
            unowned.path = with_task(&unowned.path, UNOWNED_TASK);
            Route::ForwardOwned {
                agent_ref,
                request,
                unowned,
                not_found: task_not_found(&client),
            }
        }
    }
}

/// A get, cancel or resubscribe, answered from the log; a task the caller's account has
/// no run for is not found, as the agent says it. `request`: the client's request as it
/// goes to the agent, for a cancel the agent answers (`Route::Cancel`).
fn task_route(
    op: Op,
    agent_ref: String,
    client: &Client,
    req: &ClientRequest,
    request: AgentRequest,
) -> Route {
    let not_found = task_not_found(client);
    let client = client.to_value();
    match op {
        Op::Get => Route::Get {
            agent_ref,
            client,
            not_found,
        },
        Op::Cancel => Route::Cancel {
            agent_ref,
            client,
            not_found,
            ask_agent: Some(request),
        },
        _ => Route::Subscribe {
            agent_ref,
            last_event_id: req.last_event_id(),
            client,
            not_found,
        },
    }
}

// ---------------------------------------------------------------------------------------
// Replies
// ---------------------------------------------------------------------------------------

fn reply((status, body): (u16, Value)) -> Route {
    Route::Reply { status, body }
}

/// A JSON-RPC error before Tether knows what the request is (it travels in a 200).
fn rpc_reply(id: &Value, code: i64, message: &str) -> Route {
    reply((200, rpc_error(id, code, message, None)))
}

fn version_message(actual: &str, expected: Version) -> String {
    format!(
        "A2A version '{actual}' is not supported by this handler. Expected version '{}'.",
        expected.as_str()
    )
}

/// The SDK's refusal of a v1.0 request without `A2A-Version: 1.x`.
fn needs_v10(client: &Client, header: Option<&str>) -> Route {
    let message = version_message(header.unwrap_or("0.3"), Version::V10);
    let data = json!([error_info("VERSION_NOT_SUPPORTED", json!({}))]);
    reply(client.error(VERSION_NOT_SUPPORTED, &message, Some(data)))
}

// ---------------------------------------------------------------------------------------
// Paths and headers
// ---------------------------------------------------------------------------------------

/// An HTTP+JSON operation: what it is, the task it names (empty for a send), and the REST
/// base path before it (`/rest/`, `/rest/v1/`).
fn rest_op<'p>(method: &str, path: &'p str) -> Option<(Op, String, &'p str)> {
    if method == "POST" {
        for (suffix, op) in [("message:send", Op::Send), ("message:stream", Op::Stream)] {
            if let Some(base) = path.strip_suffix(suffix) {
                return base.ends_with('/').then_some((op, String::new(), base));
            }
        }
    }
    let i = path.rfind("/tasks/")?;
    let (base, rest) = (&path[..=i], &path[i + "/tasks/".len()..]);
    let (op, id) = match rest.rsplit_once(':') {
        None => (Op::Get, rest),
        Some((id, "cancel")) => (Op::Cancel, id),
        Some((id, "subscribe")) => (Op::Subscribe, id),
        Some(_) => return None,
    };
    let method_ok = match op {
        Op::Get => method == "GET",
        Op::Cancel => method == "POST",
        _ => matches!(method, "GET" | "POST"),
    };
    (method_ok && !id.is_empty() && !rest.contains('/')).then(|| (op, decode_segment(id), base))
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

/// The client's protocol headers, to send on to the agent.
fn protocol_headers(req: &ClientRequest) -> Vec<(String, String)> {
    PROTOCOL_HEADERS
        .iter()
        .filter_map(|name| req.header(name).map(|v| (name.to_string(), v.to_owned())))
        .collect()
}

pub(super) fn with_headers(
    mut request: AgentRequest,
    headers: &[(String, String)],
) -> AgentRequest {
    for (name, value) in headers {
        request = request.with_header(name, value);
    }
    request
}

/// The `A2A-Version` header, when the client sent one.
fn version_header<'r>(req: &'r ClientRequest) -> Option<&'r str> {
    req.header(VERSION_HEADER)
        .map(str::trim)
        .filter(|h| !h.is_empty())
}

/// The major version an `A2A-Version` header names (`"1.0"` → 1).
fn header_major(header: &str) -> Option<u64> {
    header.trim().split('.').next()?.parse().ok()
}

/// HTTP+JSON bodies are protobuf JSON, where a field may be spelled in snake_case as in
/// the .proto (`message_id`, a2a-sdk's v0.3 client does) or in lowerCamelCase: names are
/// brought to the camelCase the rest of the adapter reads. Free-form values (`metadata`,
/// a data part's `data`) are the user's and stay as they are.
fn camel_case_fields(value: &mut Value) {
    match value {
        Value::Object(map) => {
            let keys: Vec<String> = map.keys().filter(|k| k.contains('_')).cloned().collect();
            for key in keys {
                let camel = to_camel(&key);
                if !map.contains_key(&camel) {
                    if let Some(v) = map.remove(&key) {
                        map.insert(camel, v);
                    }
                }
            }
            for (key, v) in map.iter_mut() {
                if !matches!(key.as_str(), "metadata" | "data") {
                    camel_case_fields(v);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(camel_case_fields),
        _ => {}
    }
}

fn to_camel(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper = false;
    for c in name.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}
