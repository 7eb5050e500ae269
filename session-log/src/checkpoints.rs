//! Checkpoints and tool receipts derived from a session's events: the `run_checkpoint`
//! content Tether records, the checkpoint descriptors (with their read-time state
//! machine) and the tool receipts that the control API lists, and the resume-risk
//! assessment. Pure functions over `[Event]`, so every derivation is tested without a
//! database.
//!
//! Checkpoint state machine (`CheckpointStatus`, computed on read, never stored; the
//! first rule that applies wins):
//! 1. `terminal` — `is_terminal`: the run had ended there; resuming is a no-op.
//! 2. `expired`  — `expires_at` is in the past.
//! 3. `disabled` — not resumable (`is_resumable` false, or a tool call it follows still
//!    has no result to replay), or already resumed while `replay_allowed` is false.
//! 4. `resumed`  — resumed at least once (`resume_count` > 0) and may be resumed again.
//! 5. `active`   — resumable and never resumed.
//!
//! `resume_count` / `last_resumed_at` come from later `run_status in_progress` events
//! whose metadata names the checkpoint in `resumed_from_checkpoint`.

use std::collections::HashMap;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use serde_json::{json, Value};

use crate::event::{Event, EventType, RunStatus, Seq};

/// The framework name of checkpoints Tether records itself.
pub const TETHER_FRAMEWORK: &str = "tether";
/// Metadata key on a resumed invocation's `in_progress` naming its checkpoint.
pub const RESUMED_FROM: &str = "resumed_from_checkpoint";

/// Where in a run Tether recorded a checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// The agent asked for tool calls; their results are still to come (from the agent
    /// itself, or from the client in the next turn).
    AfterToolCall,
    /// Tool results are in the history and the model has not answered them yet.
    AfterToolResult,
    /// The turn ended; nothing of this run is left to resume.
    TurnCompleted,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::AfterToolCall => "after_tool_call",
            Phase::AfterToolResult => "after_tool_result",
            Phase::TurnCompleted => "turn_completed",
        }
    }
}

/// How Tether's own checkpoints are recorded (from configuration).
#[derive(Clone, Debug)]
pub struct CheckpointPolicy {
    /// Checkpoints expire this long after they are recorded; `None`: never.
    pub ttl: Option<chrono::Duration>,
    /// Whether a checkpoint may be resumed more than once.
    pub replay_allowed: bool,
}

impl Default for CheckpointPolicy {
    fn default() -> Self {
        CheckpointPolicy {
            ttl: None,
            replay_allowed: true,
        }
    }
}

/// Content of a `run_checkpoint` event Tether records itself.
pub fn checkpoint_content(
    checkpoint_id: &str,
    phase: Phase,
    tool_call_ids: &[String],
    backend: &str,
    policy: &CheckpointPolicy,
    now: DateTime<Utc>,
) -> Value {
    let next_node = match phase {
        Phase::AfterToolCall => Some("tool_result"),
        Phase::AfterToolResult => Some("model"),
        Phase::TurnCompleted => None,
    };
    let terminal = phase == Phase::TurnCompleted;
    json!({
        "checkpoint_id": checkpoint_id,
        "framework": TETHER_FRAMEWORK,
        "phase": phase.as_str(),
        "next_node": next_node,
        "is_resumable": !terminal,
        "is_terminal": terminal,
        "replay_allowed": policy.replay_allowed,
        "expires_at": policy.ttl.map(|ttl| rfc3339(now + ttl)),
        "backend": backend,
        "scope": "session",
        "durable": true,
        "tool_call_ids": tool_call_ids,
    })
}

/// Read-time state of a checkpoint (see the module docs for the rules).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointStatus {
    Active,
    Resumed,
    Disabled,
    Terminal,
    Expired,
}

impl CheckpointStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CheckpointStatus::Active => "active",
            CheckpointStatus::Resumed => "resumed",
            CheckpointStatus::Disabled => "disabled",
            CheckpointStatus::Terminal => "terminal",
            CheckpointStatus::Expired => "expired",
        }
    }

    /// Whether ResumeRun may start from a checkpoint in this state.
    pub fn can_resume(self) -> bool {
        matches!(self, CheckpointStatus::Active | CheckpointStatus::Resumed)
    }
}

