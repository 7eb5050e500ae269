//! The Pingora service: routes each request to a run, a local answer, or the agent
//! through the normal proxy pipeline with the tee attached.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use http::Method;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::proxy::{ProxyHttp, Session};
use pingora::upstreams::peer::HttpPeer;
use pingora::{Error, ErrorType, Result};
use policies::input::AttachmentPolicy;
use policies::{AuthError, Authenticator, Identity, IdentityHeaders, Limited, RateLimits};
use runtime_adapter::sse::SseFrame;
use runtime_adapter::{
    surface, Protocol, RunInfo, SessionRef, StreamRenderer, Surface, TurnRequest,
};
use serde_json::{json, Value};
use session_log::{Event, Hub, Store, Subscription, Writer};
use tokio::runtime::Handle;

use crate::agent::Agent;
use crate::config::Config;
use crate::core::on_core;
use crate::runs::{new_id, Runs, StartError, StartedRun};
use crate::tee::{Tee, PASSTHROUGH_SESSION};
use crate::{attachments, control, respond, responses_api, stream};

/// Everything the request path needs, shared by all connections.
pub struct State {
    pub config: Config,
    pub core: Handle,
    /// Usable from any runtime (see `core::CoreStore`).
    pub store: Arc<dyn Store>,
    pub hub: Hub,
    pub writer: Writer,
    pub runs: Arc<Runs>,
    pub agent: Arc<Agent>,
    /// Decides the account of every request but health checks.
    pub auth: Authenticator,
    /// Requests per second per account and credential, and concurrent runs (also held by
    /// `runs`, which takes a slot per run).
    pub limits: Arc<RateLimits>,
    /// Identity headers a client may never send toward the agent.
    pub identity_headers: IdentityHeaders,
    /// What `input_file`/`input_image` data URLs may contain.
    pub attachments: AttachmentPolicy,
    /// Body size, rate and JSON depth for bodies Tether reads itself.
    pub input: InputLimits,
    /// The client surface of a stateful agent protocol (A2A, ADK), which claims its own
    /// paths; `None` for the OpenAI protocols, whose paths the gateway routes itself.
    pub protocol_surface: Option<&'static dyn Surface>,
}

pub struct Gateway {
    pub state: Arc<State>,
}

/// Per-request state.
pub struct Ctx {
    /// The authenticated account (set in `request_filter` before anything else runs).
    account_id: String,
    tee: Option<Tee>,
    /// Pass-through request body seen so far, for the size and rate limits.
    body_bytes: usize,
    body_started: Option<Instant>,
    /// Pass-through body bytes read (and so checked) in `request_filter` that Pingora
    /// will not replay upstream itself (its retry buffer overflowed): sent ahead of the
    /// rest of the body by `request_body_filter`.
    body_prefix: Option<Bytes>,
}

/// How much of a chunked pass-through body is read and checked before the agent is
/// contacted: Pingora's retry buffer (64 KiB in 0.9) replays a body read that far.
const PREFETCH_BYTES: usize = 64 * 1024;

/// Which API a path belongs to, so refusals come in that API's error format.
#[derive(Clone, Copy)]
enum Area {
    /// A path the agent protocol's surface claims (A2A, ADK): its own error bodies.
    Protocol(&'static dyn Surface),
    /// `/v1/*` answered by Tether: OpenAI error bodies.
    OpenAi,
    /// `/agentengine/api/v1/<Action>`: the control envelope.
    Control,
    /// Everything proxied to the agent: a plain JSON error.
    PassThrough,
}

impl Area {
    fn of(state: &State, method: &Method, path: &str) -> Area {
        if let Some(surface) = state.protocol_surface {
            if surface.claims(method.as_str(), path) {
                return Area::Protocol(surface);
            }
        }
        if path.starts_with(control::PREFIX) {
            Area::Control
        } else if path == "/v1/responses"
            || path == "/v1/chat/completions"
            || path.starts_with("/v1/responses/")
        {
            Area::OpenAi
        } else {
            Area::PassThrough
        }
    }
}

/// Request-input limits that free functions (`read_body`, used by the control API too)
/// need; set once at start-up from `[limits]`.
#[derive(Clone, Debug)]
pub struct InputLimits {
    pub max_body_bytes: usize,
    pub max_json_depth: usize,
    /// Slowest accepted average body upload.
    pub min_body_bytes_per_second: u64,
    /// Time a body may take on top of what the minimum rate allows, and the longest
    /// silence between two body reads.
    pub body_grace: Duration,
}

/// An error to send in the surface's own format.
pub struct ApiError {
    pub status: u16,
    pub kind: &'static str,
    pub code: &'static str,
    pub param: Option<String>,
    pub message: String,
    /// Extra response headers (Retry-After and friends on a 429).
    pub headers: Vec<(&'static str, String)>,
}

impl ApiError {
    pub fn new(
        status: u16,
        kind: &'static str,
        code: &'static str,
        message: impl Into<String>,
    ) -> Self {
        ApiError {
            status,
            kind,
            code,
            param: None,
            message: message.into(),
            headers: Vec::new(),
        }
    }

