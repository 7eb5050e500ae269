//! A total deadline for request headers (slowloris protection), which Pingora 0.9 does not
//! have: its HTTP/1 server only times out each read (60 s by default, not configurable
//! before a request is parsed), so a client sending a byte every 59 s holds a connection
//! forever.
//!
//! [`HeaderDeadline`] wraps the proxy's `ServerApp`. Before handing a connection (new or
//! kept alive) to Pingora it reads until the end of the header block — or the deadline,
//! which closes the connection — and puts the bytes back with the L4 stream's `rewind`,
//! so Pingora parses exactly what the client sent. The clock starts at the first byte of
//! a request; an idle keep-alive connection is closed after `idle`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora::apps::ServerApp;
use pingora::protocols::l4::stream::Stream as L4Stream;
use pingora::protocols::Stream;
use pingora::server::ShutdownWatch;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::{timeout_at, Instant};

/// Header bytes read here at most: Pingora's own limit (1 MiB - 1). The deadline applies
/// to every byte up to it (it once stopped at 64 KiB, after which a client could trickle
/// header lines for ever); a longer header block is answered 431 and closed here.
const MAX_HEADER: usize = 1 << 20;
/// Room for each read of header bytes; most header blocks fit in one.
const HEADER_READ: usize = 2048;

pub struct HeaderDeadline<A> {
    inner: Arc<A>,
    deadline: Duration,
    idle: Duration,
}

impl<A> HeaderDeadline<A> {
    pub fn new(inner: A, deadline: Duration, idle: Duration) -> Self {
        HeaderDeadline {
            inner: Arc::new(inner),
            deadline,
            idle,
        }
    }
}

/// Whether `buf` holds a complete header block (CRLF CRLF, or LF LF for clients using
/// bare LF, which Tether then refuses with a proper answer).
fn header_complete(buf: &[u8]) -> bool {
    buf.windows(4).any(|w| w == b"\r\n\r\n") || buf.windows(2).any(|w| w == b"\n\n")
}

impl<A> HeaderDeadline<A> {
    /// Reads the header block under the deadline; `None`: close the connection.
    async fn read_header(&self, stream: &mut Stream) -> Option<Vec<u8>> {
        // Read straight into `buf`: a scratch array here would live in the connection's
        // future (and its memory) for as long as the connection does.
        let mut buf = Vec::with_capacity(HEADER_READ);
        // Waiting for the first byte is keep-alive idleness, not a slow client.
        match timeout_at(Instant::now() + self.idle, stream.read_buf(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return None,
        }
        let deadline = Instant::now() + self.deadline;
        // Where the search for the end of the block resumes: a long block is scanned once.
        let mut scanned = 0;
        while !header_complete(&buf[scanned..]) {
            scanned = buf.len().saturating_sub(3);
            if buf.len() >= MAX_HEADER {
                let _ = stream
                    .write_all(b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\ncontent-length: 118\r\nconnection: close\r\n\r\n{\"error\":{\"message\":\"the request header block is too large\",\"type\":\"invalid_request_error\",\"code\":\"header_too_large\"}}")
                    .await;
                return None;
            }
            buf.reserve(HEADER_READ);
            match timeout_at(deadline, stream.read_buf(&mut buf)).await {
                Ok(Ok(n)) if n > 0 => {}
                Ok(_) => return None,
                Err(_) => {
                    tracing::info!(
                        bytes = buf.len(),
                        deadline_seconds = self.deadline.as_secs(),
                        "closed a connection that did not finish its request headers in time"
                    );
                    return None;
                }
            }
        }
        Some(buf)
    }
}

#[async_trait]
impl<A> ServerApp for HeaderDeadline<A>
where
    A: ServerApp + Send + Sync + 'static,
{
    async fn process_new(
        self: &Arc<Self>,
        mut stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        // Only a plain TCP/Unix stream can take the bytes back; anything else (none today)
        // goes to Pingora untouched.
        if stream.as_any().downcast_ref::<L4Stream>().is_none() {
            return self.inner.process_new(stream, shutdown).await;
        }
        let header = self.read_header(&mut stream).await?;
        let mut l4 = stream.into_any().downcast::<L4Stream>().ok()?;
        l4.rewind(&header);
        drop(header); // not kept for the connection's life
        self.inner.process_new(l4, shutdown).await
    }

    async fn cleanup(&self) {
        self.inner.cleanup().await
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn header_end_is_found() {
        assert!(super::header_complete(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
        assert!(super::header_complete(b"GET / HTTP/1.1\nHost: x\n\n"));
        assert!(!super::header_complete(b"GET / HTTP/1.1\r\nHost: x\r\n"));
    }
}
