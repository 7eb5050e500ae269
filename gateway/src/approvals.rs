//! Approvals: a request a run ended waiting on (its `requires_action` status, recorded
//! as pending by the run manager) resolved by a person (`ResolveApproval`) or by the
//! timeout sweeper, and the answer sent to the agent in its own protocol as a new run
//! of the session (restoring the session first if the agent forgot it, as any turn does).

use std::sync::Arc;

use runtime_adapter::approval::{answer, Resolution};
use runtime_adapter::{surface, ClientRequest, Protocol, Route};
use serde_json::{json, Value};
use session_log::{Approval, Decision, EventType, Hub, NewEvent, Store, StoreError, Subscription};

use crate::config::{ApprovalsConfig, OnTimeout};
use crate::ids::new_id;
use crate::runs::{Runs, Seen, Start, StartError};

/// Why a request could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The account has no such request.
    #[error("approval request {0:?} not found")]
    NotFound(String),
    /// Someone (or the timeout) resolved it first.
    #[error("approval request {:?} is already resolved ({})", .0.request_id, .0.decision.map_or("", Decision::as_str))]
    AlreadyResolved(Box<Approval>),
    /// The answer cannot be given so (edited arguments the agent's protocol cannot carry).
    #[error("{0}")]
    Invalid(String),
    /// The session cannot take the answer's run now; nothing was resolved.
    #[error("{0}")]
    Busy(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Resolved and recorded, but the answer's run did not start.
    #[error("the request is resolved, but the answer's run did not start: {0}")]
    NotSent(StartError),
}

/// What a resolve did.
pub struct Resolved {
    pub approval: Approval,
    /// The `approval_resolved` event's seq.
    pub seq: Option<i64>,
    /// The answer's run: (run id, invocation id).
    pub run: (String, String),
}

/// A person's (or the timeout's) answer.
pub struct Answer {
    pub decision: Decision,
    pub arguments: Option<Value>,
    pub comment: Option<String>,
    /// Who answered: `{"account_id", "credential"}`, or `{"timeout": true}`.
    pub by: Value,
}

/// What resolving needs of the gateway.
#[derive(Clone)]
pub struct Approvals {
    pub store: Arc<dyn Store>,
    pub hub: Hub,
    pub runs: Arc<Runs>,
    pub writer: session_log::Writer,
    /// The agent's protocol: the answer is written in it.
    pub protocol: Protocol,
}

impl Approvals {
    /// Resolves a pending request of the account and sends the answer. Exactly one of
    /// any number of concurrent resolvers (on any replica) gets past the store's
    /// conditional update; the others get `AlreadyResolved`.
    pub async fn resolve(
        &self,
        account_id: &str,
        session_id: &str,
        request_id: &str,
        a: Answer,
    ) -> Result<Resolved, ResolveError> {
        let Some(pending) = self
            .store
            .approval(account_id, session_id, request_id)
            .await?
        else {
            return Err(ResolveError::NotFound(request_id.to_owned()));
        };
        if pending.decision.is_some() {
            return Err(ResolveError::AlreadyResolved(Box::new(pending)));
        }
        // What the agent will be sent is checked before anything changes.
        let resolution = Resolution {
            approve: a.decision == Decision::Approve,
            arguments: a.arguments.as_ref(),
            comment: a.comment.as_deref(),
        };
        answer(session_id, &pending.action, &resolution).map_err(ResolveError::Invalid)?;
        if self.runs.running_in_session(account_id, session_id) {
            return Err(ResolveError::Busy(format!(
                "session {session_id:?} has a run in progress; resolve once it ends"
            )));
        }
        let mut record = json!({ "by": a.by });
        if let Some(args) = &a.arguments {
            record["arguments"] = args.clone();
        }
        if let Some(c) = &a.comment {
            record["comment"] = json!(c);
        }
        let won = self
            .store
            .resolve_approval(
                account_id,
                session_id,
                request_id,
                a.decision,
                &record,
                chrono::Utc::now(),
            )
            .await?;
        let Some(approval) = won else {
            let now = self
                .store
                .approval(account_id, session_id, request_id)
                .await?
                .ok_or_else(|| ResolveError::NotFound(request_id.to_owned()))?;
            return Err(ResolveError::AlreadyResolved(Box::new(now)));
        };
        Box::pin(self.deliver(approval, &resolution)).await
    }

