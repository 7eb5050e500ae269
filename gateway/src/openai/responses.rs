//! The Responses API's stored-response routes, served from the log for any agent:
//! `GET /v1/responses/{id}` (retrieve), `GET /v1/responses/{id}?stream=true&starting_after=N`
//! (resume a stream after the event whose `sequence_number` is N) and
//! `POST /v1/responses/{id}/cancel`.

use http::Method;
use pingora::proxy::Session;
use pingora::Result;
use runtime_adapter::{surface, Protocol, Surface};
use serde_json::Value;
use session_log::{Invocation, Subscription};

use crate::client::respond;
use crate::client::stream::{self, render_step};
use crate::error::ApiError;
use crate::state::State;
use crate::turn::{cancel_and_wait, run_events, run_info, run_query};

fn responses() -> &'static dyn Surface {
    surface(Protocol::OpenAiResponses)
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
    let answer = match find(state, account_id, id).await {
        Ok(invocation) => match (method, action) {
            (Method::GET, None) => retrieve(state, session, account_id, &invocation).await,
            (Method::POST, Some("cancel")) => cancel(state, session, account_id, &invocation).await,
            _ => Err(ApiError::new(
                405,
                "invalid_request_error",
                "method_not_allowed",
                "use GET /v1/responses/{id} or POST /v1/responses/{id}/cancel",
            )),
        },
        Err(e) => Err(e),
    };
    match answer {
        Ok(result) => result,
        Err(e) => e.send(session, responses(), &[]).await,
    }
}

/// The latest invocation of the run behind a response id, in the caller's account.
async fn find(
    state: &State,
    account_id: &str,
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
    let run_id = responses().run_id(id).ok_or_else(not_found)?;
    match state.store.run(account_id, &run_id).await {
        Ok(Some(invocation)) => Ok(invocation),
        Ok(None) => Err(not_found()),
        Err(e) => Err(ApiError::store_unavailable(&e, "cannot look up a response")),
    }
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
    inv: &Invocation,
) -> Answer {
    let stream = query_param(session, "stream").as_deref() == Some("true");
    let starting_after = match query_param(session, "starting_after").map(|v| v.parse::<i64>()) {
        None => -1,
        Some(Ok(n)) if n >= -1 => n,
        Some(_) => {
            let e = ApiError::new(
                400,
                "invalid_request_error",
                "invalid_value",
                "starting_after must be an integer",
            );
            return Err(e.with_param("starting_after"));
        }
    };
    let events = run_events(state, account_id, inv).await?;
    let info = run_info(inv, &events, Value::Null);
    let headers = [("x-session-id", inv.session_id.as_str())];
    if !stream {
        return Ok(respond::json(
            session,
            200,
            &responses().final_body(&info, &events),
            &headers,
        )
        .await);
    }
    // Replay renders every event of the run from its start, so sequence numbers match the
    // original stream; frames up to `starting_after` are not sent again.
    if let Err(e) = respond::sse_start(session, &headers).await {
        return Ok(Err(e));
    }
    let mut subscription =
        Subscription::open(state.store.clone(), &state.hub, run_query(account_id, inv));
    let mut renderer = responses().stream_renderer(&info);
    stream::pump(session, &mut subscription, None, |event| {
        let mut step = render_step(&mut *renderer, event);
        let sequence_number = |data: &str| {
            serde_json::from_str::<Value>(data)
                .ok()
                .and_then(|v| v["sequence_number"].as_i64())
        };
        step.frames
            .retain(|f| sequence_number(&f.data).is_none_or(|n| n > starting_after));
        // Only the latest invocation's end ends the stream (a resumed run goes on).
        step.last = step.last && event.invocation_id.as_deref() == Some(inv.invocation_id.as_str());
        step
    })
    .await;
    Ok(Ok(()))
}

async fn cancel(
    state: &State,
    session: &mut Session,
    account_id: &str,
    inv: &Invocation,
) -> Answer {
    // Answer with the response as it ended (the supervisor records the end promptly).
    let events = cancel_and_wait(state, account_id, inv).await?;
    let info = run_info(inv, &events, Value::Null);
    Ok(respond::json(
        session,
        200,
        &responses().final_body(&info, &events),
        &[("x-session-id", &inv.session_id)],
    )
    .await)
}
