//! The Pingora service: routes each request to a run, a local answer, or the agent
//! through the normal proxy pipeline with the tee attached.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use http::Method;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::proxy::{ProxyHttp, Session};
use pingora::upstreams::peer::HttpPeer;
use pingora::{Error, ErrorType, Result};
use runtime_adapter::sse::SseFrame;
use runtime_adapter::{
    surface, Protocol, RunInfo, SessionRef, StreamRenderer, Surface, TurnRequest,
};
use serde_json::{json, Value};
use session_log::{Event, EventQuery, Hub, Store, Subscription, Writer};
use tokio::runtime::Handle;

use crate::agent::Agent;
use crate::config::Config;
use crate::core::on_core;
use crate::runs::{new_id, Runs, StartError, StartedRun};
use crate::tee::{Tee, PASSTHROUGH_SESSION};
use crate::{control, respond, responses_api, stream};

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
}

pub struct Gateway {
    pub state: Arc<State>,
}

/// Per-request state.
pub struct Ctx {
    account_id: String,
    tee: Option<Tee>,
}

/// An error to send in the surface's own format.
pub struct ApiError {
    pub status: u16,
    pub kind: &'static str,
    pub code: &'static str,
    pub param: Option<String>,
    pub message: String,
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
        }
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
        respond::json(session, self.status, &body, headers).await
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
        }
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        let (method, path) = {
            let req = session.req_header();
            (req.method.clone(), req.uri.path().to_owned())
        };
        match (method, path.as_str()) {
            (Method::GET, "/healthz") => {
                respond::json(session, 200, &json!({ "status": "ok" }), &[]).await?;
                Ok(true)
            }
            (Method::GET, "/readyz") => {
                self.readyz(session).await?;
                Ok(true)
            }
            (Method::POST, "/v1/responses") => {
                self.serve_run(session, ctx, Protocol::OpenAiResponses)
                    .await
            }
            (Method::POST, "/v1/chat/completions") => {
                self.serve_run(session, ctx, Protocol::OpenAiChat).await
            }
            (method, path) if path.starts_with(control::PREFIX) => {
                let action = &path[control::PREFIX.len()..];
                let allowed = if action == "SubscribeRunEvents" {
                    Method::GET
                } else {
                    Method::POST
                };
                if method == allowed {
                    control::handle(&self.state, session, &ctx.account_id, action).await?;
                } else {
                    let body = json!({ "Code": 405, "Message": format!("{action} takes {allowed}"), "RequestId": new_id("req"), "Action": action, "Data": null });
                    respond::json(session, 405, &body, &[("allow", allowed.as_str())]).await?;
                }
                Ok(true)
            }
            (method, path) if path.starts_with("/v1/responses/") => {
                let rest = &path["/v1/responses/".len()..];
                responses_api::handle(&self.state, session, &ctx.account_id, method, rest).await?;
                Ok(true)
            }
            _ => {
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
        let identity: Vec<http::HeaderName> = req
            .headers
            .keys()
            .filter(|n| policies::is_identity_header(n.as_str()))
            .cloned()
            .collect();
        for name in identity {
            req.remove_header(&name);
        }
        if !self.state.config.forward_authorization {
            req.remove_header("authorization");
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

    async fn logging(&self, _session: &mut Session, error: Option<&Error>, ctx: &mut Ctx) {
        if let Some(tee) = ctx.tee.take() {
            tee.finish(error.map(|e| e.to_string()));
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

    /// A turn through one of the OpenAI surfaces. Always answers the client itself.
    async fn serve_run(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        protocol: Protocol,
    ) -> Result<bool> {
        let surface = surface(protocol);
        let prepared = self.prepare_run(session, &ctx.account_id, surface).await;
        let (started, turn) = match prepared {
            Ok(v) => v,
            Err((e, session_id)) => {
                let headers: Vec<(&str, &str)> = session_id
                    .as_deref()
                    .map(|s| ("x-session-id", s))
                    .into_iter()
                    .collect();
                e.send(session, surface, &headers).await?;
                return Ok(true);
            }
        };
        let info = RunInfo {
            run_id: started.run_id.clone(),
            session_id: started.session_id.clone(),
            model: started.model.clone(),
            created_at: chrono::Utc::now().timestamp(),
        };
        let query = EventQuery {
            after_seq: started.first_seq - 1,
            invocation_id: Some(started.invocation_id.clone()),
            ..EventQuery::session(&started.account_id, &started.session_id)
        };
        let mut events = Subscription::open(self.state.store.clone(), &self.state.hub, query);
        let response_id = surface.response_id(&started.run_id);
        let headers = [
            ("x-session-id", started.session_id.as_str()),
            ("x-run-id", started.run_id.as_str()),
            ("x-response-id", response_id.as_str()),
            ("x-invocation-id", started.invocation_id.as_str()),
        ];
        if turn.stream {
            stream_run(session, surface, &info, &mut events, &headers).await;
        } else {
            respond_when_done(session, surface, &info, &mut events, &headers).await?;
        }
        Ok(true)
    }

    /// Reads and checks the request, resolves the session and starts the run. On error,
    /// returns the error and the session id if one was resolved. Nothing is written
    /// before every check has passed.
    async fn prepare_run(
        &self,
        session: &mut Session,
        account_id: &str,
        surface: &'static dyn Surface,
    ) -> std::result::Result<(StartedRun, TurnRequest), (ApiError, Option<String>)> {
        let body = read_body(session, self.state.config.max_body_bytes)
            .await
            .map_err(|e| (e, None))?;
        let header = session
            .req_header()
            .headers
            .get("x-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let turn = surface
            .parse_request(&body, header.as_deref())
            .map_err(|e| {
                let mut err = ApiError::new(400, "invalid_request_error", e.code, e.message);
                err.param = e.param;
                (err, None)
            })?;
        let session_id = self
            .resolve_session(account_id, surface, &turn.session)
            .await
            .map_err(|e| (e, None))?;
        let runs = self.state.runs.clone();
        let (account, sid, t) = (account_id.to_owned(), session_id.clone(), turn.clone());
        let started = on_core(&self.state.core, async move {
            runs.start(&account, &sid, t).await
        })
        .await;
        let started = started.map_err(|e| {
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
                StartError::Store(_) | StartError::Write(_) => {
                    ApiError::store_unavailable(&e, "cannot start a run")
                }
            };
            (err, Some(session_id.clone()))
        })?;
        Ok((started, turn))
    }

    async fn resolve_session(
        &self,
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
                format!("session id {id:?} is not valid: use 1-128 letters, digits, '-', '_', '.' or ':'"),
            )
            .with_param("conversation")),
            SessionRef::AfterResponse(response_id) => {
                let not_found = || {
                    ApiError::new(404, "invalid_request_error", "previous_response_not_found", format!("Previous response with id '{response_id}' not found."))
                        .with_param("previous_response_id")
                };
                let run_id = surface.run_id(response_id).ok_or_else(not_found)?;
                match self.state.store.run(account_id, &run_id).await {
                    Ok(Some(run)) => Ok(run.session_id),
                    Ok(None) => Err(not_found()),
                    Err(e) => Err(ApiError::store_unavailable(&e, "cannot resolve previous_response_id")),
                }
            }
        }
    }
}

/// Reads the whole request body, refusing more than `limit` bytes.
pub async fn read_body(
    session: &mut Session,
    limit: usize,
) -> std::result::Result<Vec<u8>, ApiError> {
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
    let mut body = Vec::new();
    loop {
        match session.read_request_body().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > limit {
                    return Err(too_large());
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body),
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
/// (the run goes on without it).
async fn stream_run(
    session: &mut Session,
    surface: &dyn Surface,
    info: &RunInfo,
    events: &mut Subscription,
    headers: &[(&str, &str)],
) {
    if respond::sse_start(session, headers).await.is_err() {
        return;
    }
    let mut renderer = surface.stream_renderer(info);
    let end = stream::pump(session, events, None, |event| {
        render_step(&mut *renderer, event)
    })
    .await;
    if end == stream::End::LogUnavailable {
        // Say so in the stream rather than hang; the client can resume from its last id.
        let body = surface.error_body(
            "the session log is unavailable; resume later",
            "server_error",
            None,
            Some("session_store_unavailable"),
        );
        let _ = stream::write_frames(session, &[SseFrame::data(body.to_string())], true).await;
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
    let terminal = collected.last().and_then(|e| e.run_status());
    if terminal == Some(session_log::RunStatus::Completed) {
        return respond::json(session, 200, &surface.final_body(info, &collected), headers).await;
    }
    let (code, message) = collected
        .iter()
        .rev()
        .find(|e| e.event_type == session_log::EventType::Error)
        .map(|e| {
            let s = |k: &str| {
                e.content
                    .get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            (s("code"), s("message"))
        })
        .unwrap_or_else(|| {
            let status = terminal.map(|s| s.as_str()).unwrap_or("failed");
            (status.to_owned(), format!("the run ended as {status}"))
        });
    let body = surface.error_body(&message, "upstream_error", None, Some(&code));
    respond::json(session, 502, &body, headers).await
}
