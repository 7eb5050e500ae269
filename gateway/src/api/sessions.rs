//! Session actions: ListSessions (with its filters and text search), ListSessionEvents,
//! CancelRun.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{json, Value};
use session_log::event::run_status_content;
use session_log::{
    metadata_key_is_valid, search_words, ArchivedFilter, EventType, ForkPoint, Lineage, NewEvent,
    RunStatus, SessionFilter,
};

use super::event::{EventView, Place};
use super::{id_param, ActionResult, Call, ControlError};
use crate::runs::Stop;
use crate::state::State;

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ListSessions {
    #[serde(default)]
    agent_id: Option<String>,
    #[serde(default)]
    user_id: Option<String>,
    #[serde(default)]
    page: Option<i64>,
    #[serde(default)]
    page_size: Option<i64>,
    /// The archived sessions instead of the active ones.
    #[serde(default)]
    archived: bool,
    /// The archived sessions as well as the active ones.
    #[serde(default)]
    include_archived: bool,
    #[serde(default)]
    created_after: Option<DateTime<Utc>>,
    #[serde(default)]
    created_before: Option<DateTime<Utc>>,
    #[serde(default)]
    active_after: Option<DateTime<Utc>>,
    #[serde(default)]
    active_before: Option<DateTime<Utc>>,
    #[serde(default)]
    last_run_status: Option<String>,
    #[serde(default)]
    metadata: Option<BTreeMap<String, String>>,
    /// Words that must all appear in one message of the session.
    #[serde(default)]
    query: Option<String>,
}

impl ListSessions {
    /// The store's filter, or what is wrong with the parameters.
    fn filter(self) -> Result<SessionFilter, ControlError> {
        let archived = match (self.archived, self.include_archived) {
            (false, false) => ArchivedFilter::Exclude,
            (false, true) => ArchivedFilter::Include,
            (true, false) => ArchivedFilter::Only,
            (true, true) => {
                return Err(ControlError::bad_request(
                    "Archived and IncludeArchived exclude each other",
                ))
            }
        };
        let last_run_status = self
            .last_run_status
            .map(|s| {
                RunStatus::parse(&s).ok_or_else(|| {
                    ControlError::bad_request(format!(
                        "LastRunStatus {s:?} is not a run status (in_progress, completed, \
                         failed, cancelled, interrupted)"
                    ))
                })
            })
            .transpose()?;
        let metadata: Vec<(String, String)> =
            self.metadata.unwrap_or_default().into_iter().collect();
        if let Some((key, _)) = metadata.iter().find(|(k, _)| !metadata_key_is_valid(k)) {
            return Err(ControlError::bad_request(format!(
                "Metadata key {key:?} cannot be searched (empty, or has a double quote)"
            )));
        }
        Ok(SessionFilter {
            user_id: self.user_id,
            agent_id: self.agent_id,
            created_after: self.created_after,
            created_before: self.created_before,
            active_after: self.active_after,
            active_before: self.active_before,
            last_run_status,
            metadata,
            archived,
            text: self.query.filter(|q| !search_words(q).is_empty()),
        })
    }
}

/// Sessions of the caller's account that the filters let through, most recently updated
/// first; archived ones only with `Archived: true`, and beside the others with
/// `IncludeArchived: true`.
pub async fn list_sessions(call: &Call<'_>) -> ActionResult {
    let p: ListSessions = call.params()?;
    let page = p.page.unwrap_or(1);
    let page_size = p.page_size.unwrap_or(20);
    if page < 1 {
        return Err(ControlError::bad_request("Page must be 1 or more"));
    }
    if !(1..=100).contains(&page_size) {
        return Err(ControlError::bad_request(
            "PageSize must be between 1 and 100",
        ));
    }
    let filter = p.filter()?;
    let offset = (page - 1) * page_size;
    let (sessions, total) = call
        .state
        .store
        .list_sessions(call.account_id, &filter, offset, page_size)
        .await?;
    let rows: Vec<Value> = sessions
        .iter()
        .map(|s| {
            json!({
                "SessionId": s.session_id,
                "AgentId": s.agent_id,
                "UserId": s.user_id,
                "LastSeqId": s.last_seq,
                "LastRunStatus": s.last_run_status.map(RunStatus::as_str),
                "CreatedAt": s.created_at.to_rfc3339(),
                "UpdatedAt": s.updated_at.to_rfc3339(),
                "ForkedFrom": s.forked_from.as_ref().map(forked_from),
                "Metadata": s.metadata,
                "Archived": s.archived_at.is_some(),
            })
        })
        .collect();
    Ok(json!({ "Sessions": rows, "Total": total, "Page": page, "PageSize": page_size }))
}

