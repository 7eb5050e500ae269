//! The active branch of a history. A `ResumeRun` from a checkpoint starts a new
//! invocation at the end of the log; everything between the checkpoint and that
//! invocation is superseded: kept in the log, left out of every projection, restore and
//! replay-for-history. Nothing records which events are superseded: this module derives
//! it, from the resumes' `in_progress` events (which name their checkpoint) and the
//! checkpoints themselves, in positions of the history (see `history`).
//!
//! A resume R, started at position r from a checkpoint at c, opens a *segment* that
//! starts at r and grows until the next resume starts; it continues the branch of the
//! segment holding c, cut at c. The active branch ending at a position is the segment
//! holding it, back to its start, then the branch at that segment's cut, and so on back
//! to the first segment. A resume's own input (a replayed tool result, an instruction)
//! is committed just before its `in_progress` and belongs to its segment.
//!
//! An invocation that failed before the agent produced anything says so on its terminal
//! `run_status` ([`INPUT_SUPERSEDED`]): its input (the user's message of a turn that got
//! no answer) stays in the log but is superseded too, so that a client retrying after an
//! outage does not find copies of its message stacked in the history.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use crate::checkpoints::RESUMED_FROM;
use crate::event::{Event, EventType, RunStatus, Seq};

/// Metadata key on a terminal `run_status`: the invocation failed before the agent
/// produced anything, and its transcript (its input) is superseded.
pub const INPUT_SUPERSEDED: &str = "input_superseded";

/// Content key of an `item_deleted` event: the history position of the item deleted.
pub const DELETED_POSITION: &str = "position";

/// A resume: where its segment starts and the checkpoint position it continues after.
#[derive(Clone, Debug, PartialEq)]
struct Segment {
    start: Seq,
    cut: Seq,
}

/// Which positions of a history are on its active branch.
#[derive(Clone, Debug, PartialEq)]
pub struct Branch {
    /// Inclusive position ranges on the branch, latest first.
    active: Vec<(Seq, Seq)>,
    /// Where each resumed invocation's segment starts.
    resumed: HashMap<String, Seq>,
    /// Invocations whose transcript is superseded because they failed with no answer.
    unanswered: std::collections::HashSet<String>,
    /// Positions of items a client deleted (`item_deleted` events): on no branch.
    deleted: HashSet<Seq>,
}

impl Branch {
    /// The active branch ending at position `at` (the history's end when `None`).
    /// `markers` are the history's `run_status` events in history order, each with its
    /// position (other events are ignored, but for `run_checkpoint` events, which place
    /// their checkpoint); `checkpoints` places the checkpoints resumes name, as far as
    /// they are not among the markers.
    pub fn derive<'a>(
        markers: impl IntoIterator<Item = (Seq, &'a Event)>,
        checkpoints: &'a HashMap<String, Seq>,
        at: Option<Seq>,
    ) -> Self {
        let mut checkpoints: HashMap<&str, Seq> = checkpoints
            .iter()
            .map(|(id, &p)| (id.as_str(), p))
            .collect();
        let mut segments: Vec<Segment> = Vec::new();
        let mut resumed = HashMap::new();
        let mut unanswered = std::collections::HashSet::new();
        for (position, e) in markers {
            match e.event_type {
                EventType::RunStatus
                    if e.metadata.get(INPUT_SUPERSEDED).and_then(Value::as_bool) == Some(true) =>
                {
                    if let Some(inv) = &e.invocation_id {
                        unanswered.insert(inv.clone());
                    }
                }
                EventType::RunCheckpoint => {
                    if let Some(id) = e.content.get("checkpoint_id").and_then(Value::as_str) {
                        checkpoints.insert(id, position);
                    }
                }
                EventType::RunStatus if e.run_status() == Some(RunStatus::InProgress) => {
                    let from = e.metadata.get(RESUMED_FROM).and_then(Value::as_str);
                    let Some(&cut) = from.and_then(|id| checkpoints.get(id)) else {
                        continue;
                    };
                    if cut < position {
                        segments.push(Segment {
                            start: position,
                            cut,
                        });
                        if let Some(inv) = &e.invocation_id {
                            resumed.insert(inv.clone(), position);
                        }
                    }
                }
                _ => {}
            }
        }
        let mut active = Vec::new();
        let mut hi = at.unwrap_or(Seq::MAX);
        loop {
            // The segment holding `hi`: the latest to start at or before it.
            match segments.iter().rev().find(|s| s.start <= hi) {
                Some(segment) => {
                    active.push((segment.start, hi));
                    hi = segment.cut;
                }
                None => {
                    active.push((Seq::MIN, hi));
                    break;
                }
            }
        }
        Branch {
            active,
            resumed,
            unanswered,
            deleted: Default::default(),
        }
    }

    /// The branch without the items at `deleted` (`Lineage::deleted_items`): deleted
    /// ones are on no branch, so no projection or read shows them.
    pub fn without_deleted(mut self, deleted: HashSet<Seq>) -> Self {
        self.deleted = deleted;
        self
    }

    /// Whether a client deleted the item at `position`.
    pub fn is_deleted(&self, position: Seq) -> bool {
        self.deleted.contains(&position)
    }

