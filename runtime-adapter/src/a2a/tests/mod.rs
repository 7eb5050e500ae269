//! The A2A adapter's tests, one file per module they test, with the helpers they share.
//! `captures` holds bodies recorded from real a2a-sdk agents.

mod captures;
mod card;
mod grpc;
mod parser;
mod render;
mod routes;
mod task;
mod upstream;
mod wire;

use serde_json::{json, Value};
use session_log::Event;

use super::A2aSurface;
use crate::item::Item;
use crate::surface::{ClientRequest, Route, Surface};
use crate::turn::TurnRequest;
use crate::upstream::TurnCall;

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
    A2aSurface::AUTO.route(&request(method, path, None, headers, bytes.as_bytes()))
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
