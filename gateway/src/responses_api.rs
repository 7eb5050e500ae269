//! The Responses API's stored-response routes, served from the log for any agent:
//! `GET /v1/responses/{id}` (retrieve), `GET /v1/responses/{id}?stream=true&starting_after=N`
//! (resume a stream after the event whose `sequence_number` is N) and
//! `POST /v1/responses/{id}/cancel`.

use std::time::Duration;

use http::Method;
use pingora::proxy::Session;
use pingora::Result;
use runtime_adapter::{surface, Protocol, RunInfo, Surface};
use serde_json::Value;
use session_log::{Event, EventQuery, Invocation, Subscription};

use crate::proxy::{render_step, State};
use crate::{control, respond, stream};

fn responses() -> &'static dyn Surface {
    surface(Protocol::OpenAiResponses)
}

async fn error(
    session: &mut Session,
    status: u16,
    code: &str,
    param: Option<&str>,
    message: &str,
) -> Result<()> {
    let kind = if status >= 500 {
        "server_error"
    } else {
        "invalid_request_error"
    };
    respond::json(
        session,
        status,
        &responses().error_body(message, kind, param, Some(code)),
        &[],
    )
    .await
}

/// Dispatches `rest` = the path after `/v1/responses/`.
pub async fn handle(
    state: &State,
    session: &mut Session,
    account_id: &str,
    method: Method,
    rest: &str,
) -> Result<()> {
    let (id, action) = match rest.split_once('/') {
        Some((id, action)) => (id, Some(action)),
        None => (rest, None),
    };
    let found = match responses().run_id(id) {
        Some(run_id) => state.store.run(account_id, &run_id).await,
        None => Ok(None),
    };
    let invocation = match found {
        Ok(Some(inv)) => inv,
        Ok(None) => {
            return error(
                session,
                404,
                "response_not_found",
                None,
                &format!("No response found with id '{id}'."),
            )
            .await
        }
        Err(e) => {
            tracing::error!(error = %e, "cannot look up a response");
            return error(
                session,
                503,
                "session_store_unavailable",
                None,
                "the session store is unavailable",
            )
            .await;
        }
    };
    match (method, action) {
        (Method::GET, None) => retrieve(state, session, account_id, &invocation).await,
        (Method::POST, Some("cancel")) => cancel(state, session, account_id, &invocation).await,
        _ => {
            error(
                session,
                405,
                "method_not_allowed",
                None,
                "use GET /v1/responses/{id} or POST /v1/responses/{id}/cancel",
            )
            .await
        }
    }
}

fn run_info(inv: &Invocation, events: &[Event]) -> RunInfo {
    let model = events
        .iter()
        .find_map(|e| {
            e.run_status()
                .and(e.metadata.get("model"))
                .and_then(Value::as_str)
        })
        .unwrap_or("agent")
        .to_owned();
    RunInfo {
        run_id: inv.run_id.clone(),
        session_id: inv.session_id.clone(),
        model,
        created_at: inv.started_at.timestamp(),
    }
}

fn query_param<'a>(session: &'a Session, name: &str) -> Option<&'a str> {
    session
        .req_header()
        .uri
        .query()?
        .split('&')
        .find_map(|p| p.strip_prefix(name)?.strip_prefix('='))
}

async fn run_events(
    state: &State,
    account_id: &str,
    inv: &Invocation,
) -> std::result::Result<Vec<Event>, session_log::StoreError> {
    let query = EventQuery {
        run_id: Some(inv.run_id.clone()),
        ..EventQuery::session(account_id, &inv.session_id)
    };
    state.store.events(&query).await
}

async fn retrieve(
    state: &State,
    session: &mut Session,
    account_id: &str,
    inv: &Invocation,
) -> Result<()> {
    let stream = query_param(session, "stream") == Some("true");
    let starting_after = match query_param(session, "starting_after").map(str::parse::<i64>) {
        None => -1,
        Some(Ok(n)) if n >= -1 => n,
        Some(_) => {
            return error(
                session,
                400,
                "invalid_value",
                Some("starting_after"),
                "starting_after must be an integer",
            )
            .await
        }
    };
    let events = match run_events(state, account_id, inv).await {
        Ok(e) => e,
        Err(_) => {
            return error(
                session,
                503,
                "session_store_unavailable",
                None,
                "the session store is unavailable",
            )
            .await
        }
    };
    let info = run_info(inv, &events);
    let headers = [("x-session-id", inv.session_id.as_str())];
    if !stream {
        return respond::json(
            session,
            200,
            &responses().final_body(&info, &events),
            &headers,
        )
        .await;
    }
    // Replay renders every event of the run from its start, so sequence numbers match the
    // original stream; frames up to `starting_after` are not sent again.
    respond::sse_start(session, &headers).await?;
    let query = EventQuery {
        run_id: Some(inv.run_id.clone()),
        ..EventQuery::session(account_id, &inv.session_id)
    };
    let mut subscription = Subscription::open(state.store.clone(), &state.hub, query);
    let mut renderer = responses().stream_renderer(&info);
    stream::pump(session, &mut subscription, None, |event| {
        let mut step = render_step(&mut *renderer, event);
        step.frames.retain(|f| {
            serde_json::from_str::<Value>(&f.data)
                .ok()
                .and_then(|v| v["sequence_number"].as_i64())
                .is_none_or(|n| n > starting_after)
        });
        // Only the latest invocation's end ends the stream (a resumed run goes on).
        step.last = step.last && event.invocation_id.as_deref() == Some(inv.invocation_id.as_str());
        step
    })
    .await;
    Ok(())
}

async fn cancel(
    state: &State,
    session: &mut Session,
    account_id: &str,
    inv: &Invocation,
) -> Result<()> {
    if let Err(e) = control::sessions_cancel(state, account_id, &inv.invocation_id).await {
        return error(session, e.status, "cancel_failed", None, &e.message).await;
    }
    // Answer with the response as it ended.
    let mut events = Vec::new();
    for _ in 0..200 {
        events = run_events(state, account_id, inv).await.unwrap_or_default();
        if events.iter().any(|e| {
            e.is_terminal() && e.invocation_id.as_deref() == Some(inv.invocation_id.as_str())
        }) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let info = run_info(inv, &events);
    respond::json(
        session,
        200,
        &responses().final_body(&info, &events),
        &[("x-session-id", &inv.session_id)],
    )
    .await
}
