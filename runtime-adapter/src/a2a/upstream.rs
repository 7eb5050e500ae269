//! Requests to the agent: the client's own send, addressed to the session, and what Tether
//! asks itself: whether the agent still knows the session, the earlier turns it forgot,
//! and the cancel of a task. They go in the client's own transport, or over gRPC to an
//! agent Tether calls over gRPC (then converted to v1.0 first).

use std::fmt::Write as _;

use serde_json::{json, Value};

use crate::grpc::{Code, Deframer, Frame, Status};
use crate::item::{Block, Item};
use crate::percent::encode_segment;
use crate::protocol::Protocol;
use crate::turn::TurnRequest;
use crate::upstream::{
    AgentRequest, Answer, Cancel, CardReader, Older, Probe, Reask, Restore, StreamParser, TurnCall,
    Upstream,
};
use crate::waited::waited;

use super::card::{grpc_address, relocated, speaks_only_v03};
use super::client::{
    method_name, rpc_code_of, Client, Op, Transport, Version, INTERNAL_ERROR, TASK_NOT_FOUND,
};
use super::message::message_key;
use super::parser::A2aParser;
use super::proto;
use super::routes::with_headers;
use super::wire::{message_from_v10, send_params_from_v10, send_params_to_v10, Dialect};
use super::A2aUpstream;

impl Upstream for A2aUpstream {
    fn protocol(&self) -> Protocol {
        Protocol::A2a
    }

    /// The client's own send, with the session as its `contextId` so that the agent's
    /// conversation and Tether's session are one.
    fn request(&self, call: &TurnCall) -> AgentRequest {
        self.sent(call.turn, call.run_id)
            .send(call.session_id, call.run_id, true)
    }

