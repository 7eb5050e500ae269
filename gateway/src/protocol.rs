//! The client API of a stateful agent protocol (A2A, ADK, LangGraph): requests the
//! protocol's surface claims are read, routed by the adapter, and answered from a run, from
//! the log (a run's snapshot, at once or once it ends), or by the agent — over HTTP, or as
//! gRPC calls of the service the surface serves. Nothing here knows a protocol; the
//! adapter decides what each request means.

use pingora::proxy::Session;
use pingora::Result;
use runtime_adapter::cursor::Resume;
use runtime_adapter::{AgentRequest, ClientRequest, Route, SessionRef, Surface};
use serde_json::{json, Value};
use session_log::{Event, EventType, Invocation, NewEvent, Subscription};
use tokio::time::Instant;

use crate::client::body::read_body;
use crate::client::grpc::read_message;
use crate::client::reply::Reply;
use crate::client::respond;
use crate::client::stream::{next_event, replay_step, End};
use crate::core::on_core;
use crate::digest::sha256_hex;
use crate::error::ApiError;
use crate::runs::agent::{self, AgentError};
use crate::state::State;
use crate::turn::{cancel_and_wait, request_digest, run_events, run_info, run_query, run_turn};

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
    let mut reply = Reply::for_request(session, surface);
    let body = match reply.is_grpc() {
        true => read_message(session, &state.input).await,
        false => read_body(session, &state.input).await,
    };
    let body = match body {
        Ok(body) => body,
        Err(e) => return reply.error(session, &e, surface, &[]).await,
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
    let reply = &mut reply;
    match surface.route(&client) {
        Route::Run(mut turn) => {
            turn.request_digest = request_digest(session, &request.body);
            run_turn(state, session, reply, account_id, surface, turn).await
        }
        Route::RunInTask {
            agent_ref,
            mut turn,
            not_found: (status, body),
        } => match find(state, account_id, &agent_ref).await {
            Ok(Some(inv)) => {
                turn.session = SessionRef::Named(inv.session_id);
                turn.request_digest = request_digest(session, &request.body);
                run_turn(state, session, reply, account_id, surface, turn).await
            }
            Ok(None) => reply.json(session, status, &body, &[]).await,
            Err(e) => reply.error(session, &e, surface, &[]).await,
        },
        Route::Reply { status, body } => reply.json(session, status, &body, &[]).await,
        Route::Forward(agent_request) => {
            forward(
                state,
                session,
                reply,
                &client,
                surface,
                agent_request,
                false,
            )
            .await
        }
        Route::ForwardListing(agent_request) => {
            forward(state, session, reply, &client, surface, agent_request, true).await
        }
        Route::ForwardOwned {
            agent_ref,
            request,
            unowned,
            not_found,
        } => match find(state, account_id, &agent_ref).await {
            Ok(Some(_)) => forward(state, session, reply, &client, surface, request, false).await,
            Ok(None) => {
                let relay = Relay::RefusalOr(not_found);
                forward_as(state, session, reply, &client, surface, unowned, relay).await
            }
            Err(e) => reply.error(session, &e, surface, &[]).await,
        },
        Route::Get {
            agent_ref,
            client: info_client,
            not_found: (status, body),
        } => match find(state, account_id, &agent_ref).await {
            Ok(Some(inv)) => match run_events(state, account_id, &inv).await {
                Ok(events) => {
                    let info = run_info(&inv, &events, info_client);
                    let (status, body) = surface.snapshot_response(&info, &events);
                    let headers = [("x-session-id", inv.session_id.as_str())];
                    reply.json(session, status, &body, &headers).await
                }
                Err(e) => reply.error(session, &e, surface, &[]).await,
            },
            Ok(None) => reply.json(session, status, &body, &[]).await,
            Err(e) => reply.error(session, &e, surface, &[]).await,
        },
        Route::Join {
            agent_ref,
            client: info_client,
            not_found: (status, body),
        } => match find(state, account_id, &agent_ref).await {
            Ok(Some(inv)) => match join(state, account_id, &inv, session).await {
                Ok(Some(events)) => {
                    let info = run_info(&inv, &events, info_client);
                    let (status, body) = surface.snapshot_response(&info, &events);
                    let headers = [("x-session-id", inv.session_id.as_str())];
                    reply.json(session, status, &body, &headers).await
                }
                Ok(None) => Ok(()), // the client left
                Err(e) => reply.error(session, &e, surface, &[]).await,
            },
            Ok(None) => reply.json(session, status, &body, &[]).await,
            Err(e) => reply.error(session, &e, surface, &[]).await,
        },
        Route::Cancel {
            agent_ref,
            client: info_client,
            not_found: (status, body),
            ask_agent,
        } => match find(state, account_id, &agent_ref).await {
            Ok(Some(inv)) => {
                let asked = Canceled {
                    client: info_client,
                    ask_agent,
                    request: &client,
                };
                cancel(state, session, reply, account_id, surface, &inv, asked).await
            }
            Ok(None) => reply.json(session, status, &body, &[]).await,
            Err(e) => reply.error(session, &e, surface, &[]).await,
        },
        Route::Subscribe {
            agent_ref,
            last_event_id,
            client: info_client,
            not_found: (status, body),
        } => match find(state, account_id, &agent_ref).await {
            Ok(Some(inv)) => {
                let from = Cursor {
                    after: last_event_id.map(Resume::AfterFrame),
                    client: info_client,
                    agent_ref,
                };
                subscribe(state, session, reply, account_id, surface, &inv, from).await
            }
            Ok(None) => reply.json(session, status, &body, &[]).await,
            Err(e) => reply.error(session, &e, surface, &[]).await,
        },
    }
}

