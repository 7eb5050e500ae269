//! ImportSession: a session exported from another Tether (`tether export`, or the events
//! of ListSessionEvents) stored into the caller's account with its seqs and times, so it
//! answers the same projection and goes on after its last seq. A session or invocation id
//! the account already has is refused, and so is an invocation id live on this gateway
//! or known in the store in any account; nothing is written.
//!
//! A fork's export holds its whole history: the events it inherited up its fork chain
//! (`Inherited`, with their own sessions' ids and seqs) and its own. It is imported
//! flattened: every event at its `Position`, all in the imported session, which is then
//! a session of its own with the same active history (positions are what resumes' cuts
//! and compactions' ranges are counted in, so they hold as they were).

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use session_log::event::run_status_content;
use session_log::{import, Event, EventType, Imported, NewEvent, RunStatus};

use super::{ActionResult, Call, ControlError};
use crate::ids::client_id;
use crate::quota;

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ImportSession {
    session_id: String,
    events: Vec<ImportedEvent>,
}

/// An event as the control API shows it (`EventId` and `Superseded` are ignored: they
/// are derived).
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ImportedEvent {
    #[serde(default)]
    session_id: Option<String>,
    seq_id: i64,
    /// Where it stands in the session's history (a fork's export): it is stored there.
    #[serde(default)]
    position: Option<i64>,
    /// Inherited from an earlier session of the fork chain: its `SessionId` is that one's.
    #[serde(default)]
    inherited: bool,
    #[serde(default)]
    run_id: Option<String>,
    #[serde(default)]
    invocation_id: Option<String>,
    event_type: String,
    #[serde(default)]
    role: Option<String>,
    content: Value,
    #[serde(default)]
    metadata: Value,
    timestamp: DateTime<Utc>,
}

/// Why an invocation the export left open is closed on import: no gateway drives it here.
const UNFINISHED: &str = "imported_unfinished";

pub async fn import_session(call: &Call<'_>) -> ActionResult {
    let p: ImportSession = call.params()?;
    client_id("SessionId", &p.session_id)?;
    let events = p
        .events
        .into_iter()
        .enumerate()
        .map(|(i, e)| event(call.account_id, &p.session_id, e).map_err(|m| at(i, m)))
        .collect::<Result<Vec<_>, _>>()?;
    let invocations = import::invocations(&events)
        .map_err(|e| ControlError::bad_request(format!("Events: {e}")))?;
    // A run keeps its id to itself, whichever account it is in: an imported copy of one
    // live on this gateway or known in the store is refused like an id the account
    // already has (the registry of live runs is keyed by account too: see `runs`).
    if let Some(live) = invocations
        .iter()
        .find(|i| call.state.runs.is_live_anywhere(&i.invocation_id))
    {
        return Err(invocation_exists(&live.invocation_id));
    }
    let ids: Vec<String> = invocations
        .iter()
        .map(|i| i.invocation_id.clone())
        .collect();
    if let Some(known) = call
        .state
        .store
        .invocation_known_elsewhere(call.account_id, &ids)
        .await?
    {
        return Err(invocation_exists(&known));
    }
    quota::refuse_new_session(call.state, call.account_id).await?;
    match call.state.store.import_session(&events).await? {
        Imported::Created => {}
        Imported::SessionExists => {
            return Err(ControlError::conflict(
                format!("session {:?} already exists in this account", p.session_id),
                json!({ "code": "session_exists" }),
            ))
        }
        Imported::InvocationExists(id) => return Err(invocation_exists(&id)),
    }
    // Every run ends with one terminal status: what the export left running is over here.
    let unfinished: Vec<NewEvent> = invocations
        .iter()
        .filter(|i| i.status == RunStatus::InProgress)
        .map(|i| {
            NewEvent::new(
                call.account_id,
                &p.session_id,
                EventType::RunStatus,
                run_status_content(RunStatus::Interrupted, Some(UNFINISHED)),
            )
            .in_run(&i.run_id, &i.invocation_id)
        })
        .collect();
    let closed: Vec<&str> = unfinished
        .iter()
        .filter_map(|e| e.invocation_id.as_deref())
        .collect();
    let mut last_seq = events.last().map_or(0, |e| e.seq);
    if !unfinished.is_empty() {
        let committed = call
            .state
            .writer
            .append(unfinished.clone())
            .await
            .map_err(ControlError::unavailable)?;
        last_seq = committed.iter().map(|e| e.seq).max().unwrap_or(last_seq);
    }
    tracing::info!(account_id = call.account_id, session_id = %p.session_id, events = events.len(), "imported a session");
    Ok(json!({
        "SessionId": p.session_id,
        "ImportedEvents": events.len(),
        "LastSeqId": last_seq,
        "InterruptedInvocations": closed,
    }))
}

fn invocation_exists(id: &str) -> ControlError {
    ControlError::conflict(
        format!("invocation {id:?} already exists"),
        json!({ "code": "invocation_exists", "InvocationId": id }),
    )
}

fn at(index: usize, message: String) -> ControlError {
    ControlError::bad_request(format!("Events[{index}]: {message}"))
}

/// One imported event, in the caller's account.
fn event(account_id: &str, session_id: &str, e: ImportedEvent) -> Result<Event, String> {
    if !e.inherited && e.session_id.as_deref().is_some_and(|s| s != session_id) {
        return Err(format!(
            "SessionId {:?} is not the imported session {session_id:?}",
            e.session_id.unwrap_or_default()
        ));
    }
    let event_type = EventType::parse(&e.event_type)
        .ok_or_else(|| format!("unknown EventType {:?}", e.event_type))?;
    let metadata = match e.metadata {
        Value::Null => Value::Object(Map::new()),
        m @ Value::Object(_) => m,
        _ => return Err("Metadata must be an object".into()),
    };
    Ok(Event {
        account_id: account_id.to_owned(),
        session_id: session_id.to_owned(),
        seq: e.position.unwrap_or(e.seq_id),
        run_id: e.run_id,
        invocation_id: e.invocation_id,
        event_type,
        role: e.role,
        content: e.content,
        metadata,
        created_at: e.timestamp,
    })
}