    fn parser(&self, _call: &TurnCall, content_type: &str) -> Box<dyn StreamParser> {
        if crate::grpc::is_grpc(content_type) {
            return Box::new(A2aParser::grpc());
        }
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
                let sent = self.sent(call.turn, call.run_id);
                Probe::Ask(sent.get_task(task, &format!("tether-probe-{}", call.run_id)))
            }
            None => Probe::Restore,
        }
    }

    /// HTTP 404 (HTTP+JSON), JSON-RPC `-32001 TaskNotFound` (the same code in v0.3 and
    /// v1.0), also when a stream carries it as its only event, or gRPC's `NOT_FOUND`.
    fn forgot(&self, status: u16, body: &[u8]) -> bool {
        if status == 404 {
            return true;
        }
        if let Some(status) = grpc_answer(body).and_then(|(_, status)| status) {
            return status.code == Code::NotFound;
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
    ///
    /// A turn that answers a tool approval the task was waiting on (kagent's, an ADK
    /// confirmation inside `input-required`) needs the agent to hold the call again: the
    /// earlier turns are put back up to the run that asked, that run's message is sent
    /// again, and the turn continues the task the agent asks in anew (`readdress`). A
    /// question (`input`) needs none of that: its answer is text the agent reads with the
    /// conversation.
    fn restore(&self, call: &TurnCall) -> Option<Restore> {
        let sent = self.sent(call.turn, call.run_id);
        let waited = waited(call).filter(|w| {
            w.action["kind"] == "approval"
                && w.action["task_id"].as_str().is_some()
                && w.action["task_id"].as_str() == sent.task_id()
        });
        let history = waited.as_ref().map_or(call.history, |w| w.before);
        let mut before = Vec::new();
        if !history.is_empty() {
            before.push(sent.send_text(
                call.session_id,
                &format!("tether-restore-{}", call.run_id),
                &format!("{}-restore", call.run_id),
                &transcript(history),
            ));
        }
        let reask = waited.map(|w| {
            let text: Vec<String> = w.input.iter().map(Item::text).collect();
            Reask {
                request: sent.send_text(
                    call.session_id,
                    &format!("tether-reask-{}", call.run_id),
                    &format!("{}-reask", call.run_id),
                    &text.join("\n"),
                ),
                pending: w.action.clone(),
            }
        });
        Some(Restore {
            before,
            request: sent.send(call.session_id, call.run_id, false),
            reask,
        })
    }

    /// The turn's send, continuing the task the agent asked in anew.
    fn readdress(&self, call: &TurnCall, asked: &Value) -> Option<AgentRequest> {
        let task = asked["task_id"].as_str()?;
        Some(self.sent(call.turn, call.run_id).in_task(task).send(
            call.session_id,
            call.run_id,
            true,
        ))
    }

    fn cancel(&self, turn: &TurnRequest) -> Option<Cancel> {
        // A cancel names only the task: the message is not kept.
        let sent = self.addressed(turn);
        Some(Box::new(move |agent_ref| {
            let id = format!("tether-cancel-{}", uuid::Uuid::new_v4().simple());
            sent.cancel_task(agent_ref, &id)
        }))
    }

    /// The agent's card (at `upstream`, over HTTP) names its gRPC interface and the URL
    /// of each HTTP binding and version; an agent whose card offers only v0.3 is called
    /// as `JSONRPC_V03` unless configuration chose how it is called.
    fn card_reader(&self) -> Option<CardReader> {
        let older = Older {
            only: speaks_only_v03,
            upstream: &A2aUpstream::JSONRPC_V03,
        };
        Some(CardReader {
            request: AgentRequest::get("/.well-known/agent-card.json"),
            grpc_address: self
                .grpc
                .then_some(grpc_address as fn(&Value) -> Option<String>),
            relocate: relocated,
            older: (!self.grpc && !self.v03).then_some(older),
        })
    }

    /// A v1.0 JSON-RPC request (what the surface forwards for gRPC clients and v1.0
    /// JSON-RPC ones) becomes the gRPC call of the same name; anything else still goes
    /// over HTTP to `upstream`.
    fn forwarded(&self, request: &AgentRequest) -> AgentRequest {
        let Some((method, params)) = self.grpc.then(|| as_grpc_call(request)).flatten() else {
            return request.clone();
        };
        let message = proto::encode(&method.input(), params).unwrap_or_default();
        let mut call = AgentRequest::grpc(proto::path(method.name()), message);
        call.headers = request.headers.clone();
        call
    }

    /// A gRPC answer read back as the JSON-RPC response the original request asked for.
    fn forwarded_answer(&self, original: &AgentRequest, answer: Answer) -> Answer {
        let Some((method, _)) = self.grpc.then(|| as_grpc_call(original)).flatten() else {
            return answer;
        };
        let id = original
            .body
            .as_ref()
            .map_or(Value::Null, |b| b["id"].clone());
        let (message, status) = grpc_answer(&answer.2).unwrap_or((None, None));
        let status = status.unwrap_or_else(|| Status::new(Code::Unknown, "no status"));
        let result = message.map(|m| proto::decode(&method.output(), &m));
        let body = match (status.code, result) {
            (Code::Ok, Some(Ok(result))) => json!({ "jsonrpc": "2.0", "id": id, "result": result }),
            (Code::Ok, Some(Err(e))) => rpc_failure(&id, INTERNAL_ERROR, &e),
            (Code::Ok, None) => rpc_failure(&id, INTERNAL_ERROR, "the agent sent no answer"),
            (code, _) => {
                // The agent's details (its ErrorInfo) travel on, so the client gets them too.
                let details = status
                    .details
                    .as_deref()
                    .and_then(proto::status_details_json);
                let reason = details
                    .iter()
                    .flat_map(|d| d.as_array().into_iter().flatten())
                    .find_map(|d| d["reason"].as_str());
                let mut failure =
                    rpc_failure(&id, rpc_code_of(code.name(), reason), &status.message);
                if let Some(details) = details {
                    failure["error"]["data"] = details;
                }
                failure
            }
        };
        let body = serde_json::to_vec(&body).unwrap_or_default();
        (200, "application/json".into(), body)
    }
}

/// The method and params of a v1.0 JSON-RPC request for a method the gRPC service has.
fn as_grpc_call(request: &AgentRequest) -> Option<(prost_reflect::MethodDescriptor, &Value)> {
    let body = request.body.as_ref()?;
    let name = body["method"].as_str()?;
    Some((proto::method(&proto::path(name))?, &body["params"]))
}

fn rpc_failure(id: &Value, code: i64, message: &str) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } })
}

