//! The agent connection used by runs: one HTTP/1.1 request, or one gRPC call over HTTP/2
//! without TLS, through Pingora's connector, with the response body handed over piece by
//! piece. Owned by a run task, not by any client connection, so a client leaving never
//! closes it.
//!
//! A gRPC call's status comes in trailers (or, when the agent fails at once, in the only
//! header block): it is handed over after the body as a gRPC-Web trailers frame, so that
//! whoever reads the body reads the status in order after the messages. A call that fails
//! at once also reads, where Tether judges answers by HTTP status, as the HTTP status
//! `google.rpc.Code` gives its code (`NOT_FOUND`: 404).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use pingora::connectors::http::Connector;
use pingora::http::RequestHeader;
use pingora::protocols::http::client::HttpSession;
use pingora::upstreams::peer::HttpPeer;
use serde_json::Value;

use runtime_adapter::grpc::{self, Status};
use runtime_adapter::{AgentRequest, CardReader, Upstream as Adapter};

use crate::config::{Config, Upstream};
use crate::telemetry::spans;

/// Why talking to the agent failed.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("cannot resolve the agent address {0}: {1}")]
    Resolve(String, String),
    #[error("cannot reach the agent: {0}")]
    Connect(String),
    #[error("the agent connection failed: {0}")]
    Io(String),
    #[error("cannot find the agent's gRPC address: {0}")]
    Locate(String),
}

/// How to reach the agent, shared by runs and the pass-through proxy.
pub struct Agent {
    connector: Connector,
    upstream: Upstream,
    headers: Vec<(String, String)>,
    connect_timeout: Duration,
    idle_timeout: Duration,
    resolved: Mutex<Option<(Instant, SocketAddr)>>,
    grpc: GrpcTarget,
    card: AgentCard,
}

/// Where the agent serves gRPC: configured (`a2a_grpc_upstream`), or read from the agent's
/// card.
struct GrpcTarget {
    configured: Option<String>,
    resolved: Mutex<Option<(Instant, SocketAddr)>>,
}

/// The agent's card as the adapter's reader asks for it, read again after `RESOLVE_TTL`
/// so that a restarted agent's new card (or new address) is found. While it cannot be
/// read (the agent is down), requests go where they would without a card.
struct AgentCard {
    reader: Option<CardReader>,
    read: Mutex<Option<(Instant, Option<Arc<Value>>)>>,
}

const RESOLVE_TTL: Duration = Duration::from_secs(5);
/// How soon a card that could not be read is asked for again: soon, since calls go where
/// they would without it meanwhile (an agent mounted under a prefix is not found there).
const CARD_RETRY: Duration = Duration::from_secs(1);
/// Concurrent calls on one HTTP/2 connection to a gRPC agent before another is opened.
const H2_STREAMS: usize = 100;

/// An agent response whose body is still being read.
pub struct AgentResponse {
    pub status: u16,
    pub content_type: String,
    /// The answer's caching headers (`CACHE_HEADERS`), for relaying a forwarded answer.
    pub caching: Vec<(String, String)>,
    http: HttpSession,
    peer: HttpPeer,
    /// For a gRPC call: its status, once known, still to be handed over after the body
    /// (`Some(None)`: to be read from the trailers).
    grpc: Option<Option<Status>>,
    /// The request's span, held so that it ends when the response is dropped (read).
    trace: tracing::Span,
}

impl AgentResponse {
    /// The next piece of the body; `None` at its end.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, AgentError> {
        let io = |e: Box<pingora::Error>| AgentError::Io(e.to_string());
        let body = self.http.read_response_body().await.map_err(io)?;
        if body.is_some() {
            return Ok(body);
        }
        let Some(pending) = self.grpc.take() else {
            return Ok(None);
        };
        let status = match pending {
            Some(status) => status,
            None => {
                let trailers = match &mut self.http {
                    HttpSession::H2(h2) => h2.read_trailers().await.map_err(io)?,
                    _ => None,
                };
                trailers
                    .as_ref()
                    .and_then(|t| Status::from_headers(header_pairs(t)))
                    .ok_or_else(|| {
                        AgentError::Io("the agent's gRPC answer ended without a status".into())
                    })?
            }
        };
        Ok(Some(Bytes::from(grpc::trailers_frame(&status))))
    }

    /// The rest of the body, of which the first `cap` bytes are kept.
    pub async fn read_to_end(&mut self, cap: usize) -> Result<Vec<u8>, AgentError> {
        let mut body = Vec::new();
        while let Some(chunk) = self.chunk().await? {
            let room = cap.saturating_sub(body.len());
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        }
        Ok(body)
    }
}

