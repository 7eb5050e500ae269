//! The OpenAI routes Tether answers itself: `POST /v1/responses` and
//! `POST /v1/chat/completions` start a run (with `item_reference` inputs resolved in
//! `references`), and the stored-response routes under
//! `/v1/responses/{id}` and `/v1/chat/completions/{id}` (in `stored`) read one back from
//! the log; the Conversations API (in `conversations`) reads and changes sessions as
//! conversations.

pub mod conversations;
pub mod references;
pub mod stored;

use pingora::proxy::Session;
use pingora::Result;
use runtime_adapter::{surface, Protocol};

use crate::client::body::read_body;
use crate::client::reply::Reply;
use crate::error::ApiError;
use crate::metrics::{Limit, METRICS};
use crate::state::State;
use crate::turn::{request_digest, run_turn};

/// A turn through one of the OpenAI surfaces. Always answers the client itself.
pub async fn serve_turn(
    state: &State,
    session: &mut Session,
    account_id: &str,
    protocol: Protocol,
) -> Result<()> {
    let surface = surface(protocol);
    // At the cap: answer before reading the body or storing any attachment. (The run
    // takes its own slot when it starts; this probe is released at once.)
    if let Err(l) = state.limits.try_acquire_run(account_id) {
        METRICS.rate_limited(Limit::Runs);
        return ApiError::limited(&l).send(session, surface, &[]).await;
    }
    let body = match read_body(session, &state.input).await {
        Ok(body) => body,
        Err(e) => return e.send(session, surface, &[]).await,
    };
    let header = session
        .req_header()
        .headers
        .get("x-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let parsed = surface.parse_request(&body, header.as_deref());
    let digest = request_digest(session, &body);
    drop(body); // not kept while the run streams
    match parsed {
        Ok(mut turn) => {
            turn.request_digest = digest;
            if let Err(e) = references::resolve(state, account_id, &mut turn).await {
                return e.send(session, surface, &[]).await;
            }
            run_turn(state, session, &mut Reply::Http, account_id, surface, turn).await
        }
        Err(e) => {
            let mut err = ApiError::new(400, "invalid_request_error", e.code, e.message);
            err.param = e.param;
            err.send(session, surface, &[]).await
        }
    }
}
