//! The client API of a stateful agent protocol (A2A, ADK): requests the protocol's surface
//! claims are read, routed by the adapter, and answered from a run, from the log, or by
//! the agent. Nothing here knows a protocol; the adapter decides what each request means.

use pingora::proxy::Session;
use pingora::Result;
use runtime_adapter::{AgentRequest, ClientRequest, Route, Surface};
use serde_json::{json, Value};
use session_log::{EventType, Invocation, NewEvent, Subscription};
use tokio::time::Instant;

use crate::client::body::read_body;
use crate::client::respond;
use crate::client::stream::{self, render_step};
use crate::core::on_core;
use crate::error::ApiError;
use crate::state::State;
use crate::turn::{cancel_and_wait, run_events, run_info, run_query, run_turn};

/// Largest agent answer relayed for a forwarded request (cards, session CRUD, listings).
const FORWARD_CAP: usize = 16 << 20;

/// A client request as the adapter sees it, owned so the session stays usable.
struct Request {
    method: String,
    path: String,
    query: Option<String>,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    fn view<'a>(
        &'a self,
        headers: &'a [(&'a str, &'a str)],
        account_id: &'a str,
    ) -> ClientRequest<'a> {
        ClientRequest {
            method: &self.method,
            path: &self.path,
            query: self.query.as_deref(),
            headers,
            body: &self.body,
            account_id,
        }
    }
}

/// Answers one claimed request.
pub async fn serve(
    state: &State,
    session: &mut Session,
    account_id: &str,
    surface: &'static dyn Surface,
) -> Result<()> {
    let body = match read_body(session, &state.input).await {
        Ok(body) => body,
        Err(e) => return e.send(session, surface, &[]).await,
    };
    let header = session.req_header();
    let request = Request {
        method: header.method.as_str().to_owned(),
        path: header.uri.path().to_owned(),
        query: header.uri.query().map(str::to_owned),
        headers: header
            .headers
            .iter()
            .filter_map(|(k, v)| Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned())))
            .collect(),
        body,
    };
    let headers: Vec<(&str, &str)> = request
        .headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let client = request.view(&headers, account_id);
    match surface.route(&client) {
        Route::Run(turn) => run_turn(state, session, account_id, surface, turn).await,
        Route::Reply { status, body } => respond::json(session, status, &body, &[]).await,
        Route::Forward(agent_request) => {
            forward(state, session, &client, surface, agent_request).await
        }
        Route::Get {
            agent_ref,
            client: info_client,
            fallback,
        } => match find(state, account_id, &agent_ref).await {
            Ok(Some(inv)) => match run_events(state, account_id, &inv).await {
                Ok(events) => {
                    let info = run_info(&inv, &events, info_client);
                    let body = surface.snapshot(&info, &events);
                    respond::json(session, 200, &body, &[("x-session-id", &inv.session_id)]).await
                }
                Err(e) => e.send(session, surface, &[]).await,
            },
            Ok(None) => forward(state, session, &client, surface, fallback).await,
            Err(e) => e.send(session, surface, &[]).await,
        },
        Route::Cancel {
            agent_ref,
            client: info_client,
            fallback,
        } => match find(state, account_id, &agent_ref).await {
            Ok(Some(inv)) => cancel(state, session, account_id, surface, &inv, info_client).await,
            Ok(None) => forward(state, session, &client, surface, fallback).await,
            Err(e) => e.send(session, surface, &[]).await,
        },
        Route::Subscribe {
            agent_ref,
            after_seq,
            client: info_client,
        } => match find(state, account_id, &agent_ref).await {
            Ok(Some(inv)) => {
                let after = after_seq.unwrap_or(0);
                subscribe(
                    state,
                    session,
                    account_id,
                    surface,
                    &inv,
                    after,
                    info_client,
                )
                .await
            }
            Ok(None) => {
                let e = ApiError::new(
                    404,
                    "not_found_error",
                    "task_not_found",
                    format!("no run is known as {agent_ref:?}"),
                );
                e.send(session, surface, &[]).await
            }
            Err(e) => e.send(session, surface, &[]).await,
        },
    }
}

/// The latest invocation the agent knows as `agent_ref`, in the caller's account.
async fn find(
    state: &State,
    account_id: &str,
    agent_ref: &str,
) -> std::result::Result<Option<Invocation>, ApiError> {
    state
        .store
        .invocation_by_agent_ref(account_id, agent_ref)
        .await
        .map_err(|e| ApiError::store_unavailable(&e, "cannot look up a run by the agent's id"))
}

