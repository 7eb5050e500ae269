//! The agent's answer to a turn: `/run`'s JSON array of events (or a FastAPI error body)
//! and `/run_sse`'s `data: <event>` frames, read into outputs: each event verbatim, text
//! deltas, transcript items with their author and the session state beside them, errors,
//! usage, and whether the turn is done.

use serde_json::{json, Map, Value};

use super::content::{event_parts, is_thought, tool_call, tool_result};
use super::request::AdkTurn;
use super::restore::{last_state, since_deleted};
use super::{field, field_str, SESSION_NOT_FOUND};
use crate::item::Item;
use crate::sse::SseParser;
use crate::upstream::{Output, StreamParser, TurnCall};

pub(super) fn parser(call: &TurnCall, content_type: &str) -> Box<dyn StreamParser> {
    let reader = EventReader::new(call);
    if content_type.contains("text/event-stream") {
        Box::new(AdkSseParser::new(reader))
    } else {
        Box::new(AdkJsonParser {
            body: Vec::new(),
            reader: Some(reader),
        })
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
    fn new(reader: EventReader) -> Self {
        AdkSseParser {
            sse: SseParser::new(),
            reader,
            cut: false,
        }
    }
}

impl StreamParser for AdkSseParser {
    fn feed(&mut self, bytes: &[u8]) -> Vec<Output> {
        let mut out = Vec::new();
        for frame in self.sse.feed(bytes) {
            if frame.data.trim().is_empty() {
                continue;
            }
            match serde_json::from_str(&frame.data) {
                Ok(event) => self.reader.read(event, &mut out),
                Err(e) => self.reader.fail(
                    &mut out,
                    "invalid_response",
                    format!("The agent sent a frame that is not JSON: {e}"),
                ),
            }
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
    /// Taken by `finish`, which reads the body once.
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
        // An agent that streams despite its content type.
        if body.trim_ascii_start().starts_with(b"data:") {
            let mut sse = AdkSseParser::new(reader);
            let mut out = sse.feed(&body);
            out.extend(sse.finish());
            return out;
        }
        let mut out = Vec::new();
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
                reader.fail(&mut out, code, message);
            }
            Ok(doc @ Value::Object(_)) if doc.get("error").is_some() => reader.read(doc, &mut out),
            _ if body.trim_ascii().is_empty() => reader.fail(
                &mut out,
                "empty_response",
                "The agent returned an empty body.".into(),
            ),
            _ => reader.fail(
                &mut out,
                "invalid_response",
                format!(
                    "The agent's answer is not a list of ADK events: {}",
                    preview(&String::from_utf8_lossy(&body))
                ),
            ),
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

/// The first 200 characters of something the agent should not have sent.
fn preview(s: &str) -> String {
    s.chars().take(200).collect()
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
        let mut reader = EventReader {
            app: t.app,
            user: t.user,
            state: last_state(since_deleted(call.events))
                .cloned()
                .unwrap_or_default(),
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

    /// What a transcript item records beside it for a later restore (`restore.rs` reads
    /// it): who said it, where, and the state when it changed since last recorded.
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
            let message = format!(
                "The agent sent something that is not an ADK event: {}",
                preview(&event.to_string())
            );
            return self.fail(out, "invalid_response", message);
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
        self.last_final = is_final_response(obj);
        out.push(Output::Frame(event.clone()));
        let author = obj.get("author").and_then(Value::as_str).unwrap_or("");
        let from_agent = author != "user";
        let parts = event_parts(obj);
        if flag(obj, "partial") {
            // Fragments are display hints: deltas only; the aggregated event follows.
            for part in parts.iter().filter(|_| from_agent) {
                let text = part.get("text").and_then(Value::as_str);
                let Some(text) = text.filter(|t| !t.is_empty()) else {
                    continue;
                };
                out.push(if is_thought(part) {
                    Output::ReasoningDelta(text.to_owned())
                } else {
                    Output::TextDelta(text.to_owned())
                });
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
                if from_agent {
                    if is_thought(part) {
                        thought.push_str(t);
                    } else {
                        text.push_str(t);
                    }
                }
            } else if let Some(fc) = field(p, "function_call", "functionCall") {
                self.flush(author, obj, &mut thought, &mut text, out);
                out.push(Output::Item(tool_call(fc, &format!("{event_id}-{i}"))));
            } else if let Some(fr) = field(p, "function_response", "functionResponse") {
                self.flush(author, obj, &mut thought, &mut text, out);
                out.push(Output::Item(tool_result(fr, &format!("{event_id}-{i}"))));
            }
        }
        self.flush(author, obj, &mut thought, &mut text, out);
        if let Some(code) = field_str(obj, "error_code", "errorCode") {
            let message = field_str(obj, "error_message", "errorMessage").unwrap_or(code);
            self.fail(out, code, message.to_owned());
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

fn flag(obj: &Map<String, Value>, key: &str) -> bool {
    obj.get(key).and_then(Value::as_bool).unwrap_or(false)
}

/// ADK's `Event.is_final_response()`: whether an event ends the agent's answer.
fn is_final_response(event: &Map<String, Value>) -> bool {
    let skip = event
        .get("actions")
        .and_then(Value::as_object)
        .and_then(|a| field(a, "skip_summarization", "skipSummarization"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let long_running = field(event, "long_running_tool_ids", "longRunningToolIds")
        .and_then(Value::as_array)
        .is_some_and(|ids| !ids.is_empty());
    if skip || long_running {
        return true;
    }
    let parts = event_parts(event);
    let has = |snake: &str, camel: &str| {
        parts
            .iter()
            .any(|p| p.as_object().and_then(|p| field(p, snake, camel)).is_some())
    };
    let calls = has("function_call", "functionCall");
    let partial = flag(event, "partial");
    if field_str(event, "error_code", "errorCode").is_some() && !partial && !calls {
        return true;
    }
    let trailing_code_result = parts
        .last()
        .and_then(Value::as_object)
        .is_some_and(|p| field(p, "code_execution_result", "codeExecutionResult").is_some());
    !calls && !has("function_response", "functionResponse") && !partial && !trailing_code_result
}

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

#[cfg(test)]
mod tests {
    use serde_json::json;
    use session_log::{EventType, NewEvent};

    use super::*;
    use crate::adk::test_support::*;
    use crate::adk::AdkUpstream;
    use crate::turn::TurnRequest;
    use crate::upstream::Upstream;

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
    fn state_recorded_before_the_client_deleted_the_session_is_gone() {
        let turn = run_turn(
            "/run",
            json!({"user_id": "u1", "app_name": "adk_agent", "session_id": "s", "state_delta": {"mood": "good"}}),
        );
        let earlier = [
            event(
                3,
                Item::assistant_text("hi")
                    .to_event("acct", "s")
                    .with_metadata(
                        json!({"adk": {"author": "assistant", "state": {"city": "Paris"}}}),
                    ),
            ),
            event(4, deleted_marker()),
        ];
        let mut p = AdkUpstream.parser(&call(&turn, &[], &earlier), "application/json");
        p.feed(json!([{"content": {"role": "model", "parts": [{"text": "ok"}]}, "author": "assistant"}]).to_string().as_bytes());
        let out = p.finish();
        let Output::ItemWith(_, meta) = &out[1] else {
            panic!("{out:?}")
        };
        assert_eq!(meta["adk"]["state"], json!({"mood": "good"}));
        // Not even a summarising compaction is such a cut.
        let summarised = [
            earlier[0].clone(),
            event(
                4,
                NewEvent::new(
                    "acct",
                    "s",
                    EventType::Compaction,
                    json!({"summary": "hi", "through_seq": 3}),
                ),
            ),
        ];
        let mut p = AdkUpstream.parser(&call(&turn, &[], &summarised), "application/json");
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
}
