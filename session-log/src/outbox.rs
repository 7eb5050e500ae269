//! The webhook outbox: which committed events tell a receiver something (a run ended, an
//! approval was asked for or answered, a session went idle), the payload each sends, and
//! the delivery rows the store keeps for them.
//!
//! An outbox row is written in the transaction that commits the event causing it (one row
//! per subscribed endpoint), so an event is never committed without its deliveries, nor
//! the other way round, whatever restarts or outages follow. Delivery workers claim due
//! rows under a lease (one replica at a time per row), post them and record the outcome.
//!
//! Every webhook event has an id derived from what caused it (the account, the kind, and
//! the invocation or approval request), never from where or when it was written: the same
//! event written twice (a journal backfill retried) is one row, and a receiver drops a
//! repeated delivery by that id.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::event::{EventType, NewEvent, RunStatus};

/// The kinds of webhook events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A run ended `requires_action`: it waits for a person.
    ApprovalRequested,
    /// An approval request was answered (by a person or a timeout).
    ApprovalResolved,
    /// A run ended `completed`.
    RunCompleted,
    /// A run ended `failed` or `interrupted` (not `cancelled`: someone asked for that).
    RunFailed,
    /// A run ended (whatever its status) and its session has no run in progress left:
    /// the session waits for its next input.
    SessionIdle,
}

impl Kind {
    pub const ALL: [Kind; 5] = [
        Kind::ApprovalRequested,
        Kind::ApprovalResolved,
        Kind::RunCompleted,
        Kind::RunFailed,
        Kind::SessionIdle,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::ApprovalRequested => "approval.requested",
            Kind::ApprovalResolved => "approval.resolved",
            Kind::RunCompleted => "run.completed",
            Kind::RunFailed => "run.failed",
            Kind::SessionIdle => "session.idle",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// Where the events of some kinds go: one configured endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// The endpoint's name, which its outbox rows carry.
    pub endpoint: String,
    pub kinds: Vec<Kind>,
    /// Only events of these accounts, when set.
    pub accounts: Option<Vec<String>>,
}

impl Route {
    fn takes(&self, kind: Kind, account_id: &str) -> bool {
        self.kinds.contains(&kind)
            && self
                .accounts
                .as_ref()
                .is_none_or(|a| a.iter().any(|a| a == account_id))
    }
}

/// The event an outbox row is made from: a committed (or committing) event's fields.
#[derive(Clone, Copy, Debug)]
pub struct Cause<'a> {
    pub account_id: &'a str,
    pub session_id: &'a str,
    pub run_id: Option<&'a str>,
    pub invocation_id: Option<&'a str>,
    pub event_type: EventType,
    pub content: &'a Value,
}

/// A `Cause` from an event before or after its commit (their fields are the same).
macro_rules! cause_from {
    ($event:ty) => {
        impl<'a> From<&'a $event> for Cause<'a> {
            fn from(e: &'a $event) -> Self {
                Cause {
                    account_id: &e.account_id,
                    session_id: &e.session_id,
                    run_id: e.run_id.as_deref(),
                    invocation_id: e.invocation_id.as_deref(),
                    event_type: e.event_type,
                    content: &e.content,
                }
            }
        }
    };
}
cause_from!(NewEvent);
cause_from!(crate::event::Event);

/// Whether an event of this type and content may cause webhook events (cheap: the append
/// path asks it of every event).
pub fn may_cause(event_type: EventType, content: &Value) -> bool {
    match event_type {
        EventType::ApprovalResolved => true,
        EventType::RunStatus => content
            .get("status")
            .and_then(Value::as_str)
            .and_then(RunStatus::parse)
            .is_some_and(RunStatus::is_terminal),
        _ => false,
    }
}

/// One outbox row to write: a webhook event for one endpoint.
#[derive(Clone, Debug, PartialEq)]
pub struct Outgoing {
    pub endpoint: String,
    pub event_id: String,
    pub kind: Kind,
    pub account_id: String,
    pub session_id: String,
    pub run_id: Option<String>,
    /// The exact body every delivery attempt sends.
    pub payload: String,
    /// Written only if the session has no run in progress once the cause is applied
    /// (`session.idle`).
    pub if_idle: bool,
    /// Runs that check passes over: opened after the cause in the same write (a journal
    /// backfill that ends one run and opens the next), so not in progress when it ended.
    pub idle_except: Vec<String>,
    pub created_ms: i64,
}

