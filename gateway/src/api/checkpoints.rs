//! Checkpoint actions of the control API: ListSessionCheckpoints, ListToolReceipts,
//! GetCheckpointResumePreview and ResumeRun, all answered from the session log (see
//! `session_log::checkpoints` for the descriptors, receipts and the state machine).

use pingora::proxy::Session;
use runtime_adapter::{project, surface, Item, Protocol, TurnRequest};
use serde::Deserialize;
use serde_json::{json, Value};
use session_log::checkpoints::{
    checkpoints, resume_risk, tool_receipts, Checkpoint, CheckpointStatus, ReceiptStatus,
};
use session_log::{Event, EventType, Lineage, RunStatus, Subscription};

use super::{id_param, ActionResult, Call, ControlError};
use crate::client::{respond, stream};
use crate::core::on_core;
use crate::error::ApiError;
use crate::ids::new_id;
use crate::quota;
use crate::runs::{ResumeFrom, Start, StartError, StartedRun};

const DEFAULT_LIMIT: i64 = 50;
const MAX_LIMIT: i64 = 200;

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ListCheckpointsParams {
    session_id: String,
    run_id: Option<String>,
    framework: Option<String>,
    only_resumable: Option<bool>,
    limit: Option<i64>,
    offset: Option<i64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ListReceiptsParams {
    session_id: String,
    run_id: Option<String>,
    checkpoint_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct CheckpointParams {
    session_id: String,
    run_id: String,
    checkpoint_id: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ResumeParams {
    session_id: String,
    run_id: String,
    checkpoint_id: String,
    resume_instruction_enabled: Option<bool>,
    resume_instruction: Option<String>,
    stream: Option<bool>,
}

/// A session the caller's account owns and every event of its history (a fork's
/// inherited ones first); another account's session is "not found".
pub(super) async fn session_history(
    call: &Call<'_>,
    session_id: &str,
) -> Result<(Lineage, Vec<Event>), ControlError> {
    id_param("SessionId", session_id)?;
    let store = &*call.state.store;
    let lineage = Lineage::resolve(store, call.account_id, session_id)
        .await?
        .ok_or_else(|| ControlError::not_found("session", session_id))?;
    let events = lineage.events(store, 0, None, None, i64::MAX).await?;
    Ok((lineage, events))
}

fn require_run(events: &[Event], run_id: &str) -> Result<(), ControlError> {
    id_param("RunId", run_id)?;
    if events.iter().any(|e| e.run_id.as_deref() == Some(run_id)) {
        Ok(())
    } else {
        Err(ControlError::not_found("run", run_id))
    }
}

/// A checkpoint of the session itself: one a fork inherited is resumed in the session
/// that holds it (or forked from), not in the fork.
fn find_checkpoint(events: &[Event], p: &CheckpointParams) -> Result<Checkpoint, ControlError> {
    require_run(events, &p.run_id)?;
    id_param("CheckpointId", &p.checkpoint_id)?;
    checkpoints(events, chrono::Utc::now())
        .into_iter()
        .find(|c| {
            c.checkpoint_id == p.checkpoint_id
                && c.run_id.as_deref() == Some(&p.run_id)
                && c.session_id == p.session_id
        })
        .ok_or_else(|| ControlError::not_found("checkpoint", &p.checkpoint_id))
}

pub async fn list_session_checkpoints(call: &Call<'_>) -> ActionResult {
    let p: ListCheckpointsParams = call.params()?;
    let limit = p.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ControlError::bad_request(format!(
            "Limit must be between 1 and {MAX_LIMIT}"
        )));
    }
    let offset = p.offset.unwrap_or(0);
    if offset < 0 {
        return Err(ControlError::bad_request("Offset must not be negative"));
    }
    let (_, events) = session_history(call, &p.session_id).await?;
    if let Some(run_id) = &p.run_id {
        require_run(&events, run_id)?;
    }
    let matching: Vec<Checkpoint> = checkpoints(&events, chrono::Utc::now())
        .into_iter()
        .filter(|c| p.run_id.is_none() || c.run_id == p.run_id)
        .filter(|c| p.framework.as_ref().is_none_or(|f| &c.framework == f))
        .filter(|c| !p.only_resumable.unwrap_or(false) || c.checkpoint_status.can_resume())
        .collect();
    let total = matching.len();
    let page: Vec<&Checkpoint> = matching
        .iter()
        .skip(usize::try_from(offset).unwrap_or(usize::MAX))
        .take(limit as usize)
        .collect();
    Ok(json!({ "Checkpoints": page, "Total": total, "Offset": offset, "Limit": limit }))
}

pub async fn list_tool_receipts(call: &Call<'_>) -> ActionResult {
    let p: ListReceiptsParams = call.params()?;
    let (_, events) = session_history(call, &p.session_id).await?;
    if let Some(run_id) = &p.run_id {
        require_run(&events, run_id)?;
    }
    if let Some(id) = &p.checkpoint_id {
        let known = checkpoints(&events, chrono::Utc::now())
            .iter()
            .any(|c| &c.checkpoint_id == id && (p.run_id.is_none() || c.run_id == p.run_id));
        if !known {
            return Err(ControlError::not_found("checkpoint", id));
        }
    }
    let receipts: Vec<_> = tool_receipts(&events)
        .into_iter()
        .filter(|r| p.run_id.is_none() || r.run_id == p.run_id)
        .filter(|r| p.checkpoint_id.is_none() || r.checkpoint_id == p.checkpoint_id)
        .collect();
    Ok(json!({ "ToolReceipts": receipts }))
}

pub async fn get_checkpoint_resume_preview(call: &Call<'_>) -> ActionResult {
    let p: CheckpointParams = call.params()?;
    let (_, events) = session_history(call, &p.session_id).await?;
    let checkpoint = find_checkpoint(&events, &p)?;
    // What resuming could repeat: the tool calls this run made after the checkpoint.
    let after: Vec<_> = tool_receipts(&events)
        .into_iter()
        .filter(|r| r.run_id.as_deref() == Some(&p.run_id) && r.seq_id > checkpoint.seq_id)
        .collect();
    let free = &call.state.config.side_effect_free_tools;
    let risk = resume_risk(&after, |tool| !free.iter().any(|t| t == tool));
    let can_resume = checkpoint.checkpoint_status.can_resume();
    let expected_action = if can_resume {
        "resume_from_checkpoint"
    } else if checkpoint.checkpoint_status == CheckpointStatus::Terminal {
        "noop"
    } else {
        "choose_another_checkpoint"
    };
    Ok(json!({ "Preview": {
        "Checkpoint": checkpoint,
        "Capabilities": capabilities(),
        "CanResume": can_resume,
        "Reason": checkpoint.resume_disabled_reason,
        "NextNode": checkpoint.next_node,
        "ExpectedAction": expected_action,
        "ToolReceipts": after,
        "Risk": risk,
        "Summary": {
            "RunId": p.run_id,
            "CheckpointId": checkpoint.checkpoint_id,
            "Phase": checkpoint.phase,
            "ToolReceiptCount": after.len(),
        },
    }}))
}

fn capabilities() -> Value {
    // IdempotentToolReplay: a resume hands the agent the recorded result of a tool call
    // that preceded the checkpoint instead of having the tool run again.
    json!({ "Checkpoints": true, "CheckpointResume": true, "ToolReceipts": true, "IdempotentToolReplay": true })
}

/// What ResumeRun answers: JSON (a no-op, or the finished invocation's response), or
/// the started invocation to stream (`Stream: true`), with its events.
pub enum Resumed {
    Json(Value),
    Stream(StartedRun, Box<Subscription>),
}

pub async fn resume_run(call: &Call<'_>) -> Result<Resumed, ControlError> {
    // At its cap the account gets 429 before any lookup, as a new turn does; the run's
    // own slot is taken when it starts.
    drop(
        call.state
            .limits
            .try_acquire_run(call.account_id)
            .map_err(|l| ControlError::from(ApiError::limited(&l)))?,
    );
    let p: ResumeParams = call.params()?;
    let stream = p.stream.unwrap_or(false);
    let instruction = match (
        p.resume_instruction_enabled.unwrap_or(false),
        &p.resume_instruction,
    ) {
        (true, Some(text)) if !text.trim().is_empty() => Some(text.clone()),
        (true, _) => return Err(ControlError::bad_request(
            "ResumeInstruction must be a non-empty string when ResumeInstructionEnabled is true",
        )),
        (false, _) => None,
    };
    let (lineage, events) = session_history(call, &p.session_id).await?;
    let key = CheckpointParams {
        session_id: p.session_id.clone(),
        run_id: p.run_id.clone(),
        checkpoint_id: p.checkpoint_id.clone(),
    };
    let checkpoint = find_checkpoint(&events, &key)?;
    let runs = call.state.runs.clone();
    if let Some(busy) = busy(call, &p.session_id, &p.run_id) {
        return Err(busy);
    }
    let attempt_id = new_id("resume");
    let replay_forbidden = checkpoint.resume_count > 0 && !checkpoint.replay_allowed;
    match checkpoint.checkpoint_status {
        CheckpointStatus::Expired | CheckpointStatus::Disabled
            if replay_forbidden || checkpoint.checkpoint_status == CheckpointStatus::Expired =>
        {
            return Err(ControlError::conflict(
                checkpoint.resume_disabled_reason.clone(),
                json!({
                    "code": "checkpoint_not_resumable",
                    "reason": checkpoint.resume_disabled_reason,
                    "checkpoint_id": checkpoint.checkpoint_id,
                    "run_id": p.run_id,
                    "resume_status": checkpoint.resume_status,
                    "is_terminal": checkpoint.is_terminal,
                }),
            ))
        }
        status if !status.can_resume() => {
            return Ok(Resumed::Json(json!({
                "status": "noop",
                "Reason": checkpoint.resume_disabled_reason,
                "CheckpointId": checkpoint.checkpoint_id,
                "RunId": p.run_id,
                "ResumeAttemptId": attempt_id,
            })))
        }
        _ => {}
    }
    // A resume starts a new invocation (the one it resumes has ended; one still in
    // progress is refused as busy above): a run start, checked as a turn in an existing
    // session is, so nothing in progress is ever cut by a quota.
    let adding = quota::Adding {
        session: quota::Target::Existing,
        events: true,
        ..quota::Adding::default()
    };
    quota::refuse_over_quota(call.state, call.account_id, adding).await?;

    let (history, replayed) = resume_history(call, &lineage, &events, &checkpoint).await?;
    let model = events
        .iter()
        .find(|e| {
            e.run_id.as_deref() == Some(&p.run_id) && e.run_status() == Some(RunStatus::InProgress)
        })
        .and_then(|e| e.metadata.get("model").and_then(Value::as_str))
        .map(str::to_owned);
    let mut turn = TurnRequest::new(Protocol::OpenAiResponses);
    turn.model = model;
    turn.input = replayed
        .into_iter()
        .chain(instruction.iter().map(|text| Item::user_text(text)))
        .collect();
    let from = ResumeFrom {
        run_id: p.run_id.clone(),
        checkpoint_id: checkpoint.checkpoint_id.clone(),
        resume_attempt_id: attempt_id,
        history,
    };
    let (account, session_id) = (call.account_id.to_owned(), p.session_id.clone());
    let state = call.state;
    let follow =
        Subscription::before_append(state.store.clone(), &state.hub, &account, &session_id);
    let started = on_core(&state.core, async move {
        runs.start(Start::resume(&account, &session_id, turn, from, follow))
            .await
    })
    .await;
    let (started, mut subscription) = match started {
        Ok(started) => started,
        // Lost a race with another start between the check above and here.
        Err(StartError::SessionBusy(_)) => {
            return Err(busy(call, &p.session_id, &p.run_id).unwrap_or_else(|| {
                ControlError::conflict("the session is busy; try again", Value::Null)
            }))
        }
        Err(e @ StartError::Archived(_)) => {
            return Err(ControlError::conflict(
                e.to_string(),
                json!({ "code": "session_archived" }),
            ))
        }
        Err(StartError::TooManyRuns(l)) => return Err(ApiError::limited(&l).into()),
        Err(StartError::Unwritable(why)) => return Err(ApiError::store_unwritable(why).into()),
        Err(StartError::ShuttingDown) => {
            return Err(ControlError::new(
                503,
                "the gateway is shutting down",
                Value::Null,
            ))
        }
        Err(e) => return Err(ControlError::unavailable(e)),
    };
    tracing::info!(
        account_id = call.account_id, session_id = %started.session_id, run_id = %started.run_id,
        invocation_id = %started.invocation_id, checkpoint_id = %checkpoint.checkpoint_id, "run resumed"
    );
    if stream {
        return Ok(Resumed::Stream(started, Box::new(subscription)));
    }

    // Answer when the invocation ends, like a non-streaming turn.
    let mut collected = Vec::new();
    loop {
        match subscription.next().await? {
            Some(event) => {
                let last = event.is_terminal();
                collected.push((*event).clone());
                if last {
                    break;
                }
            }
            None => return Err(ControlError::unavailable("the event hub closed")),
        }
    }
    let info = started.info(Value::Null);
    let terminal = collected.last().and_then(Event::run_status);
    if terminal.is_some_and(RunStatus::is_answered) {
        return Ok(Resumed::Json(
            surface(Protocol::OpenAiResponses).final_body(&info, &collected),
        ));
    }
    let error = collected
        .iter()
        .rev()
        .find(|e| e.event_type == EventType::Error)
        .map(|e| e.content.clone())
        .unwrap_or(Value::Null);
    Err(ControlError {
        headers: Vec::new(),
        status: 502,
        message: format!(
            "the resumed run ended as {}",
            terminal.map(RunStatus::as_str).unwrap_or("failed")
        ),
        data: json!({
            "InvocationId": started.invocation_id,
            "SessionId": started.session_id,
            "RunId": started.run_id,
            "Error": error,
        }),
    })
}

/// The 409 for a session that already has a run going on this gateway.
fn busy(call: &Call<'_>, session_id: &str, run_id: &str) -> Option<ControlError> {
    let (active_run, invocation_id) = call
        .state
        .runs
        .active_in_session(call.account_id, session_id)?;
    let (code, message) = if active_run == run_id {
        (
            "resume_already_running",
            "A checkpoint resume is already running for this session and run.",
        )
    } else {
        (
            "session_busy",
            "Another run is in progress in this session; wait for it or cancel it.",
        )
    };
    Some(ControlError::conflict(
        message,
        json!({
            "code": code,
            "message": message,
            "InvocationId": invocation_id,
            "SessionId": session_id,
            "RunId": active_run,
        }),
    ))
}

/// What the agent is sent on resume: the projection of the history at the checkpoint
/// (the branch it was on), and — for a tool call the checkpoint follows — the result
/// already recorded for it, replayed from its receipt so the tool does not run twice.
/// The replayed results are the resumed invocation's first input: recorded with it, they
/// are on the branch the resume starts, where later turns find them.
async fn resume_history(
    call: &Call<'_>,
    lineage: &Lineage,
    events: &[Event],
    checkpoint: &Checkpoint,
) -> Result<(Vec<Item>, Vec<Item>), ControlError> {
    let at = lineage.own_position(checkpoint.seq_id);
    let history = project(&lineage.history(&*call.state.store, Some(at)).await?);
    let receipts = tool_receipts(events);
    let unanswered = history
        .iter()
        .enumerate()
        .filter_map(|(i, item)| match item {
            Item::ToolCall { call_id, .. } => {
                let answered = history[i + 1..].iter().any(
                    |later| matches!(later, Item::ToolResult { call_id: c, .. } if c == call_id),
                );
                (!answered).then_some(call_id)
            }
            _ => None,
        });
    let replayed = unanswered
        .filter_map(|call_id| {
            let output = receipts
                .iter()
                .rev()
                .find(|r| {
                    r.session_id == checkpoint.session_id
                        && r.seq_id < checkpoint.seq_id
                        && &r.tool_call_id == call_id
                })
                .filter(|r| r.status != ReceiptStatus::Pending)
                .and_then(|r| r.output.clone())?;
            Some(Item::ToolResult {
                call_id: call_id.clone(),
                output,
            })
        })
        .collect();
    Ok((history, replayed))
}

/// A resumed invocation streamed like a Responses turn (every frame's `id:` is its
/// `sequence_number`);
/// the client leaving does not stop it.
pub async fn stream_resumed(
    session: &mut Session,
    run: &StartedRun,
    mut events: Subscription,
) -> pingora::Result<()> {
    let surface = surface(Protocol::OpenAiResponses);
    let info = run.info(Value::Null);
    let headers = [
        ("x-session-id", run.session_id.as_str()),
        ("x-invocation-id", run.invocation_id.as_str()),
    ];
    respond::sse_start(session, &headers).await?;
    let mut renderer = surface.stream_renderer(&info);
    stream::pump(session, &mut events, None, |event| {
        stream::render_step(&mut *renderer, event)
    })
    .await;
    Ok(())
}