    /// A 429 from a rate limit or the concurrent-run cap.
    pub fn limited(l: &Limited) -> Self {
        let mut e = ApiError::new(
            Limited::STATUS,
            "rate_limit_error",
            "rate_limit_exceeded",
            l.to_string(),
        );
        e.headers = l.headers().to_vec();
        e
    }

    /// The store failed: logged here with `context`, told to the client without detail.
    pub fn store_unavailable(error: &dyn std::fmt::Display, context: &str) -> Self {
        tracing::error!(%error, "{context}");
        ApiError::new(
            503,
            "server_error",
            "session_store_unavailable",
            "the session store is unavailable",
        )
    }

    /// Sends this error in `surface`'s format.
    pub async fn send(
        &self,
        session: &mut Session,
        surface: &dyn Surface,
        headers: &[(&str, &str)],
    ) -> Result<()> {
        let body = surface.error_body(
            &self.message,
            self.kind,
            self.param.as_deref(),
            Some(self.code),
        );
        let mut all: Vec<(&str, &str)> = headers.to_vec();
        all.extend(self.headers.iter().map(|(k, v)| (*k, v.as_str())));
        respond::json(session, self.status, &body, &all).await
    }

    pub fn with_param(mut self, param: &str) -> Self {
        self.param = Some(param.to_owned());
        self
    }
}

/// Whether a client-chosen session id is acceptable: short, printable, no separators
/// that would make logs or URLs ambiguous.
fn valid_session_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
}

#[async_trait]
impl ProxyHttp for Gateway {
    type CTX = Ctx;

    fn new_ctx(&self) -> Ctx {
        Ctx {
            account_id: policies::LOCAL_ACCOUNT.to_owned(),
            tee: None,
            body_bytes: 0,
            body_started: None,
            body_prefix: None,
        }
    }

