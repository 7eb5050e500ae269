//! Compaction, the model's side of it: how much history a turn is estimated to carry,
//! what a summarizer is asked (the prompt, and the transcript it condenses), reading its
//! answer, and the Responses API's own per-request form (`context_management`). Which
//! events a compaction covers is the session log's business (`session_log::history`).

use std::fmt::Write as _;

use serde_json::{Map, Value};

use crate::item::{Block, Item};
use crate::protocol::Protocol;
use crate::turn::{InputError, TurnRequest};
use crate::upstream::Output;

/// The summarizer's instructions (its system message). The transcript follows as the
/// user's message, one line per item (see [`summary_turn`]).
pub const SUMMARIZER_PROMPT: &str = "You are summarizing the earlier part of a conversation \
    between a user and an assistant, so that the conversation can go on without it. Write a \
    concise summary in the conversation's language that keeps every fact, name, number, \
    decision, tool result and open question a later turn may need; where something changed, \
    keep only its latest value. Write plain text, in the third person, and answer with the \
    summary alone.";

/// The characters taken for one token in [`estimate_tokens`].
pub const CHARS_PER_TOKEN: u64 = 4;

/// The tokens `items` are estimated to take: one per four characters (Unicode scalar
/// values) of each item's text, rounded up per item; a tool call counts its name and
/// arguments, images and files count nothing. Tokenizers differ; this is a budget, not a
/// count.
pub fn estimate_tokens(items: &[Item]) -> u64 {
    items
        .iter()
        .map(|item| {
            let chars = match item {
                Item::ToolCall {
                    name, arguments, ..
                } => name.chars().count() + arguments.chars().count(),
                Item::Approval(v) => v.to_string().chars().count(),
                other => other.text().chars().count(),
            } as u64;
            chars.div_ceil(CHARS_PER_TOKEN)
        })
        .sum()
}

/// What the summarizer is sent: [`SUMMARIZER_PROMPT`] as the history's system message,
/// and a turn whose user message is the transcript to condense — the summary an earlier
/// compaction left (its first item, a system message) included.
pub fn summary_turn(covered: &[Item], model: Option<String>) -> (Vec<Item>, TurnRequest) {
    let prompt = Item::Message {
        role: "system".into(),
        content: vec![Block::Text(SUMMARIZER_PROMPT.into())],
    };
    let mut turn = TurnRequest::new(Protocol::OpenAiChat);
    turn.model = model;
    turn.input = vec![Item::user_text(&transcript(covered))];
    (vec![prompt], turn)
}

/// The transcript a summarizer reads: `role: text` per message (an earlier summary as
/// `summary so far:`), tool calls and results as `tool call name(arguments)` and `tool
/// result: output`; reasoning and approvals are left out.
pub fn transcript(items: &[Item]) -> String {
    let mut out = String::from("Summarize this conversation:\n\n");
    for item in items {
        let _ = match item {
            Item::Message { role, content } => {
                let who = if role == "system" {
                    "summary so far"
                } else {
                    role
                };
                let mut text = item.text();
                for block in content {
                    match block {
                        Block::File { filename, .. } => {
                            let name = filename.as_deref().unwrap_or("file");
                            let _ = write!(text, " [attached file: {name}]");
                        }
                        Block::Image { .. } => text.push_str(" [attached image]"),
                        Block::Text(_) => {}
                    }
                }
                writeln!(out, "{who}: {}", text.trim())
            }
            Item::ToolCall {
                name, arguments, ..
            } => writeln!(out, "tool call {name}({arguments})"),
            Item::ToolResult { output, .. } => writeln!(out, "tool result: {}", output.trim()),
            Item::Reasoning { .. } | Item::Approval(_) => continue,
        };
    }
    out
}

/// The summary in a summarizer's answer: its assistant message, or its text deltas when
/// it sent no whole message. An error, or an empty answer, is why there is none.
pub fn summary_of(outputs: &[Output]) -> Result<String, String> {
    let mut deltas = String::new();
    let mut message = None;
    for output in outputs {
        match output {
            Output::Error { code, message } => return Err(format!("{code}: {message}")),
            Output::TextDelta(d) => deltas.push_str(d),
            Output::Item(item @ Item::Message { role, .. })
            | Output::ItemWith(item @ Item::Message { role, .. }, _)
                if role == "assistant" =>
            {
                message = Some(item.text());
            }
            _ => {}
        }
    }
    let summary = message.unwrap_or(deltas).trim().to_owned();
    if summary.is_empty() {
        return Err("the summarizer answered with no text".into());
    }
    Ok(summary)
}

