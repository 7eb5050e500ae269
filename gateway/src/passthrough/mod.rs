//! The pass-through path: every request Tether does not answer itself goes to the agent
//! through Pingora's proxy pipeline, its body within the input limits, its identity
//! headers replaced by the gateway's, and the exchange recorded by the tee. The Pingora
//! phases in `serve` call in here.

pub mod tee;

use std::time::Instant;

use bytes::Bytes;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::proxy::Session;
use pingora::upstreams::peer::HttpPeer;
use pingora::{Error, ErrorType};

use crate::client::body::{prefetch_body, too_large, too_slow, InputLimits};
use crate::error::ApiError;
use crate::ids::valid_session_id;
use crate::state::State;
use crate::telemetry::spans;
use tee::{Tee, PASSTHROUGH_SESSION};

/// How much of a chunked pass-through body is read and checked before the agent is
/// contacted: Pingora's retry buffer (64 KiB in 0.9) replays a body read that far.
const PREFETCH_BYTES: usize = 64 * 1024;

/// One pass-through exchange's state, kept for the request's life.
#[derive(Default)]
pub struct Exchange {
    tee: Option<Tee>,
    /// Request body seen so far, for the size and rate limits.
    body_bytes: usize,
    body_started: Option<Instant>,
    /// Body bytes read (and so checked) in `admit` that Pingora will not replay upstream
    /// itself (its retry buffer overflowed): sent ahead of the rest of the body by
    /// `request_body`.
    body_prefix: Option<Bytes>,
    /// The exchange's span (see `telemetry::spans::passthrough`), ended by `finish`.
    trace: Option<tracing::Span>,
}

impl Exchange {
    /// Lets a request through to the agent: its declared size, and the start of a chunked
    /// body, are checked before the agent is contacted; then the tee is attached. An
    /// error is the refusal to answer instead.
    pub async fn admit(
        &mut self,
        state: &State,
        session: &mut Session,
        account_id: &str,
    ) -> Result<(), ApiError> {
        let header = session.req_header();
        self.trace = Some(spans::passthrough(
            header.method.as_str(),
            header.uri.path(),
            &header.headers,
        ));
        let limit = state.config.max_body_bytes;
        let declared = session
            .req_header()
            .headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<usize>().ok());
        if declared.is_some_and(|n| n > limit) {
            return Err(too_large(limit));
        }
        // A chunked body's framing is only checked as it is read: read its start here,
        // before the agent is contacted, so a malformed one (an overflowing chunk size,
        // say) is refused without the agent seeing any of it.
        if crate::client::framing::is_chunked(session.req_header()) {
            self.body_started = Some(Instant::now());
            let limits = InputLimits {
                max_body_bytes: limit,
                ..state.input.clone()
            };
            match prefetch_body(session, &limits, PREFETCH_BYTES).await {
                Ok(prefix) => self.body_prefix = prefix,
                Err(e) => {
                    tracing::info!(reason = %e.message, "refused a pass-through body");
                    // The rest of the connection cannot be trusted.
                    session.set_keepalive(None);
                    return Err(e);
                }
            }
        }
        if state.config.tee {
            let session_id = session
                .req_header()
                .headers
                .get("x-session-id")
                .and_then(|v| v.to_str().ok())
                .filter(|id| valid_session_id(id))
                .unwrap_or(PASSTHROUGH_SESSION)
                .to_owned();
            self.tee = Some(Tee::start(
                state.writer.clone(),
                account_id,
                &session_id,
                session.req_header(),
                state.config.tee_body_cap_bytes,
            ));
        }
        Ok(())
    }

    /// Counts and checks a piece of the request body on its way to the agent, first
    /// putting back what `admit` read that Pingora does not replay.
    pub fn request_body(&mut self, state: &State, body: &mut Option<Bytes>) -> pingora::Result<()> {
        if let Some(prefix) = self.body_prefix.take() {
            // Read in `admit` and not replayed by Pingora: goes first.
            *body = Some(match body.take() {
                Some(rest) if !rest.is_empty() => {
                    let mut all = Vec::with_capacity(prefix.len() + rest.len());
                    all.extend_from_slice(&prefix);
                    all.extend_from_slice(&rest);
                    Bytes::from(all)
                }
                _ => prefix,
            });
        }
        let started = *self.body_started.get_or_insert_with(Instant::now);
        if let Some(chunk) = body.as_ref() {
            self.body_bytes += chunk.len();
            // A chunked body has no Content-Length to check up front: count it.
            let limit = state.config.max_body_bytes;
            if self.body_bytes > limit {
                return Err(Error::explain(
                    ErrorType::HTTPStatus(413),
                    format!("request body larger than {limit} bytes"),
                ));
            }
        }
        if too_slow(self.body_bytes, started.elapsed(), &state.input) {
            return Err(Error::explain(
                ErrorType::HTTPStatus(408),
                "request body arrived too slowly",
            ));
        }
        if let Some(tee) = &mut self.tee {
            tee.request_body(body.as_ref());
        }
        Ok(())
    }

    pub fn response_header(&mut self, resp: &ResponseHeader) {
        if let Some(trace) = &self.trace {
            spans::http_status(trace, resp.status.as_u16());
        }
        if let Some(tee) = &mut self.tee {
            tee.response_header(resp);
        }
    }

    pub fn response_body(&mut self, body: &Option<Bytes>) {
        if let Some(tee) = &mut self.tee {
            tee.response_body(body.as_ref());
        }
    }

    /// The exchange is over (`error`: how it failed): the tee hands what it has to the
    /// writer.
    pub fn finish(&mut self, error: Option<&Error>) {
        // The span ends here, with the exchange.
        if let (Some(trace), Some(e)) = (self.trace.take(), error) {
            spans::failed(&trace, &e.to_string());
        }
        if let Some(tee) = self.tee.take() {
            tee.finish(error.map(|e| e.to_string()));
        }
    }

    /// The exchange's span, whose context the agent gets.
    pub fn trace(&self) -> Option<&tracing::Span> {
        self.trace.as_ref()
    }
}

