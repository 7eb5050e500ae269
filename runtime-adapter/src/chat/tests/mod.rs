//! Unit tests of the Chat Completions adapter, one file per part.

use chrono::{TimeZone, Utc};
use serde_json::{json, Value};
use session_log::{Event, EventType, NewEvent, RunStatus};

use super::{ChatSurface, ChatUpstream};
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

const RUN: &str = "run_0123456789abcdef0123456789abcdef";
const CHAT_ID: &str = "chatcmpl-0123456789abcdef0123456789abcdef";

fn run_info() -> RunInfo {
    RunInfo {
        run_id: RUN.into(),
        session_id: "s1".into(),
        model: "gpt-test".into(),
        created_at: 1_700_000_000,
        client: Value::Null,
    }
}

fn parse(body: Value) -> Result<TurnRequest, InputError> {
    ChatSurface.parse_request(body.to_string().as_bytes(), None)
}

fn parse_err(body: Value) -> InputError {
    parse(body).expect_err("request should be refused")
}

fn call(id: &str, name: &str, args: &str) -> Item {
    Item::ToolCall {
        call_id: id.into(),
        name: name.into(),
        arguments: args.into(),
    }
}

fn result(id: &str, output: &str) -> Item {
    Item::ToolResult {
        call_id: id.into(),
        output: output.into(),
    }
}
