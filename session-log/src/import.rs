//! Importing a session exported from another log: the checks its events must pass (one
//! session, seqs strictly increasing, every invocation opened once and ended at most
//! once), and the invocation rows its `run_status` events imply. A fork's export stops at
//! its fork point, often a `turn_completed` checkpoint, which a run writes only when it
//! completes, just before its terminal status: such a run is imported as completed. Both stores write what
//! this module derives, in [`Store::import_session`](crate::Store::import_session).

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::checkpoints::Phase;
use crate::event::{Event, EventType, RunStatus, Seq};

/// Why a session's events cannot be imported as they are.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ImportError {
    #[error("there are no events to import")]
    Empty,
    #[error("seq {seq}: the event belongs to account/session {found:?}, not {expected:?}")]
    OtherSession {
        seq: Seq,
        expected: String,
        found: String,
    },
    #[error(
        "seq {seq}: seqs must be 1 or more and strictly increasing (the one before is {before})"
    )]
    SeqOrder { seq: Seq, before: Seq },
    #[error("seq {seq}: a run_status event needs a valid status, a run id and an invocation id")]
    BadRunStatus { seq: Seq },
    #[error("seq {seq}: invocation {invocation_id:?} {problem}")]
    Invocation {
        seq: Seq,
        invocation_id: String,
        problem: &'static str,
    },
}

/// One invocation as an import records it: how it ended, if its events say.
#[derive(Clone, Debug, PartialEq)]
pub struct ImportedInvocation {
    pub invocation_id: String,
    pub run_id: String,
    /// `in_progress` when no terminal status ends it in the events.
    pub status: RunStatus,
    pub started_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
    /// The agent's handle, as the terminal status's metadata recorded it.
    pub agent_ref: Option<String>,
}

