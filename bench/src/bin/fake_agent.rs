//! bench-agent: a fast fake agent for the benchmarks (the Python one in tests/ is too slow
//! to be a baseline). Hand-rolled HTTP/1.1 with keep-alive on a tokio runtime.
//!
//! Routes:
//! - `GET /json` — a small JSON document (pass-through scenarios).
//! - `POST /v1/chat/completions`, `POST /v1/responses` — when the body holds `"stream":true`,
//!   an SSE stream of N text deltas, each `@t=<send time, ns since epoch>;`, the first at
//!   once and the others `MS` ms apart, ended properly (`finish_reason` + `[DONE]`, or
//!   `response.completed`), so Tether records a completed run. N and MS come from the
//!   last `bench:N:MS` in the body (the user message); default `bench:10:0`. Without
//!   `"stream":true`, one JSON completion with the same text.
//! - `GET /healthz` — `ok`.
//!
//! `bench-agent --listen 127.0.0.1:19100 [--threads 1]`; prints `READY <addr>`.

use std::time::Duration;

use bytes::{Buf, BytesMut};
use clap::Parser;
use tether_bench::{find, now_nanos};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "127.0.0.1:19100")]
    listen: String,
    /// Runtime worker threads (1 = current-thread runtime).
    #[arg(long, default_value_t = 1)]
    threads: usize,
}

const JSON: &str = r#"{"object":"list","data":[{"id":"fake","object":"model","created":0,"owned_by":"bench"}],"ok":true}"#;

fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let rt = if args.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.threads)
            .enable_all()
            .build()?
    };
    rt.block_on(async move {
        let addr: std::net::SocketAddr = args
            .listen
            .parse()
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let socket = if addr.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        // A queue as deep as nginx's and Tether's listeners here (uvicorn's is 2,048):
        // with tokio's default of 128, a burst of a thousand new connections overflowed it
        // and a few runs waited a second for the SYN to be sent again.
        let listener = socket.listen(4096)?;
        println!("READY {}", listener.local_addr()?);
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(s) => s,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    eprintln!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let _ = serve(stream).await;
            });
        }
    })
}

struct Request {
    method: String,
    path: String,
    body: Vec<u8>,
    close: bool,
}

async fn read_request(
    stream: &mut TcpStream,
    buf: &mut BytesMut,
) -> std::io::Result<Option<Request>> {
    let end = loop {
        if let Some(pos) = find(buf, b"\r\n\r\n") {
            break pos;
        }
        if stream.read_buf(buf).await? == 0 {
            return Ok(None);
        }
    };
    let head = buf.split_to(end + 4);
    let text = String::from_utf8_lossy(&head[..end]);
    let mut lines = text.split("\r\n");
    let mut first = lines.next().unwrap_or("").split(' ');
    let method = first.next().unwrap_or("").to_owned();
    let path = first.next().unwrap_or("/").to_owned();
    let mut length = 0usize;
    let mut chunked = false;
    let mut close = false;
    for line in lines {
        if let Some((k, v)) = line.split_once(':') {
            let v = v.trim();
            if k.eq_ignore_ascii_case("content-length") {
                length = v.parse().unwrap_or(0);
            } else if k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked") {
                chunked = true;
            } else if k.eq_ignore_ascii_case("connection") && v.eq_ignore_ascii_case("close") {
                close = true;
            }
        }
    }
    let body = if chunked {
        read_chunked(stream, buf).await?
    } else {
        while buf.len() < length {
            if stream.read_buf(buf).await? == 0 {
                return Ok(None);
            }
        }
        buf.split_to(length).to_vec()
    };
    Ok(Some(Request {
        method,
        path,
        body,
        close,
    }))
}

async fn read_line(stream: &mut TcpStream, buf: &mut BytesMut) -> std::io::Result<Vec<u8>> {
    loop {
        if let Some(pos) = find(buf, b"\r\n") {
            let line = buf.split_to(pos).to_vec();
            buf.advance(2);
            return Ok(line);
        }
        if stream.read_buf(buf).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
}

async fn read_chunked(stream: &mut TcpStream, buf: &mut BytesMut) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line = read_line(stream, buf).await?;
        let size = std::str::from_utf8(&line)
            .ok()
            .and_then(|s| usize::from_str_radix(s.split(';').next()?.trim(), 16).ok())
            .unwrap_or(0);
        if size == 0 {
            while !read_line(stream, buf).await?.is_empty() {}
            return Ok(body);
        }
        while buf.len() < size + 2 {
            if stream.read_buf(buf).await? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
        }
        body.extend_from_slice(&buf[..size]);
        buf.advance(size + 2);
    }
}

