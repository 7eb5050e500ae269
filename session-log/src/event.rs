//! The event model: one row of a session log, and the JSON shapes its `content` takes.
//!
//! Content shapes (the common language every adapter reads and writes):
//! - `message` (role `user`/`assistant`/`system`/`developer`): `{"text": "...", "content": [block, ...]}`
//!   where `text` is all text blocks joined and `content` is present only when the message
//!   has more than one plain text block. A block is `{"type":"text","text":..}`,
//!   `{"type":"image","image_url":..,"detail"?:..}` or
//!   `{"type":"file","filename"?:..,"file_data"?:..,"file_url"?:..}`.
//! - `reasoning` (role `assistant`): `{"text": "..."}` — one aggregated event per turn.
//! - `tool_call` (role `assistant`): `{"call_id": .., "name": .., "arguments": "<json text>"}`.
//! - `tool_result` (role `tool`): `{"call_id": .., "output": "<text>", "name"?: ..}`.
//! - `approval`: the upstream's approval request or response item, verbatim.
//! - `run_status`: `{"status": "in_progress"|"completed"|"failed"|"cancelled"|"interrupted", "reason"?: ..}`.
//! - `text_delta` / `reasoning_delta`: `{"delta": "..."}`.
//! - `error`: `{"code": .., "message": ..}`.
//! - `http_exchange`: a teed pass-through exchange whose response came whole, in one event:
//!   `{"request": {method, path, headers, body}, "response": {status, headers, body, ..}}`.
//! - `http_request` / `http_sse_event`* / `http_response`: a teed exchange whose response
//!   streamed (SSE or chunked): the request when the response starts, each SSE event, and
//!   the response at its end. `metadata.exchange_id` groups the events of one exchange.
//! - `agent_event`: one event of a stateful agent's own protocol, verbatim (an A2A task,
//!   status or artifact update, an ADK event), rendered back as it came to clients that
//!   speak that protocol.
//! - `session_restore`: Tether put the session back into an agent that had forgotten it:
//!   `{"reason": .., "items": <history items sent>, "requests": <agent calls made>}`.
//! - `session_fork`: always seq 1 of a fork, naming where its history comes from:
//!   `{"parent_session_id": .., "parent_seq": n, "checkpoint_id": ..}` (see [`ForkPoint`]).
//! - `compaction_boundary`: a compaction starts here: `{"reason": "manual"|"trigger_tokens"|
//!   "compact_threshold", "keep_last_turns": k, "estimated_tokens"?: n, "summarizer"?:
//!   {"model", "request"}}` (the summarizer's request, when Tether asked one).
//! - `context_checkpoint`: right after its boundary: `{"summary": .., "seq_start": a,
//!   "seq_end": b}`; the summary stands for the transcript events of the session's
//!   history at positions `a..=b` (see `history`).
//! - `compaction` (older versions): `{"summary"?: .., "through_seq"?: n, "reason"?: ..}`,
//!   standing for the transcript events up to `through_seq` (default: its own seq).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// Position of an event within its session: assigned by the store at commit, strictly
/// increasing, never reused. The first event of a session has seq 1.
pub type Seq = i64;

/// The kind of an event. Transcript kinds are what the model sees; the rest are control.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventType {
    Message,
    Reasoning,
    ToolCall,
    ToolResult,
    Approval,
    RunStatus,
    TextDelta,
    ReasoningDelta,
    Error,
    RunCheckpoint,
    ToolReceipt,
    Compaction,
    HttpExchange,
    HttpRequest,
    HttpResponse,
    HttpSseEvent,
    AgentEvent,
    SessionRestore,
    SessionFork,
    CompactionBoundary,
    ContextCheckpoint,
    /// The session's metadata from here on (`{"metadata": {...}}`), as a client set it.
    SessionMetadata,
    /// The session was deleted: hidden from every read from here on.
    SessionDeleted,
    /// An item of the session was deleted (`{"item_id", "position"}`): hidden from every
    /// projection and read from here on.
    ItemDeleted,
}

impl EventType {
    pub const ALL: [EventType; 24] = [
        EventType::Message,
        EventType::Reasoning,
        EventType::ToolCall,
        EventType::ToolResult,
        EventType::Approval,
        EventType::RunStatus,
        EventType::TextDelta,
        EventType::ReasoningDelta,
        EventType::Error,
        EventType::RunCheckpoint,
        EventType::ToolReceipt,
        EventType::Compaction,
        EventType::HttpExchange,
        EventType::HttpRequest,
        EventType::HttpResponse,
        EventType::HttpSseEvent,
        EventType::AgentEvent,
        EventType::SessionRestore,
        EventType::SessionFork,
        EventType::CompactionBoundary,
        EventType::ContextCheckpoint,
        EventType::SessionMetadata,
        EventType::SessionDeleted,
        EventType::ItemDeleted,
    ];