    async fn early_request_filter(&self, session: &mut Session, _ctx: &mut Ctx) -> Result<()> {
        let raw = session.as_downstream().as_http1().map_or(Ok(()), |h1| {
            crate::framing::check_raw(&h1.get_headers_raw_bytes())
        });
        let verdict = raw.and_then(|()| crate::framing::check(session.req_header()));
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
                self.readyz(session).await?;
                Ok(true)
            }
            // Unauthenticated like the health checks: scrapers rarely hold API keys, and
            // the page has no per-account labels (nothing about any tenant's traffic but
            // totals). Deployments that expose the port publicly can block the path.
            (Method::GET, "/metrics") => {
                self.metrics(session).await?;
                Ok(true)
            }
            _ => self.route(session, ctx, method, &path).await,
        }
    }
    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut Ctx) -> Result<Box<HttpPeer>> {
        let peer = self
            .state
            .agent
            .peer()
            .await
            .map_err(|e| Error::explain(ErrorType::ConnectError, e.to_string()))?;
        Ok(Box::new(peer))
    }

    async fn upstream_request_filter(
        &self,
        _session: &mut Session,
        req: &mut RequestHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        let agent = &self.state.agent;
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
        let plan = self.state.identity_headers.plan(&req.headers);
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
            tracing::info!(account_id = %ctx.account_id, headers = spoofed, "removed client-supplied identity headers");
        }
        if !self.state.config.forward_authorization {
            req.remove_header("authorization");
            req.remove_header("x-api-key");
        }
        req.insert_header(policies::ACCOUNT_HEADER, &ctx.account_id)?;
        req.insert_header("host", &upstream.authority)?;
        for (name, value) in agent.extra_headers() {
            req.insert_header(name.clone(), value.as_str())?;
        }
        Ok(())
    }

    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        _end_of_stream: bool,
        ctx: &mut Ctx,
    ) -> Result<()> {
        if let Some(prefix) = ctx.body_prefix.take() {
            // Read in `request_filter` and not replayed by Pingora: goes first.
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
        let started = *ctx.body_started.get_or_insert_with(Instant::now);
        if let Some(chunk) = body.as_ref() {
            ctx.body_bytes += chunk.len();
            // A chunked body has no Content-Length to check up front: count it.
            let limit = self.state.config.max_body_bytes;
            if ctx.body_bytes > limit {
                return Err(Error::explain(
                    ErrorType::HTTPStatus(413),
                    format!("request body larger than {limit} bytes"),
                ));
            }
        }
        if too_slow(ctx.body_bytes, started.elapsed(), &self.state.input) {
            return Err(Error::explain(
                ErrorType::HTTPStatus(408),
                "request body arrived too slowly",
            ));
        }
        if let Some(tee) = &mut ctx.tee {
            tee.request_body(body.as_ref());
        }
        Ok(())
    }

    async fn response_filter(
        &self,
        _session: &mut Session,
        resp: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        if let Some(tee) = &mut ctx.tee {
            tee.response_header(resp);
        }
        Ok(())
    }

    fn response_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        _end_of_stream: bool,
        ctx: &mut Ctx,
    ) -> Result<Option<Duration>> {
        if let Some(tee) = &mut ctx.tee {
            tee.response_body(body.as_ref());
        }
        Ok(None)
    }

    async fn logging(&self, session: &mut Session, error: Option<&Error>, ctx: &mut Ctx) {
        crate::metrics::METRICS.request_done(session.response_written().map(|r| r.status.as_u16()));
        if let Some(tee) = ctx.tee.take() {
            tee.finish(error.map(|e| e.to_string()));
        }
    }
}

/// Whether a body of `bytes` after `elapsed` is below the minimum average rate, allowing
/// `body_grace` on top (slow starts and small bodies are not punished).
fn too_slow(bytes: usize, elapsed: Duration, limits: &InputLimits) -> bool {
    let allowed = limits.body_grace.as_secs_f64()
        + bytes as f64 / limits.min_body_bytes_per_second.max(1) as f64;
    elapsed.as_secs_f64() > allowed
}

/// Answers a refusal in the format of the API the path belongs to.
async fn refuse(session: &mut Session, area: Area, path: &str, e: ApiError) -> Result<()> {
    match area {
        Area::Protocol(surface) => e.send(session, surface, &[]).await,
        Area::OpenAi => {
            e.send(session, surface(Protocol::OpenAiResponses), &[])
                .await
        }
        Area::Control => {
            let action = path.get(control::PREFIX.len()..).unwrap_or_default();
            let body = json!({ "Code": e.status, "Message": e.message, "RequestId": new_id("req"), "Action": action, "Data": { "code": e.code } });
            let headers: Vec<(&str, &str)> =
                e.headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            respond::json(session, e.status, &body, &headers).await
        }
        Area::PassThrough => {
            let body = json!({ "error": { "message": e.message, "type": e.kind, "code": e.code } });
            let headers: Vec<(&str, &str)> =
                e.headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            respond::json(session, e.status, &body, &headers).await
        }
    }
}

/// 401 (or 400 for a malformed credential) with a `WWW-Authenticate` challenge. The
/// message is the library's fixed text: the credential is never echoed.
async fn refuse_unauthenticated(
    session: &mut Session,
    area: Area,
    path: &str,
    e: &AuthError,
) -> Result<()> {
    let mut err = ApiError::new(
        e.status(),
        "authentication_error",
        e.code().unwrap_or("authentication_required"),
        e.message(),
    );
    err.headers.push(("www-authenticate", e.www_authenticate()));
    refuse(session, area, path, err).await
}