/// `bench:N:MS` (the last one in the body).
fn plan(body: &[u8]) -> (u64, u64) {
    let text = String::from_utf8_lossy(body);
    let Some(pos) = text.rfind("bench:") else {
        return (10, 0);
    };
    let mut parts = text[pos + 6..].splitn(2, ':');
    let num = |s: Option<&str>| -> Option<u64> {
        let s = s?;
        let digits: String = s.chars().take_while(|c| c.is_ascii_digit()).collect();
        digits.parse().ok()
    };
    let n = num(parts.next()).unwrap_or(10);
    let ms = num(parts.next()).unwrap_or(0);
    (n, ms)
}

async fn serve(mut stream: TcpStream) -> std::io::Result<()> {
    let mut buf = BytesMut::with_capacity(8192);
    while let Some(req) = read_request(&mut stream, &mut buf).await? {
        let path = req.path.split('?').next().unwrap_or("");
        match (req.method.as_str(), path) {
            ("POST", "/v1/chat/completions") | ("POST", "/v1/responses") => {
                let chat = path == "/v1/chat/completions";
                let (n, ms) = plan(&req.body);
                let streaming = find(&req.body, b"\"stream\":true").is_some()
                    || find(&req.body, b"\"stream\": true").is_some();
                if streaming {
                    stream_answer(&mut stream, chat, n, ms).await?;
                } else {
                    let text: String = (0..n).map(|_| format!("@t={};", now_nanos())).collect();
                    let body = if chat {
                        format!(
                            r#"{{"id":"chatcmpl-bench","object":"chat.completion","created":0,"model":"fake","choices":[{{"index":0,"message":{{"role":"assistant","content":"{text}"}},"finish_reason":"stop"}}],"usage":{{"prompt_tokens":1,"completion_tokens":{n},"total_tokens":{}}}}}"#,
                            n + 1
                        )
                    } else {
                        format!(
                            r#"{{"id":"resp_bench","object":"response","created_at":0,"status":"completed","model":"fake","output":[{{"type":"message","id":"msg_bench","role":"assistant","status":"completed","content":[{{"type":"output_text","text":"{text}","annotations":[]}}]}}]}}"#
                        )
                    };
                    respond(&mut stream, 200, "application/json", body.as_bytes()).await?;
                }
            }
            ("GET", "/json") => {
                respond(&mut stream, 200, "application/json", JSON.as_bytes()).await?
            }
            ("GET", "/healthz") => respond(&mut stream, 200, "text/plain", b"ok").await?,
            _ => {
                respond(
                    &mut stream,
                    404,
                    "application/json",
                    br#"{"error":"no route"}"#,
                )
                .await?
            }
        }
        if req.close {
            break;
        }
    }
    Ok(())
}

async fn respond(
    stream: &mut TcpStream,
    status: u16,
    ctype: &str,
    body: &[u8],
) -> std::io::Result<()> {
    let reason = if status == 200 { "OK" } else { "Not Found" };
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    stream.write_all(&out).await
}

async fn chunk(stream: &mut TcpStream, data: &str) -> std::io::Result<()> {
    let out = format!("{:x}\r\n{data}\r\n", data.len());
    stream.write_all(out.as_bytes()).await
}

fn chat_chunk(delta: &str, finish: Option<&str>) -> String {
    let finish = finish
        .map(|f| format!("\"{f}\""))
        .unwrap_or_else(|| "null".into());
    format!(
        "data: {{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"fake\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish}}}]}}\n\n"
    )
}

async fn stream_answer(stream: &mut TcpStream, chat: bool, n: u64, ms: u64) -> std::io::Result<()> {
    stream
        .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n")
        .await?;
    if chat {
        chunk(
            stream,
            &chat_chunk(r#"{"role":"assistant","content":""}"#, None),
        )
        .await?;
    } else {
        chunk(stream, "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_bench\",\"object\":\"response\",\"created_at\":0,\"status\":\"in_progress\",\"model\":\"fake\",\"output\":[]}}\n\n").await?;
    }
    let mut next = tokio::time::Instant::now();
    for i in 0..n {
        if i > 0 && ms > 0 {
            next += Duration::from_millis(ms);
            tokio::time::sleep_until(next).await;
        }
        let mark = format!("@t={};", now_nanos());
        let frame = if chat {
            chat_chunk(&format!(r#"{{"content":"{mark}"}}"#), None)
        } else {
            format!("event: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\"sequence_number\":{},\"item_id\":\"msg_bench\",\"output_index\":0,\"content_index\":0,\"delta\":\"{mark}\"}}\n\n", i + 1)
        };
        chunk(stream, &frame).await?;
    }
    if chat {
        chunk(stream, &chat_chunk("{}", Some("stop"))).await?;
        chunk(stream, "data: [DONE]\n\n").await?;
    } else {
        chunk(stream, &format!("event: response.completed\ndata: {{\"type\":\"response.completed\",\"sequence_number\":{},\"response\":{{\"id\":\"resp_bench\",\"object\":\"response\",\"created_at\":0,\"status\":\"completed\",\"model\":\"fake\",\"output\":[]}}}}\n\n", n + 1)).await?;
    }
    stream.write_all(b"0\r\n\r\n").await
}
