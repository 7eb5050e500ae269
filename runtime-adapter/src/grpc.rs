//! gRPC's wire, whatever the service: length-prefixed messages, status codes and the
//! trailers that carry them. The gateway serves gRPC clients with it and the adapters
//! read gRPC agents with it; which messages a service has is the service's own business
//! (`GrpcService`, implemented by a surface that speaks gRPC).

use base64::Engine as _;
use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, CONTROLS};
use serde_json::Value;

/// The content type of gRPC requests and responses (`application/grpc+proto` too).
pub const CONTENT_TYPE: &str = "application/grpc";
/// The trailer holding a `google.rpc.Status` with details (base64 protobuf).
pub const STATUS_DETAILS: &str = "grpc-status-details-bin";

/// A gRPC status code (grpc/doc/statuscodes.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    Ok = 0,
    Cancelled = 1,
    Unknown = 2,
    InvalidArgument = 3,
    DeadlineExceeded = 4,
    NotFound = 5,
    AlreadyExists = 6,
    PermissionDenied = 7,
    ResourceExhausted = 8,
    FailedPrecondition = 9,
    Aborted = 10,
    OutOfRange = 11,
    Unimplemented = 12,
    Internal = 13,
    Unavailable = 14,
    DataLoss = 15,
    Unauthenticated = 16,
}

/// Every code with its canonical name (as `google.rpc.Code` and JSON errors spell it).
const CODES: [(Code, &str); 17] = [
    (Code::Ok, "OK"),
    (Code::Cancelled, "CANCELLED"),
    (Code::Unknown, "UNKNOWN"),
    (Code::InvalidArgument, "INVALID_ARGUMENT"),
    (Code::DeadlineExceeded, "DEADLINE_EXCEEDED"),
    (Code::NotFound, "NOT_FOUND"),
    (Code::AlreadyExists, "ALREADY_EXISTS"),
    (Code::PermissionDenied, "PERMISSION_DENIED"),
    (Code::ResourceExhausted, "RESOURCE_EXHAUSTED"),
    (Code::FailedPrecondition, "FAILED_PRECONDITION"),
    (Code::Aborted, "ABORTED"),
    (Code::OutOfRange, "OUT_OF_RANGE"),
    (Code::Unimplemented, "UNIMPLEMENTED"),
    (Code::Internal, "INTERNAL"),
    (Code::Unavailable, "UNAVAILABLE"),
    (Code::DataLoss, "DATA_LOSS"),
    (Code::Unauthenticated, "UNAUTHENTICATED"),
];

impl Code {
    pub fn from_number(n: i64) -> Code {
        CODES
            .iter()
            .find(|(c, _)| *c as i64 == n)
            .map_or(Code::Unknown, |(c, _)| *c)
    }

    pub fn from_name(name: &str) -> Option<Code> {
        CODES.iter().find(|(_, n)| *n == name).map(|(c, _)| *c)
    }

    pub fn name(self) -> &'static str {
        CODES
            .iter()
            .find(|(c, _)| *c == self)
            .map_or("UNKNOWN", |(_, n)| n)
    }

    /// The code for an HTTP error status Tether answers with (`google.rpc.Code`'s own
    /// HTTP mapping, read backwards).
    pub fn from_http(status: u16) -> Code {
        match status {
            200..=299 => Code::Ok,
            400 | 413 | 415 | 422 => Code::InvalidArgument,
            401 => Code::Unauthenticated,
            403 => Code::PermissionDenied,
            404 => Code::NotFound,
            405 | 501 => Code::Unimplemented,
            408 | 504 => Code::DeadlineExceeded,
            409 => Code::Aborted,
            412 => Code::FailedPrecondition,
            429 => Code::ResourceExhausted,
            499 => Code::Cancelled,
            502 | 503 => Code::Unavailable,
            _ => Code::Internal,
        }
    }

    /// The HTTP status `google.rpc.Code` documents for this code: how an agent's gRPC
    /// error reads where Tether judges HTTP answers.
    pub fn http_status(self) -> u16 {
        match self {
            Code::Ok => 200,
            Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => 400,
            Code::Unauthenticated => 401,
            Code::PermissionDenied => 403,
            Code::NotFound => 404,
            Code::AlreadyExists | Code::Aborted => 409,
            Code::ResourceExhausted => 429,
            Code::Cancelled => 499,
            Code::Unimplemented => 501,
            Code::Unavailable => 503,
            Code::DeadlineExceeded => 504,
            Code::Unknown | Code::Internal | Code::DataLoss => 500,
        }
    }
}

/// A call's outcome, as its trailers carry it.
#[derive(Clone, Debug, PartialEq)]
pub struct Status {
    pub code: Code,
    pub message: String,
    /// `google.rpc.Status` protobuf with details, when the server sent one.
    pub details: Option<Vec<u8>>,
}

