//! The gRPC edge: a call's request message read within the input limits, and its answer
//! written as gRPC has it — response headers, length-prefixed messages encoded by the
//! surface's service, and the status in trailers. Every call ends with a status: an error
//! Tether or the agent reports, or `OK`.
//!
//! Pingora 0.9 writes trailers downstream on HTTP/2 only, which is the only way gRPC
//! comes in (h2c); the call's headers go out with the first message or with the status,
//! so an error before any message still has its status in trailers after an empty body.

use bytes::Bytes;
use http::HeaderMap;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use pingora::Result;
use runtime_adapter::grpc::{self, Code, Deframer, Frame, GrpcService, Status};
use runtime_adapter::sse::SseFrame;
use serde_json::{json, Value};

use super::body::{read_bytes, InputLimits};
use crate::error::ApiError;

/// Whether the request is a gRPC call (HTTP/2 with gRPC's content type).
pub fn is_call(session: &Session) -> bool {
    let req = session.req_header();
    req.version == http::Version::HTTP_2
        && req
            .headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(grpc::is_grpc)
}

/// Reads the call's request message (the methods Tether serves take exactly one), within
/// the body size and rate limits.
pub async fn read_message(
    session: &mut Session,
    limits: &InputLimits,
) -> Result<Vec<u8>, ApiError> {
    let body = read_bytes(session, limits).await?;
    let invalid =
        |message: String| ApiError::new(400, "invalid_request_error", "invalid_body", message);
    let mut frames = Deframer::new(limits.max_body_bytes);
    frames.push(&body);
    let message = match frames.next_frame() {
        Ok(Some(Frame::Message(message))) => message,
        Ok(Some(Frame::Trailers(_))) | Ok(None) => {
            return Err(invalid("the call carries no whole request message".into()))
        }
        Err(e) => return Err(invalid(e.to_string())),
    };
    if frames.leftover() > 0 {
        return Err(invalid(
            "the call carries more than one request message".into(),
        ));
    }
    Ok(message)
}

/// A call being answered.
pub struct GrpcReply {
    service: &'static dyn GrpcService,
    /// The method's path, which says what its response messages are.
    path: String,
    headers_sent: bool,
}

impl GrpcReply {
    pub fn new(service: &'static dyn GrpcService, path: &str) -> Self {
        GrpcReply {
            service,
            path: path.to_owned(),
            headers_sent: false,
        }
    }

    /// The call's response headers (once), with `extra` ones (`x-session-id`, …).
    pub async fn start(&mut self, session: &mut Session, extra: &[(&str, &str)]) -> Result<()> {
        if self.headers_sent {
            return Ok(());
        }
        let mut h = ResponseHeader::build(200, Some(1 + extra.len()))?;
        h.insert_header("content-type", grpc::CONTENT_TYPE)?;
        for (name, value) in extra {
            h.insert_header(name.to_string(), *value)?;
        }
        session.write_response_header(Box::new(h), false).await?;
        self.headers_sent = true;
        Ok(())
    }

    /// Ends the call with `status` in its trailers.
    pub async fn finish(&mut self, session: &mut Session, status: &Status) -> Result<()> {
        self.start(session, &[]).await?;
        let mut trailers = HeaderMap::new();
        for (name, value) in status.headers() {
            if let Ok(value) = http::HeaderValue::from_str(&value) {
                trailers.insert(name, value);
            }
        }
        session.write_response_trailers(trailers).await
    }

    /// Appends the messages of rendered frames (each one's data is a response message in
    /// its JSON form) to `out`; an error among them is the status that ends the call, and
    /// nothing after it is sent.
    pub fn encode(&self, frames: &[SseFrame], out: &mut Vec<u8>) -> Option<Status> {
        for frame in frames {
            let json: Value = match serde_json::from_str(&frame.data) {
                Ok(json) => json,
                Err(e) => return Some(Status::new(Code::Internal, e.to_string())),
            };
            if let Err(status) = self.encode_one(&json, out) {
                return Some(status);
            }
        }
        None
    }

    fn encode_one(&self, json: &Value, out: &mut Vec<u8>) -> std::result::Result<(), Status> {
        if json.get("error").is_some_and(Value::is_object) {
            return Err(self.service.status_of(json));
        }
        let message = self
            .service
            .encode_response(&self.path, json)
            .map_err(|e| Status::new(Code::Internal, format!("cannot encode the answer: {e}")))?;
        grpc::frame_into(&message, out);
        Ok(())
    }

    /// A whole answer: one response message and `OK`, or the error it is.
    pub async fn answer(
        &mut self,
        session: &mut Session,
        http_status: u16,
        body: &Value,
        extra: &[(&str, &str)],
    ) -> Result<()> {
        let mut out = Vec::new();
        let status = if (200..300).contains(&http_status) || body.get("error").is_some() {
            self.encode_one(body, &mut out).err()
        } else {
            Some(Status::new(Code::from_http(http_status), body.to_string()))
        };
        self.start(session, extra).await?;
        if !out.is_empty() {
            session
                .write_response_body(Some(Bytes::from(out)), false)
                .await?;
        }
        let status = status.unwrap_or_else(|| Status::new(Code::Ok, ""));
        self.finish(session, &status).await
    }

    /// Tether's own refusal or failure as a status: its code from the HTTP status it
    /// would have had (401 `UNAUTHENTICATED`, 429 `RESOURCE_EXHAUSTED`, 404 `NOT_FOUND`,
    /// 400 and 413 `INVALID_ARGUMENT`, 502 and 503 `UNAVAILABLE`), its reason in an
    /// `ErrorInfo`, a retry delay in a `RetryInfo`, and its headers (`Retry-After`, the
    /// `RateLimit` ones) in the call's headers.
    pub async fn refuse(
        &mut self,
        session: &mut Session,
        e: &ApiError,
        extra: &[(&str, &str)],
    ) -> Result<()> {
        let code = Code::from_http(e.status);
        let mut details = vec![json!({
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": e.code.to_ascii_uppercase(),
            "domain": "tether",
        })];
        let retry_after = e
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("retry-after"));
        if let Some(seconds) = retry_after.and_then(|(_, v)| v.trim().parse::<u64>().ok()) {
            details.push(json!({
                "@type": "type.googleapis.com/google.rpc.RetryInfo",
                "retryDelay": format!("{seconds}s"),
            }));
        }
        let error = json!({ "error": {
            "status": code.name(), "message": e.message, "details": details,
        }});
        let status = self.service.status_of(&error);
        let mut headers: Vec<(&str, &str)> = extra.to_vec();
        headers.extend(e.header_pairs());
        self.start(session, &headers).await?;
        self.finish(session, &status).await
    }
}
