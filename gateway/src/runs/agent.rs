//! The agent connection used by runs: one HTTP/1.1 request through Pingora's connector,
//! with the response body handed over piece by piece. Owned by a run task, not by any
//! client connection, so a client leaving never closes it.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use pingora::connectors::http::Connector;
use pingora::http::RequestHeader;
use pingora::protocols::http::client::HttpSession;
use pingora::upstreams::peer::HttpPeer;

use runtime_adapter::AgentRequest;

use crate::config::{Config, Upstream};

/// Why talking to the agent failed.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("cannot resolve the agent address {0}: {1}")]
    Resolve(String, String),
    #[error("cannot reach the agent: {0}")]
    Connect(String),
    #[error("the agent connection failed: {0}")]
    Io(String),
}

/// How to reach the agent, shared by runs and the pass-through proxy.
pub struct Agent {
    connector: Connector,
    upstream: Upstream,
    headers: Vec<(String, String)>,
    connect_timeout: Duration,
    idle_timeout: Duration,
    resolved: Mutex<Option<(Instant, SocketAddr)>>,
}

const RESOLVE_TTL: Duration = Duration::from_secs(5);

/// An agent response whose body is still being read.
pub struct AgentResponse {
    pub status: u16,
    pub content_type: String,
    http: HttpSession,
    peer: HttpPeer,
}

impl AgentResponse {
    /// The next piece of the body; `None` at its end.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, AgentError> {
        self.http
            .read_response_body()
            .await
            .map_err(|e| AgentError::Io(e.to_string()))
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

impl Agent {
    pub fn new(config: &Config) -> Self {
        Self::at(
            config.upstream.clone(),
            config.upstream_headers.clone(),
            config,
        )
    }

    /// A connection to another agent-like server (the compaction summarizer), with the
    /// agent's timeouts and `headers` of its own.
    pub fn at(upstream: Upstream, headers: Vec<(String, String)>, config: &Config) -> Self {
        Agent {
            connector: Connector::new(None),
            upstream,
            headers,
            connect_timeout: config.upstream_connect_timeout,
            idle_timeout: config.upstream_idle_timeout,
            resolved: Mutex::new(None),
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
        let cached = *self.resolved.lock().unwrap_or_else(|p| p.into_inner());
        let addr = match cached {
            Some((at, addr)) if at.elapsed() < RESOLVE_TTL => addr,
            _ => {
                let addr: SocketAddr = tokio::net::lookup_host(&self.upstream.authority)
                    .await
                    .map_err(|e| {
                        AgentError::Resolve(self.upstream.authority.clone(), e.to_string())
                    })?
                    .next()
                    .ok_or_else(|| {
                        AgentError::Resolve(self.upstream.authority.clone(), "no address".into())
                    })?;
                *self.resolved.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some((Instant::now(), addr));
                addr
            }
        };
        let mut peer = HttpPeer::new(addr, false, String::new());
        peer.options.connection_timeout = Some(self.connect_timeout);
        peer.options.read_timeout = Some(self.idle_timeout);
        Ok(peer)
    }

    /// Sends `request` (its path below the upstream's base path) and returns once the
    /// response header has arrived. `account_id` is stamped as the gateway's identity.
    pub async fn send(
        &self,
        request: &AgentRequest,
        account_id: &str,
    ) -> Result<AgentResponse, AgentError> {
        let peer = self.peer().await?;
        let (mut http, _reused) = self
            .connector
            .get_http_session(&peer)
            .await
            .map_err(|e| AgentError::Connect(e.to_string()))?;
        http.set_read_timeout(Some(self.idle_timeout));
        let io = |e: Box<pingora::Error>| AgentError::Io(e.to_string());
        let uri = format!("{}{}", self.upstream.base_path, request.path);
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
        for (name, value) in &request.headers {
            req.insert_header(name.clone(), value.as_str())
                .map_err(io)?;
        }
        req.insert_header(policies::ACCOUNT_HEADER, account_id)
            .map_err(io)?;
        for (name, value) in &self.headers {
            req.insert_header(name.clone(), value.as_str())
                .map_err(io)?;
        }
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
        let content_type = header
            .headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        Ok(AgentResponse {
            status,
            content_type,
            http,
            peer,
        })
    }

    /// Sends `request` and reads the whole answer, keeping its first `cap` bytes.
    pub async fn exchange(
        &self,
        request: &AgentRequest,
        account_id: &str,
        cap: usize,
    ) -> Result<(u16, String, Vec<u8>), AgentError> {
        let mut response = self.send(request, account_id).await?;
        let body = response.read_to_end(cap).await?;
        let (status, content_type) = (response.status, response.content_type.clone());
        self.release(response).await;
        Ok((status, content_type, body))
    }

    /// Returns a fully read connection to the pool for the next run.
    pub async fn release(&self, response: AgentResponse) {
        self.connector
            .release_http_session(response.http, &response.peer, Some(Duration::from_secs(60)))
            .await;
    }
}
