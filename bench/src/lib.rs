//! Shared pieces of the Tether benchmark tools: a minimal HTTP/1.1 client connection
//! (content-length, chunked and read-to-close bodies, streamed piece by piece), the
//! `@t=<nanos>;` send-time markers the fake agent puts in every streamed text delta, and
//! percentile summaries.

use std::io;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Wall-clock nanoseconds since the epoch. Both processes read the same kernel clock, so
/// an agent's send time and a client's receive time are directly comparable on one host.
pub fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Prefix of a send-time marker inside a text delta: `@t=<nanos>;`.
pub const MARK: &[u8] = b"@t=";

/// Appends every marker's timestamp found in `data` to `out`.
pub fn markers(data: &[u8], out: &mut Vec<u64>) {
    let mut i = 0;
    while let Some(pos) = find(&data[i..], MARK) {
        let mut j = i + pos + MARK.len();
        let mut v: u64 = 0;
        let start = j;
        while j < data.len() && data[j].is_ascii_digit() {
            v = v * 10 + (data[j] - b'0') as u64;
            j += 1;
        }
        if j > start && j < data.len() && data[j] == b';' {
            out.push(v);
        }
        i = j;
    }
}

pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Percentile (0..=100) of sorted values; 0 when empty.
pub fn pct(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    // The epsilon keeps float error (0.999 * 1000 = 999.0000000000001) from skipping a rank.
    let rank = (p * sorted.len() as f64 / 100.0 - 1e-9).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// How a response body is delimited.
#[derive(Debug, Clone, Copy)]
pub enum Body {
    Length(usize),
    Chunked,
    Close,
}

/// A response head.
#[derive(Debug)]
pub struct Head {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Body,
}

impl Head {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Reading state of one response body.
pub enum BodyState {
    Length(usize),
    /// Bytes left in the current chunk; whether its trailing CRLF is still to be read.
    Chunked {
        left: usize,
        crlf: bool,
        done: bool,
    },
    Close {
        done: bool,
    },
}

impl BodyState {
    pub fn new(body: Body) -> Self {
        match body {
            Body::Length(n) => BodyState::Length(n),
            Body::Chunked => BodyState::Chunked {
                left: 0,
                crlf: false,
                done: false,
            },
            Body::Close => BodyState::Close { done: false },
        }
    }
}

/// One client connection (HTTP/1.1, keep-alive).
pub struct Conn {
    stream: TcpStream,
    buf: BytesMut,
}

fn eof() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed")
}

fn bad(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_owned())
}

impl Conn {
    pub async fn connect(addr: &str) -> io::Result<Conn> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            buf: BytesMut::with_capacity(8192),
        })
    }

    pub async fn send(&mut self, req: &[u8]) -> io::Result<()> {
        self.stream.write_all(req).await
    }

    /// Reads more bytes into the buffer; 0 at EOF.
    async fn fill(&mut self) -> io::Result<usize> {
        if self.buf.capacity() - self.buf.len() < 4096 {
            self.buf.reserve(16384);
        }
        self.stream.read_buf(&mut self.buf).await
    }

    async fn line(&mut self) -> io::Result<BytesMut> {
        loop {
            if let Some(pos) = find(&self.buf, b"\r\n") {
                let line = self.buf.split_to(pos);
                self.buf.advance(2);
                return Ok(line);
            }
            if self.fill().await? == 0 {
                return Err(eof());
            }
        }
    }

    pub async fn read_head(&mut self) -> io::Result<Head> {
        let end = loop {
            if let Some(pos) = find(&self.buf, b"\r\n\r\n") {
                break pos;
            }
            if self.fill().await? == 0 {
                return Err(eof());
            }
        };
        let raw = self.buf.split_to(end + 4);
        let text = std::str::from_utf8(&raw[..end]).map_err(|_| bad("non-UTF-8 head"))?;
        let mut lines = text.split("\r\n");
        let status_line = lines.next().ok_or_else(|| bad("empty head"))?;
        let status = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad("bad status line"))?;
        let mut headers = Vec::new();
        let mut body = Body::Close;
        for line in lines {
            if let Some((k, v)) = line.split_once(':') {
                let (k, v) = (k.trim().to_owned(), v.trim().to_owned());
                if k.eq_ignore_ascii_case("content-length") {
                    body = Body::Length(v.parse().map_err(|_| bad("bad content-length"))?);
                } else if k.eq_ignore_ascii_case("transfer-encoding")
                    && v.to_ascii_lowercase().contains("chunked")
                {
                    body = Body::Chunked;
                }
                headers.push((k, v));
            }
        }
        if status == 204 || status == 304 {
            body = Body::Length(0);
        }
        Ok(Head {
            status,
            headers,
            body,
        })
    }

    /// The next piece of the body as it arrives; `None` at its end.
    pub async fn piece(&mut self, st: &mut BodyState) -> io::Result<Option<Bytes>> {
        match st {
            BodyState::Length(left) => {
                if *left == 0 {
                    return Ok(None);
                }
                if self.buf.is_empty() && self.fill().await? == 0 {
                    return Err(eof());
                }
                let n = (*left).min(self.buf.len());
                *left -= n;
                Ok(Some(self.buf.split_to(n).freeze()))
            }
            BodyState::Chunked { left, crlf, done } => {
                if *done {
                    return Ok(None);
                }
                if *crlf {
                    self.line().await?;
                    *crlf = false;
                }
                if *left == 0 {
                    let line = self.line().await?;
                    let size = std::str::from_utf8(&line)
                        .ok()
                        .and_then(|s| usize::from_str_radix(s.split(';').next()?.trim(), 16).ok())
                        .ok_or_else(|| bad("bad chunk size"))?;
                    if size == 0 {
                        loop {
                            if self.line().await?.is_empty() {
                                break;
                            }
                        }
                        *done = true;
                        return Ok(None);
                    }
                    *left = size;
                }
                if self.buf.is_empty() && self.fill().await? == 0 {
                    return Err(eof());
                }
                let n = (*left).min(self.buf.len());
                *left -= n;
                if *left == 0 {
                    *crlf = true;
                }
                Ok(Some(self.buf.split_to(n).freeze()))
            }
            BodyState::Close { done } => {
                if *done {
                    return Ok(None);
                }
                if self.buf.is_empty() && self.fill().await? == 0 {
                    *done = true;
                    return Ok(None);
                }
                let n = self.buf.len();
                Ok(Some(self.buf.split_to(n).freeze()))
            }
        }
    }

    /// Reads and discards a whole body; returns its length.
    pub async fn drain(&mut self, body: Body) -> io::Result<usize> {
        let mut st = BodyState::new(body);
        let mut n = 0;
        while let Some(p) = self.piece(&mut st).await? {
            n += p.len();
        }
        Ok(n)
    }
}

