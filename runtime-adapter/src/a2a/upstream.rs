//! Requests to the agent: the client's own send, addressed to the session, and what Tether
//! asks itself: whether the agent still knows the session, the earlier turns it forgot,
//! and the cancel of a task.

use std::fmt::Write as _;

use serde_json::{json, Value};

use crate::item::{Block, Item};
use crate::percent::encode_segment;
use crate::protocol::Protocol;
use crate::turn::TurnRequest;
use crate::upstream::{AgentRequest, Cancel, Probe, Restore, StreamParser, TurnCall, Upstream};

use super::client::{method_name, Client, Op, Transport, Version, TASK_NOT_FOUND};
use super::message::message_key;
use super::parser::A2aParser;
use super::routes::with_headers;
use super::wire::{message_from_v10, Dialect};
use super::A2aUpstream;

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

    fn cancel(&self, turn: &TurnRequest) -> Option<Cancel> {
        // A cancel names only the task: the message is not kept.
        let sent = Sent::addressed(turn);
        Some(Box::new(move |agent_ref| {
            let id = format!("tether-cancel-{}", uuid::Uuid::new_v4().simple());
            sent.cancel_task(agent_ref, &id)
        }))
    }
}

/// The client's request as the surface kept it, to send on to the agent; other requests
/// to the agent are made in the same transport, version and dialect.
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
        let params = match Sent::kept(turn) {
            Some((_, kept)) => kept["params"].clone(),
            None => {
                let parts: Vec<Value> = turn
                    .input
                    .iter()
                    .map(|item| json!({ "kind": "text", "text": item.text() }))
                    .collect();
                json!({ "message": {
                    "kind": "message",
                    "role": "user",
                    "messageId": format!("{run_id}-input"),
                    "parts": parts,
                }})
            }
        };
        Sent {
            params,
            ..Sent::addressed(turn)
        }
    }

    /// Where and how the turn's requests go, without its message: all a cancel needs.
    fn addressed(turn: &TurnRequest) -> Sent {
        let Some((client, kept)) = Sent::kept(turn) else {
            let op = if turn.stream { Op::Stream } else { Op::Send };
            return Sent {
                client: Client::new(Transport::JsonRpc, Version::V03, op, Value::Null),
                path: "/".into(),
                params: Value::Null,
                headers: Vec::new(),
            };
        };
        Sent {
            client: Client::from_value(client),
            path: kept["path"].as_str().unwrap_or("/").to_owned(),
            params: Value::Null,
            headers: kept["headers"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|h| Some((h[0].as_str()?.to_owned(), h[1].as_str()?.to_owned())))
                .collect(),
        }
    }

    /// The client and its request as the A2A surface kept them, when the turn came from
    /// there.
    fn kept(turn: &TurnRequest) -> Option<(&Value, &Value)> {
        Some((turn.extra.get("client")?, turn.extra.get("a2a")?))
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

    /// The JSON-RPC method for `op` in the client's version.
    fn method(&self, op: Op) -> &'static str {
        method_name(Transport::JsonRpc, self.client.version, op)
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
            Transport::JsonRpc => self.rpc(rpc_id, &self.client.method, params),
            Transport::Rest => self.post(&self.path, params),
        };
        if self.client.op() == Some(Op::Stream) {
            request.with_header("Accept", "text/event-stream")
        } else {
            request
        }
    }

    fn get_task(&self, task_id: &str, rpc_id: &str) -> AgentRequest {
        match self.client.transport {
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
        match self.client.transport {
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
        let message = message_from_v10(&message, self.client.dialect());
        match self.client.transport {
            Transport::JsonRpc => {
                self.rpc(rpc_id, self.method(Op::Send), json!({ "message": message }))
            }
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
