//! Test fixtures shared by the ADK adapter's tests: bodies captured from a real
//! `adk api_server`, and requests, turns and log events to feed the adapter.

use chrono::{TimeZone, Utc};
use serde_json::{json, Value};
use session_log::{Event, EventType, NewEvent};

use super::AdkSurface;
use crate::item::Item;
use crate::surface::{ClientRequest, Route, Surface};
use crate::turn::TurnRequest;
use crate::upstream::{AgentRequest, TurnCall};

// Bodies captured from google-adk 2.13.0 `adk api_server` (see /tmp/wire).

/// `adk_07_run_turn1.http`.
pub const RUN_TURN1: &str = r#"[{"content":{"parts":[{"text":"You said: My project is named zebra42."}],"role":"model"},"finishReason":"STOP","usageMetadata":{"candidatesTokenCount":7,"promptTokenCount":19,"totalTokenCount":26},"invocationId":"e-0b366c9a-36e7-4dee-99b7-52508e5cbe43","author":"assistant","actions":{"stateDelta":{},"artifactDelta":{},"requestedAuthConfigs":{},"requestedToolConfirmations":{}},"nodeInfo":{"path":"assistant@1"},"id":"f5659ecf-1927-4097-9cf1-f03973698d67","timestamp":1796221359.734756}]"#;

/// `adk_16_run_sse_streaming_true_slow.http`.
pub const SSE_SLOW: &str = r#"data: {"content":{"parts":[{"text":"w1 "}],"role":"model"},"partial":true,"invocationId":"e-e1acd8e9-7f69-48e1-afb1-577a53b745f8","author":"assistant","actions":{"stateDelta":{},"artifactDelta":{},"requestedAuthConfigs":{},"requestedToolConfirmations":{}},"nodeInfo":{"path":"assistant@1"},"id":"61793950-e704-47aa-8339-61e07b58261a","timestamp":1796221360.2725186}

data: {"content":{"parts":[{"text":"w2 "}],"role":"model"},"partial":true,"invocationId":"e-e1acd8e9-7f69-48e1-afb1-577a53b745f8","author":"assistant","actions":{"stateDelta":{},"artifactDelta":{},"requestedAuthConfigs":{},"requestedToolConfirmations":{}},"nodeInfo":{"path":"assistant@1"},"id":"61793950-e704-47aa-8339-61e07b58261a","timestamp":1796221360.4294786}

data: {"content":{"parts":[{"text":"w3 "}],"role":"model"},"partial":true,"invocationId":"e-e1acd8e9-7f69-48e1-afb1-577a53b745f8","author":"assistant","actions":{"stateDelta":{},"artifactDelta":{},"requestedAuthConfigs":{},"requestedToolConfirmations":{}},"nodeInfo":{"path":"assistant@1"},"id":"61793950-e704-47aa-8339-61e07b58261a","timestamp":1796221360.5805273}

data: {"content":{"parts":[{"text":"w4 "}],"role":"model"},"partial":true,"invocationId":"e-e1acd8e9-7f69-48e1-afb1-577a53b745f8","author":"assistant","actions":{"stateDelta":{},"artifactDelta":{},"requestedAuthConfigs":{},"requestedToolConfirmations":{}},"nodeInfo":{"path":"assistant@1"},"id":"61793950-e704-47aa-8339-61e07b58261a","timestamp":1796221360.7307417}

data: {"content":{"parts":[{"text":"w1 w2 w3 w4 "}],"role":"model"},"partial":false,"finishReason":"STOP","usageMetadata":{"candidatesTokenCount":4,"promptTokenCount":34,"totalTokenCount":38},"invocationId":"e-e1acd8e9-7f69-48e1-afb1-577a53b745f8","author":"assistant","actions":{"stateDelta":{},"artifactDelta":{},"requestedAuthConfigs":{},"requestedToolConfirmations":{}},"nodeInfo":{"path":"assistant@1"},"id":"61793950-e704-47aa-8339-61e07b58261a","timestamp":1796221360.8810155}

"#;

/// `adk_39_run_sse_llm_error.http`.
pub const SSE_LLM_ERROR: &str = r#"data: {"errorCode":"InternalServerError","errorMessage":"Error code: 500 - fake failure","invocationId":"e-24184d5d-c325-4148-be9c-7707cd113bb6","author":"assistant","actions":{"stateDelta":{},"artifactDelta":{},"requestedAuthConfigs":{},"requestedToolConfirmations":{}},"nodeInfo":{"path":"assistant@1"},"id":"6cfd4578-49ce-4d77-af90-fde7a679ad21","timestamp":1796221398.406569}

data: {"error": "InternalServerError: Error code: 500 - fake failure", "error_details": {"error_type": "InternalServerError", "error_message": "Error code: 500 - fake failure", "timestamp": 1796221398.422432}}

"#;

/// `adk_12_run_unknown_session.http`.
pub const RUN_UNKNOWN_SESSION: &str = r#"{"detail":"Session not found: no-such-session"}"#;

/// `adk_11_list_sessions.http`.
pub const LIST_SESSIONS: &str = r#"[{"id":"s-camel","appName":"adk_agent","userId":"u1","state":{},"events":[],"lastUpdateTime":1796221359.1136792},{"id":"bdf105b6-a7fe-4de3-ac00-1824191e29c0","appName":"adk_agent","userId":"u1","state":{},"events":[],"lastUpdateTime":1796221359.1156495},{"id":"1c0374db-2d8b-493e-a06c-6048867925ed","appName":"adk_agent","userId":"u1","state":{},"events":[],"lastUpdateTime":1796221359.1173806},{"id":"s-run","appName":"adk_agent","userId":"u1","state":{},"events":[],"lastUpdateTime":1796221360.0770285}]"#;

pub const RUN_ID: &str = "run_1";

pub fn request<'a>(
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

pub fn route(method: &str, path: &str, body: &str, account: &str) -> Route {
    AdkSurface.route(&request(method, path, body.as_bytes(), account))
}

pub fn run_turn(path: &str, body: Value) -> TurnRequest {
    match route("POST", path, &body.to_string(), "acct") {
        Route::Run(turn) => turn,
        other => panic!("expected a run, got {other:?}"),
    }
}

pub fn forward(method: &str, path: &str, body: &str, account: &str) -> AgentRequest {
    match route(method, path, body, account) {
        Route::Forward(req) => req,
        other => panic!("expected a forward, got {other:?}"),
    }
}

pub fn reply(r: Route) -> (u16, Value) {
    match r {
        Route::Reply { status, body } => (status, body),
        other => panic!("expected a reply, got {other:?}"),
    }
}

/// A `/run` body of user `u1` in app `adk_agent`.
pub fn body(sid: &str, text: &str) -> Value {
    json!({"app_name": "adk_agent", "user_id": "u1", "session_id": sid,
           "new_message": {"role": "user", "parts": [{"text": text}]}})
}

/// A turn of account `acct` in session `s-run`, run `RUN_ID`.
pub fn call<'a>(turn: &'a TurnRequest, history: &'a [Item], events: &'a [Event]) -> TurnCall<'a> {
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

pub fn event(seq: i64, new: NewEvent) -> Event {
    Event::committed(new, seq, Utc.timestamp_opt(1_700_000_000, 0).unwrap())
}

/// The marker the gateway appends once the agent confirms the client deleted `s-run`.
pub fn deleted_marker() -> NewEvent {
    NewEvent::new(
        "acct",
        "s-run",
        EventType::Compaction,
        json!({"reason": "session_deleted"}),
    )
}