/// A GET request with keep-alive.
pub fn get_request(host: &str, path: &str, headers: &[String]) -> Vec<u8> {
    let extra: String = headers.iter().map(|h| format!("{h}\r\n")).collect();
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: */*\r\n{extra}\r\n").into_bytes()
}

/// The request `open` and `sat` send for `path`: a non-streaming chat completion (one
/// text answer from the fake agent) for `/v1/chat/completions`, else a `GET`.
pub fn load_request(host: &str, path: &str, headers: &[String]) -> Vec<u8> {
    if path != "/v1/chat/completions" {
        return get_request(host, path, headers);
    }
    let extra: String = headers.iter().map(|h| format!("{h}\r\n")).collect();
    let body = r#"{"model":"fake","messages":[{"role":"user","content":"bench:1:0"}]}"#;
    format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A streaming model request for `surface` ("chat" or "responses") asking the fake
/// agent for `events` text deltas `delay_ms` apart.
pub fn model_request(host: &str, surface: &str, events: u64, delay_ms: u64) -> Vec<u8> {
    let (path, body) = if surface == "responses" {
        (
            "/v1/responses",
            format!(r#"{{"model":"fake","stream":true,"input":"bench:{events}:{delay_ms}"}}"#),
        )
    } else {
        (
            "/v1/chat/completions",
            format!(
                r#"{{"model":"fake","stream":true,"messages":[{{"role":"user","content":"bench:{events}:{delay_ms}"}}]}}"#
            ),
        )
    };
    format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// `request` with the header `line` (`Name: value`) added after its request line.
pub fn with_header(request: &[u8], line: &str) -> Vec<u8> {
    let at = find(request, b"\r\n").map_or(request.len(), |i| i + 2);
    let mut out = Vec::with_capacity(request.len() + line.len() + 2);
    out.extend_from_slice(&request[..at]);
    out.extend_from_slice(line.as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&request[at..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_markers() {
        let mut out = Vec::new();
        markers(b"data: {\"c\":\"@t=123;\"}\n\ndata: @t=45;@t=9", &mut out);
        assert_eq!(out, vec![123, 45]);
    }

    #[test]
    fn adds_a_header_after_the_request_line() {
        let req = with_header(b"POST / HTTP/1.1\r\nHost: h\r\n\r\n{}", "x-session-id: s-1");
        assert_eq!(
            req,
            b"POST / HTTP/1.1\r\nx-session-id: s-1\r\nHost: h\r\n\r\n{}".to_vec()
        );
    }

    #[test]
    fn percentiles() {
        let v: Vec<u64> = (1..=1000).collect();
        assert_eq!(pct(&v, 50.0), 500);
        assert_eq!(pct(&v, 99.9), 999);
        assert_eq!(pct(&v, 100.0), 1000);
    }
}
