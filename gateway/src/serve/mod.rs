//! The Pingora service: every request comes in here. Health checks and metrics are
//! answered at once, everything else is authenticated, rate-limited and routed (see
//! `route`) to a run, a local API, or the agent through the proxy pipeline, whose
//! remaining phases hand the exchange to `passthrough`.

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
use pingora::proxy::{ProxyHttp, Session};
use pingora::upstreams::peer::HttpPeer;
use pingora::{Error, ErrorType, Result};
use serde_json::json;

use crate::client::{framing, respond};
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
        let raw = session
            .as_downstream()
            .as_http1()
            .map_or(Ok(()), |h1| framing::check_raw(&h1.get_headers_raw_bytes()));
        let verdict = raw.and_then(|()| framing::check(session.req_header()));
        if let Err(why) = verdict {
            tracing::info!(reason = why, "refused an ambiguous request");
            // Pingora sends the status and closes the connection: after ambiguous framing
            // nothing else on it can be trusted.
            return Err(Error::explain(ErrorType::HTTPStatus(400), why));
        }
        Ok(())
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
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
        ctx.exchange.request_body(&self.state, body)
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

    async fn logging(&self, session: &mut Session, error: Option<&Error>, ctx: &mut Ctx) {
        METRICS.request_done(session.response_written().map(|r| r.status.as_u16()));
        ctx.exchange.finish(error);
    }
}