/// The state machine itself. `is_resumable` is the effective value (stored flag and no
/// pending tool result).
pub fn checkpoint_status(
    is_terminal: bool,
    is_resumable: bool,
    resume_count: u64,
    expires_at: Option<DateTime<Utc>>,
    replay_allowed: bool,
    now: DateTime<Utc>,
) -> CheckpointStatus {
    if is_terminal {
        CheckpointStatus::Terminal
    } else if expires_at.is_some_and(|at| at <= now) {
        CheckpointStatus::Expired
    } else if !is_resumable || (resume_count > 0 && !replay_allowed) {
        CheckpointStatus::Disabled
    } else if resume_count > 0 {
        CheckpointStatus::Resumed
    } else {
        CheckpointStatus::Active
    }
}

/// One checkpoint as the control API shows it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Checkpoint {
    pub event_id: String,
    pub session_id: String,
    pub invocation_id: Option<String>,
    pub run_id: Option<String>,
    pub seq_id: Seq,
    pub timestamp: String,
    pub checkpoint_id: String,
    pub framework: String,
    pub phase: Option<String>,
    pub is_resumable: bool,
    /// `resumable`, or the status that prevents resuming.
    pub resume_status: &'static str,
    pub is_terminal: bool,
    /// Empty when resumable.
    pub resume_disabled_reason: String,
    pub next_node: Option<String>,
    pub backend: String,
    pub scope: String,
    pub durable: bool,
    pub last_resumed_at: Option<String>,
    pub resume_count: u64,
    pub replay_allowed: bool,
    pub expires_at: Option<String>,
    pub checkpoint_status: CheckpointStatus,
    pub tool_call_ids: Vec<String>,
}

/// Outcome of a tool call as far as the log knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReceiptStatus {
    /// No result recorded yet.
    Pending,
    Succeeded,
    /// A result that says it failed (see [`output_signals_error`]).
    Failed,
}

/// One tool call and its outcome, reconstructed from `tool_call` / `tool_result` events.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ToolReceipt {
    pub event_id: String,
    pub session_id: String,
    pub invocation_id: Option<String>,
    pub seq_id: Seq,
    pub timestamp: String,
    pub receipt_id: String,
    pub idempotency_key: String,
    pub tool_name: String,
    pub tool_call_id: String,
    pub run_id: Option<String>,
    /// The checkpoint recorded after the call in its invocation.
    pub checkpoint_id: Option<String>,
    pub status: ReceiptStatus,
    /// The same call id was already called in an earlier invocation of the run, and this
    /// is a resumed invocation calling it again.
    pub replayed: bool,
    pub metadata: Value,
    /// The recorded result, replayed to the agent on resume instead of re-running the tool.
    #[serde(skip)]
    pub output: Option<String>,
}