    /// Records a resolution this replica won and starts the answer's run.
    async fn deliver(
        &self,
        approval: Approval,
        resolution: &Resolution<'_>,
    ) -> Result<Resolved, ResolveError> {
        let (account_id, session_id) = (&approval.account_id, &approval.session_id);
        let mut content = json!({
            "request_id": approval.request_id,
            "run_id": approval.invocation_id,
            "decision": approval.decision.map_or("reject", Decision::as_str),
        });
        let record = approval.resolution.clone().unwrap_or(Value::Null);
        for key in ["arguments", "comment"] {
            if let Some(v) = record.get(key) {
                content[key] = v.clone();
            }
        }
        content["by"] = match record.get("timeout") {
            Some(_) => json!({ "timeout": true }),
            None => record.get("by").cloned().unwrap_or(Value::Null),
        };
        let event = NewEvent::new(account_id, session_id, EventType::ApprovalResolved, content)
            .with_metadata(json!({ "waiting_run_id": approval.run_id }));
        let committed = self
            .writer
            .append(vec![event])
            .await
            .map_err(|e| ResolveError::NotSent(StartError::Write(e)))?;
        let seq = committed.first().map(|e| e.seq);
        tracing::info!(
            account_id = %account_id, session_id = %session_id, request_id = %approval.request_id,
            decision = approval.decision.map_or("", Decision::as_str), "approval resolved"
        );
        // The waiting run's end may still be being written (its request is listed just
        // before): the session is busy for that moment.
        let mut tries = 0;
        let (run, _events) = loop {
            let turn = self
                .answer_turn(&approval, resolution)
                .map_err(ResolveError::Invalid)?;
            let follow =
                Subscription::before_append(self.store.clone(), &self.hub, account_id, session_id);
            let start = self.runs.start(Box::new(Start {
                account_id: account_id.to_owned(),
                session_id: session_id.to_owned(),
                run_id: new_id("run"),
                turn,
                follow,
                seen: Seen::Unread,
                resume: None,
            }));
            match Box::pin(start).await {
                Ok(started) => break started,
                Err(StartError::SessionBusy(_)) if tries < 50 => {
                    tries += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                Err(e) => return Err(ResolveError::NotSent(e)),
            }
        };
        Ok(Resolved {
            approval,
            seq,
            run: (run.run_id, run.invocation_id),
        })
    }

    /// The answer as a turn: the request a client of the agent's protocol would send,
    /// read by that protocol's surface.
    fn answer_turn(
        &self,
        approval: &Approval,
        resolution: &Resolution<'_>,
    ) -> Result<runtime_adapter::TurnRequest, String> {
        let request = answer(&approval.session_id, &approval.action, resolution)?;
        let body = request.body.to_string();
        let mut headers = vec![("content-type", "application/json")];
        if let Some(s) = request.session_header.as_deref() {
            headers.push(("x-session-id", s));
        }
        let protocol = Protocol::parse(approval.action["protocol"].as_str().unwrap_or_default())
            .unwrap_or(self.protocol);
        let client = ClientRequest {
            method: request.method,
            path: &request.path,
            query: None,
            headers: &headers,
            body: body.as_bytes(),
            account_id: &approval.account_id,
        };
        match surface(protocol).route(&client) {
            Route::Run(turn) | Route::RunInTask { turn, .. } => Ok(turn),
            Route::Reply { status, body } => Err(format!(
                "the answer could not be written in the agent's protocol ({status}): {body}"
            )),
            _ => Err("the answer is not a turn in the agent's protocol".into()),
        }
    }

    /// Resolves, on this replica, the requests whose time ran out (each exactly once
    /// across replicas: the store's conditional update decides who), and sends each
    /// answer. Returns how many this replica resolved.
    pub async fn sweep(&self, on_timeout: OnTimeout) -> Result<usize, StoreError> {
        let decision = match on_timeout {
            OnTimeout::Leave => return Ok(0),
            OnTimeout::Approve => Decision::Approve,
            OnTimeout::Reject => Decision::Reject,
        };
        let expired = self
            .store
            .resolve_expired_approvals(chrono::Utc::now(), decision)
            .await?;
        let count = expired.len();
        for approval in expired {
            let resolution = Resolution {
                approve: decision == Decision::Approve,
                arguments: None,
                comment: None,
            };
            let request_id = approval.request_id.clone();
            if let Err(error) = Box::pin(self.deliver(approval, &resolution)).await {
                tracing::error!(%error, request_id, "a timed-out approval's answer was not sent");
            }
        }
        Ok(count)
    }

    /// The timeout sweeper: every `config.sweep_interval`, resolves what timed out.
    pub async fn keep(self, config: ApprovalsConfig) {
        let mut tick = tokio::time::interval(config.sweep_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            match self.sweep(config.on_timeout).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(resolved = n, "timed-out approvals resolved"),
                Err(error) => tracing::warn!(%error, "approval sweep failed; trying again"),
            }
        }
    }
}
