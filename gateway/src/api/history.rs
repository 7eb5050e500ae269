//! History actions of the control API: ForkSession (a new session whose history is
//! another's up to a checkpoint; see `session_log::history`) and CompactSession.

use serde::Deserialize;
use serde_json::{json, Value};
use session_log::checkpoints::event_id;
use session_log::history::{fork, ForkError};
use session_log::{Event, EventType, Lineage, RunStatus};

use super::sessions::forked_from;
use super::{id_param, non_empty, ActionResult, Call, ControlError};
use crate::ids::{client_id, new_id};
use crate::quota;
use crate::runs::compaction::CompactError;

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
    id_param("SessionId", &p.session_id)?;
    if let Some(checkpoint_id) = &p.checkpoint_id {
        id_param("CheckpointId", checkpoint_id)?;
    }
    let new_session_id = match p.new_session_id {
        Some(id) => {
            client_id("NewSessionId", &id)?;
            id
        }
        None => new_id("sess"),
    };
    quota::refuse_new_session(call.state, call.account_id).await?;
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

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct CompactParams {
    session_id: String,
    keep_last_turns: Option<u32>,
    summary: Option<String>,
}

/// Compacts a session: everything before its last `KeepLastTurns` turns is summarised
/// (as `Summary`, or by the summarizer) into a `compaction_boundary` and a
/// `context_checkpoint`. Nothing is deleted; later turns get the summary and the turns
/// kept.
pub async fn compact_session(call: &Call<'_>) -> ActionResult {
    let p: CompactParams = call.params()?;
    id_param("SessionId", &p.session_id)?;
    if let Some(summary) = &p.summary {
        non_empty("Summary", summary)?;
    }
    let state = call.state;
    let keep = p
        .keep_last_turns
        .map_or(state.runs.compactor().keep_last_turns, |k| k as usize);
    let store = &*state.store;
    let lineage = Lineage::resolve(store, call.account_id, &p.session_id)
        .await?
        .ok_or_else(|| ControlError::not_found("session", &p.session_id))?;
    if store
        .archived_at(call.account_id, &p.session_id)
        .await?
        .is_some()
    {
        return Err(super::archive::archived(&p.session_id));
    }
    let (_, markers) = lineage.branch(store, None).await?;
    let open = open_run(&lineage, &markers)
        .or_else(|| state.runs.active_in_session(call.account_id, &p.session_id));
    if let Some((run_id, invocation_id)) = open {
        return Err(ControlError::conflict(
            "a run is in progress in this session; wait for it or cancel it",
            json!({ "code": "session_busy", "RunId": run_id, "InvocationId": invocation_id }),
        ));
    }
    let history = lineage.history(store, None).await?;
    let model = markers
        .iter()
        .rev()
        .find_map(|e| e.run_status().and(e.metadata.get("model")?.as_str()))
        .unwrap_or(&state.config.model);
    let boundary = serde_json::Map::from_iter([("reason".to_owned(), json!("manual"))]);
    let compaction = state
        .runs
        .compactor()
        .compact(&lineage, &history, keep, p.summary, model, boundary)
        .await
        .map_err(compact_refused)?;
    let committed = state
        .writer
        .append(compaction.events.to_vec())
        .await
        .map_err(ControlError::unavailable)?;
    let checkpoint = compaction.checkpoint;
    tracing::info!(
        account_id = call.account_id, session_id = %p.session_id, keep_last_turns = keep,
        seq_start = checkpoint.seq_start, seq_end = checkpoint.seq_end, "session compacted"
    );
    Ok(json!({
        "Summary": checkpoint.summary,
        "SeqStart": checkpoint.seq_start,
        "SeqEnd": checkpoint.seq_end,
        "EventIds": committed.iter().map(event_id).collect::<Vec<_>>(),
    }))
}

/// The run and invocation left open in the session itself, per its markers.
fn open_run(lineage: &Lineage, markers: &[Event]) -> Option<(String, String)> {
    let own = markers.iter().filter(|e| !lineage.is_inherited(e));
    let mut open: Option<&Event> = None;
    for e in own.filter(|e| e.event_type == EventType::RunStatus) {
        match e.run_status() {
            Some(RunStatus::InProgress) => open = Some(e),
            Some(_) if open.is_some_and(|o| o.invocation_id == e.invocation_id) => open = None,
            _ => {}
        }
    }
    let open = open?;
    Some((open.run_id.clone()?, open.invocation_id.clone()?))
}

/// A compaction refused, as the control API answers it.
fn compact_refused(e: CompactError) -> ControlError {
    let message = e.to_string();
    match e {
        CompactError::NothingToCompact(_) => {
            ControlError::conflict(message, json!({ "code": "nothing_to_compact" }))
        }
        CompactError::NoSummarizer => {
            ControlError::new(400, message, json!({ "code": "summarizer_not_configured" }))
        }
        CompactError::Summarizer(reason) => {
            tracing::error!(%reason, "CompactSession: the summarizer failed; nothing was written");
            ControlError::new(502, message, json!({ "code": "summarizer_failed" }))
        }
        CompactError::Store(e) => ControlError::unavailable(e),
    }
}
