//! The OpenAI surfaces' stored-response routes, served from the log for any agent:
//! `GET /v1/responses/{id}` and `GET /v1/chat/completions/{id}` (retrieve),
//! `GET …/{id}?stream=true&starting_after=N` (the run's stream again, after the frame
//! numbered N, Responses' `sequence_number`, or whose `id:` is N; a `Last-Event-ID` header
//! is the same cursor, so an `EventSource` reconnect resumes where it stopped) and
//! `POST …/{id}/cancel`.
//!
//! Frame ids (`runtime_adapter::cursor`): each surface numbers a run's frames from 0 in
//! the order its events render them, and a replay renders the run from its first event,
//! so the ids match the original stream's. A bare number as `Last-Event-ID` is an earlier
//! release's id: a frame number from the release that numbered frames so, a log seq from
//! the one before; the run's start, against when the store took the first one's
//! migration, says which.

use http::Method;
use pingora::proxy::Session;
use pingora::Result;
use runtime_adapter::{surface, Protocol, Surface};
use serde_json::Value;
use session_log::{Invocation, Subscription};

use crate::client::respond;
use crate::client::stream::{self, replay_step};
use crate::error::ApiError;
use crate::state::State;
use crate::turn::{cancel_and_wait, run_events, run_info, run_query};

/// Dispatches `rest` = the path after `/v1/responses/` or `/v1/chat/completions/`.
pub async fn handle(
    state: &State,
    session: &mut Session,
    account_id: &str,
    method: Method,
    protocol: Protocol,
    rest: &str,
) -> Result<()> {
    let surface = surface(protocol);
    let base = match protocol {
        Protocol::OpenAiChat => "/v1/chat/completions",
        _ => "/v1/responses",
    };
    let (id, action) = match rest.split_once('/') {
        Some((id, action)) => (id, Some(action)),
        None => (rest, None),
    };
    let answer = match find(state, account_id, surface, id).await {
        Ok(invocation) => match (method, action) {
            (Method::GET, None) => retrieve(state, session, account_id, surface, &invocation).await,
            (Method::POST, Some("cancel")) => {
                cancel(state, session, account_id, surface, &invocation).await
            }
            _ => Err(ApiError::new(
                405,
                "invalid_request_error",
                "method_not_allowed",
                format!("use GET {base}/{{id}} or POST {base}/{{id}}/cancel"),
            )),
        },
        Err(e) => Err(e),
    };
    match answer {
        Ok(result) => result,
        Err(e) => e.send(session, surface, &[]).await,
    }
}

/// The latest invocation of the run behind a response id, in the caller's account.
async fn find(
    state: &State,
    account_id: &str,
    surface: &dyn Surface,
    id: &str,
) -> std::result::Result<Invocation, ApiError> {
    let not_found = || {
        ApiError::new(
            404,
            "invalid_request_error",
            "response_not_found",
            format!("No response found with id '{id}'."),
        )
    };
    let run_id = surface.run_id(id).ok_or_else(not_found)?;
    let unavailable = |e| ApiError::store_unavailable(&e, "cannot look up a response");
    let invocation = state
        .store
        .run(account_id, &run_id)
        .await
        .map_err(unavailable)?
        .ok_or_else(not_found)?;
    // A deleted conversation's responses are gone with it.
    if crate::turn::session_deleted(state, account_id, &invocation.session_id)
        .await
        .map_err(unavailable)?
    {
        return Err(not_found());
    }
    Ok(invocation)
}

/// The first value of the query parameter `name`, decoded.
fn query_param(session: &Session, name: &str) -> Option<String> {
    let query = session.req_header().uri.query()?;
    form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// `Ok(Err(_))` is an error to send; `Ok(Ok(()))` means the answer went out.
type Answer = std::result::Result<Result<()>, ApiError>;

async fn retrieve(
    state: &State,
    session: &mut Session,
    account_id: &str,
    surface: &'static dyn Surface,
    inv: &Invocation,
) -> Answer {
    let stream = query_param(session, "stream").as_deref() == Some("true");
    let starting_after = crate::ids::stream_cursor(
        "starting_after",
        query_param(session, "starting_after").as_deref(),
        &session.req_header().headers,
    )
    .map_err(|e| e.to_api())?;
    let starting_after = match starting_after {
        Some(cursor) => Some(cursor.openai_resume(frames_numbered(state, cursor, inv).await?)),
        None => None,
    };
    let events = run_events(state, account_id, inv).await?;
    let info = run_info(inv, &events, Value::Null);
    let headers = [("x-session-id", inv.session_id.as_str())];
    if !stream {
        return Ok(
            respond::json(session, 200, &surface.final_body(&info, &events), &headers).await,
        );
    }
    // Replay renders every event of the run from its start, so frame ids match the
    // original stream's; frames up to the cursor are not sent again.
    if let Err(e) = respond::sse_start(session, &headers).await {
        return Ok(Err(e));
    }
    let mut subscription =
        Subscription::open(state.store.clone(), &state.hub, run_query(account_id, inv));
    let mut renderer = surface.stream_renderer(&info);
    stream::pump(session, &mut subscription, None, |event| {
        replay_step(&mut *renderer, event, starting_after, &inv.invocation_id)
    })
    .await;
    Ok(Ok(()))
}

/// Whether the run was streamed by the release whose Chat and Responses ids were bare
/// frame numbers (it started after the store took that release's migration), as a bare
/// `Last-Event-ID` from an earlier release is read by; asked of the store only then.
async fn frames_numbered(
    state: &State,
    cursor: crate::ids::StreamCursor,
    inv: &Invocation,
) -> std::result::Result<bool, ApiError> {
    if !cursor.is_bare_header() {
        return Ok(false);
    }
    let since = state
        .store
        .migrated_at(crate::ids::FRAME_NUMBERS_MIGRATION)
        .await
        .map_err(|e| ApiError::store_unavailable(&e, "cannot read the store's migrations"))?;
    // SQLite dates a migration to the second: a run that started within that second may
    // have come before it, and is read as the older release's.
    let surely_after = |since: chrono::DateTime<chrono::Utc>| since + chrono::Duration::seconds(1);
    Ok(since.is_some_and(|since| inv.started_at >= surely_after(since)))
}

async fn cancel(
    state: &State,
    session: &mut Session,
    account_id: &str,
    surface: &dyn Surface,
    inv: &Invocation,
) -> Answer {
    // Answer with the response as it ended (the supervisor records the end promptly).
    let events = cancel_and_wait(state, account_id, inv).await?;
    let info = run_info(inv, &events, Value::Null);
    Ok(respond::json(
        session,
        200,
        &surface.final_body(&info, &events),
        &[("x-session-id", &inv.session_id)],
    )
    .await)
}
