//! The pass-through path: every request Tether does not answer itself goes to the agent
//! through Pingora's proxy pipeline (or, for a body longer than Pingora replays, sent by
//! `Exchange::forward`), its whole body read within the input limits first, its identity
//! headers replaced by the gateway's, and the exchange recorded by the tee. The Pingora
//! phases in `serve` call in here.

pub mod tee;

use bytes::Bytes;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::proxy::Session;
use pingora::upstreams::peer::HttpPeer;
use pingora::{Error, ErrorType};

use crate::client::body::{read_bytes, InputLimits};
use crate::error::ApiError;
use crate::state::State;
use crate::telemetry::spans;
use tee::{Tee, PASSTHROUGH_SESSION};

/// One pass-through exchange's state, kept for the request's life.
#[derive(Default)]
pub struct Exchange {
    tee: Option<Tee>,
    /// The whole request body, read in `admit`, when it is longer than Pingora replays
    /// (its retry buffer, 64 KiB in 0.9): `forward` sends it itself.
    whole_body: Option<Bytes>,
    /// The exchange's span (see `telemetry::spans::passthrough`), ended by `finish`.
    trace: Option<tracing::Span>,
}

impl Exchange {
    /// Lets a request through to the agent: its whole body is read first, within the size
    /// and rate limits, so a refused request sends the agent nothing at all (whatever its
    /// framing); then the tee is attached. An error is the refusal to answer instead.
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
        let limits = InputLimits {
            max_body_bytes: state.config.max_body_bytes,
            ..state.input.clone()
        };
        // Pingora replays what is read here to the agent, up to its retry buffer's size.
        session.enable_retry_buffering();
        let body = match read_bytes(session, &limits).await {
            Ok(body) => body,
            Err(e) => {
                tracing::info!(reason = %e.message, "refused a pass-through body");
                // The rest of the connection cannot be trusted.
                session.set_keepalive(None);
                return Err(e);
            }
        };
        if session.retry_buffer_truncated() {
            self.whole_body = Some(Bytes::from(body));
        }
        if state.config.tee {
            // `serve::route` refused a session header that is not a valid id.
            let session_id = session
                .req_header()
                .headers
                .get("x-session-id")
                .and_then(|v| v.to_str().ok())
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

    /// Whether `forward` must send this request (its body is longer than Pingora
    /// replays); otherwise the proxy pipeline does.
    pub fn needs_forward(&self) -> bool {
        self.whole_body.is_some()
    }

    /// Sends a request whose whole body `admit` holds to the agent and relays the answer,
    /// recorded by the tee as the proxy pipeline's would be.
    pub async fn forward(
        &mut self,
        state: &State,
        session: &mut Session,
        account_id: &str,
    ) -> pingora::Result<()> {
        let body = self.whole_body.take().unwrap_or_default();
        if let Some(tee) = &mut self.tee {
            tee.request_body(Some(&body));
        }
        let mut req = session.req_header().clone();
        upstream_request(state, &mut req, account_id, self.trace.as_ref())?;
        req.remove_header(&http::header::TRANSFER_ENCODING);
        req.insert_header(http::header::CONTENT_LENGTH, body.len().to_string())?;
        let agent = &state.agent;
        let upstream_failed = |e: String| Error::explain(ErrorType::HTTPStatus(502), e).into_up();
        let peer = agent
            .peer()
            .await
            .map_err(|e| upstream_failed(e.to_string()))?;
        let mut http = agent
            .connect(&peer)
            .await
            .map_err(|e| upstream_failed(e.to_string()))?;
        http.write_request_header(Box::new(req)).await?;
        http.write_request_body(body, true).await?;
        http.finish_request_body().await?;
        http.read_response_header().await?;
        let mut resp = http
            .response_header()
            .cloned()
            .ok_or_else(|| upstream_failed("no response header".into()))?;
        self.response_header(&resp);
        for hop in ["connection", "keep-alive", "transfer-encoding"] {
            resp.remove_header(hop);
        }
        if !resp.headers.contains_key(http::header::CONTENT_LENGTH)
            && session.req_header().version == http::Version::HTTP_11
        {
            resp.insert_header(http::header::TRANSFER_ENCODING, "chunked")?;
        }
        session.write_response_header(Box::new(resp), false).await?;
        while let Some(chunk) = http.read_response_body().await? {
            self.response_body(&Some(chunk.clone()));
            session.write_response_body(Some(chunk), false).await?;
        }
        session
            .write_response_body(Some(Bytes::new()), true)
            .await?;
        Ok(())
    }

    /// Counts and checks a piece of the request body on its way to the agent (the body
    /// `admit` read, replayed by Pingora).
    pub fn request_body(&mut self, body: &mut Option<Bytes>) -> pingora::Result<()> {
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

/// What to tell the client when the proxy pipeline failed with `e` before the agent's
/// answer began: Tether's own refusals of the body (size, rate) as themselves, the agent
/// being unreachable or failing as an upstream error. `None`: the client is gone.
pub fn failure(e: &Error) -> Option<ApiError> {
    match e.etype() {
        ErrorType::HTTPStatus(413) => Some(too_large_message(e)),
        ErrorType::HTTPStatus(408) => Some(ApiError::new(
            408,
            "invalid_request_error",
            "request_timeout",
            "the request body arrived too slowly",
        )),
        ErrorType::HTTPStatus(code) if (400..500).contains(code) => Some(ApiError::new(
            *code,
            "invalid_request_error",
            "invalid_request",
            context(e, "the request was refused"),
        )),
        _ => match e.esource() {
            pingora::ErrorSource::Downstream => match e.etype() {
                ErrorType::WriteError | ErrorType::ReadError | ErrorType::ConnectionClosed => None,
                _ => Some(ApiError::new(
                    400,
                    "invalid_request_error",
                    "invalid_request",
                    "the request could not be read",
                )),
            },
            pingora::ErrorSource::Upstream => Some(ApiError::new(
                502,
                "upstream_error",
                "agent_unavailable",
                "the agent could not be reached or failed before answering",
            )),
            _ => Some(ApiError::new(
                502,
                "upstream_error",
                "agent_unavailable",
                "the agent could not be reached",
            )),
        },
    }
}

fn too_large_message(e: &Error) -> ApiError {
    ApiError::new(
        413,
        "invalid_request_error",
        "request_too_large",
        context(e, "the request body is too large"),
    )
}

fn context(e: &Error, default: &str) -> String {
    e.context
        .as_ref()
        .map_or_else(|| default.to_owned(), |c| c.to_string())
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