/// Checks `events` (in the order given) and returns the invocations they open, in the
/// order they open.
pub fn invocations(events: &[Event]) -> Result<Vec<ImportedInvocation>, ImportError> {
    let first = events.first().ok_or(ImportError::Empty)?;
    let mut before = 0;
    let mut opened: Vec<ImportedInvocation> = Vec::new();
    // Each invocation's last event: a `turn_completed` checkpoint there ended it.
    let mut last: Vec<(&str, &Event)> = Vec::new();
    for e in events {
        if let Some(inv) = e.invocation_id.as_deref() {
            match last.iter_mut().find(|(id, _)| *id == inv) {
                Some(entry) => entry.1 = e,
                None => last.push((inv, e)),
            }
        }
        if e.account_id != first.account_id || e.session_id != first.session_id {
            return Err(ImportError::OtherSession {
                seq: e.seq,
                expected: format!("{}/{}", first.account_id, first.session_id),
                found: format!("{}/{}", e.account_id, e.session_id),
            });
        }
        if e.seq <= before {
            return Err(ImportError::SeqOrder { seq: e.seq, before });
        }
        before = e.seq;
        if e.event_type != EventType::RunStatus {
            continue;
        }
        let (Some(status), Some(run_id), Some(invocation_id)) =
            (e.run_status(), &e.run_id, &e.invocation_id)
        else {
            return Err(ImportError::BadRunStatus { seq: e.seq });
        };
        let problem = |problem| ImportError::Invocation {
            seq: e.seq,
            invocation_id: invocation_id.clone(),
            problem,
        };
        let known = opened
            .iter_mut()
            .find(|i| &i.invocation_id == invocation_id);
        match (status, known) {
            (RunStatus::InProgress, None) => opened.push(ImportedInvocation {
                invocation_id: invocation_id.clone(),
                run_id: run_id.clone(),
                status,
                started_at: e.created_at,
                ended_at: None,
                agent_ref: None,
            }),
            (RunStatus::InProgress, Some(_)) => return Err(problem("is opened twice")),
            (_, None) => return Err(problem("ends without having started")),
            (_, Some(i)) if i.status.is_terminal() => return Err(problem("ends twice")),
            (_, Some(i)) if &i.run_id != run_id => {
                return Err(problem("ends under another run id than it started with"))
            }
            (_, Some(i)) => {
                i.status = status;
                i.ended_at = Some(e.created_at);
                i.agent_ref = e
                    .metadata
                    .get("agent_ref")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
            }
        }
    }
    for i in opened
        .iter_mut()
        .filter(|i| i.status == RunStatus::InProgress)
    {
        let Some((_, end)) = last.iter().find(|(id, _)| *id == i.invocation_id) else {
            continue;
        };
        let phase = end.content.get("phase").and_then(Value::as_str);
        if end.event_type == EventType::RunCheckpoint
            && phase == Some(Phase::TurnCompleted.as_str())
        {
            i.status = RunStatus::Completed;
            i.ended_at = Some(end.created_at);
        }
    }
    Ok(opened)
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use serde_json::json;

    use super::*;
    use crate::event::NewEvent;

    fn at(seq: Seq, event: NewEvent) -> Event {
        Event::committed(
            event,
            seq,
            Utc.timestamp_opt(1_800_000_000 + seq, 0).unwrap(),
        )
    }

    fn status(seq: Seq, inv: &str, s: &str) -> Event {
        at(
            seq,
            NewEvent::new("a", "s", EventType::RunStatus, json!({ "status": s }))
                .in_run("run_1", inv),
        )
    }

    fn message(seq: Seq) -> Event {
        at(
            seq,
            NewEvent::new("a", "s", EventType::Message, json!({ "text": "hi" })),
        )
    }

    #[test]
    fn invocations_are_read_from_their_statuses() {
        let mut end = status(4, "inv_1", "completed");
        end.metadata = json!({ "agent_ref": "task-9" });
        let events = [
            message(1),
            status(2, "inv_1", "in_progress"),
            end,
            status(7, "inv_2", "in_progress"),
        ];
        let found = invocations(&events).unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].status, RunStatus::Completed);
        assert_eq!(found[0].agent_ref.as_deref(), Some("task-9"));
        assert_eq!(found[0].ended_at, Some(events[2].created_at));
        assert_eq!(found[1].status, RunStatus::InProgress);
        assert_eq!(found[1].ended_at, None);
    }

    #[test]
    fn a_run_cut_at_its_turn_completed_checkpoint_completed() {
        // A fork's export, cut at the checkpoint that ended turn 1 (its `completed` status
        // came after the fork point), then the fork's own run, still open.
        let checkpoint = at(
            3,
            NewEvent::new(
                "a",
                "s",
                EventType::RunCheckpoint,
                json!({ "checkpoint_id": "ck", "phase": "turn_completed" }),
            )
            .in_run("run_1", "inv_1"),
        );
        let events = [
            message(1),
            status(2, "inv_1", "in_progress"),
            checkpoint,
            status(4, "inv_2", "in_progress"),
        ];
        let found = invocations(&events).unwrap();
        assert_eq!(found[0].status, RunStatus::Completed);
        assert_eq!(found[0].ended_at, Some(events[2].created_at));
        assert_eq!(
            found[1].status,
            RunStatus::InProgress,
            "no checkpoint ended it"
        );
    }

    #[test]
    fn what_no_log_could_hold_is_refused() {
        assert_eq!(invocations(&[]), Err(ImportError::Empty));
        assert!(matches!(
            invocations(&[message(2), message(2)]),
            Err(ImportError::SeqOrder { seq: 2, before: 2 })
        ));
        assert!(matches!(
            invocations(&[message(0)]),
            Err(ImportError::SeqOrder { seq: 0, .. })
        ));
        let mut other = message(2);
        other.session_id = "t".into();
        assert!(matches!(
            invocations(&[message(1), other]),
            Err(ImportError::OtherSession { seq: 2, .. })
        ));
        let problem = |events: &[Event]| match invocations(events) {
            Err(ImportError::Invocation { problem, .. }) => problem,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            problem(&[status(1, "i", "completed")]),
            "ends without having started"
        );
        assert_eq!(
            problem(&[
                status(1, "i", "in_progress"),
                status(2, "i", "failed"),
                status(3, "i", "completed")
            ]),
            "ends twice"
        );
        assert_eq!(
            problem(&[status(1, "i", "in_progress"), status(2, "i", "in_progress")]),
            "is opened twice"
        );
        let mut unknown = status(1, "i", "in_progress");
        unknown.content = json!({ "status": "paused" });
        assert_eq!(
            invocations(&[unknown]),
            Err(ImportError::BadRunStatus { seq: 1 })
        );
    }
}
