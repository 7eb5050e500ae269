//! An event as the control API shows it (`ListSessionEvents`, `SubscribeRunEvents`):
//! PascalCase fields, `evt_<session>_<seq>` ids and microsecond UTC timestamps.

use serde_json::Value;

/// An event as the control API shows it. Serialised straight from the event, without
/// copying its content or building its id and timestamp strings: a replay writes hundreds
/// of thousands of these per second.
#[derive(serde::Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct EventView<'a> {
    event_id: EventId<'a>,
    session_id: &'a str,
    seq_id: i64,
    run_id: &'a Option<String>,
    invocation_id: &'a Option<String>,
    event_type: &'static str,
    role: &'a Option<String>,
    content: &'a Value,
    metadata: &'a Value,
    timestamp: Timestamp,
    #[serde(flatten)]
    place: Option<Place>,
}

/// Where an event stands in the history of the session it is listed for: its
/// position (its seq, unless the session is a fork), whether it comes from an earlier
/// session of the fork chain, and whether a resume superseded it.
#[derive(serde::Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Place {
    pub position: i64,
    pub inherited: bool,
    pub superseded: bool,
}

impl Place {
    /// Where `event` stands in `lineage`'s history, whose active branch is `branch`.
    pub fn of(
        lineage: &session_log::Lineage,
        branch: &session_log::branch::Branch,
        event: &session_log::Event,
    ) -> Place {
        let position = lineage.position(event);
        Place {
            position,
            inherited: lineage.is_inherited(event),
            superseded: !branch.is_active(position, event),
        }
    }
}

impl<'a> EventView<'a> {
    pub fn of(e: &'a session_log::Event) -> Self {
        EventView {
            event_id: EventId(&e.session_id, e.seq),
            session_id: &e.session_id,
            seq_id: e.seq,
            run_id: &e.run_id,
            invocation_id: &e.invocation_id,
            event_type: e.event_type.as_str(),
            role: &e.role,
            content: &e.content,
            metadata: &e.metadata,
            timestamp: Timestamp(e.created_at),
            place: None,
        }
    }

    /// The event with its place in a history.
    pub fn placed(e: &'a session_log::Event, place: Place) -> Self {
        EventView {
            place: Some(place),
            ..EventView::of(e)
        }
    }
}

/// `evt_<session>_<seq>`.
struct EventId<'a>(&'a str, i64);

impl serde::Serialize for EventId<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(&format_args!("evt_{}_{}", self.0, self.1))
    }
}

/// RFC 3339 in UTC with microseconds (`2026-12-02T15:09:32.927406Z`), as
/// `to_rfc3339_opts(SecondsFormat::Micros, true)` writes it, without allocating.
struct Timestamp(chrono::DateTime<chrono::Utc>);

impl serde::Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl std::fmt::Display for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use chrono::{Datelike, Timelike};
        let t = self.0.naive_utc();
        let year = t.year();
        if !(0..=9999).contains(&year) || t.nanosecond() >= 1_000_000_000 {
            // Signed years and leap seconds: rare enough for chrono's own writer.
            let text = self.0.to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
            return f.write_str(&text);
        }
        let mut buf = *b"0000-00-00T00:00:00.000000Z";
        for (range, n) in [
            (0..4, year as u32),
            (5..7, t.month()),
            (8..10, t.day()),
            (11..13, t.hour()),
            (14..16, t.minute()),
            (17..19, t.second()),
            (20..26, t.nanosecond() / 1_000),
        ] {
            let mut n = n;
            for b in buf[range].iter_mut().rev() {
                *b = b'0' + (n % 10) as u8;
                n /= 10;
            }
        }
        f.write_str(std::str::from_utf8(&buf).map_err(|_| std::fmt::Error)?)
    }
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, NaiveDate, SecondsFormat, TimeZone, Utc};
    use serde_json::json;
    use session_log::{Event, EventType};

    use super::*;

    #[test]
    fn timestamps_read_as_chrono_writes_them() {
        let mut times: Vec<DateTime<Utc>> = vec![
            Utc::now(),
            Utc.with_ymd_and_hms(2026, 12, 2, 15, 9, 32).unwrap(),
            Utc.with_ymd_and_hms(1, 1, 1, 0, 0, 0).unwrap(),
            Utc.with_ymd_and_hms(9999, 12, 31, 23, 59, 59).unwrap(),
            Utc.with_ymd_and_hms(10000, 1, 1, 0, 0, 0).unwrap(),
            Utc.with_ymd_and_hms(-1, 6, 15, 12, 0, 0).unwrap(),
        ];
        let leap = NaiveDate::from_ymd_opt(2016, 12, 31)
            .unwrap()
            .and_hms_nano_opt(23, 59, 59, 1_999_999_999)
            .unwrap()
            .and_utc();
        times.push(leap);
        for nanos in [0, 1, 999, 1_000, 123_456_789, 999_999_999] {
            times.push(Utc.timestamp_opt(1_796_224_172, nanos).unwrap());
        }
        for t in times {
            assert_eq!(
                Timestamp(t).to_string(),
                t.to_rfc3339_opts(SecondsFormat::Micros, true)
            );
        }
    }

    #[test]
    fn an_event_view_keeps_its_wire_form() {
        let event = Event {
            account_id: "acct".into(),
            session_id: "sess_1".into(),
            seq: 42,
            run_id: Some("run_1".into()),
            invocation_id: None,
            event_type: EventType::TextDelta,
            role: None,
            content: json!({"delta": "h\u{e9}\"llo\n", "b": 1.5, "a": [1, null]}),
            metadata: json!({}),
            created_at: Utc.timestamp_opt(1_796_224_172, 929_201_123).unwrap(),
        };
        assert_eq!(
            serde_json::to_string(&EventView::of(&event)).unwrap(),
            r#"{"EventId":"evt_sess_1_42","SessionId":"sess_1","SeqId":42,"RunId":"run_1","InvocationId":null,"EventType":"text_delta","Role":null,"Content":{"a":[1,null],"b":1.5,"delta":"hé\"llo\n"},"Metadata":{},"Timestamp":"2026-12-02T15:09:32.929201Z"}"#
        );
        let placed = EventView::placed(
            &event,
            Place {
                position: 45,
                inherited: true,
                superseded: false,
            },
        );
        assert_eq!(
            serde_json::to_value(placed).unwrap(),
            json!({
                "EventId": "evt_sess_1_42", "SessionId": "sess_1", "SeqId": 42,
                "RunId": "run_1", "InvocationId": null, "EventType": "text_delta",
                "Role": null, "Content": event.content, "Metadata": {},
                "Timestamp": "2026-12-02T15:09:32.929201Z",
                "Position": 45, "Inherited": true, "Superseded": false,
            })
        );
    }
}
