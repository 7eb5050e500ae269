//! A2A (Agent2Agent): the client surface for A2A clients and the upstream adapter for
//! A2A agents, over the transports (JSON-RPC, HTTP+JSON and v1.0's gRPC) and both
//! protocol versions (0.3 and 1.0) that a2a-sdk 1.x serves.
//!
//! An A2A agent keeps its conversations itself (its `contextId` is Tether's session), so
//! Tether forwards the client's own request, addressed to the session, and records every
//! result the agent sends verbatim as an `agent_event`. Answering an A2A client is
//! replaying those frames; a task's state (`tasks/get`, a cancel's answer, a non-streaming
//! send) is folded from them. That is what lets a stream reconnect, `tasks/get` and
//! cancel keep working after the agent forgot the task, and lets Tether put a lost
//! conversation back into the agent from the log before the next turn.
//!
//! The wire has three spellings of the same objects (see `wire::Dialect`). Frames are
//! recorded in the agent's spelling and converted through v1.0's form only when a client
//! that speaks another one reads them.
//!
//! - `client`: who is asking (transport, version, dialect) and how they are answered.
//! - `routes`: which requests are A2A's and where each goes; `message`: a send's turn,
//!   read from the client's message.
//! - `wire`: the three spellings, and frames converted through v1.0's form.
//! - `task`: frames folded into the task, as the agent's own task store folds them.
//! - `render`: the log replayed to the client: streams, send answers, task snapshots.
//! - `card`: agent cards pointed at Tether.
//! - `proto`: the gRPC service and its messages to and from their JSON form (a gRPC call
//!   is routed as the v1.0 JSON-RPC method of the same name).
//! - `upstream`: requests to the agent, in the client's transport or over gRPC; `parser`:
//!   reading its answer.

mod card;
mod client;
mod message;
mod parser;
mod proto;
mod render;
mod routes;
mod task;
mod upstream;
mod wire;

#[cfg(test)]
mod tests;

use serde_json::{json, Value};
use session_log::Event;

use crate::grpc::GrpcService;
use crate::sse::SseFrame;
use crate::surface::{ClientRequest, Numbered, Refused, Route, RunInfo, StreamRenderer, Surface};
use crate::turn::{InputError, TurnRequest};

use self::client::{rpc_error, INTERNAL_ERROR, INVALID_REQUEST};

use self::proto::A2aGrpc;

pub use self::card::AdvertiseGrpc;

/// Whether a frame the agent sent leaves its task waiting for the user
/// (`input-required`, `auth-required`): `{"kind": "input"|"auth"|"approval", "request_id":
/// <its question's message id, else the task id>, "task_id", "context_id", "tool",
/// "arguments", "question"}`, the tool call being a data part of the status message that
/// names one; `{"kind": "working"}` when the task works again (see `crate::approval`).
pub(crate) fn task_wait(frame: &Value) -> Option<Value> {
    let canon = wire::canonical(frame)?;
    let (task_id, object) = match (canon.get("task"), canon.get("statusUpdate")) {
        (Some(task), _) => (task["id"].as_str()?, task),
        (None, Some(update)) => (update["taskId"].as_str()?, update),
        _ => return None,
    };
    let state = wire::short_state(wire::state_of(object));
    let kind = match state.as_str() {
        "input-required" => "input",
        "auth-required" => "auth",
        "working" | "submitted" => return Some(json!({ "kind": "working" })),
        _ => return None,
    };
    let parts = &object["status"]["message"]["parts"];
    // A tool call the agent asks to approve: a data part naming it (an ADK-based agent's
    // `adk_request_confirmation` names the original call in its arguments).
    let call = parts.as_array().and_then(|parts| {
        parts.iter().find_map(|p| {
            let data = p.get("data")?;
            // v1.0 nests a data part's object once more.
            let data = data.get("data").filter(|d| d.is_object()).unwrap_or(data);
            let call = match data.get("name") {
                Some(_) => data,
                None => data
                    .get("functionCall")
                    .or_else(|| data.get("function_call"))?,
            };
            match call["name"].as_str() {
                Some(crate::waited::ADK_CONFIRMATION) => call["args"]
                    .get("originalFunctionCall")
                    .or_else(|| call["args"].get("original_function_call"))
                    .cloned(),
                Some(_) => Some(call.clone()),
                None => None,
            }
        })
    });
    let tool = call.as_ref().and_then(|c| c.get("name")).cloned();
    let arguments = call
        .as_ref()
        .and_then(|c| c.get("args").or_else(|| c.get("arguments")))
        .cloned();
    let question = task::parts_text(parts);
    let kind = if tool.is_some() && kind == "input" {
        "approval"
    } else {
        kind
    };
    // The question's own message id names this request (a task may ask again after an
    // answer); the task id when the agent sent no message.
    let request_id = object["status"]["message"]["messageId"]
        .as_str()
        .unwrap_or(task_id);
    Some(json!({
        "kind": kind,
        "request_id": request_id,
        "task_id": task_id,
        "context_id": object["contextId"],
        "tool": tool,
        "arguments": arguments,
        "question": (!question.is_empty()).then_some(question),
    }))
}

/// The A2A client surface; its cards list Tether's gRPC interface as `advertise_grpc`
/// says.
pub struct A2aSurface {
    advertise_grpc: AdvertiseGrpc,
}