/// The outbox rows `cause`, committed at `at`, makes for `routes`. A terminal status must
/// be one the store kept (it closed its invocation).
pub fn outgoing(routes: &[Route], cause: Cause<'_>, at: DateTime<Utc>) -> Vec<Outgoing> {
    if routes.is_empty() {
        return Vec::new();
    }
    let mut events = Vec::new();
    match cause.event_type {
        EventType::RunStatus => {
            let Some(invocation_id) = cause.invocation_id else {
                return Vec::new();
            };
            let Some(status) = cause
                .content
                .get("status")
                .and_then(Value::as_str)
                .and_then(RunStatus::parse)
                .filter(|s| s.is_terminal())
            else {
                return Vec::new();
            };
            let data = run_data(&cause, status);
            let kind = match status {
                RunStatus::Completed => Some(Kind::RunCompleted),
                RunStatus::Failed | RunStatus::Interrupted => Some(Kind::RunFailed),
                RunStatus::RequiresAction => Some(Kind::ApprovalRequested),
                RunStatus::Cancelled | RunStatus::InProgress => None,
            };
            if let Some(kind) = kind {
                let mut data = data.clone();
                if let Some(reason) = cause.content.get("reason").filter(|r| r.is_string()) {
                    data.insert("reason".into(), reason.clone());
                }
                if kind == Kind::ApprovalRequested {
                    data.insert("action".into(), action_summary(cause.content));
                }
                events.push((kind, invocation_id, cause.run_id, data, false));
            }
            events.push((Kind::SessionIdle, invocation_id, cause.run_id, data, true));
        }
        EventType::ApprovalResolved => {
            let c = cause.content;
            let Some(request_id) = c.get("request_id").and_then(Value::as_str) else {
                return Vec::new();
            };
            let mut data = Map::new();
            data.insert("account_id".into(), json!(cause.account_id));
            data.insert("session_id".into(), json!(cause.session_id));
            let run_id = c.get("run_id").and_then(Value::as_str).or(cause.run_id);
            data.insert("run_id".into(), json!(run_id));
            data.insert("request_id".into(), json!(request_id));
            for key in ["decision", "by"] {
                if let Some(v) = c.get(key) {
                    data.insert(key.into(), v.clone());
                }
            }
            events.push((Kind::ApprovalResolved, request_id, run_id, data, false));
        }
        _ => {}
    }
    let timestamp = at.to_rfc3339_opts(SecondsFormat::Millis, true);
    let mut rows = Vec::new();
    for (kind, key, run_id, data, if_idle) in events {
        let event_id = event_id(cause.account_id, kind, key);
        let payload = json!({
            "id": event_id,
            "type": kind.as_str(),
            "timestamp": timestamp,
            "data": data,
        })
        .to_string();
        for route in routes.iter().filter(|r| r.takes(kind, cause.account_id)) {
            rows.push(Outgoing {
                endpoint: route.endpoint.clone(),
                event_id: event_id.clone(),
                kind,
                account_id: cause.account_id.to_owned(),
                session_id: cause.session_id.to_owned(),
                run_id: run_id.map(str::to_owned),
                payload: payload.clone(),
                if_idle,
                idle_except: Vec::new(),
                created_ms: at.timestamp_millis(),
            });
        }
    }
    rows
}

/// The ids and status every run event carries.
fn run_data(cause: &Cause<'_>, status: RunStatus) -> Map<String, Value> {
    let mut data = Map::new();
    data.insert("account_id".into(), json!(cause.account_id));
    data.insert("session_id".into(), json!(cause.session_id));
    data.insert("run_id".into(), json!(cause.run_id));
    data.insert("invocation_id".into(), json!(cause.invocation_id));
    data.insert("status".into(), json!(status.as_str()));
    data
}

/// What a waiting run asks, without its arguments (a receiver reads those, if it may,
/// through `ListPendingApprovals`).
fn action_summary(content: &Value) -> Value {
    let mut summary = Map::new();
    if let Some(action) = content.get("action").and_then(Value::as_object) {
        for key in ["kind", "request_id", "tool"] {
            if let Some(v) = action.get(key) {
                summary.insert(key.into(), v.clone());
            }
        }
    }
    Value::Object(summary)
}

/// The stable id of a webhook event: `msg_` and 32 hex digits of SHA-256 over what makes
/// it unique (an invocation ends once; a request is resolved once).
fn event_id(account_id: &str, kind: Kind, key: &str) -> String {
    let mut hash = Sha256::new();
    for part in [account_id, kind.as_str(), key] {
        hash.update(part.as_bytes());
        hash.update([0]);
    }
    let digest = hash.finalize();
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("msg_{hex}")
}

/// Where a delivery stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeliveryStatus {
    /// Not delivered yet: due at `next_attempt`.
    Pending,
    /// The receiver answered 2xx.
    Delivered,
    /// Every attempt failed; no more are made.
    Failed,
}

impl DeliveryStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "pending",
            DeliveryStatus::Delivered => "delivered",
            DeliveryStatus::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<DeliveryStatus> {
        [
            DeliveryStatus::Pending,
            DeliveryStatus::Delivered,
            DeliveryStatus::Failed,
        ]
        .into_iter()
        .find(|d| d.as_str() == s)
    }
}

/// A row a worker claimed: deliver it, then record the attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claimed {
    pub event_id: String,
    pub kind: String,
    pub payload: String,
    /// Attempts made before this one.
    pub attempts: i64,
}