impl Status {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Status {
            code,
            message: message.into(),
            details: None,
        }
    }

    /// The status in a header block (trailers, or the headers of a trailers-only
    /// answer); `None` when it has no `grpc-status`.
    pub fn from_headers<'a>(headers: impl IntoIterator<Item = (&'a str, &'a str)>) -> Option<Self> {
        let (mut code, mut message, mut details) = (None, String::new(), None);
        for (name, value) in headers {
            match name.to_ascii_lowercase().as_str() {
                "grpc-status" => code = value.trim().parse::<i64>().ok().map(Code::from_number),
                "grpc-message" => {
                    message = percent_decode_str(value).decode_utf8_lossy().into_owned()
                }
                STATUS_DETAILS => details = decode_bin(value),
                _ => {}
            }
        }
        Some(Status {
            code: code?,
            message,
            details,
        })
    }

    /// The trailers that carry this status.
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let mut out = vec![("grpc-status", (self.code as i32).to_string())];
        if !self.message.is_empty() {
            let message = utf8_percent_encode(&self.message, MESSAGE_ESCAPES).to_string();
            out.push(("grpc-message", message));
        }
        if let Some(details) = &self.details {
            let encoded = base64::engine::general_purpose::STANDARD_NO_PAD.encode(details);
            out.push((STATUS_DETAILS, encoded));
        }
        out
    }

    /// The status as `google.rpc.Status` JSON inside an error body, the shape HTTP+JSON
    /// errors have: `{"error": {"code": <HTTP>, "status": "NOT_FOUND", "message": …}}`.
    pub fn to_error_json(&self) -> Value {
        serde_json::json!({ "error": {
            "code": self.code.http_status(),
            "status": self.code.name(),
            "message": self.message,
        }})
    }
}

/// `grpc-message` is percent-encoded: everything but printable ASCII, and `%` itself.
const MESSAGE_ESCAPES: &AsciiSet = &CONTROLS.add(b'%');

/// A `-bin` metadata value: base64, padded or not.
fn decode_bin(value: &str) -> Option<Vec<u8>> {
    let value = value.trim().trim_end_matches('=');
    base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(value)
        .ok()
}

/// Whether a content type is gRPC's with protobuf messages (`application/grpc`,
/// `application/grpc+proto`).
pub fn is_grpc(content_type: &str) -> bool {
    let base = content_type.split(';').next().unwrap_or("").trim();
    base.eq_ignore_ascii_case(CONTENT_TYPE) || base.eq_ignore_ascii_case("application/grpc+proto")
}

// ---------------------------------------------------------------------------------------
// Messages on the wire
// ---------------------------------------------------------------------------------------

/// The flag of a frame that holds trailers instead of a message (gRPC-Web's encoding;
/// Tether uses it to hand an agent's trailers to a parser in order, after its messages).
const TRAILERS_FLAG: u8 = 0x80;
const COMPRESSED_FLAG: u8 = 0x01;

/// A message as gRPC sends it: uncompressed, with its 5-byte length prefix.
pub fn frame(message: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + message.len());
    frame_into(message, &mut out);
    out
}

pub fn frame_into(message: &[u8], out: &mut Vec<u8>) {
    out.push(0);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
}

/// Trailers as a gRPC-Web trailers frame (an HTTP/1-style header block).
pub fn trailers_frame(status: &Status) -> Vec<u8> {
    let mut block = String::new();
    for (name, value) in status.headers() {
        block.push_str(name);
        block.push(':');
        block.push_str(&value);
        block.push_str("\r\n");
    }
    let mut out = Vec::with_capacity(5 + block.len());
    out.push(TRAILERS_FLAG);
    out.extend_from_slice(&(block.len() as u32).to_be_bytes());
    out.extend_from_slice(block.as_bytes());
    out
}

/// What a stream of gRPC bytes holds, piece by piece.
#[derive(Clone, Debug, PartialEq)]
pub enum Frame {
    Message(Vec<u8>),
    /// The call's status (from a trailers frame).
    Trailers(Status),
}

/// Why a stream of gRPC bytes cannot be read.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum FrameError {
    #[error("a message of {0} bytes is larger than the limit of {1} bytes")]
    TooLarge(usize, usize),
    #[error("compressed messages are not accepted (no grpc-accept-encoding was offered)")]
    Compressed,
    #[error("a trailers frame without grpc-status")]
    BadTrailers,
}

/// Splits a byte stream into frames; bytes may arrive cut anywhere.
#[derive(Debug)]
pub struct Deframer {
    buf: Vec<u8>,
    max_message: usize,
}

