//! The projection: the model-facing history built from a session's history (see
//! `session_log::history`: the active branch, a fork's inherited part, and what a
//! compaction left of it). Control events are left out, and a compaction's summary
//! comes first, in place of what it summarises.

use session_log::History;

use crate::item::{Block, Item};

/// History for the model: the compaction's summary as a system message, if there is
/// one, then the transcript events in history order.
pub fn project(history: &History) -> Vec<Item> {
    let summary = history.summary.as_ref().map(|s| Item::Message {
        role: "system".into(),
        content: vec![Block::Text(s.clone())],
    });
    summary
        .into_iter()
        .chain(
            history
                .events
                .iter()
                .filter(|e| e.event_type.is_transcript())
                .filter_map(Item::from_event),
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use serde_json::json;
    use session_log::{Event, EventType, NewEvent, RunStatus};

    fn ev(seq: i64, new: NewEvent) -> Event {
        Event::committed(new, seq, Utc::now())
    }

    fn status(seq: i64, status: RunStatus) -> Event {
        ev(
            seq,
            NewEvent::new(
                "a",
                "s",
                EventType::RunStatus,
                session_log::event::run_status_content(status, None),
            ),
        )
    }

    #[test]
    fn control_events_are_left_out() {
        let events = vec![
            ev(
                1,
                Item::user_text("My project is named zebra42.").to_event("a", "s"),
            ),
            status(2, RunStatus::InProgress),
            ev(
                3,
                NewEvent::new("a", "s", EventType::TextDelta, json!({"delta": "O"})),
            ),
            ev(4, Item::assistant_text("OK").to_event("a", "s")),
            status(5, RunStatus::Completed),
        ];
        let history = History {
            events,
            ..History::default()
        };
        assert_eq!(
            project(&history),
            vec![
                Item::user_text("My project is named zebra42."),
                Item::assistant_text("OK")
            ]
        );
    }

    #[test]
    fn a_summary_comes_first() {
        let history = History {
            events: vec![ev(4, Item::user_text("three").to_event("a", "s"))],
            summary: Some("said one, two".into()),
            compacted_from: 1,
            compacted_through: 3,
        };
        assert_eq!(
            project(&history),
            vec![
                Item::Message {
                    role: "system".into(),
                    content: vec![Block::Text("said one, two".into())]
                },
                Item::user_text("three"),
            ]
        );
    }
}
