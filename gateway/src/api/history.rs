//! History actions of the control API: ForkSession (a new session whose history is
//! another's up to a checkpoint; see `session_log::history`) and CompactSession.

use serde::Deserialize;
use serde_json::{json, Value};
use session_log::history::{fork, ForkError};

use super::sessions::forked_from;
use super::{non_empty, ActionResult, Call, ControlError};
use crate::ids::{new_id, valid_session_id};

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ForkParams {
    session_id: String,
    checkpoint_id: Option<String>,
    new_session_id: Option<String>,
}

/// Forks a session at a checkpoint (the latest without `CheckpointId`) into a new
/// session (`NewSessionId`, or one Tether names).
pub async fn fork_session(call: &Call<'_>) -> ActionResult {
    let p: ForkParams = call.params()?;
    non_empty("SessionId", &p.session_id)?;
    if let Some(checkpoint_id) = &p.checkpoint_id {
        non_empty("CheckpointId", checkpoint_id)?;
    }
    let new_session_id = match p.new_session_id {
        Some(id) if valid_session_id(&id) => id,
        Some(id) => {
            return Err(ControlError::bad_request(format!(
                "NewSessionId {id:?} is not valid: use 1-128 letters, digits, '-', '_', '.' or ':'"
            )))
        }
        None => new_id("sess"),
    };
    let store = &*call.state.store;
    let forked = fork(
        store,
        call.account_id,
        &p.session_id,
        p.checkpoint_id.as_deref(),
        &new_session_id,
    )
    .await
    .map_err(fork_refused)?;
    Ok(json!({ "SessionId": forked.session_id, "ForkedFrom": forked_from(&forked.from) }))
}

/// A refused fork as the control API answers it.
fn fork_refused(e: ForkError) -> ControlError {
    let message = e.to_string();
    match e {
        ForkError::SessionNotFound(_) | ForkError::CheckpointNotFound { .. } => {
            ControlError::new(404, message, Value::Null)
        }
        ForkError::RunInProgress {
            checkpoint_id,
            run_id,
            invocation_id,
        } => ControlError::conflict(
            message,
            json!({
                "code": "run_in_progress",
                "CheckpointId": checkpoint_id,
                "RunId": run_id,
                "InvocationId": invocation_id,
            }),
        ),
        ForkError::SessionExists(session_id) => ControlError::conflict(
            message,
            json!({ "code": "session_exists", "SessionId": session_id }),
        ),
        ForkError::Store(e) => ControlError::unavailable(e),
    }
}