impl Gateway {
    /// Everything but health checks: authenticate, rate-limit, then route.
    async fn route(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        method: Method,
        path: &str,
    ) -> Result<bool> {
        let area = Area::of(&self.state, &method, path);
        // Boxed, like each handler below: a stream lives for minutes inside this future,
        // which would otherwise be as large as its largest step, for every open stream.
        let identity: Identity =
            match Box::pin(self.state.auth.authenticate(&session.req_header().headers)).await {
                Ok(identity) => identity,
                Err(e) => {
                    refuse_unauthenticated(session, area, path, &e).await?;
                    return Ok(true);
                }
            };
        if let Err(limited) = self.state.limits.check(&identity) {
            tracing::info!(account_id = %identity.account_id, credential = %identity.credential_id, "rate limited");
            crate::metrics::METRICS.rate_limited(crate::metrics::Limit::Requests);
            refuse(session, area, path, ApiError::limited(&limited)).await?;
            return Ok(true);
        }
        ctx.account_id = identity.account_id;
        // Body reads below (runs, control, pass-through) must not stall for the default
        // 60 s per read: a silent client is cut off after the grace time.
        session.set_read_timeout(Some(self.state.input.body_grace));
        if let Area::Protocol(surface) = area {
            Box::pin(crate::protocol_api::serve(
                &self.state,
                session,
                &ctx.account_id,
                surface,
            ))
            .await?;
            return Ok(true);
        }
        match (method, path) {
            (Method::POST, "/v1/responses") if self.state.protocol_surface.is_none() => {
                Box::pin(self.serve_run(session, ctx, Protocol::OpenAiResponses)).await
            }
            (Method::POST, "/v1/chat/completions") if self.state.protocol_surface.is_none() => {
                Box::pin(self.serve_run(session, ctx, Protocol::OpenAiChat)).await
            }
            (method, path) if path.starts_with(control::PREFIX) => {
                let action = &path[control::PREFIX.len()..];
                let allowed = if matches!(action, "SubscribeRunEvents" | "AttachmentContent") {
                    Method::GET
                } else {
                    Method::POST
                };
                if method != allowed {
                    let body = json!({ "Code": 405, "Message": format!("{action} takes {allowed}"), "RequestId": new_id("req"), "Action": action, "Data": null });
                    respond::json(session, 405, &body, &[("allow", allowed.as_str())]).await?;
                    return Ok(true);
                }
                match action {
                    "AttachmentContent" => {
                        Box::pin(attachments::content(&self.state, session, &ctx.account_id))
                            .await?
                    }
                    _ => {
                        Box::pin(control::handle(
                            &self.state,
                            session,
                            &ctx.account_id,
                            action,
                        ))
                        .await?
                    }
                }
                Ok(true)
            }
            (method, path) if path.starts_with("/v1/responses/") => {
                let rest = &path["/v1/responses/".len()..];
                Box::pin(responses_api::handle(
                    &self.state,
                    session,
                    &ctx.account_id,
                    method,
                    rest,
                ))
                .await?;
                Ok(true)
            }
            _ => {
                let declared = session
                    .req_header()
                    .headers
                    .get(http::header::CONTENT_LENGTH)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<usize>().ok());
                if declared.is_some_and(|n| n > self.state.config.max_body_bytes) {
                    let limit = self.state.config.max_body_bytes;
                    let e = ApiError::new(
                        413,
                        "invalid_request_error",
                        "request_too_large",
                        format!("the request body is larger than {limit} bytes"),
                    );
                    refuse(session, Area::PassThrough, path, e).await?;
                    return Ok(true);
                }
                // A chunked body's framing is only checked as it is read: read its start
                // here, before the agent is contacted, so a malformed one (an overflowing
                // chunk size, say) is refused without the agent seeing any of it.
                if crate::framing::is_chunked(session.req_header()) {
                    ctx.body_started = Some(Instant::now());
                    let limits = InputLimits {
                        max_body_bytes: self.state.config.max_body_bytes,
                        ..self.state.input.clone()
                    };
                    match prefetch_body(session, &limits, PREFETCH_BYTES).await {
                        Ok(prefix) => ctx.body_prefix = prefix,
                        Err(e) => {
                            tracing::info!(reason = %e.message, "refused a pass-through body");
                            // The rest of the connection cannot be trusted.
                            session.set_keepalive(None);
                            refuse(session, Area::PassThrough, path, e).await?;
                            return Ok(true);
                        }
                    }
                }
                if self.state.config.tee {
                    let session_id = session
                        .req_header()
                        .headers
                        .get("x-session-id")
                        .and_then(|v| v.to_str().ok())
                        .filter(|id| valid_session_id(id))
                        .unwrap_or(PASSTHROUGH_SESSION)
                        .to_owned();
                    ctx.tee = Some(Tee::start(
                        self.state.writer.clone(),
                        &ctx.account_id,
                        &session_id,
                        session.req_header(),
                        self.state.config.tee_body_cap_bytes,
                    ));
                }
                Ok(false)
            }
        }
    }
}

