//! `ArchiveSession` and `UnarchiveSession`: an archived session stays readable (events,
//! checkpoints, export, forks of it) but takes no run, resume or compaction (409
//! `session_archived` in each surface's format) and is left out of `ListSessions` unless
//! `Archived: true` asks for exactly those; unarchiving restores it as it was. And
//! `PatchSession`, the other change to a session that is not a turn (its metadata),
//! which an archived session refuses alike.

use serde::Deserialize;
use serde_json::{json, Value};
use session_log::event::check_metadata;
use session_log::{EventType, NewEvent};

use super::{id_param, ActionResult, Call, ControlError};
use crate::quota;

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

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Patch {
    session_id: String,
    metadata: serde_json::Map<String, Value>,
}

/// `PatchSession`: changes a session's metadata (what `ListSessions` shows and filters
/// on as `Metadata`): each key given is set to its string, or removed with `null`; the
/// others stay. The result follows the Conversations API's rules (16 keys of 64
/// characters, string values of 512). A session's metadata is a `session_metadata` event
/// like the Conversations API's, so it is in the log with the rest; an archived session
/// is read-only and refuses it (409 `session_archived`).
pub async fn patch(call: &Call<'_>) -> ActionResult {
    let p: Patch = call.params()?;
    id_param("SessionId", &p.session_id)?;
    let store = &call.state.store;
    let session = store
        .session(call.account_id, &p.session_id)
        .await?
        .filter(|s| !s.deleted)
        .ok_or_else(|| ControlError::not_found("session", &p.session_id))?;
    if session.archived_at.is_some() {
        return Err(archived(&p.session_id));
    }
    let mut metadata = match session.metadata {
        Some(Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    };
    for (key, value) in p.metadata {
        match value {
            Value::Null => metadata.remove(&key),
            value => metadata.insert(key, value),
        };
    }
    check_metadata(&metadata).map_err(ControlError::bad_request)?;
    let adding = quota::Adding {
        events: true,
        ..quota::Adding::default()
    };
    quota::refuse_over_quota(call.state, call.account_id, adding)
        .await
        .map_err(ControlError::from)?;
    let metadata = Value::Object(metadata);
    let event = NewEvent::new(
        call.account_id,
        &p.session_id,
        EventType::SessionMetadata,
        json!({ "metadata": metadata }),
    )
    .with_metadata(json!({ "actor": call.credential_id }));
    call.state
        .writer
        .append(vec![event])
        .await
        .map_err(ControlError::unavailable)?;
    Ok(json!({ "SessionId": p.session_id, "Metadata": metadata }))
}
