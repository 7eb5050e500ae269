//! Properties of the parsers every agent byte goes through, for any input and any way
//! the bytes are cut into chunks (chunk boundaries are not event boundaries): SSE
//! reassembly, the OpenAI (chat, responses), A2A, ADK and LangGraph stream parsers, and
//! the projection (never a control event; a compaction's summary first, in place of
//! what it covers).

use chrono::{TimeZone, Utc};
use proptest::prelude::*;
use runtime_adapter::a2a::A2aUpstream;
use runtime_adapter::adk::AdkUpstream;
use runtime_adapter::chat::ChatUpstream;
use runtime_adapter::langgraph::LangGraphUpstream;
use runtime_adapter::responses::ResponsesUpstream;
use runtime_adapter::sse::{SseFrame, SseParser};
use runtime_adapter::{project, Item, Output, Protocol, TurnCall, TurnRequest, Upstream};
use serde_json::json;
use session_log::{Event, EventType, History, NewEvent};

/// Cuts `bytes` at `cuts` (taken modulo its length, in any order).
fn split(bytes: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut at: Vec<usize> = cuts
        .iter()
        .map(|c| if bytes.is_empty() { 0 } else { c % bytes.len() })
        .collect();
    at.push(0);
    at.push(bytes.len());
    at.sort_unstable();
    at.dedup();
    at.windows(2).map(|w| bytes[w[0]..w[1]].to_vec()).collect()
}

/// Text without CR or LF (a data line's content).
fn line_text() -> impl Strategy<Value = String> {
    "[^\r\n]{0,24}"
}