impl Gateway {
    async fn readyz(&self, session: &mut Session) -> Result<()> {
        let store = self.state.store.clone();
        let ping = tokio::time::timeout(Duration::from_secs(2), store.ping()).await;
        let (status, body) = match ping {
            Ok(Ok(())) => (200, json!({ "status": "ready", "store": store.backend() })),
            Ok(Err(e)) => (
                503,
                json!({ "status": "unavailable", "store": store.backend(), "error": e.to_string() }),
            ),
            Err(_) => (
                503,
                json!({ "status": "unavailable", "store": store.backend(), "error": "store did not answer in 2s" }),
            ),
        };
        respond::json(session, status, &body, &[]).await
    }

    async fn metrics(&self, session: &mut Session) -> Result<()> {
        let state = &self.state;
        let page = crate::metrics::render(
            &crate::metrics::METRICS,
            &crate::metrics::Gauges {
                writer: state.writer.stats(),
                backend: state.store.backend(),
                subscribers: state.hub.subscribers(),
                followed_sessions: state.hub.active_sessions(),
                active_runs: state.runs.active_count(),
            },
        );
        let mut header = ResponseHeader::build(200, Some(3))?;
        header.insert_header("content-type", "text/plain; version=0.0.4; charset=utf-8")?;
        header.insert_header("content-length", page.len().to_string())?;
        header.insert_header("cache-control", "no-store")?;
        session
            .write_response_header(Box::new(header), false)
            .await?;
        session
            .write_response_body(Some(Bytes::from(page)), true)
            .await
    }

