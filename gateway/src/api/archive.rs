//! `ArchiveSession` and `UnarchiveSession`: an archived session stays readable (events,
//! checkpoints, export, forks of it) but takes no run, resume or compaction (409
//! `session_archived` in each surface's format) and is left out of `ListSessions` unless
//! `Archived: true` asks for exactly those; unarchiving restores it as it was.

use serde::Deserialize;
use serde_json::json;

use super::{id_param, ActionResult, Call, ControlError};

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Params {
    session_id: String,
}

/// Archives (`archived`) or unarchives the session; either is idempotent.
pub async fn archive(call: &Call<'_>, archived: bool) -> ActionResult {
    let p: Params = call.params()?;
    id_param("SessionId", &p.session_id)?;
    let store = &call.state.store;
    // Archiving again keeps the first time.
    let at = match (
        archived,
        store.archived_at(call.account_id, &p.session_id).await?,
    ) {
        (true, Some(at)) => Some(at),
        // Microseconds: what both stores keep, so the answer matches a later read.
        (true, None) => Some(chrono::SubsecRound::trunc_subsecs(chrono::Utc::now(), 6)),
        (false, _) => None,
    };
    if !store
        .set_archived(call.account_id, &p.session_id, at)
        .await?
    {
        return Err(ControlError::not_found("session", &p.session_id));
    }
    Ok(json!({
        "SessionId": p.session_id,
        "Archived": archived,
        "ArchivedAt": at.map(|t| t.to_rfc3339()),
    }))
}

/// The refusal of a write to an archived session, in the envelope.
pub fn archived(session_id: &str) -> ControlError {
    ControlError::conflict(
        format!(
            "session {session_id:?} is archived (read-only); unarchive it (UnarchiveSession) \
             to continue it"
        ),
        json!({ "code": "session_archived", "SessionId": session_id }),
    )
}