/// Where the agent is.
pub async fn peer(state: &State) -> pingora::Result<Box<HttpPeer>> {
    let peer = state
        .agent
        .peer()
        .await
        .map_err(|e| Error::explain(ErrorType::ConnectError, e.to_string()))?;
    Ok(Box::new(peer))
}

/// The request as the agent gets it: under the upstream's base path, without any
/// identity header the client sent (and without its credential unless configured), with
/// the gateway's account and the agent's own headers.
pub fn upstream_request(
    state: &State,
    req: &mut RequestHeader,
    account_id: &str,
    trace: Option<&tracing::Span>,
) -> pingora::Result<()> {
    let agent = &state.agent;
    let upstream = agent.upstream();
    if !upstream.base_path.is_empty() {
        let pq = req.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
        let uri: http::Uri = format!("{}{}", upstream.base_path, pq)
            .parse()
            .map_err(|_| Error::explain(ErrorType::InvalidHTTPHeader, "bad upstream path"))?;
        req.set_uri(uri);
    }
    // Through RequestHeader's own API: it keeps a case-preserving name map beside the
    // HeaderMap, and editing only the map would let the original spelling through.
    let plan = state.identity_headers.plan(&req.headers);
    let spoofed = plan.remove.len();
    for name in plan.remove {
        req.remove_header(&name);
    }
    match plan.connection {
        Some(Some(value)) => req.insert_header(http::header::CONNECTION, value)?,
        Some(None) => {
            req.remove_header(&http::header::CONNECTION);
        }
        None => {}
    }
    if spoofed > 0 {
        tracing::info!(account_id = %account_id, headers = spoofed, "removed client-supplied identity headers");
    }
    if !state.config.forward_authorization {
        req.remove_header("authorization");
        req.remove_header("x-api-key");
    }
    req.insert_header(policies::ACCOUNT_HEADER, account_id)?;
    req.insert_header("host", &upstream.authority)?;
    for (name, value) in agent.extra_headers() {
        req.insert_header(name.clone(), value.as_str())?;
    }
    // With traces on, the agent's parent is this exchange's span, not the client's.
    if let Some(trace) = trace {
        spans::inject(trace, |name, value| {
            let _ = req.insert_header(name.to_owned(), value);
        });
    }
    Ok(())
}