    /// What a client changed about a session other than by a turn: its metadata, its
    /// deletion, an item's deletion. Rare, and indexed apart (in this order, which the
    /// index's condition repeats), so reading them costs nothing in a session without.
    pub const UPDATES: [EventType; 3] = [
        EventType::SessionMetadata,
        EventType::SessionDeleted,
        EventType::ItemDeleted,
    ];

    /// The events that shape a session's history rather than its transcript: run
    /// statuses (a resume names its checkpoint), checkpoints, a fork's `session_fork`, and
    /// compaction markers. A few per turn, indexed apart from the rest of the log (in this
    /// order, which the index's condition repeats).
    pub const MARKERS: [EventType; 6] = [
        EventType::RunStatus,
        EventType::RunCheckpoint,
        EventType::SessionFork,
        EventType::Compaction,
        EventType::CompactionBoundary,
        EventType::ContextCheckpoint,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Message => "message",
            EventType::Reasoning => "reasoning",
            EventType::ToolCall => "tool_call",
            EventType::ToolResult => "tool_result",
            EventType::Approval => "approval",
            EventType::RunStatus => "run_status",
            EventType::TextDelta => "text_delta",
            EventType::ReasoningDelta => "reasoning_delta",
            EventType::Error => "error",
            EventType::RunCheckpoint => "run_checkpoint",
            EventType::ToolReceipt => "tool_receipt",
            EventType::Compaction => "compaction",
            EventType::HttpExchange => "http_exchange",
            EventType::HttpRequest => "http_request",
            EventType::HttpResponse => "http_response",
            EventType::HttpSseEvent => "http_sse_event",
            EventType::AgentEvent => "agent_event",
            EventType::SessionRestore => "session_restore",
            EventType::SessionFork => "session_fork",
            EventType::CompactionBoundary => "compaction_boundary",
            EventType::ContextCheckpoint => "context_checkpoint",
            EventType::SessionMetadata => "session_metadata",
            EventType::SessionDeleted => "session_deleted",
            EventType::ItemDeleted => "item_deleted",
        }
    }

    pub fn parse(s: &str) -> Option<EventType> {
        EventType::ALL.into_iter().find(|t| t.as_str() == s)
    }

    /// The transcript types: what the model sees (see the projection).
    pub const TRANSCRIPT: [EventType; 5] = [
        EventType::Message,
        EventType::Reasoning,
        EventType::ToolCall,
        EventType::ToolResult,
        EventType::Approval,
    ];

    /// Whether the model should see events of this type (see the projection).
    pub fn is_transcript(self) -> bool {
        EventType::TRANSCRIPT.contains(&self)
    }
}

/// Lifecycle of one invocation of a run. Exactly one terminal status ends each invocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    InProgress,
    Completed,
    Failed,
    Cancelled,
    Interrupted,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::InProgress => "in_progress",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Interrupted => "interrupted",
        }
    }

    pub fn parse(s: &str) -> Option<RunStatus> {
        [
            RunStatus::InProgress,
            RunStatus::Completed,
            RunStatus::Failed,
            RunStatus::Cancelled,
            RunStatus::Interrupted,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
    }

    pub fn is_terminal(self) -> bool {
        self != RunStatus::InProgress
    }
}

/// An event before it is committed: no seq and no timestamp yet.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewEvent {
    pub account_id: String,
    pub session_id: String,
    pub run_id: Option<String>,
    pub invocation_id: Option<String>,
    pub event_type: EventType,
    pub role: Option<String>,
    pub content: Value,
    pub metadata: Value,
}

/// A committed event: one row of the session log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub account_id: String,
    pub session_id: String,
    pub seq: Seq,
    pub run_id: Option<String>,
    pub invocation_id: Option<String>,
    pub event_type: EventType,
    pub role: Option<String>,
    pub content: Value,
    pub metadata: Value,
    pub created_at: DateTime<Utc>,
}

impl Event {
    pub fn committed(new: NewEvent, seq: Seq, created_at: DateTime<Utc>) -> Event {
        Event {
            account_id: new.account_id,
            session_id: new.session_id,
            seq,
            run_id: new.run_id,
            invocation_id: new.invocation_id,
            event_type: new.event_type,
            role: new.role,
            content: new.content,
            metadata: new.metadata,
            created_at,
        }
    }

