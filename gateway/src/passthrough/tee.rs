//! The pass-through tee: records each proxied exchange in the log — request and response
//! metadata, bodies up to a cap, and every SSE event of a streamed response — without
//! ever making the stream wait for the database. An exchange whose response comes whole
//! is one `http_exchange` event, handed to the writer at its end; a streamed one is its
//! `http_request`, its SSE events as they pass, and its `http_response`.

use std::time::Instant;

use bytes::Bytes;
use pingora::http::{RequestHeader, ResponseHeader};
use runtime_adapter::sse::{SseFrame, SseParser};
use serde_json::{json, Map, Value};
use session_log::{EventType, NewEvent, Writer};

use crate::ids::new_id;

/// Headers never written to the log: they carry credentials.
const SECRET_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
    "x-api-key",
];

/// Session pass-through exchanges are recorded in when the request names none.
pub const PASSTHROUGH_SESSION: &str = "passthrough";

pub struct Tee {
    writer: Writer,
    account_id: String,
    session_id: String,
    exchange_id: String,
    started: Instant,
    cap: usize,
    request: Option<Value>,
    request_body: Body,
    response: Option<Value>,
    response_body: Body,
    sse: Option<SseParser>,
    sse_events: u64,
    /// Events not yet handed to the writer, in order.
    queued: Vec<NewEvent>,
}

#[derive(Default)]
struct Body {
    bytes: Vec<u8>,
    total: usize,
}

impl Body {
    fn push(&mut self, chunk: &[u8], cap: usize) {
        self.total += chunk.len();
        let room = cap.saturating_sub(self.bytes.len());
        self.bytes
            .extend_from_slice(&chunk[..chunk.len().min(room)]);
    }

    fn to_json(&self) -> Value {
        object([
            ("text", String::from_utf8_lossy(&self.bytes).into()),
            ("bytes", self.total.into()),
            ("truncated", (self.total > self.bytes.len()).into()),
        ])
    }
}

/// A JSON object of the values given, moved in: `json!` would copy each `Value` it is
/// handed (it serializes its arguments), and a teed exchange's headers are most of its
/// cost on the proxy's threads.
fn object<const N: usize>(fields: [(&str, Value); N]) -> Value {
    Value::Object(
        fields
            .into_iter()
            .map(|(name, value)| (name.to_owned(), value))
            .collect(),
    )
}

fn headers_json(headers: &http::HeaderMap) -> Value {
    let mut map = Map::new();
    for (name, value) in headers {
        let name = name.as_str();
        let value = if SECRET_HEADERS.contains(&name) {
            "[redacted]".into()
        } else {
            String::from_utf8_lossy(value.as_bytes()).into_owned()
        };
        match map.get_mut(name) {
            Some(Value::Array(values)) => values.push(value.into()),
            Some(existing) => *existing = json!([existing.take(), value]),
            None => {
                map.insert(name.to_owned(), value.into());
            }
        }
    }
    Value::Object(map)
}

impl Tee {
    pub fn start(
        writer: Writer,
        account_id: &str,
        session_id: &str,
        req: &RequestHeader,
        cap: usize,
    ) -> Tee {
        let request = object([
            ("method", req.method.as_str().into()),
            (
                "path",
                req.uri.path_and_query().map_or("/", |p| p.as_str()).into(),
            ),
            ("headers", headers_json(&req.headers)),
        ]);
        Tee {
            writer,
            account_id: account_id.to_owned(),
            session_id: session_id.to_owned(),
            exchange_id: new_id("x"),
            started: Instant::now(),
            cap,
            request: Some(request),
            request_body: Body::default(),
            response: None,
            response_body: Body::default(),
            sse: None,
            sse_events: 0,
            queued: Vec::new(),
        }
    }

    pub fn request_body(&mut self, chunk: Option<&Bytes>) {
        if let Some(chunk) = chunk {
            self.request_body.push(chunk, self.cap);
        }
    }

    /// The agent's response header arrived.
    pub fn response_header(&mut self, resp: &ResponseHeader) {
        let is_sse = resp
            .headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.contains("text/event-stream"));
        self.response = Some(object([
            ("status", resp.status.as_u16().into()),
            ("headers", headers_json(&resp.headers)),
        ]));
        if is_sse {
            self.sse = Some(SseParser::new());
        }
        // A body of declared length is already whole at the agent and follows at once: the
        // exchange is recorded as one event at its end. Anything else (a stream, a chunked
        // body) may run for long, and its request is recorded now, whole as it matters.
        if is_sse || !resp.headers.contains_key(http::header::CONTENT_LENGTH) {
            self.record_request();
            self.hand_off();
        }
    }

    pub fn response_body(&mut self, chunk: Option<&Bytes>) {
        let Some(chunk) = chunk else { return };
        match &mut self.sse {
            Some(parser) => {
                let frames = parser.feed(chunk);
                self.sse_frames(frames);
                self.hand_off();
            }
            None => self.response_body.push(chunk, self.cap),
        }
    }

    /// The exchange is over (`error` says why, if it failed).
    pub fn finish(mut self, error: Option<String>) {
        if let Some(frame) = self.sse.as_mut().and_then(SseParser::finish) {
            self.sse_frames(vec![frame]);
        }
        let mut response = self
            .response
            .take()
            .unwrap_or_else(|| json!({ "status": null }));
        response["body"] = self.response_body.to_json();
        response["sse_events"] = self.sse_events.into();
        response["duration_ms"] = (self.started.elapsed().as_secs_f64() * 1000.0).into();
        if let Some(error) = error {
            response["error"] = error.into();
        }
        match self.request.take() {
            Some(request) => {
                let request = self.with_body(request);
                self.emit(
                    EventType::HttpExchange,
                    object([("request", request), ("response", response)]),
                );
            }
            None => self.emit(EventType::HttpResponse, response),
        }
        self.hand_off();
    }

    fn record_request(&mut self) {
        if let Some(request) = self.request.take() {
            let request = self.with_body(request);
            self.emit(EventType::HttpRequest, request);
        }
    }

    fn with_body(&self, mut request: Value) -> Value {
        request["body"] = self.request_body.to_json();
        request
    }

    fn sse_frames(&mut self, frames: Vec<SseFrame>) {
        for frame in frames {
            self.sse_events += 1;
            self.emit(
                EventType::HttpSseEvent,
                object([
                    ("event", frame.event.into()),
                    ("id", frame.id.into()),
                    ("data", frame.data.into()),
                ]),
            );
        }
    }

    fn emit(&mut self, event_type: EventType, content: Value) {
        let event = NewEvent::new(&self.account_id, &self.session_id, event_type, content)
            .with_metadata(json!({ "exchange_id": self.exchange_id }));
        self.queued.push(event);
    }

    fn hand_off(&mut self) {
        if self.queued.is_empty() {
            return;
        }
        // Never wait here: a full queue costs log entries (counted), not the stream.
        if let Err(e) = self.writer.try_submit(std::mem::take(&mut self.queued)) {
            tracing::warn!(error = %e, exchange_id = %self.exchange_id, "pass-through events not recorded");
        }
    }
}
