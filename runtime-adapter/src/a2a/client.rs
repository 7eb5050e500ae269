//! Who is asking: the transport, protocol version and dialect of a client's request, the
//! operation it names, and how that client is answered (results and errors in kind).

use serde_json::{json, Value};

use super::wire::Dialect;
use crate::surface::Refused;

// JSON-RPC 2.0 and A2A error codes.
pub(super) const PARSE_ERROR: i64 = -32700;
pub(super) const INVALID_REQUEST: i64 = -32600;
pub(super) const METHOD_NOT_FOUND: i64 = -32601;
pub(super) const INVALID_PARAMS: i64 = -32602;
pub(super) const INTERNAL_ERROR: i64 = -32603;
pub(super) const TASK_NOT_FOUND: i64 = -32001;
pub(super) const TASK_NOT_CANCELABLE: i64 = -32002;
pub(super) const UNSUPPORTED_OPERATION: i64 = -32004;
pub(super) const CONTENT_TYPE_NOT_SUPPORTED: i64 = -32005;
pub(super) const VERSION_NOT_SUPPORTED: i64 = -32009;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Transport {
    JsonRpc,
    Rest,
    /// `lf.a2a.v1.A2AService` (v1.0 only): results bare, as HTTP+JSON has them; errors as
    /// `google.rpc.Status` JSON, which the gateway's gRPC edge turns into the call's status.
    Grpc,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Version {
    V03,
    V10,
}

impl Version {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Version::V03 => "0.3",
            Version::V10 => "1.0",
        }
    }
}

/// An operation Tether takes part in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Op {
    Send,
    Stream,
    Get,
    Cancel,
    Subscribe,
}

/// What each operation is called: `(operation, v0.3 JSON-RPC method, v1.0 JSON-RPC
/// method, HTTP+JSON operation)`.
#[rustfmt::skip]
const METHODS: &[(Op, &str, &str, &str)] = &[
    (Op::Send,      "message/send",      "SendMessage",          "message:send"),
    (Op::Stream,    "message/stream",    "SendStreamingMessage", "message:stream"),
    (Op::Get,       "tasks/get",         "GetTask",              "get"),
    (Op::Cancel,    "tasks/cancel",      "CancelTask",           "cancel"),
    (Op::Subscribe, "tasks/resubscribe", "SubscribeToTask",      "subscribe"),
];

/// The version and operation of a JSON-RPC method.
pub(super) fn method_op(method: &str) -> Option<(Version, Op)> {
    METHODS.iter().find_map(|&(op, v03, v10, _)| {
        if method == v03 {
            Some((Version::V03, op))
        } else if method == v10 {
            Some((Version::V10, op))
        } else {
            None
        }
    })
}

/// What a client of `transport` and `version` calls `op`: its JSON-RPC method, or the
/// HTTP+JSON operation.
pub(super) fn method_name(transport: Transport, version: Version, op: Op) -> &'static str {
    let &(_, v03, v10, rest) = METHODS
        .iter()
        .find(|m| m.0 == op)
        .expect("every operation has its names");
    match (transport, version) {
        (Transport::Rest, _) => rest,
        (Transport::JsonRpc, Version::V03) => v03,
        // gRPC is A2A v1.0's only; its methods have v1.0's JSON-RPC names.
        (Transport::Grpc, _) | (Transport::JsonRpc, Version::V10) => v10,
    }
}

/// What the surface keeps from a client's request to answer it in kind: `RunInfo::client`.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Client {
    pub(super) transport: Transport,
    pub(super) version: Version,
    /// The JSON-RPC method, or for HTTP+JSON the operation (`message:send`, `get`, …).
    pub(super) method: String,
    /// The JSON-RPC request id (`null` for HTTP+JSON).
    id: Value,
    /// `historyLength` of a get: how much of the task's history to show.
    pub(super) history_length: Option<i64>,
}

impl Client {
    pub(super) fn new(transport: Transport, version: Version, op: Op, id: Value) -> Self {
        Client {
            transport,
            version,
            method: method_name(transport, version, op).to_owned(),
            id,
            history_length: None,
        }
    }

    /// The operation the client asked for, whatever its spelling.
    pub(super) fn op(&self) -> Option<Op> {
        let method = self.method.as_str();
        METHODS
            .iter()
            .find(|&&(_, v03, v10, rest)| [v03, v10, rest].contains(&method))
            .map(|m| m.0)
    }

    pub(super) fn dialect(&self) -> Dialect {
        match (self.version, self.transport) {
            (Version::V10, _) | (_, Transport::Grpc) => Dialect::Proto,
            (Version::V03, Transport::JsonRpc) => Dialect::Kinded,
            (Version::V03, Transport::Rest) => Dialect::Proto03,
        }
    }