    /// The run status this event carries, if it is a `run_status` event.
    pub fn run_status(&self) -> Option<RunStatus> {
        run_status_of(self.event_type, &self.content)
    }

    /// Whether this event ends its invocation.
    pub fn is_terminal(&self) -> bool {
        self.run_status().is_some_and(RunStatus::is_terminal)
    }

    /// Whether this event was written by a replica after another took its run over (the
    /// outage journal's backfill flags it, with its original seq, under the metadata key
    /// `late`): kept in the log, left out of every projection.
    pub fn is_late(&self) -> bool {
        self.metadata.get("late").is_some_and(|v| !v.is_null())
    }

    /// The `text` (or `delta`) string of the content, or "".
    pub fn text(&self) -> &str {
        text_of(&self.content)
    }
}

impl NewEvent {
    /// A bare event of `event_type` in `session_id`; set run fields with [`NewEvent::in_run`].
    pub fn new(account_id: &str, session_id: &str, event_type: EventType, content: Value) -> Self {
        NewEvent {
            account_id: account_id.to_owned(),
            session_id: session_id.to_owned(),
            run_id: None,
            invocation_id: None,
            event_type,
            role: None,
            content,
            metadata: Value::Object(Default::default()),
        }
    }

    pub fn in_run(mut self, run_id: &str, invocation_id: &str) -> Self {
        self.run_id = Some(run_id.to_owned());
        self.invocation_id = Some(invocation_id.to_owned());
        self
    }

    pub fn with_role(mut self, role: &str) -> Self {
        self.role = Some(role.to_owned());
        self
    }

    pub fn with_metadata(mut self, metadata: Value) -> Self {
        self.metadata = metadata;
        self
    }

    pub fn run_status(&self) -> Option<RunStatus> {
        run_status_of(self.event_type, &self.content)
    }

    /// Whether this event ends its invocation (as [`Event::is_terminal`]).
    pub fn is_terminal(&self) -> bool {
        self.run_status().is_some_and(RunStatus::is_terminal)
    }
}

fn run_status_of(event_type: EventType, content: &Value) -> Option<RunStatus> {
    (event_type == EventType::RunStatus)
        .then(|| {
            content
                .get("status")
                .and_then(Value::as_str)
                .and_then(RunStatus::parse)
        })
        .flatten()
}

fn text_of(content: &Value) -> &str {
    content
        .get("text")
        .or_else(|| content.get("delta"))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// The reason of the `interrupted` status a lease sweep writes for a run whose owner
/// stopped renewing its lease. Such a close applies only while the lease is still expired
/// (see `InvocationOp::Close::if_expired`): a renewal racing the sweep wins.
pub const RUN_OWNER_LOST: &str = "run_owner_lost";

/// Content of a `run_status` event.
pub fn run_status_content(status: RunStatus, reason: Option<&str>) -> Value {
    match reason {
        Some(r) => json!({ "status": status.as_str(), "reason": r }),
        None => json!({ "status": status.as_str() }),
    }
}

/// A session: one conversation, owned by exactly one account.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Session {
    pub account_id: String,
    pub session_id: String,
    pub last_seq: Seq,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Where the session's history starts, when it is a fork (read from its seq 1).
    pub forked_from: Option<ForkPoint>,
    /// The metadata a client last set (its latest `session_metadata` event's), if any.
    #[serde(default)]
    pub metadata: Option<Value>,
    /// A client deleted the session (a `session_deleted` event): its events stay in the
    /// log, and no read shows it.
    #[serde(default)]
    pub deleted: bool,
    /// When it was archived (read-only: no run starts in it); `None` while active.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archived_at: Option<DateTime<Utc>>,
}

/// Where a fork's history comes from: its parent's history up to and including the
/// parent's own event `seq` (the checkpoint it was forked at). The content of the fork's
/// `session_fork` event, its seq 1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkPoint {
    #[serde(rename = "parent_session_id")]
    pub session_id: String,
    #[serde(rename = "parent_seq")]
    pub seq: Seq,
    pub checkpoint_id: String,
}

impl ForkPoint {
    /// The fork point a `session_fork` event's content names, if it is well formed.
    pub fn of(content: &Value) -> Option<ForkPoint> {
        serde_json::from_value(content.clone())
            .ok()
            .filter(|f: &ForkPoint| f.seq > 0)
    }

    pub fn content(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}