    /// A turn through one of the OpenAI surfaces. Always answers the client itself.
    async fn serve_run(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        protocol: Protocol,
    ) -> Result<bool> {
        let surface = surface(protocol);
        // At the cap: answer before reading the body or storing any attachment. (The run
        // takes its own slot when it starts; this probe is released at once.)
        if let Err(l) = self.state.limits.try_acquire_run(&ctx.account_id) {
            crate::metrics::METRICS.rate_limited(crate::metrics::Limit::Runs);
            ApiError::limited(&l).send(session, surface, &[]).await?;
            return Ok(true);
        }
        let body = match read_body(session, &self.state.input).await {
            Ok(body) => body,
            Err(e) => {
                e.send(session, surface, &[]).await?;
                return Ok(true);
            }
        };
        let header = session
            .req_header()
            .headers
            .get("x-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let parsed = surface.parse_request(&body, header.as_deref());
        drop(body); // not kept while the run streams
        match parsed {
            Ok(turn) => run_turn(&self.state, session, &ctx.account_id, surface, turn).await?,
            Err(e) => {
                let mut err = ApiError::new(400, "invalid_request_error", e.code, e.message);
                err.param = e.param;
                err.send(session, surface, &[]).await?;
            }
        }
        Ok(true)
    }
}

/// Starts a run for `turn` and answers the client: the run's stream, or its whole
/// response once it ends.
pub async fn run_turn(
    state: &State,
    session: &mut Session,
    account_id: &str,
    surface: &'static dyn Surface,
    turn: TurnRequest,
) -> Result<()> {
    // What the answer needs of the turn; the run's start takes the rest. The start is
    // boxed so that its future is not kept in this one while the run streams.
    let stream = turn.stream;
    let client = turn.extra.get("client").cloned().unwrap_or(Value::Null);
    let (started, mut events) = match Box::pin(prepare_run(state, account_id, surface, turn)).await
    {
        Ok(started) => started,
        Err((e, session_id)) => {
            let headers: Vec<(&str, &str)> = session_id
                .as_deref()
                .map(|s| ("x-session-id", s))
                .into_iter()
                .collect();
            return e.send(session, surface, &headers).await;
        }
    };
    let info = RunInfo {
        run_id: started.run_id.clone(),
        session_id: started.session_id.clone(),
        model: started.model.clone(),
        created_at: chrono::Utc::now().timestamp(),
        client,
    };
    let response_id = surface.response_id(&started.run_id);
    let headers = [
        ("x-session-id", started.session_id.as_str()),
        ("x-run-id", started.run_id.as_str()),
        ("x-response-id", response_id.as_str()),
        ("x-invocation-id", started.invocation_id.as_str()),
    ];
    if stream {
        stream_run(session, surface, &info, &mut events, &headers).await;
        Ok(())
    } else {
        // Boxed too: the streaming path would otherwise carry its larger future.
        Box::pin(respond_when_done(
            session,
            surface,
            &info,
            &mut events,
            &headers,
        ))
        .await
    }
}

/// Resolves the session and starts the run; returns it with the subscription its client
/// follows. On error, returns the error and the session id if one was resolved. Nothing
/// is written before every check has passed.
async fn prepare_run(
    state: &State,
    account_id: &str,
    surface: &'static dyn Surface,
    turn: TurnRequest,
) -> std::result::Result<(StartedRun, Subscription), (ApiError, Option<String>)> {
    let session_id = resolve_session(state, account_id, surface, &turn.session)
        .await
        .map_err(|e| (e, None))?;
    // Every attachment is checked before any is stored: a refused one writes nothing.
    let (turn, uploads) = attachments::extract(&state.attachments, turn).map_err(|e| (e, None))?;
    attachments::save(&*state.store, account_id, uploads)
        .await
        .map_err(|e| (e, None))?;
    let runs = state.runs.clone();
    let (account, sid) = (account_id.to_owned(), session_id.clone());
    let follow = Subscription::before_append(state.store.clone(), &state.hub, account_id, &sid);
    on_core(&state.core, async move {
        runs.start(&account, &sid, turn, follow).await
    })
    .await
    .map_err(|e| {
        let err = match e {
            StartError::SessionBusy(_) => ApiError::new(
                409,
                "invalid_request_error",
                "conversation_busy",
                format!("{e}; wait for it to finish or cancel it"),
            ),
            StartError::ShuttingDown => {
                ApiError::new(503, "server_error", "shutting_down", e.to_string())
            }
            StartError::TooManyRuns(ref l) => {
                crate::metrics::METRICS.rate_limited(crate::metrics::Limit::Runs);
                ApiError::limited(l)
            }
            StartError::Store(_) | StartError::Write(_) => {
                ApiError::store_unavailable(&e, "cannot start a run")
            }
        };
        (err, Some(session_id))
    })
}

async fn resolve_session(
    state: &State,
    account_id: &str,
    surface: &dyn Surface,
    reference: &SessionRef,
) -> std::result::Result<String, ApiError> {
    match reference {
        SessionRef::New => Ok(new_id("sess")),
        SessionRef::Named(id) if valid_session_id(id) => Ok(id.clone()),
        SessionRef::Named(id) => Err(ApiError::new(
            400,
            "invalid_request_error",
            "invalid_value",
            format!(
                "session id {id:?} is not valid: use 1-128 letters, digits, '-', '_', '.' or ':'"
            ),
        )
        .with_param("conversation")),
        SessionRef::AfterResponse(response_id) => {
            let not_found = || {
                ApiError::new(
                    404,
                    "invalid_request_error",
                    "previous_response_not_found",
                    format!("Previous response with id '{response_id}' not found."),
                )
                .with_param("previous_response_id")
            };
            let run_id = surface.run_id(response_id).ok_or_else(not_found)?;
            match state.store.run(account_id, &run_id).await {
                Ok(Some(run)) => Ok(run.session_id),
                Ok(None) => Err(not_found()),
                Err(e) => Err(ApiError::store_unavailable(
                    &e,
                    "cannot resolve previous_response_id",
                )),
            }
        }
    }
}

/// Reads the start of a pass-through body, at least `want` bytes or to its end, within
/// `limits` (size and arrival rate), with Pingora's retry buffer on so the proxy
/// pipeline replays what was read. Returns what was read when the retry buffer
/// overflowed (Pingora then replays nothing and the caller must send it).
async fn prefetch_body(
    session: &mut Session,
    limits: &InputLimits,
    want: usize,
) -> std::result::Result<Option<Bytes>, ApiError> {
    let limit = limits.max_body_bytes;
    let too_slow_error = || {
        ApiError::new(
            408,
            "invalid_request_error",
            "request_timeout",
            "the request body arrived too slowly",
        )
    };
    session.enable_retry_buffering();
    let started = Instant::now();
    let mut body = Vec::new();
    while body.len() < want && !session.is_body_done() {
        let budget = limits.body_grace.as_secs_f64()
            + (body.len() + 1) as f64 / limits.min_body_bytes_per_second.max(1) as f64;
        let left = Duration::from_secs_f64(budget).saturating_sub(started.elapsed());
        let read = match tokio::time::timeout(left, session.read_request_body()).await {
            Ok(read) => read,
            Err(_) => return Err(too_slow_error()),
        };
        match read {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > limit {
                    return Err(ApiError::new(
                        413,
                        "invalid_request_error",
                        "request_too_large",
                        format!("the request body is larger than {limit} bytes"),
                    ));
                }
                body.extend_from_slice(&chunk);
                if too_slow(body.len(), started.elapsed(), limits) {
                    return Err(too_slow_error());
                }
            }
            Ok(None) => break,
            Err(e) if e.etype() == &ErrorType::ReadTimedout => return Err(too_slow_error()),
            Err(e) => {
                return Err(ApiError::new(
                    400,
                    "invalid_request_error",
                    "invalid_body",
                    format!("cannot read the request body: {e}"),
                ))
            }
        }
    }
    if !session.retry_buffer_truncated() {
        return Ok(None);
    }
    // Pingora replays nothing once its buffer overflowed, and nothing at all for a body
    // already read to its end: only a body still being read can be forwarded this way.
    if session.is_body_done() {
        return Err(ApiError::new(
            500,
            "server_error",
            "internal_error",
            "the request body could not be forwarded",
        ));
    }
    Ok(Some(Bytes::from(body)))
}