impl Deframer {
    pub fn new(max_message: usize) -> Self {
        Deframer {
            buf: Vec::new(),
            max_message,
        }
    }

    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole frame, `Ok(None)` until one has arrived.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, FrameError> {
        let Some(header) = self.buf.get(..5) else {
            return Ok(None);
        };
        let flags = header[0];
        let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
        if len > self.max_message {
            return Err(FrameError::TooLarge(len, self.max_message));
        }
        if flags & COMPRESSED_FLAG != 0 {
            return Err(FrameError::Compressed);
        }
        if self.buf.len() < 5 + len {
            return Ok(None);
        }
        let body: Vec<u8> = self.buf.drain(..5 + len).skip(5).collect();
        if flags & TRAILERS_FLAG == 0 {
            return Ok(Some(Frame::Message(body)));
        }
        let block = String::from_utf8_lossy(&body);
        let headers = block
            .split("\r\n")
            .filter_map(|line| line.split_once(':'))
            .map(|(k, v)| (k.trim(), v.trim()));
        Status::from_headers(headers)
            .map(|s| Some(Frame::Trailers(s)))
            .ok_or(FrameError::BadTrailers)
    }

    /// Bytes left over that make no whole frame.
    pub fn leftover(&self) -> usize {
        self.buf.len()
    }
}

// ---------------------------------------------------------------------------------------
// Services
// ---------------------------------------------------------------------------------------

/// A method of a service a surface serves over gRPC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Method {
    /// Whether the server answers with a stream of messages.
    pub server_streaming: bool,
}

/// A gRPC service a surface serves: which paths are its methods, and its answers' JSON
/// form encoded as the method's response message. Requests are decoded by the surface
/// itself when it routes them.
pub trait GrpcService: Send + Sync {
    /// The method `/package.Service/Method` names, if the service has it.
    fn method(&self, path: &str) -> Option<Method>;

    /// A response (its JSON form) encoded as the method's response message.
    fn encode_response(&self, path: &str, json: &Value) -> Result<Vec<u8>, String>;

    /// An error body (`{"error": google.rpc.Status JSON}`, as HTTP+JSON errors look) as
    /// the status that ends the call, its details encoded for `grpc-status-details-bin`.
    fn status_of(&self, error: &Value) -> Status;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_cut_anywhere_come_out_whole() {
        let mut wire = frame(b"hello");
        wire.extend(frame(b""));
        wire.extend(trailers_frame(&Status::new(
            Code::NotFound,
            "no 100% match",
        )));
        let mut d = Deframer::new(1024);
        let mut out = Vec::new();
        for byte in &wire {
            d.push(std::slice::from_ref(byte));
            while let Some(f) = d.next_frame().unwrap() {
                out.push(f);
            }
        }
        assert_eq!(
            out,
            vec![
                Frame::Message(b"hello".to_vec()),
                Frame::Message(Vec::new()),
                Frame::Trailers(Status::new(Code::NotFound, "no 100% match")),
            ]
        );
        assert_eq!(d.leftover(), 0);
    }

    #[test]
    fn oversized_and_compressed_messages_are_refused_before_they_arrive() {
        let mut d = Deframer::new(4);
        d.push(&frame(b"12345")[..5]);
        assert_eq!(d.next_frame(), Err(FrameError::TooLarge(5, 4)));
        let mut d = Deframer::new(64);
        d.push(&[1, 0, 0, 0, 1]);
        assert_eq!(d.next_frame(), Err(FrameError::Compressed));
    }

    #[test]
    fn status_round_trips_through_headers() {
        let mut s = Status::new(Code::ResourceExhausted, "slow down: ünïcode\n");
        s.details = Some(vec![8, 8]);
        let headers = s.headers();
        assert!(headers[1].1.is_ascii());
        let back = Status::from_headers(headers.iter().map(|(k, v)| (*k, v.as_str())));
        assert_eq!(back, Some(s));
        assert_eq!(Status::from_headers([("content-type", "x")]), None);
    }

    #[test]
    fn codes_map_to_and_from_http() {
        assert_eq!(Code::from_http(401), Code::Unauthenticated);
        assert_eq!(Code::from_http(429), Code::ResourceExhausted);
        assert_eq!(Code::from_http(413), Code::InvalidArgument);
        assert_eq!(Code::from_http(502), Code::Unavailable);
        assert_eq!(Code::NotFound.http_status(), 404);
        assert_eq!(Code::from_name("NOT_FOUND"), Some(Code::NotFound));
        assert_eq!(Code::from_number(16), Code::Unauthenticated);
        assert!(is_grpc("application/grpc"));
        assert!(is_grpc("application/grpc+proto"));
        assert!(!is_grpc("application/grpc+json"));
        assert!(!is_grpc("application/json"));
    }
}
