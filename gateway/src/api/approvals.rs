//! Approval actions of the control API: `ListPendingApprovals` (what the account's runs
//! ended waiting on, oldest first) and `ResolveApproval` (a person's answer, sent to the
//! agent in its own protocol; see `crate::approvals`).

use chrono::SecondsFormat;
use serde::Deserialize;
use serde_json::{json, Value};
use session_log::{Approval, ApprovalFilter, Decision};

use super::feedback::comment_param;
use super::{id_param, ActionResult, Call, ControlError};
use crate::approvals::{Answer, ResolveError};
use crate::core::on_core;

const DEFAULT_LIMIT: i64 = 50;
const MAX_LIMIT: i64 = 200;

fn time(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// One approval as the actions show it.
pub fn approval_json(a: &Approval) -> Value {
    let resolution = a.resolution.as_ref();
    json!({
        "SessionId": a.session_id,
        "RequestId": a.request_id,
        "RunId": a.run_id,
        "InvocationId": a.invocation_id,
        "AgentId": a.agent_id,
        "Kind": a.kind,
        "Tool": a.action.get("tool"),
        "Arguments": a.action.get("arguments"),
        "Question": a.action.get("question"),
        "Protocol": a.action.get("protocol"),
        "Action": a.action,
        "RequestedAt": time(a.requested_at),
        "ExpiresAt": a.expires_at.map(time),
        "Status": a.decision.map_or("pending", |_| "resolved"),
        "Decision": a.decision.map(Decision::as_str),
        "ResolvedAt": a.resolved_at.map(time),
        "ResolvedBy": resolution.and_then(|r| r.get("by").cloned().or_else(|| r.get("timeout").map(|_| json!({"timeout": true})))),
    })
}

/// `ListPendingApprovals` (`{"SessionId"?, "AgentId"?, "Offset", "Limit"}`).
pub async fn list(call: &Call<'_>) -> ActionResult {
    #[derive(Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Params {
        #[serde(default)]
        session_id: Option<String>,
        #[serde(default)]
        agent_id: Option<String>,
        #[serde(flatten)]
        paging: super::Paging,
    }
    let p: Params = call.params()?;
    let (offset, limit) = p.paging.resolve(DEFAULT_LIMIT, MAX_LIMIT)?;
    super::listed_session(call, p.session_id.as_deref()).await?;
    let store = &call.state.store;
    let filter = ApprovalFilter {
        session_id: p.session_id.as_deref(),
        agent_id: p.agent_id.as_deref(),
    };
    let (approvals, total) = store
        .list_pending_approvals(call.account_id, filter, offset, limit)
        .await?;
    Ok(json!({
        "Approvals": approvals.iter().map(approval_json).collect::<Vec<_>>(),
        "Total": total,
        "Offset": offset,
        "Limit": limit,
    }))
}

/// `ResolveApproval` (`{"SessionId", "RequestId", "Decision": "approve"|"reject",
/// "Arguments"?, "Comment"?}`): resolves the request as the caller and starts the answer's
/// run.
pub async fn resolve(call: &Call<'_>) -> ActionResult {
    #[derive(Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Params {
        session_id: String,
        request_id: String,
        decision: String,
        #[serde(default)]
        arguments: Option<Value>,
        #[serde(default)]
        comment: Option<String>,
    }
    let p: Params = call.params()?;
    id_param("SessionId", &p.session_id)?;
    super::non_empty("RequestId", &p.request_id)?;
    let decision = Decision::parse(&p.decision).ok_or_else(|| {
        ControlError::bad_request(format!(
            "Decision must be \"approve\" or \"reject\", not {:?}",
            p.decision
        ))
    })?;
    let comment = comment_param(p.comment)?;
    let arguments = p.arguments.filter(|a| !a.is_null());
    if arguments.as_ref().is_some_and(|a| !a.is_object()) {
        return Err(ControlError::bad_request("Arguments must be a JSON object"));
    }
    let answer = Answer {
        decision,
        arguments,
        comment,
        by: json!({ "account_id": call.account_id, "credential": call.credential_id }),
    };
    let approvals = call.state.approvals.clone();
    let (account, session, request) = (
        call.account_id.to_owned(),
        p.session_id.clone(),
        p.request_id.clone(),
    );
    let resolving: std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send>> =
        Box::pin(async move {
            approvals
                .resolve(&account, &session, &request, answer)
                .await
        });
    let resolved = on_core(&call.state.core, resolving).await;
    match resolved {
        Ok(r) => {
            let mut data = approval_json(&r.approval);
            data["EventSeqId"] = json!(r.seq);
            data["AnswerRunId"] = json!(r.run.0);
            data["AnswerInvocationId"] = json!(r.run.1);
            if let Some(res) = &r.approval.resolution {
                data["ResolvedArguments"] = res.get("arguments").cloned().unwrap_or(Value::Null);
                data["Comment"] = res.get("comment").cloned().unwrap_or(Value::Null);
            }
            Ok(data)
        }
        Err(ResolveError::NotFound(id)) => Err(ControlError::not_found("approval request", &id)),
        Err(ResolveError::AlreadyResolved(a)) => {
            let message = format!(
                "approval request {:?} is already resolved ({})",
                a.request_id,
                a.decision.map_or("", Decision::as_str)
            );
            let mut data = approval_json(&a);
            data["code"] = json!("approval_resolved");
            Err(ControlError::conflict(message, data))
        }
        Err(ResolveError::Invalid(m)) => Err(ControlError::bad_request(m)),
        Err(ResolveError::Busy(m)) => {
            Err(ControlError::conflict(m, json!({ "code": "session_busy" })))
        }
        Err(ResolveError::Store(e)) => Err(ControlError::unavailable(e)),
        Err(e @ ResolveError::NotSent(_)) => Err(ControlError::unavailable(e)),
    }
}