/// Where a subscriber picks a run up: after which frame id (from the start when `None`),
/// and how it asked (for its renderer).
struct Cursor {
    after: Option<Resume>,
    client: Value,
    /// The task the run is about, as the agent knows it.
    agent_ref: String,
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

/// The run's events once its latest invocation has ended (followed live until then);
/// `None` when the client left first.
async fn join(
    state: &State,
    account_id: &str,
    inv: &Invocation,
    session: &mut Session,
) -> std::result::Result<Option<Vec<Event>>, ApiError> {
    let mut subscription =
        Subscription::open(state.store.clone(), &state.hub, run_query(account_id, inv));
    let mut events = Vec::new();
    let mut watch_client = true;
    let deadline = Instant::now() + state.config.subscribe_timeout;
    loop {
        match next_event(
            session,
            &mut subscription,
            &mut watch_client,
            Some(deadline),
        )
        .await
        {
            Ok(event) => {
                let ends = event.is_terminal()
                    && event.invocation_id.as_deref() == Some(inv.invocation_id.as_str());
                events.push((*event).clone());
                if ends {
                    return Ok(Some(events));
                }
            }
            Err(End::LogUnavailable) => return Err(ApiError::log_unavailable()),
            Err(End::Deadline) => {
                return Err(ApiError::new(
                    504,
                    "server_error",
                    "run_not_finished",
                    "the run did not end within subscribe_timeout_seconds; join again",
                ))
            }
            Err(_) => return Ok(None),
        }
    }
}

/// A cancel as the client asked for it: how it is answered (`RunInfo::client`), and what
/// goes to the agent when the agent is the one to answer it.
struct Canceled<'r> {
    client: Value,
    ask_agent: Option<AgentRequest>,
    request: &'r ClientRequest<'r>,
}

/// Cancels the run (its adapter tells the agent), waits for its end to be recorded, and
/// answers with the run as it ended; a run that had ended with its task still open (the
/// surface says so) has its cancel answered by the agent.
async fn cancel(
    state: &State,
    session: &mut Session,
    reply: &mut Reply,
    account_id: &str,
    surface: &dyn Surface,
    inv: &Invocation,
    asked: Canceled<'_>,
) -> Result<()> {
    let Canceled {
        client,
        ask_agent,
        request,
    } = asked;
    match cancel_and_wait(state, account_id, inv).await {
        Ok(events) => {
            let info = run_info(inv, &events, client);
            if let Some(ask) = ask_agent.filter(|_| surface.task_waits(&info, &events)) {
                return forward(state, session, reply, request, surface, ask, false).await;
            }
            let (status, body) = surface.snapshot_response(&info, &events);
            let headers = [("x-session-id", inv.session_id.as_str())];
            reply.json(session, status, &body, &headers).await
        }
        Err(e) => reply.error(session, &e, surface, &[]).await,
    }
}