/// Takes the Responses API's `context_management` out of a request's other fields (the
/// Responses surface's parse calls it): `[{"type": "compaction", "compact_threshold":
/// N}]` asks for a compaction before the turn when its history would exceed N tokens.
/// Returns N; Tether does the compaction, so the field never reaches the agent.
pub fn context_management(extra: &mut Map<String, Value>) -> Result<Option<u64>, InputError> {
    let Some(value) = extra.remove("context_management") else {
        return Ok(None);
    };
    let param = "context_management";
    let invalid = |message: String| InputError::new("invalid_value", Some(param), message);
    let entries = match value {
        Value::Null => return Ok(None),
        Value::Array(entries) => entries,
        _ => {
            return Err(InputError::new(
                "invalid_type",
                Some(param),
                "Invalid type for 'context_management': expected an array.",
            ))
        }
    };
    let mut threshold = None;
    for entry in entries {
        let kind = entry.get("type").and_then(Value::as_str);
        if kind != Some("compaction") {
            return Err(invalid(format!(
                "Unsupported context_management entry {entry}: only {{\"type\": \"compaction\", \
                 \"compact_threshold\": N}} is supported."
            )));
        }
        let n = entry
            .get("compact_threshold")
            .and_then(Value::as_u64)
            .filter(|n| *n > 0)
            .ok_or_else(|| {
                invalid("'compact_threshold' must be a positive integer (tokens).".into())
            })?;
        threshold = Some(threshold.map_or(n, |t: u64| t.min(n)));
    }
    Ok(threshold)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn tokens_are_four_characters_rounded_up_per_item() {
        let items = [
            Item::user_text("abcde"),   // 5 chars: 2
            Item::assistant_text("dé"), // 2 chars: 1
            Item::ToolCall {
                call_id: "c".into(),
                name: "look".into(),
                arguments: "{}".into(),
            }, // 6 chars: 2
            Item::user_text(""),        // 0
        ];
        assert_eq!(estimate_tokens(&items), 5);
    }

    #[test]
    fn the_summarizer_reads_the_transcript_under_its_prompt() {
        let covered = [
            Item::Message {
                role: "system".into(),
                content: vec![Block::Text("earlier: hello".into())],
            },
            Item::user_text("My project is named zebra42."),
            Item::ToolCall {
                call_id: "c1".into(),
                name: "lookup".into(),
                arguments: "{\"x\":1}".into(),
            },
            Item::ToolResult {
                call_id: "c1".into(),
                output: "42".into(),
            },
            Item::Reasoning {
                text: "hidden".into(),
            },
            Item::assistant_text("OK."),
        ];
        let (history, turn) = summary_turn(&covered, Some("m".into()));
        assert_eq!(history[0].text(), SUMMARIZER_PROMPT);
        assert_eq!(turn.model.as_deref(), Some("m"));
        assert_eq!(
            turn.input[0].text(),
            "Summarize this conversation:\n\nsummary so far: earlier: hello\n\
             user: My project is named zebra42.\ntool call lookup({\"x\":1})\n\
             tool result: 42\nassistant: OK.\n"
        );
    }

    #[test]
    fn a_summary_is_the_answer_or_why_there_is_none() {
        let deltas = [
            Output::TextDelta("a ".into()),
            Output::TextDelta("b".into()),
        ];
        assert_eq!(summary_of(&deltas).unwrap(), "a b");
        let whole = [
            Output::TextDelta("x".into()),
            Output::Item(Item::assistant_text(" the summary ")),
        ];
        assert_eq!(summary_of(&whole).unwrap(), "the summary");
        assert!(summary_of(&[]).is_err());
        let failed = [Output::Error {
            code: "boom".into(),
            message: "down".into(),
        }];
        assert_eq!(summary_of(&failed).unwrap_err(), "boom: down");
    }

    #[test]
    fn context_management_gives_a_threshold_or_a_clear_error() {
        let take = |v: Value| {
            let mut extra = Map::new();
            extra.insert("context_management".into(), v);
            let got = context_management(&mut extra);
            assert!(extra.is_empty(), "never forwarded");
            got
        };
        assert_eq!(context_management(&mut Map::new()), Ok(None));
        assert_eq!(
            take(json!([{"type": "compaction", "compact_threshold": 2000}])),
            Ok(Some(2000))
        );
        assert_eq!(take(json!([])), Ok(None));
        for bad in [
            json!("compaction"),
            json!([{"type": "compaction"}]),
            json!([{"type": "compaction", "compact_threshold": 0}]),
            json!([{"type": "compaction", "compact_threshold": "100"}]),
            json!([{"type": "truncate"}]),
            json!([7]),
        ] {
            let e = take(bad.clone()).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("context_management"), "{bad}");
        }
    }
}