/// Response headers that say how long an answer may be cached and how to revalidate it.
pub const CACHE_HEADERS: &[&str] = &["etag", "cache-control", "last-modified", "expires"];

fn caching(header: &pingora::http::ResponseHeader) -> Vec<(String, String)> {
    CACHE_HEADERS
        .iter()
        .filter_map(|name| {
            let value = header.headers.get(*name)?.to_str().ok()?;
            Some((name.to_string(), value.to_owned()))
        })
        .collect()
}

fn content_type(header: &pingora::http::ResponseHeader) -> String {
    header
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}

/// A header block's entries whose values are text.
fn header_pairs(headers: &http::HeaderMap) -> impl Iterator<Item = (&str, &str)> {
    headers
        .iter()
        .filter_map(|(k, v)| Some((k.as_str(), v.to_str().ok()?)))
}

/// `host:port` to an address, with a cache of `RESOLVE_TTL`.
async fn resolve(
    authority: &str,
    cache: &Mutex<Option<(Instant, SocketAddr)>>,
) -> Result<SocketAddr, AgentError> {
    let cached = *cache.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, addr)) = cached.filter(|(at, _)| at.elapsed() < RESOLVE_TTL) {
        return Ok(addr);
    }
    let addr: SocketAddr = tokio::net::lookup_host(authority)
        .await
        .map_err(|e| AgentError::Resolve(authority.to_owned(), e.to_string()))?
        .next()
        .ok_or_else(|| AgentError::Resolve(authority.to_owned(), "no address".into()))?;
    *cache.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), addr));
    Ok(addr)
}

impl Agent {
    pub fn new(config: &Config, reader: Option<CardReader>) -> Self {
        let mut agent = Self::at(
            config.upstream.clone(),
            config.upstream_headers.clone(),
            config,
        );
        agent.grpc.configured = config.a2a_grpc_upstream.clone();
        // A configured gRPC address is for an agent without an HTTP card: none is asked for.
        agent.card.reader = reader.filter(|_| agent.grpc.configured.is_none());
        agent
    }

    /// A connection over HTTP to another agent-like server (the compaction summarizer),
    /// with the agent's timeouts and `headers` of its own.
    pub fn at(upstream: Upstream, headers: Vec<(String, String)>, config: &Config) -> Self {
        Agent {
            connector: Connector::new(None),
            upstream,
            headers,
            connect_timeout: config.upstream_connect_timeout,
            idle_timeout: config.upstream_idle_timeout,
            resolved: Mutex::new(None),
            grpc: GrpcTarget {
                configured: None,
                resolved: Mutex::new(None),
            },
            card: AgentCard {
                reader: None,
                read: Mutex::new(None),
            },
        }
    }

    pub fn upstream(&self) -> &Upstream {
        &self.upstream
    }

    /// Headers configuration adds toward the agent (its own credential, for example).
    pub fn extra_headers(&self) -> &[(String, String)] {
        &self.headers
    }

    /// A peer for the agent. The host is resolved again after `RESOLVE_TTL`, so a
    /// restarted container under a new address is found without a lookup per request.
    pub async fn peer(&self) -> Result<HttpPeer, AgentError> {
        let addr = resolve(&self.upstream.authority, &self.resolved).await?;
        Ok(self.peer_at(addr))
    }

    fn peer_at(&self, addr: SocketAddr) -> HttpPeer {
        let mut peer = HttpPeer::new(addr, false, String::new());
        peer.options.connection_timeout = Some(self.connect_timeout);
        peer.options.read_timeout = Some(self.idle_timeout);
        peer
    }

    /// The agent's card, read again once `RESOLVE_TTL` has passed (`CARD_RETRY` after it
    /// could not be read); `None` when there is no reader or the agent did not give it.
    pub async fn card(&self) -> Option<Arc<Value>> {
        let reader = self.card.reader.as_ref()?;
        let cached = self
            .card
            .read
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let fresh = |(at, card): &(Instant, Option<Arc<Value>>)| {
            let ttl = if card.is_some() {
                RESOLVE_TTL
            } else {
                CARD_RETRY
            };
            at.elapsed() < ttl
        };
        if let Some((_, card)) = cached.filter(fresh) {
            return card;
        }
        let trace = tracing::Span::none();
        let card = match self.send_http(&reader.request, None, "", &trace).await {
            Ok(mut response) => {
                let body = response.read_to_end(1 << 20).await.ok();
                let ok = (200..300).contains(&response.status);
                self.release(response).await;
                body.filter(|_| ok)
                    .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                    .map(Arc::new)
            }
            Err(_) => None,
        };
        if card.is_none() {
            tracing::debug!(path = %reader.request.path, "the agent's card could not be read");
        }
        *self.card.read.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((Instant::now(), card.clone()));
        card
    }