/// Reads the whole request body within `limits`: size, arrival rate and JSON depth.
pub async fn read_body(
    session: &mut Session,
    limits: &InputLimits,
) -> std::result::Result<Vec<u8>, ApiError> {
    let limit = limits.max_body_bytes;
    let too_large = || {
        ApiError::new(
            413,
            "invalid_request_error",
            "request_too_large",
            format!("the request body is larger than {limit} bytes"),
        )
    };
    if let Some(len) = session
        .req_header()
        .headers
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
    {
        if len > limit {
            return Err(too_large());
        }
    }
    let too_slow_error = || {
        ApiError::new(
            408,
            "invalid_request_error",
            "request_timeout",
            "the request body arrived too slowly",
        )
    };
    let started = Instant::now();
    let mut body = Vec::new();
    loop {
        // However the client trickles, the whole body must arrive at the minimum rate (plus
        // the grace time); pingora's per-read timeout alone would let a byte a minute through.
        let budget = limits.body_grace.as_secs_f64()
            + (body.len() + 1) as f64 / limits.min_body_bytes_per_second.max(1) as f64;
        let left = Duration::from_secs_f64(budget).saturating_sub(started.elapsed());
        let read = match tokio::time::timeout(left, session.read_request_body()).await {
            Ok(read) => read,
            Err(_) => return Err(too_slow_error()),
        };
        match read {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > limit {
                    return Err(too_large());
                }
                body.extend_from_slice(&chunk);
                if too_slow(body.len(), started.elapsed(), limits) {
                    return Err(too_slow_error());
                }
            }
            Ok(None) => {
                // Depth is checked before any parser sees the body (runs and control
                // actions alike); malformed JSON is left to them, they say it better.
                if !body.iter().all(u8::is_ascii_whitespace) {
                    if let Err(e @ policies::InputLimitError::TooDeep { .. }) =
                        policies::input::check_json(&body, limits.max_json_depth)
                    {
                        return Err(ApiError::new(
                            400,
                            "invalid_request_error",
                            "json_too_deep",
                            e.to_string(),
                        ));
                    }
                }
                return Ok(body);
            }
            Err(e) if e.etype() == &ErrorType::ReadTimedout => return Err(too_slow_error()),
            Err(e) => {
                return Err(ApiError::new(
                    400,
                    "invalid_request_error",
                    "invalid_body",
                    format!("cannot read the request body: {e}"),
                ))
            }
        }
    }
}

