//! Unit tests of the Responses adapter, one file per part.

use chrono::{TimeZone, Utc};
use serde_json::{json, Value};
use session_log::event::run_status_content;
use session_log::{Event, EventType, NewEvent, RunStatus};

use super::{ResponsesSurface, ResponsesUpstream};
use crate::cursor::frame_number;
use crate::item::{Block, Item};
use crate::protocol::Protocol;
use crate::sse::SseFrame;
use crate::surface::{RunInfo, Surface};
use crate::turn::{InputError, SessionRef, Tool, TurnRequest};
use crate::upstream::{Output, Stateless, Upstream};

mod parse;
mod render;
mod request;
mod stream;

const HEX: &str = "0123456789abcdef0123456789abcdef";
const RESP: &str = "resp_0123456789abcdef0123456789abcdef";

fn run() -> RunInfo {
    RunInfo {
        run_id: format!("run_{HEX}"),
        session_id: "sess-1".into(),
        model: "my-agent".into(),
        created_at: 1_700_000_000,
        client: Value::Null,
    }
}

fn item_id(prefix: &str, index: u32) -> String {
    format!("{prefix}_{HEX}{index:08x}")
}

/// A committed event of the test run.
fn ev(seq: i64, new: NewEvent) -> Event {
    let new = new.in_run(&format!("run_{HEX}"), "inv_1");
    Event::committed(new, seq, Utc.timestamp_opt(1_700_000_100, 0).unwrap())
}

fn control(seq: i64, t: EventType, content: Value) -> Event {
    ev(seq, NewEvent::new("acct", "sess-1", t, content))
}

fn status(seq: i64, s: RunStatus) -> Event {
    control(seq, EventType::RunStatus, run_status_content(s, None))
}

fn item(seq: i64, item: Item) -> Event {
    ev(seq, item.to_event("acct", "sess-1"))
}

fn render_all(events: &[Event]) -> Vec<SseFrame> {
    let mut r = ResponsesSurface.stream_renderer(&run());
    let mut frames: Vec<SseFrame> = events.iter().flat_map(|e| r.render(e)).collect();
    frames.extend(r.end());
    frames
}

/// Frames as `(id, event, data)`, checking the invariants every frame must hold:
/// `event:` equals the data's `type`, and `sequence_number` and `id:` both count from 0
/// without gaps.
fn decode(frames: &[SseFrame]) -> Vec<(i64, String, Value)> {
    frames
        .iter()
        .enumerate()
        .map(|(n, f)| {
            let data: Value = serde_json::from_str(&f.data).unwrap();
            assert_eq!(data["sequence_number"], json!(n), "frame {n}");
            assert_eq!(f.event.as_deref(), data["type"].as_str(), "frame {n}");
            let id =
                frame_number(f.id.as_deref().expect("every frame has an id")).expect("a frame id");
            assert_eq!(id, n as i64, "frame {n}: the id is the sequence number");
            (id, f.event.clone().unwrap(), data)
        })
        .collect()
}

fn response_obj(status: &str, output: Value, usage: Value) -> Value {
    json!({
        "id": RESP,
        "object": "response",
        "created_at": 1_700_000_100,
        "completed_at": if status == "completed" { json!(1_700_000_100) } else { Value::Null },
        "status": status,
        "error": null,
        "incomplete_details": null,
        "instructions": null,
        "max_output_tokens": null,
        "max_tool_calls": null,
        "model": "my-agent",
        "output": output,
        "parallel_tool_calls": true,
        "previous_response_id": null,
        "temperature": 1.0,
        "top_p": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "top_logprobs": 0,
        "tool_choice": "auto",
        "tools": [],
        "truncation": "disabled",
        "text": { "format": { "type": "text" } },
        "reasoning": { "effort": null, "summary": null },
        "store": true,
        "background": false,
        "service_tier": "default",
        "safety_identifier": null,
        "prompt_cache_key": null,
        "user": null,
        "usage": usage,
        "metadata": {},
        "conversation": { "id": "sess-1" },
    })
}

fn text_part(text: &str) -> Value {
    json!({ "type": "output_text", "text": text, "annotations": [], "logprobs": [] })
}

fn message_item(index: u32, status: &str, text: Option<&str>) -> Value {
    json!({
        "id": item_id("msg", index),
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": match text { Some(t) => json!([text_part(t)]), None => json!([]) },
    })
}

fn streamed_run() -> Vec<Event> {
    vec![
        item(1, Item::user_text("Say hello")),
        status(2, RunStatus::InProgress),
        control(3, EventType::TextDelta, json!({"delta": "Hel"})),
        control(4, EventType::TextDelta, json!({"delta": "lo!"})),
        item(5, Item::assistant_text("Hello!")),
        ev(
            6,
            NewEvent::new(
                "acct",
                "sess-1",
                EventType::RunStatus,
                run_status_content(RunStatus::Completed, None),
            )
            .with_metadata(
                json!({"usage": {"input_tokens": 12, "output_tokens": 3, "total_tokens": 15}}),
            ),
        ),
    ]
}

fn parse(body: Value) -> Result<TurnRequest, InputError> {
    ResponsesSurface.parse_request(body.to_string().as_bytes(), None)
}

fn parse_with_header(body: Value, header: &str) -> Result<TurnRequest, InputError> {
    ResponsesSurface.parse_request(body.to_string().as_bytes(), Some(header))
}

fn err(body: Value) -> (&'static str, Option<String>, String) {
    let e = parse(body).unwrap_err();
    (e.code, e.param, e.message)
}
