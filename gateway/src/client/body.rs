//! Reading request bodies within the input limits (size, arrival rate, JSON depth): whole
//! for the bodies Tether parses itself and for pass-through bodies, before any byte goes on.

use std::time::{Duration, Instant};

use pingora::proxy::Session;
use pingora::ErrorType;

use crate::error::ApiError;

/// Request-input limits, set once at start-up from `[limits]`.
#[derive(Clone, Debug)]
pub struct InputLimits {
    pub max_body_bytes: usize,
    pub max_json_depth: usize,
    /// Slowest accepted average body upload.
    pub min_body_bytes_per_second: u64,
    /// Time a body may take on top of what the minimum rate allows, and the longest
    /// silence between two body reads.
    pub body_grace: Duration,
}

/// Whether a body of `bytes` after `elapsed` is below the minimum average rate, allowing
/// `body_grace` on top (slow starts and small bodies are not punished).
pub fn too_slow(bytes: usize, elapsed: Duration, limits: &InputLimits) -> bool {
    let allowed = limits.body_grace.as_secs_f64()
        + bytes as f64 / limits.min_body_bytes_per_second.max(1) as f64;
    elapsed.as_secs_f64() > allowed
}

/// The 413 for a body over `limit` bytes.
pub fn too_large(limit: usize) -> ApiError {
    ApiError::new(
        413,
        "invalid_request_error",
        "request_too_large",
        format!("the request body is larger than {limit} bytes"),
    )
}

fn too_slow_error() -> ApiError {
    ApiError::new(
        408,
        "invalid_request_error",
        "request_timeout",
        "the request body arrived too slowly",
    )
}

/// Reads the next piece of the body into `body`, within `limits`: its size, and its
/// arrival rate since `started`. Returns `false` at the body's end.
async fn read_chunk(
    session: &mut Session,
    limits: &InputLimits,
    started: Instant,
    body: &mut Vec<u8>,
) -> Result<bool, ApiError> {
    // However the client trickles, the whole body must arrive at the minimum rate (plus
    // the grace time); pingora's per-read timeout alone would let a byte a minute through.
    let budget = limits.body_grace.as_secs_f64()
        + (body.len() + 1) as f64 / limits.min_body_bytes_per_second.max(1) as f64;
    let left = Duration::from_secs_f64(budget).saturating_sub(started.elapsed());
    let read = match tokio::time::timeout(left, session.read_request_body()).await {
        Ok(read) => read,
        Err(_) => return Err(too_slow_error()),
    };
    match read {
        Ok(Some(chunk)) => {
            if body.len() + chunk.len() > limits.max_body_bytes {
                return Err(too_large(limits.max_body_bytes));
            }
            body.extend_from_slice(&chunk);
            if too_slow(body.len(), started.elapsed(), limits) {
                return Err(too_slow_error());
            }
            Ok(true)
        }
        Ok(None) => Ok(false),
        Err(e) if e.etype() == &ErrorType::ReadTimedout => Err(too_slow_error()),
        Err(e) => Err(ApiError::new(
            400,
            "invalid_request_error",
            "invalid_body",
            format!("cannot read the request body: {e}"),
        )),
    }
}

/// Reads the whole request body within `limits`: size, arrival rate and JSON depth.
pub async fn read_body(session: &mut Session, limits: &InputLimits) -> Result<Vec<u8>, ApiError> {
    let body = read_bytes(session, limits).await?;
    // Depth is checked before any parser sees the body (runs and control actions alike);
    // malformed JSON is left to them, they say it better.
    if !body.iter().all(u8::is_ascii_whitespace) {
        if let Err(e @ policies::InputLimitError::TooDeep { .. }) =
            policies::input::check_json(&body, limits.max_json_depth)
        {
            return Err(ApiError::new(
                400,
                "invalid_request_error",
                "json_too_deep",
                e.to_string(),
            ));
        }
    }
    Ok(body)
}

/// Reads the whole request body within `limits` of size and arrival rate (these are
/// Tether's own timers: Pingora's read timeout does not apply to HTTP/2 streams).
pub async fn read_bytes(session: &mut Session, limits: &InputLimits) -> Result<Vec<u8>, ApiError> {
    if let Some(len) = session
        .req_header()
        .headers
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
    {
        if len > limits.max_body_bytes {
            return Err(too_large(limits.max_body_bytes));
        }
    }
    let started = Instant::now();
    let mut body = Vec::new();
    while read_chunk(session, limits, started, &mut body).await? {}
    Ok(body)
}
