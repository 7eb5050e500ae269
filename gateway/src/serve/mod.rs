//! The Pingora service: every request comes in here. Its head is checked first (see
//! `client::head`); health checks and metrics are answered at once; everything else is
//! authenticated, rate-limited and routed (see `route`) to a run, a local API, or the
//! agent through the proxy pipeline, whose remaining phases hand the exchange to
//! `passthrough`.

pub mod deadline;
mod health;
pub mod listener;
mod route;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use http::Method;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use pingora::upstreams::peer::HttpPeer;
use pingora::{Error, Result};
use serde_json::json;

use crate::client::{head, respond};
use crate::metrics::METRICS;
use crate::passthrough::{self, Exchange};
use crate::state::State;
use crate::ui;

pub struct Gateway {
    pub state: Arc<State>,
}

/// Per-request state.
pub struct Ctx {
    /// The authenticated account (set in `request_filter` before anything else runs).
    account_id: String,
    /// Used when the request goes through to the agent.
    exchange: Exchange,
}

impl Gateway {
    /// The one request-head check (see `client::head`), before anything else runs.
    fn check_head(&self, session: &Session) -> std::result::Result<(), head::HeadError> {
        let raw = session
            .as_downstream()
            .as_http1()
            .map(|h1| h1.get_headers_raw_bytes());
        head::check(session.req_header(), raw.as_deref(), |path| {
            self.tether_answers(path)
        })
    }

    /// Whether Tether answers `path` itself (any method): health, metrics, the console,
    /// control, OpenAI run paths, and what the agent protocol's surface claims.
    fn tether_answers(&self, path: &str) -> bool {
        matches!(path, "/healthz" | "/readyz" | "/metrics")
            || ui::claims(path)
            || path.starts_with(crate::api::PREFIX)
            || path.starts_with("/agentengine/")
            || path == "/v1/responses"
            || path == "/v1/chat/completions"
            || path.starts_with("/v1/responses/")
            || self
                .state
                .protocol_surface
                .is_some_and(|s| s.claims("POST", path) || s.claims("GET", path))
    }
}

#[async_trait]
impl ProxyHttp for Gateway {
    type CTX = Ctx;

    fn new_ctx(&self) -> Ctx {
        Ctx {
            account_id: policies::LOCAL_ACCOUNT.to_owned(),
            exchange: Exchange::default(),
        }
    }

    async fn early_request_filter(&self, session: &mut Session, _ctx: &mut Ctx) -> Result<()> {
        // Requests pipelined behind this one (RFC 9112 §9.3.2) are answered in order on
        // the same connection; without this Pingora drops them.
        session.as_downstream_mut().set_pipelining_enabled(true);
        Ok(())
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        if let Err(e) = self.check_head(session) {
            tracing::info!(reason = %e.message, "refused a malformed request head");
            respond::malformed_head(session, &e.message).await?;
            return Ok(true);
        }
        let (method, path) = {
            let req = session.req_header();
            (req.method.clone(), req.uri.path().to_owned())
        };
        match (method.clone(), path.as_str()) {
            (Method::GET, "/healthz") => {
                respond::json(session, 200, &json!({ "status": "ok" }), &[]).await?;
                Ok(true)
            }
            (Method::GET, "/readyz") => {
                health::readyz(&self.state, session).await?;
                Ok(true)
            }
            // Unauthenticated like the health checks: scrapers rarely hold API keys, and
            // the page has no per-account labels (nothing about any tenant's traffic but
            // totals). Deployments that expose the port publicly can block the path.
            (Method::GET, "/metrics") => {
                health::metrics(&self.state, session).await?;
                Ok(true)
            }
            // The console's files hold no data: served before authentication, so that the
            // page can ask for a credential; everything it then fetches is authenticated.
            (method, path) if ui::claims(path) => {
                ui::serve(session, &method, path).await?;
                Ok(true)
            }
            _ => route::route(&self.state, session, ctx, method, &path).await,
        }
    }

    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut Ctx) -> Result<Box<HttpPeer>> {
        passthrough::peer(&self.state).await
    }

    async fn upstream_request_filter(
        &self,
        _session: &mut Session,
        req: &mut RequestHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        passthrough::upstream_request(&self.state, req, &ctx.account_id, ctx.exchange.trace())
    }

    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        _end_of_stream: bool,
        ctx: &mut Ctx,
    ) -> Result<()> {
        ctx.exchange.request_body(body)
    }

    async fn response_filter(
        &self,
        _session: &mut Session,
        resp: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        ctx.exchange.response_header(resp);
        Ok(())
    }

    fn response_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        _end_of_stream: bool,
        ctx: &mut Ctx,
    ) -> Result<Option<Duration>> {
        ctx.exchange.response_body(body);
        Ok(None)
    }

    /// The proxy pipeline failed before the agent's answer began (or a check of Tether's
    /// own refused the body on its way): answered with Tether's JSON error, with the
    /// gateway's own refusals told as such and never as the agent's failure.
    async fn fail_to_proxy(&self, session: &mut Session, e: &Error, _ctx: &mut Ctx) -> FailToProxy
    where
        Ctx: Send + Sync,
    {
        let error = passthrough::failure(e);
        let code = match &error {
            Some(error) if session.response_written().is_none() => {
                let body = json!({ "error": {
                    "message": error.message, "type": error.kind, "code": error.code } });
                // The request body may be unread or half read: the connection goes.
                session.set_keepalive(None);
                let pairs = [("connection", "close")];
                if let Err(e) = respond::json_undrained(session, error.status, &body, &pairs).await
                {
                    tracing::debug!(%e, "could not answer a failed pass-through");
                }
                error.status
            }
            _ => 0,
        };
        FailToProxy {
            error_code: code,
            can_reuse_downstream: false,
        }
    }

    async fn logging(&self, session: &mut Session, error: Option<&Error>, ctx: &mut Ctx) {
        METRICS.request_done(session.response_written().map(|r| r.status.as_u16()));
        ctx.exchange.finish(error);
    }
}