fn frame() -> impl Strategy<Value = SseFrame> {
    (
        proptest::option::of("[a-z.]{1,12}"),
        proptest::option::of("[0-9]{1,6}"),
        proptest::collection::vec(line_text(), 1..4),
    )
        .prop_map(|(event, id, lines)| SseFrame {
            event,
            id,
            data: lines.join("\n"),
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any frames, written with any line ending and cut anywhere, come back as written.
    #[test]
    fn sse_reassembly_is_the_same_under_any_split(
        frames in proptest::collection::vec(frame(), 0..8),
        ending in prop_oneof![Just("\n"), Just("\r\n"), Just("\r")],
        comments in any::<bool>(),
        cuts in proptest::collection::vec(any::<usize>(), 0..12),
    ) {
        let mut wire = String::new();
        for f in &frames {
            if comments {
                wire.push_str(": keep-alive\n");
            }
            f.encode(&mut wire);
        }
        let wire = wire.replace('\n', ending);
        let mut parser = SseParser::new();
        let mut got: Vec<SseFrame> = split(wire.as_bytes(), &cuts)
            .iter()
            .flat_map(|c| parser.feed(c))
            .collect();
        got.extend(parser.finish());
        prop_assert_eq!(got, frames);
    }
}

/// Makes a fresh parser.
type MakeParser = Box<dyn Fn() -> Box<dyn runtime_adapter::StreamParser>>;

/// The adapters' parsers, each with its usual content type.
fn parsers() -> Vec<(&'static str, MakeParser)> {
    fn make(
        upstream: &'static dyn Upstream,
        protocol: Protocol,
        content_type: &'static str,
    ) -> MakeParser {
        Box::new(move || {
            let turn = TurnRequest::new(protocol);
            let call = TurnCall {
                account_id: "acct",
                session_id: "s",
                run_id: "run_1",
                history: &[],
                events: &[],
                turn: &turn,
                default_model: "m",
            };
            upstream.parser(&call, content_type)
        })
    }
    static A2A: A2aUpstream = A2aUpstream::JSONRPC;
    vec![
        (
            "chat",
            make(&ChatUpstream, Protocol::OpenAiChat, "text/event-stream"),
        ),
        (
            "responses",
            make(
                &ResponsesUpstream,
                Protocol::OpenAiResponses,
                "text/event-stream",
            ),
        ),
        ("a2a", make(&A2A, Protocol::A2a, "text/event-stream")),
        (
            "adk",
            make(&AdkUpstream, Protocol::Adk, "text/event-stream"),
        ),
        (
            "langgraph",
            make(&LangGraphUpstream, Protocol::LangGraph, "text/event-stream"),
        ),
    ]
}

/// Pieces of agent streams: frames each protocol sends (with any text), and noise
/// (comments, stray lines, malformed JSON, a cut-off frame).
fn piece() -> impl Strategy<Value = String> {
    let text = "[^\r\n\"\\\\]{0,16}";
    prop_oneof![
        text.prop_map(|t| format!(
            "data: {}\n\n",
            json!({"choices": [{"index": 0, "delta": {"content": t}}]})
        )),
        Just("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n".to_owned()),
        Just("data: [DONE]\n\n".to_owned()),
        text.prop_map(|t| format!(
            "event: response.output_text.delta\ndata: {}\n\n",
            json!({"type": "response.output_text.delta", "delta": t})
        )),
        Just(format!(
            "event: response.completed\ndata: {}\n\n",
            json!({"type": "response.completed", "response": {"id": "resp_1", "status": "completed", "output": []}})
        )),
        text.prop_map(|t| format!(
            "data: {}\n\n",
            json!({"jsonrpc": "2.0", "id": 1, "result": {"kind": "artifact-update", "taskId": "t1", "contextId": "c1",
                "artifact": {"artifactId": "a1", "parts": [{"kind": "text", "text": t}]}, "append": true}})
        )),
        Just(format!(
            "data: {}\n\n",
            json!({"jsonrpc": "2.0", "id": 1, "result": {"kind": "status-update", "taskId": "t1", "contextId": "c1",
                "status": {"state": "completed"}, "final": true}})
        )),
        text.prop_map(|t| format!(
            "data: {}\n\n",
            json!({"content": {"role": "model", "parts": [{"text": t}]}, "author": "agent", "partial": true, "invocationId": "i1", "id": "e1"})
        )),
        text.prop_map(|t| format!(
            "event: messages\ndata: {}\n\n",
            json!([{"type": "AIMessageChunk", "content": t, "id": "m1"}, {}])
        )),
        Just(": comment\n".to_owned()),
        Just("\n".to_owned()),
        Just("data: {not json\n\n".to_owned()),
        Just("data: {\"choices\": [".to_owned()),
        "[ -~]{0,20}",
    ]
}

fn run(
    make: &dyn Fn() -> Box<dyn runtime_adapter::StreamParser>,
    chunks: &[Vec<u8>],
) -> Vec<Output> {
    let mut p = make();
    let mut out: Vec<Output> = chunks.iter().flat_map(|c| p.feed(c)).collect();
    out.extend(p.finish());
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Every parser gives the same outputs for a stream however it is cut, valid or not.
    #[test]
    fn stream_parsers_are_the_same_under_any_split(
        pieces in proptest::collection::vec(piece(), 0..12),
        cuts in proptest::collection::vec(any::<usize>(), 0..16),
    ) {
        let wire = pieces.concat();
        for (name, make) in parsers() {
            let whole = run(&*make, &[wire.as_bytes().to_vec()]);
            let cut = run(&*make, &split(wire.as_bytes(), &cuts));
            prop_assert_eq!(&cut, &whole, "{}", name);
            let bytes = run(&*make, &split(wire.as_bytes(), &(0..wire.len()).collect::<Vec<_>>()));
            prop_assert_eq!(&bytes, &whole, "{} byte by byte", name);
        }
    }

    /// The chat parser's text deltas are the agent's text, whatever it is.
    #[test]
    fn chat_deltas_carry_the_text(texts in proptest::collection::vec("\\PC{0,12}", 0..8),
                                  cuts in proptest::collection::vec(any::<usize>(), 0..8)) {
        let mut wire = String::new();
        for t in &texts {
            wire.push_str(&format!("data: {}\n\n", json!({"choices": [{"index": 0, "delta": {"content": t}}]})));
        }
        wire.push_str("data: [DONE]\n\n");
        let make = &parsers()[0].1;
        let out = run(&**make, &split(wire.as_bytes(), &cuts));
        let got: String = out.iter().filter_map(|o| match o { Output::TextDelta(t) => Some(t.as_str()), _ => None }).collect();
        prop_assert_eq!(got, texts.concat());
    }
}

fn at(seq: i64, new: NewEvent) -> Event {
    Event::committed(new, seq, Utc.timestamp_opt(1_700_000_000, 0).unwrap())
}

/// Any event of any type, with content the transcript types can be read from.
fn any_event() -> impl Strategy<Value = (EventType, String)> {
    (
        proptest::sample::select(EventType::ALL.to_vec()),
        "[a-z ]{0,10}",
    )
}

proptest! {
    /// For any log, the projection holds no control event, keeps the transcript's order,
    /// and puts a compaction's summary first.
    #[test]
    fn the_projection_never_contains_control_events(
        events in proptest::collection::vec(any_event(), 0..30),
        summary in proptest::option::of("[a-z ]{1,10}"),
    ) {
        let events: Vec<Event> = events
            .iter()
            .enumerate()
            .map(|(i, (t, text))| {
                let content = if t.is_transcript() {
                    Item::user_text(text).to_event("a", "s").content
                } else {
                    json!({ "text": format!("CONTROL {text}"), "delta": "CONTROL", "status": "completed" })
                };
                at(i as i64 + 1, NewEvent::new("a", "s", *t, content))
            })
            .collect();
        let history = History { events: events.clone(), summary: summary.clone(), ..History::default() };
        let projected = project(&history);
        let rendered = serde_json::to_string(&projected.iter().map(|i| format!("{i:?}")).collect::<Vec<_>>()).unwrap();
        prop_assert!(!rendered.contains("CONTROL"), "{}", rendered);
        let transcript: Vec<Item> = events
            .iter()
            .filter(|e| e.event_type.is_transcript())
            .filter_map(Item::from_event)
            .collect();
        let offset = usize::from(summary.is_some());
        prop_assert_eq!(&projected[offset..], &transcript[..]);
        if let Some(s) = summary {
            let first = format!("{:?}", projected[0]);
            prop_assert!(first.contains(&s) && first.contains("system"), "{}", first);
        }
    }
}