/// Replays the run from the log (frames up to the cursor are not sent again), then
/// follows it live until its latest invocation ends.
async fn subscribe(
    state: &State,
    session: &mut Session,
    reply: &mut Reply,
    account_id: &str,
    surface: &dyn Surface,
    inv: &Invocation,
    from: Cursor,
) -> Result<()> {
    let Cursor {
        after,
        client,
        agent_ref,
    } = from;
    let headers = [("x-session-id", inv.session_id.as_str())];
    // The protocol may refuse a subscription to the run as it stands (a finished A2A
    // task), unless the client resumes from a cursor.
    let events = match run_events(state, account_id, inv).await {
        Ok(events) => events,
        Err(e) => return reply.error(session, &e, surface, &headers).await,
    };
    let info = run_info(inv, &events, client.clone());
    if let Some((status, body)) = surface.subscribe_refusal(&info, &events, after.is_some()) {
        return reply.json(session, status, &body, &headers).await;
    }
    reply.stream_start(session, &headers).await?;
    let deadline = Instant::now() + state.config.subscribe_timeout;
    // A task waiting for input goes on in its next run (a message naming it): a new
    // subscriber follows that one, as the protocol's own server streams the task's next
    // events (the run it subscribed to has nothing more to say).
    let waited;
    let inv = match after.is_none() && surface.task_waits(&info, &events) {
        true => {
            if let Some(frame) = surface.waiting_frame(&info, &events) {
                reply.frames(session, &[frame], false).await?;
            }
            match next_run(state, session, account_id, &agent_ref, inv, deadline).await {
                Some(next) => {
                    waited = next;
                    &waited
                }
                // No next turn within subscribe_timeout_seconds: the stream ends.
                None => return reply.frames(session, &[], true).await,
            }
        }
        false => inv,
    };
    let info = run_info(inv, &[], client);
    let mut renderer = surface.stream_renderer(&info);
    let mut subscription =
        Subscription::open(state.store.clone(), &state.hub, run_query(account_id, inv));
    // The renderer sees every event from the run's start (it may need earlier ones to
    // render later ones); what the client already has is dropped after rendering.
    reply
        .pump(
            session,
            surface,
            &mut subscription,
            Some(deadline),
            |event| replay_step(&mut *renderer, event, after, &inv.invocation_id),
        )
        .await;
    Ok(())
}

/// The run after `inv` that the agent knows as `agent_ref` (the task's next turn), once
/// it has started; `None` when none starts before `deadline`, the client leaves first
/// or the log cannot say.
async fn next_run(
    state: &State,
    session: &mut Session,
    account_id: &str,
    agent_ref: &str,
    inv: &Invocation,
    deadline: Instant,
) -> Option<Invocation> {
    let mut watch_client = true;
    while Instant::now() < deadline {
        match find(state, account_id, agent_ref).await {
            Ok(Some(next)) if next.invocation_id != inv.invocation_id => return Some(next),
            Ok(_) => {}
            Err(_) => return None,
        }
        tokio::select! {
            _ = tokio::time::sleep(NEXT_RUN_POLL) => {}
            gone = session.read_body_or_idle(true), if watch_client => match gone {
                Err(_) => return None,
                // Bytes from the client (or the end of its body): stop watching, not spin.
                Ok(_) => watch_client = false,
            },
        }
    }
    None
}

/// How often a subscriber to a task waiting for input looks for its next run.
const NEXT_RUN_POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// Sends `request` to the agent (in the transport the agent is called over) and relays
/// its answer, JSON bodies through the surface's rewrite (the agent card's addresses
/// become Tether's).
/// Sends `request` to the agent and relays its answer; of a `listing`'s answer, only the
/// runs of the caller's account (a run the log does not have belongs to no account).
async fn forward(
    state: &State,
    session: &mut Session,
    reply: &mut Reply,
    client: &ClientRequest<'_>,
    surface: &dyn Surface,
    request: AgentRequest,
    listing: bool,
) -> Result<()> {
    let relay = match listing {
        true => Relay::Listing,
        false => Relay::Answer,
    };
    forward_as(state, session, reply, client, surface, request, relay).await
}

/// What of a forwarded request's answer the client gets.
enum Relay {
    /// The answer.
    Answer,
    /// The answer, of a listing only the caller's runs.
    Listing,
    /// The agent's refusal (an error status, or a JSON-RPC error); anything else is
    /// answered with this instead (`Route::ForwardOwned`'s stand-in request).
    RefusalOr((u16, Value)),
}