    /// The adapter to call the agent with: `configured`, or the older one its reader names
    /// when the agent's card (as last read) says the agent speaks only that.
    pub fn adapter(&self, configured: &'static dyn Adapter) -> &'static dyn Adapter {
        let Some(older) = self.card.reader.as_ref().and_then(|r| r.older) else {
            return configured;
        };
        let read = self.card.read.lock().unwrap_or_else(|p| p.into_inner());
        match read.as_ref().and_then(|(_, card)| card.as_deref()) {
            Some(card) if (older.only)(card) => older.upstream,
            _ => configured,
        }
    }

    /// The agent's gRPC `host:port`: configured, or read from its card.
    async fn grpc_authority(&self) -> Result<String, AgentError> {
        if let Some(configured) = &self.grpc.configured {
            return Ok(configured.clone());
        }
        let reader = self.card.reader.as_ref();
        let Some(address) = reader.and_then(|r| r.grpc_address) else {
            return Err(AgentError::Locate(
                "this agent protocol is not called over gRPC".into(),
            ));
        };
        let path = reader.map_or("", |r| r.request.path.as_str());
        self.card()
            .await
            .and_then(|card| address(&card))
            .ok_or_else(|| {
                AgentError::Locate(format!(
                    "{path} names no v1.0 GRPC interface (or cannot be read); set a2a_grpc_upstream"
                ))
            })
    }

    /// Sends `request` (its path below the upstream's base path) and returns once the
    /// response header has arrived. `account_id` is stamped as the gateway's identity.
    pub async fn send(
        &self,
        request: &AgentRequest,
        account_id: &str,
    ) -> Result<AgentResponse, AgentError> {
        let trace = spans::agent_request(request.method, &request.path);
        let sent = match &request.grpc {
            Some(message) => self.call(request, message, account_id, &trace).await,
            None => {
                let path = match &self.card.reader {
                    Some(reader) => self
                        .card()
                        .await
                        .and_then(|c| (reader.relocate)(&c, request)),
                    None => None,
                };
                self.send_http(request, path.as_deref(), account_id, &trace)
                    .await
            }
        };
        match sent {
            Ok(mut response) => {
                spans::http_status(&trace, response.status);
                response.trace = trace;
                Ok(response)
            }
            Err(e) => {
                spans::failed(&trace, &e.to_string());
                Err(e)
            }
        }
    }

    /// An HTTP/1.1 request, up to its response header: to `path` (from the agent's
    /// card, already below any base path) or to its own path below the upstream's base.
    async fn send_http(
        &self,
        request: &AgentRequest,
        path: Option<&str>,
        account_id: &str,
        trace: &tracing::Span,
    ) -> Result<AgentResponse, AgentError> {
        let peer = self.peer().await?;
        let mut http = self.connect(&peer).await?;
        let io = |e: Box<pingora::Error>| AgentError::Io(e.to_string());
        let uri = match path {
            Some(path) => path.to_owned(),
            None => format!("{}{}", self.upstream.base_path, request.path),
        };
        let mut req = RequestHeader::build(request.method, uri.as_bytes(), None).map_err(io)?;
        req.insert_header("host", &self.upstream.authority)
            .map_err(io)?;
        req.insert_header("accept", "text/event-stream, application/json")
            .map_err(io)?;
        let body = match &request.body {
            Some(body) => {
                let bytes = serde_json::to_vec(body).map_err(|e| AgentError::Io(e.to_string()))?;
                req.insert_header("content-type", "application/json")
                    .map_err(io)?;
                Some(bytes)
            }
            None => None,
        };
        let len = body.as_ref().map_or(0, Vec::len);
        if body.is_some() || request.method != "GET" {
            req.insert_header("content-length", len.to_string())
                .map_err(io)?;
        }
        self.stamp(&mut req, request, account_id, trace)
            .map_err(io)?;
        http.write_request_header(Box::new(req)).await.map_err(io)?;
        if let Some(body) = body {
            http.write_request_body(Bytes::from(body), true)
                .await
                .map_err(io)?;
        }
        http.finish_request_body().await.map_err(io)?;
        http.read_response_header().await.map_err(io)?;
        let header = http
            .response_header()
            .ok_or_else(|| AgentError::Io("no response header".into()))?;
        let status = header.status.as_u16();
        let content_type = content_type(header);
        let caching = caching(header);
        Ok(AgentResponse {
            status,
            content_type,
            caching,
            http,
            peer,
            grpc: None,
            trace: tracing::Span::none(),
        })
    }

    /// A gRPC call: `message` framed, to the agent's gRPC address over HTTP/2 without TLS
    /// (prior knowledge); returns once the response header has arrived.
    async fn call(
        &self,
        request: &AgentRequest,
        message: &[u8],
        account_id: &str,
        trace: &tracing::Span,
    ) -> Result<AgentResponse, AgentError> {
        let authority = self.grpc_authority().await?;
        let addr = resolve(&authority, &self.grpc.resolved).await?;
        let mut peer = self.peer_at(addr);
        peer.options.set_http_version(2, 2);
        peer.options.max_h2_streams = H2_STREAMS;
        let mut http = self.connect(&peer).await?;
        let io = |e: Box<pingora::Error>| AgentError::Io(e.to_string());
        // The authority in the URI (h2's `:authority`, with `:scheme` http), no Host.
        let uri: http::Uri = format!("http://{authority}{}", request.path)
            .parse()
            .map_err(|e| AgentError::Io(format!("gRPC call {}: {e}", request.path)))?;
        let mut req = RequestHeader::build("POST", request.path.as_bytes(), None).map_err(io)?;
        req.set_uri(uri);
        req.insert_header("content-type", grpc::CONTENT_TYPE)
            .map_err(io)?;
        req.insert_header("te", "trailers").map_err(io)?;
        self.stamp(&mut req, request, account_id, trace)
            .map_err(io)?;
        http.write_request_header(Box::new(req)).await.map_err(io)?;
        http.write_request_body(Bytes::from(grpc::frame(message)), true)
            .await
            .map_err(io)?;
        http.read_response_header().await.map_err(io)?;
        let header = http
            .response_header()
            .ok_or_else(|| AgentError::Io("no response header".into()))?;
        let content_type = content_type(header);
        // A call that failed at once has its status in its only header block.
        let at_once = Status::from_headers(header_pairs(&header.headers));
        let status = match &at_once {
            Some(s) => s.code.http_status(),
            None => header.status.as_u16(),
        };
        Ok(AgentResponse {
            status,
            content_type,
            caching: Vec::new(),
            http,
            peer,
            grpc: Some(at_once),
            trace: tracing::Span::none(),
        })
    }

    /// A connection (or an HTTP/2 stream) to `peer`, with the agent's idle timeout.
    pub async fn connect(&self, peer: &HttpPeer) -> Result<HttpSession, AgentError> {
        let (mut http, _reused) = self
            .connector
            .get_http_session(peer)
            .await
            .map_err(|e| AgentError::Connect(e.to_string()))?;
        http.set_read_timeout(Some(self.idle_timeout));
        Ok(http)
    }

    /// The request's protocol headers, then the gateway's account and the configured
    /// headers toward the agent (which win), and `trace`'s context when traces are on.
    fn stamp(
        &self,
        req: &mut RequestHeader,
        request: &AgentRequest,
        account_id: &str,
        trace: &tracing::Span,
    ) -> pingora::Result<()> {
        for (name, value) in &request.headers {
            req.insert_header(name.clone(), value.as_str())?;
        }
        req.insert_header(policies::ACCOUNT_HEADER, account_id)?;
        for (name, value) in &self.headers {
            req.insert_header(name.clone(), value.as_str())?;
        }
        spans::inject(trace, |name, value| {
            let _ = req.insert_header(name.to_owned(), value);
        });
        Ok(())
    }

    /// Sends `request` and reads the whole answer, keeping its first `cap` bytes.
    pub async fn exchange(
        &self,
        request: &AgentRequest,
        account_id: &str,
        cap: usize,
    ) -> Result<(u16, String, Vec<u8>), AgentError> {
        Ok(self.exchange_relayed(request, account_id, cap).await?.0)
    }

    /// `exchange`, and the answer's caching headers (for an answer relayed to a client).
    pub async fn exchange_relayed(
        &self,
        request: &AgentRequest,
        account_id: &str,
        cap: usize,
    ) -> Result<((u16, String, Vec<u8>), Vec<(String, String)>), AgentError> {
        let mut response = self.send(request, account_id).await?;
        let body = response.read_to_end(cap).await?;
        let (status, content_type) = (response.status, response.content_type.clone());
        let caching = std::mem::take(&mut response.caching);
        self.release(response).await;
        Ok(((status, content_type, body), caching))
    }

    /// Returns a fully read connection to the pool for the next run.
    pub async fn release(&self, response: AgentResponse) {
        self.connector
            .release_http_session(response.http, &response.peer, Some(Duration::from_secs(60)))
            .await;
    }
}
