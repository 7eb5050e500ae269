//! Routing a request that is not a health check: authenticate, rate-limit, then hand it
//! to the path it belongs to (a run, a local API, the agent's own protocol surface, or the
//! pass-through), and answer refusals in that path's own error format.

use http::Method;
use pingora::proxy::Session;
use pingora::Result;
use policies::{AuthError, Identity};
use runtime_adapter::{surface, Protocol, Surface};
use serde_json::json;

use super::Ctx;
use crate::client::reply::Reply;
use crate::client::{grpc, respond};
use crate::error::ApiError;
use crate::metrics::{Limit, METRICS};
use crate::state::State;
use crate::{api, openai, protocol};

/// Which API a path belongs to, so refusals come in that API's error format.
#[derive(Clone, Copy)]
enum Area {
    /// A path the agent protocol's surface claims (A2A, ADK): its own error bodies, or
    /// statuses for gRPC calls of its service.
    Protocol(&'static dyn Surface),
    /// A gRPC call of a method the surface's service does not have: `UNIMPLEMENTED`,
    /// once the caller is authenticated.
    UnknownCall(&'static dyn Surface),
    /// `/v1/*` answered by Tether: OpenAI error bodies.
    OpenAi,
    /// `/agentengine/api/v1/<Action>`: the control envelope.
    Control,
    /// Everything proxied to the agent: a plain JSON error.
    PassThrough,
}

impl Area {
    fn of(state: &State, session: &Session, method: &Method, path: &str) -> Area {
        if let Some(surface) = state.protocol_surface {
            if surface.claims(method.as_str(), path) {
                return Area::Protocol(surface);
            }
            if surface.grpc().is_some() && grpc::is_call(session) {
                return Area::UnknownCall(surface);
            }
        }
        if path.starts_with(api::PREFIX) {
            Area::Control
        } else if path == "/v1/responses"
            || path == "/v1/chat/completions"
            || path.starts_with("/v1/responses/")
            || path.starts_with("/v1/chat/completions/")
            || is_conversations(path)
        {
            Area::OpenAi
        } else {
            Area::PassThrough
        }
    }
}

/// Whether `path` is the Conversations API's (`openai::conversations`): Tether's own,
/// whatever the agent speaks, as its conversations are Tether's sessions.
fn is_conversations(path: &str) -> bool {
    path.strip_prefix(openai::conversations::PATH)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Everything but health checks: authenticate, rate-limit, then route. `Ok(true)` when
/// Tether answered, `Ok(false)` to go on through the proxy pipeline to the agent.
pub async fn route(
    state: &State,
    session: &mut Session,
    ctx: &mut Ctx,
    method: Method,
    path: &str,
) -> Result<bool> {
    let area = Area::of(state, session, &method, path);
    // Boxed, like each handler below: a stream lives for minutes inside this future,
    // which would otherwise be as large as its largest step, for every open stream.
    let identity: Identity =
        match Box::pin(state.auth.authenticate(&session.req_header().headers)).await {
            Ok(identity) => identity,
            Err(e) => {
                refuse_unauthenticated(session, area, path, &e).await?;
                return Ok(true);
            }
        };
    if let Err(limited) = state.limits.check(&identity) {
        tracing::info!(account_id = %identity.account_id, credential = %identity.credential_id, "rate limited");
        METRICS.rate_limited(Limit::Requests);
        refuse(session, area, path, ApiError::limited(&limited)).await?;
        return Ok(true);
    }
    // A session id header Tether cannot use is refused, never silently replaced by a new
    // session (or, on the pass-through, by the shared pass-through session).
    if let Some(e) = session_header_error(session) {
        refuse(session, area, path, e.to_api()).await?;
        return Ok(true);
    }
    ctx.account_id = identity.account_id;
    let credential_id = identity.credential_id;
    let account_id = ctx.account_id.as_str();
    // Body reads below (runs, control, pass-through) must not stall for the default
    // 60 s per read: a silent client is cut off after the grace time.
    session.set_read_timeout(Some(state.input.body_grace));
    match area {
        Area::Protocol(surface) => {
            Box::pin(protocol::serve(state, session, account_id, surface)).await?;
            return Ok(true);
        }
        Area::UnknownCall(_) => {
            let e = ApiError::new(
                501,
                "invalid_request_error",
                "unknown_method",
                format!("Tether serves no gRPC method {path}"),
            );
            refuse(session, area, path, e).await?;
            return Ok(true);
        }
        _ => {}
    }
    match (method, path) {
        (Method::POST, "/v1/responses" | "/v1/chat/completions")
            if state.protocol_surface.is_none() =>
        {
            let protocol = match path {
                "/v1/responses" => Protocol::OpenAiResponses,
                _ => Protocol::OpenAiChat,
            };
            Box::pin(openai::serve_turn(state, session, account_id, protocol)).await?;
            Ok(true)
        }
        (method, path) if is_conversations(path) => {
            let caller = openai::conversations::Caller {
                account_id,
                credential_id: &credential_id,
            };
            Box::pin(openai::conversations::handle(
                state, session, &caller, method, path,
            ))
            .await?;
            Ok(true)
        }
        (method, path) if path.starts_with(api::PREFIX) => {
            let action = &path[api::PREFIX.len()..];
            Box::pin(api::serve(
                state,
                session,
                account_id,
                &credential_id,
                method,
                action,
            ))
            .await?;
            Ok(true)
        }
        (method, path) if path.starts_with("/v1/responses/") => {
            let rest = &path["/v1/responses/".len()..];
            let protocol = Protocol::OpenAiResponses;
            Box::pin(openai::stored::handle(
                state, session, account_id, method, protocol, rest,
            ))
            .await?;
            Ok(true)
        }
        (method, path)
            if path.starts_with("/v1/chat/completions/") && state.protocol_surface.is_none() =>
        {
            let rest = &path["/v1/chat/completions/".len()..];
            let protocol = Protocol::OpenAiChat;
            Box::pin(openai::stored::handle(
                state, session, account_id, method, protocol, rest,
            ))
            .await?;
            Ok(true)
        }
        _ => match ctx.exchange.admit(state, session, account_id).await {
            Ok(()) if ctx.exchange.needs_forward() => {
                Box::pin(ctx.exchange.forward(state, session, account_id)).await?;
                Ok(true)
            }
            Ok(()) => Ok(false),
            Err(e) => {
                refuse(session, Area::PassThrough, path, e).await?;
                Ok(true)
            }
        },
    }
}

/// A refusal made before authentication (the host and site rules), in the format of the
/// API the path belongs to.
pub async fn refuse_early(
    state: &State,
    session: &mut Session,
    method: &Method,
    path: &str,
    e: ApiError,
) -> Result<()> {
    let area = Area::of(state, session, method, path);
    refuse(session, area, path, e).await
}

/// Why the `x-session-id` header, when sent, is not a usable id. (Non-ASCII values were
/// refused with the request head.)
fn session_header_error(session: &Session) -> Option<crate::ids::IdError> {
    let value = session.req_header().headers.get(SESSION_HEADER)?;
    let text = String::from_utf8_lossy(value.as_bytes());
    crate::ids::client_id(SESSION_HEADER, &text).err()
}

const SESSION_HEADER: &str = "x-session-id";

/// Answers a refusal in the format of the API the path belongs to.
async fn refuse(session: &mut Session, area: Area, path: &str, e: ApiError) -> Result<()> {
    match area {
        Area::Protocol(surface) | Area::UnknownCall(surface) => {
            let mut reply = Reply::for_request(session, surface);
            reply.error(session, &e, surface, &[]).await
        }
        Area::OpenAi => {
            e.send(session, surface(Protocol::OpenAiResponses), &[])
                .await
        }
        Area::Control => {
            let action = path.get(api::PREFIX.len()..).unwrap_or_default();
            api::refuse(session, action, e).await
        }
        Area::PassThrough => {
            let body = json!({ "error": { "message": e.message, "type": e.kind, "code": e.code } });
            respond::json(session, e.status, &body, &e.header_pairs()).await
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