async fn forward_as(
    state: &State,
    session: &mut Session,
    reply: &mut Reply,
    client: &ClientRequest<'_>,
    surface: &dyn Surface,
    request: AgentRequest,
    relay: Relay,
) -> Result<()> {
    let agent = state.agent.clone();
    let runs = state.runs.clone();
    let account_id = client.account_id.to_owned();
    let answer = on_core(&state.core, async move {
        // The agent's card (read again now and then) says how it is called.
        agent.card().await;
        let upstream = runs.upstream();
        let toward = upstream.forwarded(&request);
        let (answer, caching) = agent
            .exchange_relayed(&toward, &account_id, FORWARD_CAP)
            .await?;
        Ok::<_, AgentError>((upstream.forwarded_answer(&request, answer), caching))
    })
    .await;
    let ((status, content_type, body), caching) = match answer {
        Ok(answer) => answer,
        Err(e) => {
            tracing::warn!(error = %e, "a forwarded request did not reach the agent");
            let e = ApiError::new(502, "server_error", "agent_unreachable", e.to_string());
            return reply.error(session, &e, surface, &[]).await;
        }
    };
    if (200..300).contains(&status) {
        if let Some(session_id) = surface.deletes_session(client) {
            forget_history(state, client.account_id, &session_id).await;
        }
    }
    let json = content_type.contains("json");
    let parsed = serde_json::from_slice::<Value>(&body);
    if let Relay::RefusalOr((status_instead, instead)) = &relay {
        let refused = status >= 400
            || parsed
                .as_ref()
                .is_ok_and(|v| v.get("error").is_some_and(|e| !e.is_null()));
        if !refused {
            return reply.json(session, *status_instead, instead, &[]).await;
        }
    }
    let listing = matches!(relay, Relay::Listing);
    match parsed {
        Ok(value) if json => {
            let public_url = public_url(state, session, client);
            let mut value = surface.rewrite_forwarded(client, &public_url, value);
            if listing && (200..300).contains(&status) {
                value = match own_runs(state, client.account_id, surface, value).await {
                    Ok(value) => value,
                    Err(e) => return reply.error(session, &e, surface, &[]).await,
                };
            }
            let caching = relayed_caching(&caching, &value);
            let headers: Vec<(&str, &str)> =
                caching.iter().map(|(n, v)| (*n, v.as_str())).collect();
            reply.json(session, status, &value, &headers).await
        }
        _ if reply.is_grpc() => {
            let text = String::from_utf8_lossy(&body);
            let message = format!("the agent answered HTTP {status}: {text:.200}");
            let e = ApiError::new(502, "server_error", "agent_error", message);
            reply.error(session, &e, surface, &[]).await
        }
        _ => respond::bytes(session, status, &content_type, body).await,
    }
}

/// The agent's caching headers for the answer Tether relays: how long it may be kept
/// as the agent said, and for the agent's `ETag` Tether's own, of the body it serves
/// (which its rewrite may have changed, an agent card's addresses).
fn relayed_caching(from_agent: &[(String, String)], served: &Value) -> Vec<(&'static str, String)> {
    from_agent
        .iter()
        .filter_map(|(name, value)| {
            let name = *agent::CACHE_HEADERS.iter().find(|n| **n == name)?;
            let value = match name {
                "etag" => {
                    let served = serde_json::to_vec(served).unwrap_or_default();
                    format!("\"{}\"", &sha256_hex(&served)[..32])
                }
                _ => value.clone(),
            };
            Some((name, value))
        })
        .collect()
}

/// A listing's answer with only the runs `account_id` has (`Surface::listed_runs`).
async fn own_runs(
    state: &State,
    account_id: &str,
    surface: &dyn Surface,
    mut body: Value,
) -> std::result::Result<Value, ApiError> {
    let Some(entries) = surface.listed_runs(&mut body) else {
        return Ok(body);
    };
    let mut kept = Vec::with_capacity(entries.len());
    for entry in std::mem::take(entries) {
        let Some(agent_ref) = surface.listed_ref(&entry) else {
            continue;
        };
        if find(state, account_id, agent_ref).await?.is_some() {
            kept.push(entry);
        }
    }
    if let Some(entries) = surface.listed_runs(&mut body) {
        *entries = kept;
    }
    Ok(surface.listing_scoped(body))
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

/// Tether's address as the client reached it: `public_url`, or the request's authority
/// (the Host header; HTTP/2's `:authority`, which Pingora keeps in the URI).
fn public_url(state: &State, session: &Session, client: &ClientRequest) -> String {
    if let Some(url) = &state.config.public_url {
        return url.clone();
    }
    let uri = &session.req_header().uri;
    let authority = client
        .header("host")
        .or_else(|| uri.authority().map(|a| a.as_str()))
        .unwrap_or("localhost");
    format!("http://{authority}")
}