/// The control API's id of an event.
pub fn event_id(e: &Event) -> String {
    format!("evt_{}_{}", e.session_id, e.seq)
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// FNV-1a, 64 bit: a stable hash (unlike `DefaultHasher`, the same across builds and
/// processes), which is all an id needs; these are not security tokens.
fn fnv64(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            // A separator, so ("ab", "c") and ("a", "bc") differ.
            h ^= 0xff;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        for b in part.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// A key that is the same whenever the same run makes the same call: run, call id, tool
/// name and arguments (JSON re-serialised, so formatting does not change the key).
pub fn idempotency_key(run_id: &str, call_id: &str, name: &str, arguments: &str) -> String {
    let canonical = serde_json::from_str::<Value>(arguments)
        .map(|v| v.to_string())
        .unwrap_or_else(|_| arguments.to_owned());
    format!("idem_{:016x}", fnv64(&[run_id, call_id, name, &canonical]))
}

/// Whether a tool's output says the tool failed: a JSON object with a non-null `error`,
/// `is_error: true` or `status` `error`/`failed`, or text starting with `error:`.
pub fn output_signals_error(output: &str) -> bool {
    let trimmed = output.trim_start();
    if let Ok(Value::Object(o)) = serde_json::from_str::<Value>(trimmed) {
        return o.get("error").is_some_and(|e| !e.is_null() && e != false)
            || o.get("is_error") == Some(&Value::Bool(true))
            || matches!(
                o.get("status").and_then(Value::as_str),
                Some("error" | "failed")
            );
    }
    let lower = trimmed.get(..6).unwrap_or(trimmed).to_ascii_lowercase();
    lower.starts_with("error:")
}

/// Invocations that are resumes, by invocation id.
fn resumed_invocations(events: &[Event]) -> HashMap<&str, &str> {
    events
        .iter()
        .filter(|e| e.run_status() == Some(RunStatus::InProgress))
        .filter_map(|e| {
            Some((
                e.invocation_id.as_deref()?,
                str_of(&e.metadata, RESUMED_FROM)?,
            ))
        })
        .collect()
}

/// Every tool call of the session, in seq order, with its outcome.
pub fn tool_receipts(events: &[Event]) -> Vec<ToolReceipt> {
    let resumed = resumed_invocations(events);
    let mut receipts = Vec::new();
    for (i, call) in events.iter().enumerate() {
        if call.event_type != EventType::ToolCall {
            continue;
        }
        let c = &call.content;
        let call_id = str_of(c, "call_id").unwrap_or_default();
        let name = str_of(c, "name").unwrap_or_default();
        let arguments = str_of(c, "arguments").unwrap_or_default();
        let run_id = call.run_id.as_deref().unwrap_or_default();
        let later = &events[i + 1..];
        // The result is the first one for this call id before the id is called again
        // (agents reuse ids such as `call_1` from turn to turn).
        let result = later
            .iter()
            .take_while(|e| {
                !(e.event_type == EventType::ToolCall
                    && str_of(&e.content, "call_id") == Some(call_id))
            })
            .find(|e| {
                e.event_type == EventType::ToolResult
                    && str_of(&e.content, "call_id") == Some(call_id)
            });
        let output = result.map(|r| str_of(&r.content, "output").unwrap_or_default().to_owned());
        let status = match &output {
            None => ReceiptStatus::Pending,
            Some(o) if output_signals_error(o) => ReceiptStatus::Failed,
            Some(_) => ReceiptStatus::Succeeded,
        };
        let checkpoint_id = {
            let after: Vec<&Event> = later
                .iter()
                .filter(|e| {
                    e.event_type == EventType::RunCheckpoint
                        && e.invocation_id == call.invocation_id
                })
                .collect();
            let names_call = |e: &&&Event| {
                e.content
                    .get("tool_call_ids")
                    .and_then(Value::as_array)
                    .is_some_and(|ids| ids.iter().any(|id| id.as_str() == Some(call_id)))
            };
            after
                .iter()
                .find(names_call)
                .or_else(|| after.first())
                .and_then(|e| str_of(&e.content, "checkpoint_id").map(str::to_owned))
        };
        let replayed = call
            .invocation_id
            .as_deref()
            .is_some_and(|inv| resumed.contains_key(inv))
            && events[..i].iter().any(|e| {
                e.event_type == EventType::ToolCall
                    && e.run_id == call.run_id
                    && e.invocation_id != call.invocation_id
                    && str_of(&e.content, "call_id") == Some(call_id)
            });
        receipts.push(ToolReceipt {
            event_id: event_id(call),
            session_id: call.session_id.clone(),
            invocation_id: call.invocation_id.clone(),
            seq_id: call.seq,
            timestamp: rfc3339(call.created_at),
            receipt_id: format!(
                "rcpt_{:016x}",
                fnv64(&[&call.session_id, &call.seq.to_string()])
            ),
            idempotency_key: idempotency_key(run_id, call_id, name, arguments),
            tool_name: name.to_owned(),
            tool_call_id: call_id.to_owned(),
            run_id: call.run_id.clone(),
            checkpoint_id,
            status,
            replayed,
            metadata: json!({ "tool_name": name }),
            output,
        });
    }
    receipts
}

/// Every checkpoint of the session, in seq order, with its read-time state.
pub fn checkpoints(events: &[Event], now: DateTime<Utc>) -> Vec<Checkpoint> {
    let receipts = tool_receipts(events);
    let mut resumes: HashMap<&str, (u64, DateTime<Utc>)> = HashMap::new();
    for e in events {
        if e.run_status() != Some(RunStatus::InProgress) {
            continue;
        }
        if let Some(id) = str_of(&e.metadata, RESUMED_FROM) {
            let entry = resumes.entry(id).or_insert((0, e.created_at));
            entry.0 += 1;
            entry.1 = entry.1.max(e.created_at);
        }
    }
    events
        .iter()
        .filter(|e| e.event_type == EventType::RunCheckpoint)
        .map(|e| {
            let c = &e.content;
            let flag = |k: &str, default: bool| c.get(k).and_then(Value::as_bool).unwrap_or(default);
            let checkpoint_id = str_of(c, "checkpoint_id")
                .map(str::to_owned)
                .unwrap_or_else(|| format!("ckpt_{}", event_id(e)));
            let tool_call_ids: Vec<String> = c
                .get("tool_call_ids")
                .and_then(Value::as_array)
                .map(|ids| ids.iter().filter_map(Value::as_str).map(str::to_owned).collect())
                .unwrap_or_default();
            // A call this checkpoint follows must have a result to replay on resume.
            let pending: Vec<&str> = tool_call_ids
                .iter()
                .filter(|id| {
                    receipts
                        .iter()
                        .rev()
                        .find(|r| r.seq_id < e.seq && &r.tool_call_id == *id)
                        .is_some_and(|r| r.status == ReceiptStatus::Pending)
                })
                .map(String::as_str)
                .collect();
            let stored_resumable = flag("is_resumable", false);
            let is_resumable = stored_resumable && pending.is_empty();
            let is_terminal = flag("is_terminal", false);
            let replay_allowed = flag("replay_allowed", true);
            let expires_at = str_of(c, "expires_at")
                .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
                .map(|t| t.with_timezone(&Utc));
            let (resume_count, last_resumed_at) = resumes
                .get(checkpoint_id.as_str())
                .map(|(n, at)| (*n, Some(rfc3339(*at))))
                .unwrap_or((0, None));
            let status = checkpoint_status(
                is_terminal,
                is_resumable,
                resume_count,
                expires_at,
                replay_allowed,
                now,
            );
            let reason = match status {
                CheckpointStatus::Active | CheckpointStatus::Resumed => String::new(),
                CheckpointStatus::Terminal => {
                    "the checkpoint is the end of its run; resume from an earlier checkpoint".into()
                }
                CheckpointStatus::Expired => "the checkpoint has expired".into(),
                CheckpointStatus::Disabled if !pending.is_empty() => format!(
                    "no result has been recorded yet for tool call(s) {}",
                    pending.join(", ")
                ),
                CheckpointStatus::Disabled if !stored_resumable => str_of(c, "resume_disabled_reason")
                    .unwrap_or("the checkpoint is not resumable")
                    .to_owned(),
                CheckpointStatus::Disabled => {
                    "the checkpoint was already resumed and the policy does not allow resuming it again"
                        .into()
                }
            };
            Checkpoint {
                event_id: event_id(e),
                session_id: e.session_id.clone(),
                invocation_id: e.invocation_id.clone(),
                run_id: e.run_id.clone(),
                seq_id: e.seq,
                timestamp: rfc3339(e.created_at),
                checkpoint_id,
                framework: str_of(c, "framework").unwrap_or(TETHER_FRAMEWORK).to_owned(),
                phase: str_of(c, "phase").map(str::to_owned),
                is_resumable,
                resume_status: if status.can_resume() { "resumable" } else { status.as_str() },
                is_terminal,
                resume_disabled_reason: reason,
                next_node: str_of(c, "next_node").map(str::to_owned),
                backend: str_of(c, "backend").unwrap_or("unknown").to_owned(),
                scope: str_of(c, "scope").unwrap_or("session").to_owned(),
                // It is in Tether's durable log, whatever the agent keeps.
                durable: flag("durable", true),
                last_resumed_at,
                resume_count,
                replay_allowed,
                expires_at: expires_at.map(rfc3339),
                checkpoint_status: status,
                tool_call_ids,
            }
        })
        .collect()
}

/// Side-effect risk of resuming: what the receipts after a checkpoint could repeat.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Risk {
    /// `none` (no tool calls after the checkpoint), `low` (only side-effect-free tools),
    /// `medium` (side-effecting tools that succeeded: resuming may repeat them), `high`
    /// (a side-effecting tool whose outcome is failed or unknown).
    pub level: &'static str,
    pub duplicate_side_effect_risk: bool,
    pub side_effect_receipt_count: usize,
    pub failed_receipt_count: usize,
}

/// Assesses `receipts` (those after the checkpoint); `has_side_effects` says which tools
/// change the world.
pub fn resume_risk(receipts: &[ToolReceipt], has_side_effects: impl Fn(&str) -> bool) -> Risk {
    let effectful: Vec<&ToolReceipt> = receipts
        .iter()
        .filter(|r| has_side_effects(&r.tool_name))
        .collect();
    let failed = receipts
        .iter()
        .filter(|r| r.status == ReceiptStatus::Failed)
        .count();
    let level = if receipts.is_empty() {
        "none"
    } else if effectful.is_empty() {
        "low"
    } else if effectful
        .iter()
        .any(|r| r.status != ReceiptStatus::Succeeded)
    {
        "high"
    } else {
        "medium"
    };
    Risk {
        level,
        duplicate_side_effect_risk: !effectful.is_empty(),
        side_effect_receipt_count: effectful.len(),
        failed_receipt_count: failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{run_status_content, NewEvent};

    struct Log {
        events: Vec<Event>,
        t0: DateTime<Utc>,
    }

    impl Log {
        fn new() -> Self {
            Log {
                events: Vec::new(),
                t0: DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
                    .unwrap()
                    .with_timezone(&Utc),
            }
        }

        fn push(&mut self, run: &str, inv: &str, t: EventType, content: Value, meta: Value) {
            let seq = self.events.len() as i64 + 1;
            let new = NewEvent::new("a", "s", t, content)
                .in_run(run, inv)
                .with_metadata(meta);
            self.events.push(Event::committed(
                new,
                seq,
                self.t0 + chrono::Duration::seconds(seq),
            ));
        }

        fn start(&mut self, run: &str, inv: &str, resumed_from: Option<&str>) {
            let meta = match resumed_from {
                Some(id) => json!({ RESUMED_FROM: id }),
                None => json!({}),
            };
            self.push(
                run,
                inv,
                EventType::RunStatus,
                run_status_content(RunStatus::InProgress, None),
                meta,
            );
        }

        fn end(&mut self, run: &str, inv: &str) {
            self.push(
                run,
                inv,
                EventType::RunStatus,
                run_status_content(RunStatus::Completed, None),
                json!({}),
            );
        }

        fn call(&mut self, run: &str, inv: &str, id: &str, name: &str) {
            self.push(
                run,
                inv,
                EventType::ToolCall,
                json!({"call_id": id, "name": name, "arguments": "{\"x\": 1}"}),
                json!({}),
            );
        }

        fn result(&mut self, run: &str, inv: &str, id: &str, output: &str) {
            self.push(
                run,
                inv,
                EventType::ToolResult,
                json!({"call_id": id, "output": output}),
                json!({}),
            );
        }

        fn checkpoint(
            &mut self,
            run: &str,
            inv: &str,
            id: &str,
            phase: Phase,
            calls: &[&str],
            policy: &CheckpointPolicy,
        ) {
            let calls: Vec<String> = calls.iter().map(|c| c.to_string()).collect();
            let content = checkpoint_content(id, phase, &calls, "sqlite", policy, self.t0);
            self.push(run, inv, EventType::RunCheckpoint, content, json!({}));
        }
    }

    /// Two turns, each ending in a tool call whose result the client supplies next.
    fn two_tool_turns(policy: &CheckpointPolicy) -> Log {
        let mut log = Log::new();
        log.start("r1", "i1", None);
        log.call("r1", "i1", "call_1", "search");
        log.checkpoint("r1", "i1", "ck1", Phase::AfterToolCall, &["call_1"], policy);
        log.checkpoint("r1", "i1", "ck2", Phase::TurnCompleted, &[], policy);
        log.end("r1", "i1");
        log.result("r2", "i2", "call_1", "found 3 docs");
        log.start("r2", "i2", None);
        log.checkpoint(
            "r2",
            "i2",
            "ck3",
            Phase::AfterToolResult,
            &["call_1"],
            policy,
        );
        log.call("r2", "i2", "call_1", "write_file");
        log.checkpoint("r2", "i2", "ck4", Phase::AfterToolCall, &["call_1"], policy);
        log.checkpoint("r2", "i2", "ck5", Phase::TurnCompleted, &[], policy);
        log.end("r2", "i2");
        log
    }

    #[test]
    fn the_state_machine() {
        let now = Utc::now();
        let past = Some(now - chrono::Duration::seconds(1));
        let future = Some(now + chrono::Duration::hours(1));
        use CheckpointStatus::*;
        assert_eq!(checkpoint_status(true, true, 0, None, true, now), Terminal);
        assert_eq!(checkpoint_status(true, true, 0, past, true, now), Terminal);
        assert_eq!(checkpoint_status(false, true, 0, past, true, now), Expired);
        assert_eq!(
            checkpoint_status(false, false, 0, future, true, now),
            Disabled
        );
        assert_eq!(
            checkpoint_status(false, true, 1, None, false, now),
            Disabled
        );
        assert_eq!(
            checkpoint_status(false, true, 2, future, true, now),
            Resumed
        );
        assert_eq!(
            checkpoint_status(false, true, 0, future, false, now),
            Active
        );
    }

    #[test]
    fn receipts_pair_calls_with_results_even_when_ids_repeat() {
        let log = two_tool_turns(&CheckpointPolicy::default());
        let receipts = tool_receipts(&log.events);
        assert_eq!(receipts.len(), 2);
        assert_eq!(receipts[0].tool_name, "search");
        assert_eq!(receipts[0].status, ReceiptStatus::Succeeded);
        assert_eq!(receipts[0].output.as_deref(), Some("found 3 docs"));
        assert_eq!(receipts[0].checkpoint_id.as_deref(), Some("ck1"));
        assert_eq!(receipts[0].run_id.as_deref(), Some("r1"));
        assert_eq!(receipts[1].tool_name, "write_file");
        assert_eq!(
            receipts[1].status,
            ReceiptStatus::Pending,
            "the second call has no result yet"
        );
        assert_eq!(receipts[1].checkpoint_id.as_deref(), Some("ck4"));
        assert_ne!(receipts[0].idempotency_key, receipts[1].idempotency_key);
        assert_ne!(receipts[0].receipt_id, receipts[1].receipt_id);
        assert!(!receipts[0].replayed && !receipts[1].replayed);
        assert_eq!(receipts[0].metadata, json!({"tool_name": "search"}));
        // Same run, call and arguments (formatted differently): same key.
        assert_eq!(
            idempotency_key("r1", "call_1", "search", "{\"x\":1}"),
            receipts[0].idempotency_key
        );
    }

    #[test]
    fn failed_outputs_are_detected() {
        assert!(output_signals_error("{\"error\": \"disk full\"}"));
        assert!(output_signals_error("{\"is_error\": true}"));
        assert!(output_signals_error("Error: no such file"));
        assert!(!output_signals_error("{\"error\": null, \"ok\": 1}"));
        assert!(!output_signals_error("errors fixed: 0"));
        assert!(!output_signals_error("é"));
    }

    #[test]
    fn descriptors_and_resume_counts() {
        let policy = CheckpointPolicy::default();
        let mut log = two_tool_turns(&policy);
        let now = log.t0 + chrono::Duration::hours(1);
        let before = checkpoints(&log.events, now);
        let status: Vec<_> = before
            .iter()
            .map(|c| (c.checkpoint_id.as_str(), c.checkpoint_status))
            .collect();
        use CheckpointStatus::*;
        assert_eq!(
            status,
            [
                ("ck1", Active),
                ("ck2", Terminal),
                ("ck3", Active),
                ("ck4", Disabled),
                ("ck5", Terminal)
            ]
        );
        assert!(before[3].resume_disabled_reason.contains("call_1"));
        assert_eq!(before[3].resume_status, "disabled");
        assert_eq!(before[0].resume_status, "resumable");
        assert_eq!(before[0].framework, "tether");
        assert_eq!(before[0].next_node.as_deref(), Some("tool_result"));
        assert_eq!(before[0].backend, "sqlite");
        assert!(before[0].durable && before[0].replay_allowed && before[0].expires_at.is_none());

        // Resume ck1 twice: a new invocation of r1 that calls call_1 again.
        log.push(
            "r1",
            "i3",
            EventType::Message,
            json!({"text": "again"}),
            json!({}),
        );
        log.start("r1", "i3", Some("ck1"));
        log.call("r1", "i3", "call_1", "search");
        log.end("r1", "i3");
        log.start("r1", "i4", Some("ck1"));
        log.end("r1", "i4");
        let after = checkpoints(&log.events, now);
        assert_eq!(after[0].resume_count, 2);
        assert_eq!(after[0].checkpoint_status, Resumed);
        assert_eq!(
            after[0].last_resumed_at,
            Some(rfc3339(log.events[log.events.len() - 2].created_at))
        );
        assert_eq!(after[2].resume_count, 0);
        let receipts = tool_receipts(&log.events);
        assert!(
            receipts.last().unwrap().replayed,
            "call_1 again in a resume of r1"
        );
        assert!(!receipts[1].replayed);
    }

    #[test]
    fn policy_expiry_and_replay() {
        let policy = CheckpointPolicy {
            ttl: Some(chrono::Duration::minutes(5)),
            replay_allowed: false,
        };
        let mut log = two_tool_turns(&policy);
        let soon = log.t0 + chrono::Duration::minutes(1);
        let cps = checkpoints(&log.events, soon);
        assert_eq!(cps[0].checkpoint_status, CheckpointStatus::Active);
        assert!(cps[0].expires_at.is_some());
        log.start("r1", "i3", Some("ck1"));
        log.end("r1", "i3");
        let cps = checkpoints(&log.events, soon);
        assert_eq!(cps[0].checkpoint_status, CheckpointStatus::Disabled);
        assert!(cps[0].resume_disabled_reason.contains("already resumed"));
        let late = log.t0 + chrono::Duration::minutes(10);
        assert_eq!(
            checkpoints(&log.events, late)[2].checkpoint_status,
            CheckpointStatus::Expired
        );
    }

    #[test]
    fn agent_checkpoints_keep_their_framework() {
        let mut log = Log::new();
        log.start("r1", "i1", None);
        log.push(
            "r1",
            "i1",
            EventType::RunCheckpoint,
            json!({"checkpoint_id": "lg_1", "framework": "langgraph", "is_resumable": true, "next_node": "summarize", "backend": "langgraph_store"}),
            json!({}),
        );
        let cps = checkpoints(&log.events, Utc::now());
        assert_eq!(cps[0].framework, "langgraph");
        assert_eq!(cps[0].backend, "langgraph_store");
        assert_eq!(cps[0].checkpoint_status, CheckpointStatus::Active);
    }

    #[test]
    fn risk_levels() {
        let log = two_tool_turns(&CheckpointPolicy::default());
        let receipts = tool_receipts(&log.events);
        let all = |_: &str| true;
        assert_eq!(resume_risk(&[], all).level, "none");
        let search_only = &receipts[..1];
        assert_eq!(resume_risk(search_only, all).level, "medium");
        let free = resume_risk(search_only, |t| t != "search");
        assert_eq!(free.level, "low");
        assert!(!free.duplicate_side_effect_risk);
        let both = resume_risk(&receipts, all);
        assert_eq!(both.level, "high", "write_file's outcome is unknown");
        assert_eq!(both.side_effect_receipt_count, 2);
        assert_eq!(both.failed_receipt_count, 0);
    }
}