/// Cancels the run (its adapter tells the agent), waits for its end to be recorded, and
/// answers with the run as it ended.
async fn cancel(
    state: &State,
    session: &mut Session,
    account_id: &str,
    surface: &dyn Surface,
    inv: &Invocation,
    client: Value,
) -> Result<()> {
    match cancel_and_wait(state, account_id, inv).await {
        Ok(events) => {
            let info = run_info(inv, &events, client);
            let body = surface.snapshot(&info, &events);
            respond::json(session, 200, &body, &[("x-session-id", &inv.session_id)]).await
        }
        Err(e) => e.send(session, surface, &[]).await,
    }
}

/// Replays the run from the log (frames up to `after_seq` are not sent again), then
/// follows it live until its latest invocation ends.
async fn subscribe(
    state: &State,
    session: &mut Session,
    account_id: &str,
    surface: &dyn Surface,
    inv: &Invocation,
    after_seq: i64,
    client: Value,
) -> Result<()> {
    let headers = [("x-session-id", inv.session_id.as_str())];
    respond::sse_start(session, &headers).await?;
    let info = run_info(inv, &[], client);
    let mut renderer = surface.stream_renderer(&info);
    let mut subscription =
        Subscription::open(state.store.clone(), &state.hub, run_query(account_id, inv));
    let deadline = Instant::now() + state.config.subscribe_timeout;
    // The renderer sees every event from the run's start (it may need earlier ones to
    // render later ones); what the client already has is dropped after rendering.
    stream::pump(session, &mut subscription, Some(deadline), |event| {
        let mut step = render_step(&mut *renderer, event);
        step.frames.retain(|f| {
            f.id.as_deref()
                .and_then(|id| id.parse::<i64>().ok())
                .is_none_or(|seq| seq > after_seq)
        });
        step.last = step.last && event.invocation_id.as_deref() == Some(inv.invocation_id.as_str());
        step
    })
    .await;
    Ok(())
}

/// Sends `request` to the agent and relays its answer, JSON bodies through the surface's
/// rewrite (the agent card's addresses become Tether's).
async fn forward(
    state: &State,
    session: &mut Session,
    client: &ClientRequest<'_>,
    surface: &dyn Surface,
    request: AgentRequest,
) -> Result<()> {
    let agent = state.agent.clone();
    let account_id = client.account_id.to_owned();
    let answer = on_core(&state.core, async move {
        agent.exchange(&request, &account_id, FORWARD_CAP).await
    })
    .await;
    let (status, content_type, body) = match answer {
        Ok(answer) => answer,
        Err(e) => {
            tracing::warn!(error = %e, "a forwarded request did not reach the agent");
            let e = ApiError::new(502, "server_error", "agent_unreachable", e.to_string());
            return e.send(session, surface, &[]).await;
        }
    };
    if (200..300).contains(&status) {
        if let Some(session_id) = surface.deletes_session(client) {
            forget_history(state, client.account_id, &session_id).await;
        }
    }
    let json = content_type.contains("json");
    match serde_json::from_slice::<Value>(&body) {
        Ok(value) if json => {
            let public_url = public_url(state, client);
            let value = surface.rewrite_forwarded(client, &public_url, value);
            respond::json(session, status, &value, &[]).await
        }
        _ => respond::bytes(session, status, &content_type, body).await,
    }
}

/// Cuts a session's history where the client deleted it at the agent: a compaction
/// marker without a summary hides everything before it from the projection (the events
/// stay in the log for audit).
async fn forget_history(state: &State, account_id: &str, session_id: &str) {
    let known = matches!(
        state.store.session(account_id, session_id).await,
        Ok(Some(_))
    );
    if !known {
        return;
    }
    let marker = NewEvent::new(
        account_id,
        session_id,
        EventType::Compaction,
        json!({ "reason": "session_deleted" }),
    );
    if let Err(error) = state.writer.append(vec![marker]).await {
        tracing::warn!(%error, account_id, session_id, "could not record a deleted session");
    }
}

/// Tether's address as the client reached it.
fn public_url(state: &State, client: &ClientRequest) -> String {
    match &state.config.public_url {
        Some(url) => url.clone(),
        None => format!("http://{}", client.header("host").unwrap_or("localhost")),
    }
}