/// A gRPC answer read whole: its (last) message and its status, `None` for a body that
/// is not gRPC frames.
fn grpc_answer(body: &[u8]) -> Option<(Option<Vec<u8>>, Option<Status>)> {
    if !matches!(body.first(), Some(0 | 0x80)) {
        return None;
    }
    let mut frames = Deframer::new(body.len());
    frames.push(body);
    let (mut message, mut status) = (None, None);
    while let Ok(Some(frame)) = frames.next_frame() {
        match frame {
            Frame::Message(m) => message = Some(m),
            Frame::Trailers(s) => status = Some(s),
        }
    }
    Some((message, status))
}

impl A2aUpstream {
    /// The turn's send as it goes to the agent.
    fn sent(&self, turn: &TurnRequest, run_id: &str) -> Sent {
        let mut sent = self.addressed(turn);
        sent.params = match Sent::kept(turn) {
            Some((client, kept)) => {
                let (from, to) = (Client::from_value(client).dialect(), sent.toward.dialect());
                if from == to {
                    kept["params"].clone()
                } else {
                    send_params_from_v10(&send_params_to_v10(&kept["params"], from), to)
                }
            }
            None => {
                let text = |item: &Item| json!({ "text": item.text() });
                let message = json!({
                    "role": "ROLE_USER",
                    "messageId": format!("{run_id}-input"),
                    "parts": turn.input.iter().map(text).collect::<Vec<_>>(),
                });
                json!({ "message": message_from_v10(&message, sent.toward.dialect()) })
            }
        };
        sent
    }

    /// Where and how the turn's requests go, without its message: all a cancel needs.
    /// Over HTTP, in the client's own transport and version (a gRPC client's as v1.0
    /// JSON-RPC, a turn from another surface as v0.3 JSON-RPC, which every A2A agent
    /// serves); over gRPC, as v1.0; to an agent pinned to v0.3, as v0.3 JSON-RPC. The
    /// path here is the client's (`/` for JSON-RPC of Tether's own making); the gateway
    /// sends each request to the URL the agent's card lists for it (`CardReader`).
    fn addressed(&self, turn: &TurnRequest) -> Sent {
        let kept = Sent::kept(turn);
        let client = kept.map(|(c, _)| Client::from_value(c));
        let op = match client.as_ref().and_then(Client::op) {
            Some(op) => op,
            None if turn.stream => Op::Stream,
            None => Op::Send,
        };
        let mut headers: Vec<(String, String)> = kept
            .and_then(|(_, k)| k["headers"].as_array())
            .into_iter()
            .flatten()
            .filter_map(|h| Some((h[0].as_str()?.to_owned(), h[1].as_str()?.to_owned())))
            .collect();
        let (toward, path) = match client {
            _ if self.grpc => (
                Client::new(Transport::Grpc, Version::V10, op, Value::Null),
                String::new(),
            ),
            _ if self.v03 => (
                Client::new(Transport::JsonRpc, Version::V03, op, Value::Null),
                "/".to_owned(),
            ),
            Some(c) if c.transport == Transport::Grpc => (
                Client::new(Transport::JsonRpc, Version::V10, op, Value::Null),
                "/".to_owned(),
            ),
            Some(c) => {
                let path = kept.and_then(|(_, k)| k["path"].as_str()).unwrap_or("/");
                (c, path.to_owned())
            }
            None => (
                Client::new(Transport::JsonRpc, Version::V03, op, Value::Null),
                "/".to_owned(),
            ),
        };
        let named = |(n, _): &(String, String)| n.eq_ignore_ascii_case("A2A-Version");
        if toward.version == Version::V10 && toward.transport != Transport::Rest {
            if !headers.iter().any(named) {
                headers.push(("A2A-Version".into(), Version::V10.as_str().into()));
            }
        } else if toward.version == Version::V03 {
            // A v1.0 client's header would make a v0.3 request a mismatched one.
            headers.retain(|h| !named(h));
        }
        Sent {
            toward,
            path,
            params: Value::Null,
            headers,
        }
    }
}

