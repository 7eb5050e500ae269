//! The projection: the model-facing history built from a session's transcript events.
//! Control events are left out, and a compaction checkpoint replaces the events it
//! summarises with its summary.

use serde_json::Value;
use session_log::{Event, EventType};

use crate::item::{Block, Item};

/// History for the model from a session's events (in seq order).
///
/// A `compaction` event with content `{"summary": "...", "through_seq": N}` stands for
/// every transcript event with seq ≤ N: they are dropped and the summary is given as a
/// system message in their place.
pub fn project(events: &[Event]) -> Vec<Item> {
    let compaction = events
        .iter()
        .rev()
        .find(|e| e.event_type == EventType::Compaction);
    let (through, summary) = match compaction {
        Some(c) => (
            c.content
                .get("through_seq")
                .and_then(Value::as_i64)
                .unwrap_or(c.seq),
            c.content
                .get("summary")
                .and_then(Value::as_str)
                .map(str::to_owned),
        ),
        None => (0, None),
    };
    let summary = summary.map(|s| Item::Message {
        role: "system".into(),
        content: vec![Block::Text(s)],
    });
    summary
        .into_iter()
        .chain(
            events
                .iter()
                .filter(|e| e.seq > through && e.event_type.is_transcript())
                .filter_map(Item::from_event),
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use serde_json::json;
    use session_log::{NewEvent, RunStatus};

    fn ev(seq: i64, new: NewEvent) -> Event {
        Event::committed(new, seq, Utc::now())
    }

    #[test]
    fn control_events_are_left_out() {
        let events = vec![
            ev(
                1,
                Item::user_text("My project is named zebra42.").to_event("a", "s"),
            ),
            ev(
                2,
                NewEvent::new(
                    "a",
                    "s",
                    EventType::RunStatus,
                    session_log::event::run_status_content(RunStatus::InProgress, None),
                ),
            ),
            ev(
                3,
                NewEvent::new("a", "s", EventType::TextDelta, json!({"delta": "O"})),
            ),
            ev(4, Item::assistant_text("OK").to_event("a", "s")),
            ev(
                5,
                NewEvent::new(
                    "a",
                    "s",
                    EventType::RunStatus,
                    session_log::event::run_status_content(RunStatus::Completed, None),
                ),
            ),
        ];
        assert_eq!(
            project(&events),
            vec![
                Item::user_text("My project is named zebra42."),
                Item::assistant_text("OK")
            ]
        );
    }

    #[test]
    fn compaction_replaces_what_it_summarises() {
        let events = vec![
            ev(1, Item::user_text("one").to_event("a", "s")),
            ev(2, Item::assistant_text("two").to_event("a", "s")),
            ev(
                3,
                NewEvent::new(
                    "a",
                    "s",
                    EventType::Compaction,
                    json!({"summary": "said one, two", "through_seq": 2}),
                ),
            ),
            ev(4, Item::user_text("three").to_event("a", "s")),
        ];
        assert_eq!(
            project(&events),
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