    pub(super) fn to_value(&self) -> Value {
        let mut v = json!({
            "transport": match self.transport {
                Transport::JsonRpc => "jsonrpc",
                Transport::Rest => "rest",
                Transport::Grpc => "grpc",
            },
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
    pub(super) fn from_value(v: &Value) -> Client {
        let s = |k: &str| v.get(k).and_then(Value::as_str);
        Client {
            transport: match s("transport") {
                Some("rest") => Transport::Rest,
                Some("grpc") => Transport::Grpc,
                _ => Transport::JsonRpc,
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
    pub(super) fn response(&self, result: Value) -> Value {
        match self.transport {
            Transport::JsonRpc => json!({ "jsonrpc": "2.0", "id": self.id, "result": result }),
            Transport::Rest | Transport::Grpc => result,
        }
    }

    /// An error as this client receives it, with its HTTP status (JSON-RPC errors travel
    /// in a 200).
    pub(super) fn error(&self, code: i64, message: &str, data: Option<Value>) -> (u16, Value) {
        match self.transport {
            Transport::JsonRpc => (200, rpc_error(&self.id, code, message, data)),
            Transport::Rest => rest_error(code, message, data),
            Transport::Grpc => grpc_error(code, message, data),
        }
    }

    /// How a run that ended with the error `code` (a run's error code: `agent_unreachable`,
    /// `a2a_error_-32001`, …) is reported to this client. A gRPC client is told the agent
    /// was unavailable when it was, so that it knows it may try again.
    pub(super) fn run_error(&self, code: &str, message: &str) -> (u16, Value) {
        match self.unavailable(code, message) {
            Some(error) => (503, error),
            None => self.error(rpc_code(code), message, None),
        }
    }

    /// For a gRPC client, the `UNAVAILABLE` error that ends its call when the run ended
    /// because the agent could not be reached or cut its answer off.
    pub(super) fn unavailable(&self, code: &str, message: &str) -> Option<Value> {
        (self.transport == Transport::Grpc && AGENT_UNAVAILABLE.contains(&code))
            .then(|| status_error(503, "UNAVAILABLE", message, None).1)
    }
}

/// Run error codes that say the agent could not be reached or its answer was cut off.
const AGENT_UNAVAILABLE: &[&str] = &[
    "agent_unreachable",
    "agent_connection_lost",
    "agent_closed_early",
    "gateway_shutdown",
    "run_lease_lost",
];

/// A turn Tether refused before it started, as the A2A error that names the reason: an
/// attachment type it does not take is `ContentTypeNotSupportedError`, any other
/// attachment refusal (too large, malformed) invalid params. A quota has no A2A error:
/// over HTTP+JSON and gRPC it is `RESOURCE_EXHAUSTED` with Tether's status (429 for
/// `sessions`, 413 for bytes); over JSON-RPC, an internal error (-32603) in a 200, as
/// every JSON-RPC error travels, whose `data` names it (v1.0: an `ErrorInfo` with reason
/// `QUOTA_EXCEEDED`; v0.3: Tether's `type`, `code` and `param`). Each names the quota.
pub(super) fn refusal(client: &Client, refused: &Refused<'_>) -> Option<(u16, Value)> {
    let message = refused.message;
    if refused.code == "quota_exceeded" {
        let info = error_info("QUOTA_EXCEEDED", json!({ "quota": refused.param }));
        return Some(match (client.transport, client.version) {
            (Transport::JsonRpc, Version::V10) => {
                client.error(INTERNAL_ERROR, message, Some(json!([info])))
            }
            (Transport::JsonRpc, Version::V03) => {
                let data = json!({ "type": "insufficient_quota", "code": refused.code,
                                   "param": refused.param });
                client.error(INTERNAL_ERROR, message, Some(data))
            }
            (Transport::Rest | Transport::Grpc, _) => status_error(
                refused.status,
                "RESOURCE_EXHAUSTED",
                message,
                Some(json!([info])),
            ),
        });
    }
    let (rpc, reason) = match refused.code {
        "unsupported_attachment_type" => (CONTENT_TYPE_NOT_SUPPORTED, "CONTENT_TYPE_NOT_SUPPORTED"),
        "attachment_too_large" | "invalid_attachment" => (INVALID_PARAMS, "INVALID_PARAMS"),
        _ => return None,
    };
    let data = (client.version == Version::V10).then(|| json!([error_info(reason, json!({}))]));
    Some(client.error(rpc, message, data))
}

pub(super) fn rpc_error(id: &Value, code: i64, message: &str, data: Option<Value>) -> Value {
    let mut error = json!({ "code": code, "message": message });
    if let Some(data) = data {
        error["data"] = data;
    }
    json!({ "jsonrpc": "2.0", "id": id, "error": error })
}

/// How a2a-sdk reports each A2A error (by JSON-RPC code) over HTTP+JSON and gRPC: HTTP
/// status, `google.rpc.Code` name, and the `ErrorInfo` reason its clients map back to the
/// error. Anything else is an internal error.
#[rustfmt::skip]
const ERRORS: &[(i64, u16, &str, &str)] = &[
    (TASK_NOT_FOUND,        404, "NOT_FOUND",           "TASK_NOT_FOUND"),
    (METHOD_NOT_FOUND,      404, "NOT_FOUND",           "METHOD_NOT_FOUND"),
    (TASK_NOT_CANCELABLE,   400, "FAILED_PRECONDITION", "TASK_NOT_CANCELABLE"),
    (-32003,                400, "FAILED_PRECONDITION", "PUSH_NOTIFICATION_NOT_SUPPORTED"),
    (UNSUPPORTED_OPERATION, 400, "FAILED_PRECONDITION", "UNSUPPORTED_OPERATION"),
    (CONTENT_TYPE_NOT_SUPPORTED, 400, "INVALID_ARGUMENT", "CONTENT_TYPE_NOT_SUPPORTED"),
    (-32006,                500, "INTERNAL",            "INVALID_AGENT_RESPONSE"),
    (-32007,                400, "FAILED_PRECONDITION", "EXTENDED_AGENT_CARD_NOT_CONFIGURED"),
    (-32008,                400, "FAILED_PRECONDITION", "EXTENSION_SUPPORT_REQUIRED"),
    (VERSION_NOT_SUPPORTED, 400, "FAILED_PRECONDITION", "VERSION_NOT_SUPPORTED"),
    (PARSE_ERROR,           400, "INVALID_ARGUMENT",    "INVALID_REQUEST"),
    (INVALID_REQUEST,       400, "INVALID_ARGUMENT",    "INVALID_REQUEST"),
    (INVALID_PARAMS,        400, "INVALID_ARGUMENT",    "INVALID_PARAMS"),
];

fn error_kind(code: i64) -> (u16, &'static str, &'static str) {
    ERRORS.iter().find(|e| e.0 == code).map_or(
        (500, "INTERNAL", "INTERNAL_ERROR"),
        |&(_, http, status, reason)| (http, status, reason),
    )
}

/// The JSON-RPC code of an error a gRPC agent reported: by its `ErrorInfo` reason, else
/// the first A2A error with its status (`NOT_FOUND`: task not found).
pub(super) fn rpc_code_of(status: &str, reason: Option<&str>) -> i64 {
    let by_reason = reason.and_then(|r| ERRORS.iter().find(|e| e.3 == r));
    by_reason
        .or_else(|| ERRORS.iter().find(|e| e.2 == status))
        .map_or(INTERNAL_ERROR, |e| e.0)
}

/// An HTTP+JSON error in the SDK's shape (`google.rpc.Status` JSON), from the JSON-RPC
/// code that names the same condition.
pub(super) fn rest_error(code: i64, message: &str, details: Option<Value>) -> (u16, Value) {
    let (http, status, _) = error_kind(code);
    status_error(http, status, message, details)
}

/// An error for a gRPC client: the status JSON of HTTP+JSON, with (unless `details` has
/// its own) the `ErrorInfo` reason a2a-sdk's gRPC client turns back into the error's class.
pub(super) fn grpc_error(code: i64, message: &str, details: Option<Value>) -> (u16, Value) {
    let reason = error_kind(code).2;
    let details = details.or_else(|| Some(json!([error_info(reason, json!({}))])));
    rest_error(code, message, details)
}

/// A gRPC call of a method the service does not have.
pub(super) fn unimplemented(message: &str) -> (u16, Value) {
    status_error(501, "UNIMPLEMENTED", message, None)
}

/// `{"error": google.rpc.Status JSON}` with the HTTP status it travels with.
fn status_error(http: u16, status: &str, message: &str, details: Option<Value>) -> (u16, Value) {
    let mut error = json!({ "code": http, "status": status, "message": message });
    if let Some(details) = details {
        error["details"] = details;
    }
    (http, json!({ "error": error }))
}

/// The `google.rpc.ErrorInfo` detail the SDK attaches to v1.0 errors.
pub(super) fn error_info(reason: &str, metadata: Value) -> Value {
    json!({
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": reason,
        "domain": "a2a-protocol.org",
        "metadata": metadata,
    })
}

/// The JSON-RPC code behind a run's error code (`a2a_error_-32001`, or an HTTP+JSON
/// agent's `a2a_error_404`).
pub(super) fn rpc_code(code: &str) -> i64 {
    match code
        .strip_prefix("a2a_error_")
        .and_then(|c| c.parse::<i64>().ok())
    {
        Some(c) if c < 0 => c,
        Some(404) => TASK_NOT_FOUND,
        _ => INTERNAL_ERROR,
    }
}