/// What one delivery attempt came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    pub at_ms: i64,
    /// `Pending` to retry at `next_attempt_ms`, `Delivered`, or `Failed` for good.
    pub status: DeliveryStatus,
    pub next_attempt_ms: i64,
    pub status_code: Option<i64>,
    pub error: Option<String>,
}

/// Which deliveries of an account to list, newest first.
#[derive(Clone, Debug, Default)]
pub struct DeliveryQuery {
    pub account_id: String,
    pub kind: Option<String>,
    pub status: Option<String>,
    pub session_id: Option<String>,
    pub offset: i64,
    pub limit: i64,
}

/// One delivery (an event to one endpoint) as listed.
#[derive(Clone, Debug, PartialEq)]
pub struct Delivery {
    pub endpoint: String,
    pub event_id: String,
    pub kind: String,
    pub account_id: String,
    pub session_id: String,
    pub run_id: Option<String>,
    pub status: String,
    pub attempts: i64,
    pub created_at: DateTime<Utc>,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub last_attempt_at: Option<DateTime<Utc>>,
    pub last_status_code: Option<i64>,
    pub last_error: Option<String>,
    pub delivered_at: Option<DateTime<Utc>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::run_status_content;

    fn routes() -> Vec<Route> {
        vec![
            Route {
                endpoint: "all".into(),
                kinds: Kind::ALL.to_vec(),
                accounts: None,
            },
            Route {
                endpoint: "failures-of-b".into(),
                kinds: vec![Kind::RunFailed],
                accounts: Some(vec!["b".into()]),
            },
        ]
    }

    fn status(account: &str, status: RunStatus, action: Option<Value>) -> NewEvent {
        let mut content = run_status_content(status, Some("agent_error"));
        if let Some(a) = action {
            content["action"] = a;
        }
        NewEvent::new(account, "s1", EventType::RunStatus, content).in_run("r1", "i1")
    }

    #[test]
    fn a_run_end_makes_its_event_and_session_idle_for_each_route() {
        let at = Utc::now();
        let failed = status("b", RunStatus::Failed, None);
        let rows = outgoing(&routes(), (&failed).into(), at);
        let got: Vec<(&str, Kind, bool)> = rows
            .iter()
            .map(|r| (r.endpoint.as_str(), r.kind, r.if_idle))
            .collect();
        assert_eq!(
            got,
            vec![
                ("all", Kind::RunFailed, false),
                ("failures-of-b", Kind::RunFailed, false),
                ("all", Kind::SessionIdle, true),
            ]
        );
        // One id per event whatever the endpoint, and stable.
        assert_eq!(rows[0].event_id, rows[1].event_id);
        assert_ne!(rows[0].event_id, rows[2].event_id);
        assert_eq!(
            rows[0].event_id,
            outgoing(&routes(), (&failed).into(), at)[0].event_id
        );
        let body: Value = serde_json::from_str(&rows[0].payload).unwrap();
        assert_eq!(body["type"], "run.failed");
        assert_eq!(body["id"], json!(rows[0].event_id));
        assert_eq!(body["data"]["run_id"], "r1");
        assert_eq!(body["data"]["reason"], "agent_error");
        // Another account's failure does not go to the endpoint of `b`.
        let a = status("a", RunStatus::Failed, None);
        assert_eq!(outgoing(&routes(), (&a).into(), at).len(), 2);
        // A cancel says only that the session is idle.
        let c = status("a", RunStatus::Cancelled, None);
        let kinds: Vec<Kind> = outgoing(&routes(), (&c).into(), at)
            .iter()
            .map(|r| r.kind)
            .collect();
        assert_eq!(kinds, vec![Kind::SessionIdle]);
    }

    #[test]
    fn an_approval_request_carries_a_summary_without_arguments() {
        let action = json!({"kind": "tool_approval", "request_id": "req-1", "tool": "rm",
                            "arguments": {"path": "/"}});
        let e = status("a", RunStatus::RequiresAction, Some(action));
        let rows = outgoing(&routes(), (&e).into(), Utc::now());
        let body: Value = serde_json::from_str(&rows[0].payload).unwrap();
        assert_eq!(body["type"], "approval.requested");
        assert_eq!(
            body["data"]["action"],
            json!({"kind": "tool_approval", "request_id": "req-1", "tool": "rm"})
        );
        let resolved = NewEvent::new(
            "a",
            "s1",
            EventType::ApprovalResolved,
            json!({"request_id": "req-1", "run_id": "r1", "decision": "approve",
                   "arguments": {"path": "/tmp"}, "comment": "ok", "by": {"subject": "ann"}}),
        );
        let rows = outgoing(&routes(), (&resolved).into(), Utc::now());
        assert_eq!(rows.len(), 1);
        let body: Value = serde_json::from_str(&rows[0].payload).unwrap();
        assert_eq!(
            body["data"],
            json!({"account_id": "a", "session_id": "s1", "run_id": "r1",
                   "request_id": "req-1", "decision": "approve", "by": {"subject": "ann"}})
        );
        assert!(outgoing(&[], (&resolved).into(), Utc::now()).is_empty());
    }
}