/// The client's request as the surface kept it, to send on to the agent; other requests
/// to the agent are made in the same transport, version and dialect.
struct Sent {
    /// How the agent is asked: transport, version and the send's method.
    toward: Client,
    path: String,
    params: Value,
    headers: Vec<(String, String)>,
}

impl Sent {
    /// The client and its request as the A2A surface kept them, when the turn came from
    /// there.
    fn kept(turn: &TurnRequest) -> Option<(&Value, &Value)> {
        Some((turn.extra.get("client")?, turn.extra.get("a2a")?))
    }

    /// The task the client's message continues.
    fn task_id(&self) -> Option<&str> {
        self.params[message_key(&self.params)]["taskId"].as_str()
    }

    /// The send with its message continuing `task_id`.
    fn in_task(mut self, task_id: &str) -> Sent {
        let key = message_key(&self.params);
        if let Some(message) = self.params.get_mut(key).and_then(Value::as_object_mut) {
            message.insert("taskId".into(), json!(task_id));
        }
        self
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

    fn get(&self, path: String) -> AgentRequest {
        with_headers(AgentRequest::get(path), &self.headers)
    }

    fn rpc(&self, id: &str, method: &str, params: Value) -> AgentRequest {
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        self.post(&self.path, body)
    }

    /// The JSON-RPC (or gRPC) method for `op` in the agent's version.
    fn method(&self, op: Op) -> &'static str {
        method_name(Transport::JsonRpc, self.toward.version, op)
    }

    /// A gRPC call of the service's method `name` with `params` (v1.0 JSON) as its request.
    fn grpc(&self, name: &str, params: &Value) -> AgentRequest {
        // What cannot be encoded (a field of the wrong type) is the client's mistake the
        // agent reports as such: an empty message is sent, which it refuses.
        let message = proto::method(&proto::path(name))
            .and_then(|m| proto::encode(&m.input(), params).ok())
            .unwrap_or_default();
        let mut call = AgentRequest::grpc(proto::path(name), message);
        call.headers = self.headers.clone();
        call
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
        let method = self.toward.method.as_str();
        let request = match self.toward.transport {
            Transport::JsonRpc => self.rpc(rpc_id, method, params),
            Transport::Rest => self.post(&self.path, params),
            Transport::Grpc => return self.grpc(method, &params),
        };
        if self.toward.op() == Some(Op::Stream) {
            request.with_header("Accept", "text/event-stream")
        } else {
            request
        }
    }

    fn get_task(&self, task_id: &str, rpc_id: &str) -> AgentRequest {
        match self.toward.transport {
            Transport::Grpc => self.grpc(
                self.method(Op::Get),
                &json!({ "id": task_id, "historyLength": 0 }),
            ),
            Transport::JsonRpc => {
                let params = json!({ "id": task_id, "historyLength": 0 });
                self.rpc(rpc_id, self.method(Op::Get), params)
            }
            Transport::Rest => {
                let task = encode_segment(task_id);
                self.get(format!("{}tasks/{task}?historyLength=0", self.rest_base()))
            }
        }
    }

    fn cancel_task(&self, task_id: &str, rpc_id: &str) -> AgentRequest {
        match self.toward.transport {
            Transport::Grpc => self.grpc(self.method(Op::Cancel), &json!({ "id": task_id })),
            Transport::JsonRpc => {
                self.rpc(rpc_id, self.method(Op::Cancel), json!({ "id": task_id }))
            }
            Transport::Rest => {
                let task = encode_segment(task_id);
                self.post(
                    format!("{}tasks/{task}:cancel", self.rest_base()),
                    json!({}),
                )
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
        let message = json!({
            "role": "ROLE_USER", "messageId": message_id,
            "contextId": session_id, "parts": [{ "text": text }],
        });
        let message = message_from_v10(&message, self.toward.dialect());
        match self.toward.transport {
            Transport::Grpc => self.grpc(self.method(Op::Send), &json!({ "message": message })),
            Transport::JsonRpc => {
                self.rpc(rpc_id, self.method(Op::Send), json!({ "message": message }))
            }
            Transport::Rest => {
                let key = if self.toward.dialect() == Dialect::Proto03 {
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