    /// Whether the event at `position` is on the branch.
    pub fn is_active(&self, position: Seq, event: &Event) -> bool {
        if self.is_deleted(position) {
            return false;
        }
        if event.event_type.is_transcript()
            && event
                .invocation_id
                .as_ref()
                .is_some_and(|inv| self.unanswered.contains(inv))
        {
            return false;
        }
        // A resume's input comes just before its `in_progress`, inside its segment.
        let position = event
            .invocation_id
            .as_ref()
            .and_then(|inv| self.resumed.get(inv))
            .map_or(position, |&start| position.max(start));
        self.active
            .iter()
            .any(|&(lo, hi)| lo <= position && position <= hi)
    }
}

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use serde_json::json;

    use super::*;
    use crate::event::{run_status_content, NewEvent};

    fn event(seq: Seq, invocation: &str, event_type: EventType, content: Value) -> Event {
        Event::committed(
            NewEvent::new("a", "s", event_type, content).in_run("run", invocation),
            seq,
            Utc::now(),
        )
    }

    fn checkpoint(seq: Seq, inv: &str, id: &str) -> Event {
        event(
            seq,
            inv,
            EventType::RunCheckpoint,
            json!({ "checkpoint_id": id }),
        )
    }

    fn started(seq: Seq, inv: &str, from: Option<&str>) -> Event {
        let mut e = event(
            seq,
            inv,
            EventType::RunStatus,
            run_status_content(RunStatus::InProgress, None),
        );
        if let Some(id) = from {
            e.metadata = json!({ RESUMED_FROM: id });
        }
        e
    }

    fn message(seq: Seq, inv: &str) -> Event {
        event(
            seq,
            inv,
            EventType::Message,
            json!({ "text": seq.to_string() }),
        )
    }

    fn active(events: &[Event], at: Option<Seq>) -> Vec<Seq> {
        let branch = Branch::derive(events.iter().map(|e| (e.seq, e)), &HashMap::new(), at);
        events
            .iter()
            .filter(|e| branch.is_active(e.seq, e))
            .map(|e| e.seq)
            .collect()
    }

    #[test]
    fn without_resumes_everything_is_active() {
        let events = [
            started(1, "i1", None),
            message(2, "i1"),
            checkpoint(3, "i1", "c1"),
        ];
        assert_eq!(active(&events, None), [1, 2, 3]);
        assert_eq!(active(&events, Some(2)), [1, 2]);
    }

    #[test]
    fn a_resume_supersedes_what_came_after_its_checkpoint() {
        let events = [
            message(1, "i1"),
            started(2, "i1", None),
            checkpoint(3, "i1", "c1"),
            message(4, "i1"),
            message(5, "i2"),
            message(6, "i3"), // the resume's input, before its in_progress
            started(7, "i3", Some("c1")),
            message(8, "i3"),
        ];
        assert_eq!(active(&events, None), [1, 2, 3, 6, 7, 8]);
        // The branch the checkpoint was on, as it was.
        assert_eq!(active(&events, Some(5)), [1, 2, 3, 4, 5]);
    }

    #[test]
    fn a_resume_from_a_superseded_checkpoint_goes_back_to_its_branch() {
        let events = [
            checkpoint(1, "i1", "c1"),
            message(2, "i1"),
            checkpoint(3, "i1", "c2"),
            message(4, "i1"),
            started(5, "i2", Some("c1")), // supersedes 2..=4
            message(6, "i2"),
            started(7, "i3", Some("c2")), // back on the first branch, cut at 3
            message(8, "i3"),
        ];
        assert_eq!(active(&events, None), [1, 2, 3, 7, 8]);
        assert_eq!(active(&events, Some(6)), [1, 5, 6]);
    }

    #[test]
    fn checkpoints_can_be_placed_apart_from_the_markers() {
        let events = [
            message(1, "i1"),
            message(2, "i1"),
            started(3, "i2", Some("c1")),
        ];
        let placed = HashMap::from([("c1".to_owned(), 1)]);
        let branch = Branch::derive(events.iter().map(|e| (e.seq, e)), &placed, None);
        let active: Vec<i64> = events
            .iter()
            .filter(|e| branch.is_active(e.seq, e))
            .map(|e| e.seq)
            .collect();
        assert_eq!(active, [1, 3]);
    }

    #[test]
    fn the_input_of_a_run_that_failed_unanswered_is_superseded() {
        let mut failed = event(
            3,
            "i1",
            EventType::RunStatus,
            run_status_content(RunStatus::Failed, Some("agent_unreachable")),
        );
        failed.metadata = json!({ INPUT_SUPERSEDED: true });
        let events = [
            message(1, "i1"),
            started(2, "i1", None),
            failed,
            message(4, "i2"),
            started(5, "i2", None),
        ];
        // The markers stay (a run happened and failed); the unanswered message does not.
        assert_eq!(active(&events, None), [2, 3, 4, 5]);
    }

    #[test]
    fn a_resume_naming_an_unknown_checkpoint_changes_nothing() {
        let events = [
            message(1, "i1"),
            started(2, "i2", Some("elsewhere")),
            message(3, "i2"),
        ];
        assert_eq!(active(&events, None), [1, 2, 3]);
    }
}