/// A fork point as the control API shows it (`ForkedFrom`).
pub fn forked_from(point: &ForkPoint) -> Value {
    json!({
        "SessionId": point.session_id,
        "CheckpointId": point.checkpoint_id,
        "SeqId": point.seq,
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ListSessionEvents {
    session_id: String,
    #[serde(default)]
    offset: Option<i64>,
    #[serde(default)]
    limit: Option<i64>,
    #[serde(default)]
    active_only: Option<bool>,
}

/// One page of a session's history, in order: for a fork, the events it inherits
/// (flagged `Inherited`) and then its own. `Offset` is a position cursor (a seq, unless
/// the session is a fork): the events after position `Offset`. Events a resume
/// superseded are flagged `Superseded`, and left out with `ActiveOnly`.
pub async fn list_session_events(call: &Call<'_>) -> ActionResult {
    let p: ListSessionEvents = call.params()?;
    id_param("SessionId", &p.session_id)?;
    let offset = p.offset.unwrap_or(0);
    let limit = p.limit.unwrap_or(50);
    let active_only = p.active_only.unwrap_or(false);
    if offset < 0 {
        return Err(ControlError::bad_request("Offset must be 0 or more"));
    }
    if !(1..=500).contains(&limit) {
        return Err(ControlError::bad_request("Limit must be between 1 and 500"));
    }
    let store = &*call.state.store;
    let lineage = Lineage::resolve(store, call.account_id, &p.session_id)
        .await?
        .ok_or_else(|| ControlError::not_found("session", &p.session_id))?;
    let (branch, _) = lineage.branch(store, None).await?;
    let mut page = Vec::new();
    let mut cursor = offset;
    loop {
        let read = lineage.events(store, cursor, None, None, limit).await?;
        let Some(last) = read.last() else { break };
        cursor = lineage.position(last);
        let full = read.len() as i64 == limit;
        page.extend(
            read.into_iter()
                .map(|e| (Place::of(&lineage, &branch, &e), e))
                // A deleted item is in no read; its `item_deleted` event says who.
                .filter(|(place, _)| !branch.is_deleted(place.position))
                .filter(|(place, _)| !(active_only && place.superseded)),
        );
        if !full || page.len() as i64 >= limit {
            break;
        }
    }
    page.truncate(limit as usize);
    let events: Vec<Value> = page
        .into_iter()
        .map(|(place, e)| serde_json::to_value(EventView::placed(&e, place)).unwrap_or(Value::Null))
        .collect();
    Ok(json!({
        "SessionId": p.session_id,
        "ForkedFrom": lineage.session.forked_from.as_ref().map(forked_from),
        "Events": events,
        "Total": lineage.last_position(),
        "Offset": offset,
        "Limit": limit,
        "ActiveOnly": active_only,
    }))
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct CancelRun {
    invocation_id: String,
    #[serde(default)]
    #[allow(dead_code)] // accepted for compatibility; ownership comes from the account
    agent_id: Option<String>,
}

/// Cancels a running invocation: the agent call is aborted and `run_status=cancelled`
/// ends every subscriber's stream. Idempotent; an unknown id is `Found: false`.
pub async fn cancel_run(call: &Call<'_>) -> ActionResult {
    let p: CancelRun = call.params()?;
    if p.invocation_id.is_empty() {
        return Err(ControlError::bad_request("InvocationId is required"));
    }
    id_param("InvocationId", &p.invocation_id)?;
    cancel(call.state, call.account_id, &p.invocation_id).await
}

/// Shared by CancelRun and the Responses surface's cancel.
pub async fn cancel(state: &State, account_id: &str, invocation_id: &str) -> ActionResult {
    let Some(invocation) = state.store.invocation(account_id, invocation_id).await? else {
        return Ok(
            json!({ "Cancelled": false, "Found": false, "Status": "not_found", "RunnerCancelStatus": "not_found" }),
        );
    };
    if invocation.status.is_terminal() {
        return Ok(json!({
            "Cancelled": invocation.status == RunStatus::Cancelled,
            "Found": true,
            "Status": invocation.status.as_str(),
            "RunnerCancelStatus": "already_finished",
        }));
    }
    if state.runs.stop(account_id, invocation_id, Stop::Cancel) {
        return Ok(
            json!({ "Cancelled": true, "Found": true, "Status": "cancelling", "RunnerCancelStatus": "accepted" }),
        );
    }
    // Driven by another replica that is alive (its lease is live): ask it. The flag reaches
    // it at its next heartbeat at the latest; the notification, at once.
    let lease = state.store.lease(account_id, invocation_id).await?;
    if let Some(session_log::Lease {
        owner: Some(owner),
        live: true,
        ..
    }) = &lease
    {
        if owner != state.runs.owner()
            && state
                .store
                .request_cancel(account_id, invocation_id)
                .await?
        {
            let payload = session_log::tail::cancel_payload(account_id, invocation_id);
            if let Err(error) = state
                .store
                .notify(session_log::tail::CANCEL_CHANNEL, &[payload])
                .await
            {
                tracing::warn!(%error, invocation_id, "cancel notification failed; the owner's heartbeat will see the request");
            }
            return Ok(
                json!({ "Cancelled": true, "Found": true, "Status": "cancelling", "RunnerCancelStatus": "forwarded" }),
            );
        }
    }
    // Open in the log but driven by nobody (its gateway died): close it now. The store
    // refuses a second terminal status, so racing a live owner is harmless.
    let terminal = NewEvent::new(
        account_id,
        &invocation.session_id,
        EventType::RunStatus,
        run_status_content(RunStatus::Cancelled, Some("cancelled_without_runner")),
    )
    .in_run(&invocation.run_id, invocation_id);
    state
        .writer
        .append(vec![terminal])
        .await
        .map_err(ControlError::unavailable)?;
    Ok(
        json!({ "Cancelled": true, "Found": true, "Status": "cancelled", "RunnerCancelStatus": "not_running" }),
    )
}
