//! Reading the agent's answer: an SSE stream whose every event is one JSON-RPC response
//! (or one HTTP+JSON stream event), one JSON document, or gRPC messages and a status.
//! Each result is recorded as a frame (a gRPC message in its JSON form, which is v1.0's);
//! the turn ends with the task's end, with the answer's text as the transcript's.

use serde_json::{json, Value};

use crate::grpc::{Code, Deframer, Frame};
use crate::item::Item;
use crate::sse::SseParser;
use crate::upstream::{Output, StreamParser};

use super::proto;
use super::task::{answer_text, artifacts_text, parts_text, Fold};
use super::wire::{canonical, ends_turn, frame_ids, short_state, state_of};

/// How much of a would-be stream is kept in case it is JSON after all.
const SNIFF_LIMIT: usize = 64 * 1024;

pub(super) struct A2aParser {
    sse: Option<SseParser>,
    /// A gRPC answer's frames (then neither `sse` nor `raw` is used).
    grpc: Option<Deframer>,
    /// The JSON body; for a stream, its start until a frame shows it is SSE (an agent may
    /// answer a streaming request with a plain JSON error).
    raw: Vec<u8>,
    any_frame: bool,
    fold: Fold,
    task_id: Option<String>,
    ended: bool,
}

impl A2aParser {
    pub(super) fn new(sse: bool) -> Self {
        A2aParser {
            sse: sse.then(SseParser::new),
            grpc: None,
            raw: Vec::new(),
            any_frame: false,
            fold: Fold::default(),
            task_id: None,
            ended: false,
        }
    }

    /// A parser for a gRPC call's answer (`StreamResponse`s, or one `SendMessageResponse`,
    /// whose fields are the first two of `StreamResponse`), ended by its status.
    pub(super) fn grpc() -> Self {
        A2aParser {
            grpc: Some(Deframer::new(usize::MAX)),
            ..A2aParser::new(false)
        }
    }

    /// The gRPC frames that have arrived whole.
    fn grpc_frames(&mut self, out: &mut Vec<Output>) {
        loop {
            let frame = match self.grpc.as_mut().map(Deframer::next_frame) {
                Some(Ok(Some(frame))) => frame,
                Some(Ok(None)) | None => return,
                Some(Err(e)) => {
                    out.push(error(
                        "invalid_response",
                        format!("The agent's gRPC answer: {e}"),
                    ));
                    self.ended = true;
                    return;
                }
            };
            match frame {
                Frame::Message(bytes) => match proto::stream_response(&bytes) {
                    Ok(doc) => self.doc(&doc, out),
                    Err(e) if !self.ended => {
                        out.push(error("invalid_response", format!("The agent sent {e}")));
                        self.ended = true;
                    }
                    Err(_) => {}
                },
                // The call is over: what came is the whole answer, as one JSON document is.
                Frame::Trailers(status) if status.code == Code::Ok => {
                    if !self.ended && (self.fold.task.is_some() || self.fold.message.is_some()) {
                        self.end(out);
                    }
                }
                Frame::Trailers(status) => self.doc(&status.to_error_json(), out),
            }
        }
    }

    /// One SSE event's data.
    fn data(&mut self, data: &str, out: &mut Vec<Output>) {
        match serde_json::from_str::<Value>(data) {
            Ok(doc) => self.doc(&doc, out),
            Err(_) if self.ended => {}
            Err(_) => {
                let preview: String = data.chars().take(200).collect();
                let message = format!("The agent sent an event that is not JSON: {preview}");
                out.push(error("invalid_response", message));
                self.ended = true;
            }
        }
    }

    /// One JSON document: a JSON-RPC response, or an HTTP+JSON body or stream event.
    fn doc(&mut self, doc: &Value, out: &mut Vec<Output>) {
        if self.ended {
            return;
        }
        if let Some(e) = doc.get("error").filter(|e| e.is_object()) {
            let code = match &e["code"] {
                Value::Number(n) => n.to_string(),
                Value::String(s) => s.clone(),
                _ => "unknown".into(),
            };
            let message = e["message"]
                .as_str()
                .unwrap_or("The agent reported an error.");
            out.push(error(format!("a2a_error_{code}"), message));
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
            if let Some(ids) = frame_ids(&canon) {
                self.task_id = Some(ids.id.clone());
                out.push(Output::AgentRef(ids.id));
            }
        }
        // A message with no task is the agent's whole reply.
        let reply = canon.get("message").is_some() && self.fold.task.is_none();
        if reply || ends_turn(frame, &canon) {
            self.end(out);
        }
    }

    /// The turn is over: the assistant's answer as a transcript item, then how it ended.
    fn end(&mut self, out: &mut Vec<Output>) {
        self.ended = true;
        if let Some(task) = &self.fold.task {
            let state = short_state(state_of(task));
            let meta = json!({ "a2a": {
                "taskId": task["id"],
                "contextId": task["contextId"],
                "state": state,
            }});
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
            out.push(match failure {
                None => Output::Done { usage: None },
                Some(code) => {
                    let message = parts_text(&task["status"]["message"]["parts"]);
                    if message.is_empty() {
                        error(code, format!("The agent's task ended as {state}."))
                    } else {
                        error(code, message)
                    }
                }
            });
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

    /// The whole answer as one JSON document.
    fn json_body(&mut self, out: &mut Vec<Output>) {
        let body = std::mem::take(&mut self.raw);
        let trimmed = body.trim_ascii();
        if trimmed.is_empty() {
            out.push(error("empty_response", "The agent returned an empty body."));
            return;
        }
        let Ok(doc @ Value::Object(_)) = serde_json::from_slice::<Value>(trimmed) else {
            let preview: String = String::from_utf8_lossy(trimmed).chars().take(200).collect();
            let message = format!("The agent's response is not A2A JSON: {preview}");
            out.push(error("invalid_response", message));
            return;
        };
        self.doc(&doc, out);
        // One document is the whole answer, even a task still running (an agent that
        // would not block): the call is complete.
        if !self.ended && (self.fold.task.is_some() || self.fold.message.is_some()) {
            self.end(out);
        }
    }
}

fn error(code: impl Into<String>, message: impl Into<String>) -> Output {
    Output::Error {
        code: code.into(),
        message: message.into(),
    }
}

impl StreamParser for A2aParser {
    fn feed(&mut self, bytes: &[u8]) -> Vec<Output> {
        let mut out = Vec::new();
        if let Some(frames) = &mut self.grpc {
            frames.push(bytes);
            self.grpc_frames(&mut out);
            return out;
        }
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
        if self.grpc.is_some() {
            // Frames were read as they came; a cut-off one tells nothing more.
            return out;
        }
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