/// Streams the run to the client until its terminal event, or until the client leaves
/// (the run goes on without it). The SSE header waits for the first frame: a run that
/// fails before its surface has anything to show (an A2A or ADK agent refusing the turn)
/// is answered with the surface's plain error response, as the agent itself would.
async fn stream_run(
    session: &mut Session,
    surface: &dyn Surface,
    info: &RunInfo,
    events: &mut Subscription,
    headers: &[(&str, &str)],
) {
    let mut renderer = surface.stream_renderer(info);
    let mut watch_client = true;
    // What came before the first frame, for the plain response of a run that fails
    // first. Dropped when the stream starts: it would otherwise stay for the stream's life.
    let mut held = Vec::new();
    let first = loop {
        let event = match stream::next_event(session, events, &mut watch_client, None).await {
            Ok(event) => event,
            Err(stream::End::LogUnavailable) => break None,
            Err(_) => return, // the client left; the run goes on
        };
        let step = render_step(&mut *renderer, &event);
        held.push((*event).clone());
        if step.last && event.run_status() != Some(session_log::RunStatus::Completed) {
            let (status, body) = surface.final_response(info, &held);
            let _ = respond::json(session, status, &body, headers).await;
            return;
        }
        if !step.frames.is_empty() || step.last {
            break Some(step);
        }
    };
    drop(held);
    if respond::sse_start(session, headers).await.is_err() {
        return;
    }
    let end = match first {
        Some(step) => {
            if stream::write_frames(session, &step.frames, step.last)
                .await
                .is_err()
            {
                return;
            }
            if step.last {
                return;
            }
            stream::pump(session, events, None, |event| {
                render_step(&mut *renderer, event)
            })
            .await
        }
        None => stream::End::LogUnavailable,
    };
    if end == stream::End::LogUnavailable {
        // Say so in the stream rather than hang; the client can resume from its last id.
        let body = surface.error_body(
            "the session log is unavailable; resume later",
            "server_error",
            None,
            Some("session_store_unavailable"),
        );
        let _ = stream::write_frames(session, &[SseFrame::json(&body)], true).await;
    }
}

/// Frames for one event; the terminal event also gets the renderer's closing frames,
/// stamped with its seq.
pub fn render_step(renderer: &mut dyn StreamRenderer, event: &Event) -> stream::Step {
    let mut frames = renderer.render(event);
    let last = event.is_terminal();
    if last {
        let seq = event.seq;
        frames.extend(renderer.end().into_iter().map(|f| {
            if f.id.is_none() {
                f.with_id(seq)
            } else {
                f
            }
        }));
    }
    stream::Step { frames, last }
}

/// Waits for the run to end and answers with the whole response.
async fn respond_when_done(
    session: &mut Session,
    surface: &dyn Surface,
    info: &RunInfo,
    events: &mut Subscription,
    headers: &[(&str, &str)],
) -> Result<()> {
    let mut collected = Vec::new();
    let mut watch_client = true;
    loop {
        match stream::next_event(session, events, &mut watch_client, None).await {
            Ok(event) => {
                let last = event.is_terminal();
                collected.push((*event).clone());
                if last {
                    break;
                }
            }
            Err(stream::End::LogUnavailable) => {
                let body = surface.error_body(
                    "the session log is unavailable",
                    "server_error",
                    None,
                    Some("session_store_unavailable"),
                );
                return respond::json(session, 503, &body, headers).await;
            }
            Err(_) => return Ok(()), // the client left; the run goes on
        }
    }
    let (status, body) = surface.final_response(info, &collected);
    respond::json(session, status, &body, headers).await
}
