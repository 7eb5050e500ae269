//! The Pingora service: every request comes in here. Its head is checked first (see
//! `client::head`), then where it comes from (`client::site`: the Host rule on every
//! request, the site rule and CORS preflights on Tether's own paths); health checks and metrics are answered at once; everything else is
//! authenticated, rate-limited and routed (see `route`) to a run, a local API, or the
//! agent through the proxy pipeline, whose remaining phases hand the exchange to
//! `passthrough`.

pub mod deadline;
mod grant;
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

use crate::client::{head, respond, site};
use crate::error::ApiError;
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

    /// The Host rule on every request; on Tether's own paths the site rule (recording a
    /// CORS grant for a configured foreign origin) and the JSON content type.
    fn check_site(&self, session: &mut Session, path: &str) -> Option<site::SiteError> {
        let health = matches!(path, "/healthz" | "/readyz" | "/metrics");
        let req = session.req_header();
        if let Err(e) = self.state.host_rule.check(req, health) {
            return Some(e);
        }
        if !self.tether_answers(path) {
            return None;
        }
        let granted = match self.state.site_rule.check(req) {
            Ok(granted) => granted,
            Err(e) => return Some(e),
        };
        if let Err(e) = site::check_content_type(req) {
            return Some(e);
        }
        if let Some(origin) = granted {
            if let Some(grant) = session.downstream_modules_ctx.get_mut::<grant::Grant>() {
                grant.origin = Some(origin);
            }
        }
        None
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
            || path == "/v1/conversations"
            || path.starts_with("/v1/conversations/")
            || self
                .state
                .protocol_surface
                .is_some_and(|s| s.claims("POST", path) || s.claims("GET", path))
    }
}

#[async_trait]
impl ProxyHttp for Gateway {
    type CTX = Ctx;

    fn init_downstream_modules(&self, modules: &mut pingora::modules::http::HttpModules) {
        // Pingora's default (response compression, off), plus the CORS grant.
        modules
            .add_module(pingora::modules::http::compression::ResponseCompressionBuilder::enable(0));
        modules.add_module(Box::new(grant::GrantBuilder));
    }

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
        if let Some(e) = self.check_site(session, &path) {
            tracing::info!(status = e.status, code = e.code, host = ?session.req_header().headers.get(http::header::HOST), origin = ?session.req_header().headers.get(http::header::ORIGIN), "refused a request by the host or site rule");
            let e = ApiError::new(e.status, "invalid_request_error", e.code, e.message);
            route::refuse_early(&self.state, session, &method, &path, e).await?;
            return Ok(true);
        }
        if self.tether_answers(&path) && site::is_preflight(session.req_header()) {
            // Only origins the site rule let through get here.
            let req = session.req_header();
            let origin = String::from_utf8_lossy(
                req.headers
                    .get(http::header::ORIGIN)
                    .map_or(&b""[..], |o| o.as_bytes()),
            )
            .into_owned();
            let pairs = site::preflight_grant(req, &origin);
            let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
            respond::empty(session, 204, &pairs).await?;
            return Ok(true);
        }
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