impl A2aSurface {
    pub const AUTO: A2aSurface = A2aSurface {
        advertise_grpc: AdvertiseGrpc::Auto,
    };
    pub const ALWAYS: A2aSurface = A2aSurface {
        advertise_grpc: AdvertiseGrpc::Always,
    };
    pub const NEVER: A2aSurface = A2aSurface {
        advertise_grpc: AdvertiseGrpc::Never,
    };
}

/// The A2A agent adapter. `JSONRPC` calls the agent in the client's own HTTP transport
/// (JSON-RPC for gRPC clients); `GRPC` calls its `lf.a2a.v1.A2AService`, and
/// `JSONRPC_V03` its v0.3 JSON-RPC at `/`, whatever the client speaks.
pub struct A2aUpstream {
    grpc: bool,
    v03: bool,
}

impl A2aUpstream {
    pub const JSONRPC: A2aUpstream = A2aUpstream {
        grpc: false,
        v03: false,
    };
    pub const GRPC: A2aUpstream = A2aUpstream {
        grpc: true,
        v03: false,
    };
    pub const JSONRPC_V03: A2aUpstream = A2aUpstream {
        grpc: false,
        v03: true,
    };
}

impl Surface for A2aSurface {
    fn grpc(&self) -> Option<&'static dyn GrpcService> {
        Some(&A2aGrpc)
    }

    fn claims(&self, method: &str, path: &str) -> bool {
        routes::claims(method, path)
    }

    fn route(&self, req: &ClientRequest) -> Route {
        routes::route(req)
    }

    /// For callers holding only a JSON-RPC body: the version is the one its method
    /// belongs to.
    fn parse_request(
        &self,
        body: &[u8],
        _session_header: Option<&str>,
    ) -> Result<TurnRequest, InputError> {
        routes::parse_request(body)
    }

    fn stream_renderer(&self, run: &RunInfo) -> Box<dyn StreamRenderer> {
        Numbered::boxed(render::A2aRenderer::new(run))
    }

    fn final_body(&self, run: &RunInfo, events: &[Event]) -> Value {
        render::final_body(run, events)
    }

    fn final_response(&self, run: &RunInfo, events: &[Event]) -> (u16, Value) {
        render::final_response(run, events)
    }

    fn snapshot(&self, run: &RunInfo, events: &[Event]) -> Value {
        render::snapshot(run, events).1
    }

    fn snapshot_response(&self, run: &RunInfo, events: &[Event]) -> (u16, Value) {
        render::snapshot(run, events)
    }

    fn task_waits(&self, run: &RunInfo, events: &[Event]) -> bool {
        render::task_waits(run, events)
    }

    fn waiting_frame(&self, run: &RunInfo, events: &[Event]) -> Option<SseFrame> {
        render::waiting_frame(run, events)
    }

    fn subscribe_refusal(
        &self,
        run: &RunInfo,
        events: &[Event],
        resuming: bool,
    ) -> Option<(u16, Value)> {
        render::subscribe_refusal(run, events, resuming)
    }

    /// Tether's attachment checks refuse a type as the SDK does
    /// (`ContentTypeNotSupportedError`), in the client's binding.
    fn refusal(&self, client: &Value, refused: &Refused<'_>) -> Option<(u16, Value)> {
        client::refusal(&client::Client::from_value(client), refused)
    }

    /// Agent cards name the agent's own address; clients must come back through Tether.
    /// A gRPC client's forwarded call went to the agent as JSON-RPC: it gets the result,
    /// or the error as a status.
    fn rewrite_forwarded(&self, req: &ClientRequest, public_url: &str, body: Value) -> Value {
        let body = card::rewrite_forwarded(body, public_url, self.advertise_grpc);
        if !routes::is_grpc(req) {
            return body;
        }
        match (body.get("result"), body.get("error")) {
            (Some(result), _) => result.clone(),
            (None, Some(error)) => {
                let code = error["code"].as_i64().unwrap_or(INTERNAL_ERROR);
                let message = error["message"].as_str().unwrap_or("The agent failed.");
                client::grpc_error(
                    code,
                    message,
                    error.get("data").filter(|d| d.is_array()).cloned(),
                )
                .1
            }
            _ => body,
        }
    }

    /// `ListTasks`' tasks: in the JSON-RPC result, or bare (HTTP+JSON, and a gRPC
    /// client's answer once rewritten).
    fn listed_runs<'b>(&self, body: &'b mut Value) -> Option<&'b mut Vec<Value>> {
        let listing = match body.get("result").is_some() {
            true => body.get_mut("result")?,
            false => body,
        };
        listing.get_mut("tasks")?.as_array_mut()
    }

    fn listed_ref<'v>(&self, entry: &'v Value) -> Option<&'v str> {
        entry.get("id").and_then(Value::as_str)
    }

    /// `totalSize` counted the agent's tasks of every account: it now counts this page's,
    /// the caller's. (A page may hold fewer than `pageSize` tasks; `nextPageToken` still
    /// leads on.)
    fn listing_scoped(&self, mut body: Value) -> Value {
        let kept = self.listed_runs(&mut body).map(|tasks| tasks.len());
        let listing = match body.get("result").is_some() {
            true => body.get_mut("result"),
            false => Some(&mut body),
        };
        if let (Some(Value::Object(listing)), Some(kept)) = (listing, kept) {
            if listing.contains_key("totalSize") {
                listing.insert("totalSize".into(), json!(kept));
            }
        }
        body
    }

    /// Tether's own errors, as a JSON-RPC error with what other surfaces say in `data`.
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
}
