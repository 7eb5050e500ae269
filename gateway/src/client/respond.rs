//! Writing answers Tether makes itself (JSON bodies, SSE streams) to a Pingora session.

use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use pingora::Result;
use runtime_adapter::Surface;
use serde_json::Value;

use crate::error::ApiError;

/// A complete JSON response. Extra headers are (name, value) pairs.
///
/// Boxed, because its future is large (about 1 KB) and is part of the futures of the
/// handlers that may answer with it, which include ones that wait for a whole run.
pub async fn json(
    session: &mut Session,
    status: u16,
    body: &Value,
    headers: &[(&str, &str)],
) -> Result<()> {
    Box::pin(write_json(session, status, body, headers)).await
}

async fn write_json(
    session: &mut Session,
    status: u16,
    body: &Value,
    headers: &[(&str, &str)],
) -> Result<()> {
    drain(session).await;
    json_undrained(session, status, body, headers).await
}

/// Longest wait for the rest of an unread request body before an answer.
const DRAIN: std::time::Duration = std::time::Duration::from_millis(500);

/// Reads what is left of the request body, so the connection can serve the next request;
/// a body that does not finish promptly costs the connection instead of holding the
/// answer (a client trickling its body used to keep a refusal from ever being sent).
pub async fn drain(session: &mut Session) {
    if session.is_body_done() {
        return;
    }
    match tokio::time::timeout(DRAIN, session.drain_request_body()).await {
        Ok(Ok(())) => {}
        _ => session.set_keepalive(None),
    }
}

/// A complete JSON response that leaves any unread request body alone (the caller closes
/// the connection, or the body was already read).
pub async fn json_undrained(
    session: &mut Session,
    status: u16,
    body: &Value,
    headers: &[(&str, &str)],
) -> Result<()> {
    let body = Bytes::from(serde_json::to_vec(body).unwrap_or_default());
    let mut h = ResponseHeader::build(status, Some(4 + headers.len()))?;
    h.insert_header("content-type", "application/json")?;
    h.insert_header("content-length", body.len().to_string())?;
    h.insert_header("cache-control", "no-store")?;
    for (name, value) in headers {
        h.insert_header(name.to_string(), *value)?;
    }
    session.write_response_header(Box::new(h), false).await?;
    session.write_response_body(Some(body), true).await
}

/// The 400 for a request head `client::head` refused: a JSON error naming what is wrong,
/// and the connection closed, because after a malformed head nothing else on it can be
/// trusted (its body is not read: it may be another request in disguise).
pub async fn malformed_head(session: &mut Session, message: &str) -> Result<()> {
    let body = serde_json::json!({ "error": {
        "message": message, "type": "invalid_request_error", "code": "malformed_request" } });
    let body = Bytes::from(serde_json::to_vec(&body).unwrap_or_default());
    let mut h = ResponseHeader::build(400, Some(4))?;
    h.insert_header("content-type", "application/json")?;
    h.insert_header("content-length", body.len().to_string())?;
    h.insert_header("connection", "close")?;
    session.set_keepalive(None);
    session.write_response_header(Box::new(h), false).await?;
    session.write_response_body(Some(body), true).await
}

/// A response without a body (a CORS preflight's grant), with the given headers.
pub async fn empty(session: &mut Session, status: u16, headers: &[(&str, &str)]) -> Result<()> {
    let mut h = ResponseHeader::build(status, Some(1 + headers.len()))?;
    h.insert_header("content-length", "0")?;
    for (name, value) in headers {
        h.insert_header(name.to_string(), *value)?;
    }
    drain(session).await;
    session.write_response_header(Box::new(h), true).await
}

/// A complete response with a body of any type (an agent's answer relayed as it came).
pub async fn bytes(
    session: &mut Session,
    status: u16,
    content_type: &str,
    body: Vec<u8>,
) -> Result<()> {
    let mut h = ResponseHeader::build(status, Some(3))?;
    if !content_type.is_empty() {
        h.insert_header("content-type", content_type)?;
    }
    h.insert_header("content-length", body.len().to_string())?;
    drain(session).await;
    session.write_response_header(Box::new(h), false).await?;
    session
        .write_response_body(Some(Bytes::from(body)), true)
        .await
}

/// Starts an SSE response; frames follow with `write_response_body`.
pub async fn sse_start(session: &mut Session, headers: &[(&str, &str)]) -> Result<()> {
    let mut h = ResponseHeader::build(200, Some(4 + headers.len()))?;
    h.insert_header("content-type", "text/event-stream")?;
    h.insert_header("cache-control", "no-cache")?;
    h.insert_header("x-accel-buffering", "no")?;
    // Without a length, HTTP/1.1 needs chunked framing to end the body and keep the
    // connection: otherwise the stream ends by closing it.
    if session.req_header().version == http::Version::HTTP_11 {
        h.insert_header("transfer-encoding", "chunked")?;
    }
    for (name, value) in headers {
        h.insert_header(name.to_string(), *value)?;
    }
    session.write_response_header(Box::new(h), false).await
}

impl ApiError {
    /// Sends this error in `surface`'s format.
    pub async fn send(
        &self,
        session: &mut Session,
        surface: &dyn Surface,
        headers: &[(&str, &str)],
    ) -> Result<()> {
        let body = surface.error_body(
            &self.message,
            self.kind,
            self.param.as_deref(),
            Some(self.code),
        );
        let mut all: Vec<(&str, &str)> = headers.to_vec();
        all.extend(self.header_pairs());
        json(session, self.status, &body, &all).await
    }
}
