//! Hard deletion: `DeleteSession`, `DeleteUserData`, `DeleteAccountData`. The store
//! removes the rows and writes the audit row in one transaction (rules in
//! `session_log::removal`); this module maps its answer to the envelope, removes the
//! account's workspace files, and counts what went in the `tether_deleted_*` metrics.
//! Unlike the surfaces' own deletes (ADK, LangGraph, the Conversations API), which hide a
//! session and keep its log, nothing of what these remove can be read back.

use std::path::Path;

use serde::Deserialize;
use serde_json::{json, Value};
use session_log::{Deletion, Removal, Removed, Scope};

use super::{id_param, non_empty, ActionResult, Call, ControlError};
use crate::ids::new_id;
use crate::metrics::METRICS;

/// How long a client waits before retrying a delete the outage journal refused: the
/// journal's probe looks for PostgreSQL about this often.
const JOURNALED_RETRY_SECONDS: u64 = 5;

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DeleteSession {
    session_id: String,
}

/// `DeleteSession` (`{"SessionId"}`): the session and everything of it.
pub async fn delete_session(call: &Call<'_>) -> ActionResult {
    let p: DeleteSession = call.params()?;
    id_param("SessionId", &p.session_id)?;
    remove(call, Scope::Session(p.session_id)).await
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DeleteUserData {
    user_id: String,
}

/// `DeleteUserData` (`{"UserId"}`): every session whose events name the user id, with
/// their forks.
pub async fn delete_user_data(call: &Call<'_>) -> ActionResult {
    let p: DeleteUserData = call.params()?;
    non_empty("UserId", &p.user_id)?;
    remove(call, Scope::User(p.user_id)).await
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DeleteAccountData {
    /// The caller's own account id, repeated: a wipe is never one mistyped action away.
    account_id: String,
}

/// `DeleteAccountData` (`{"AccountId"}`, the caller's own): everything of the account.
pub async fn delete_account_data(call: &Call<'_>) -> ActionResult {
    let p: DeleteAccountData = call.params()?;
    if p.account_id != call.account_id {
        let mut e = ControlError::bad_request(
            "AccountId must repeat the caller's own account id (a confirmation)",
        );
        e.data = json!({ "Field": "AccountId" });
        return Err(e);
    }
    remove(call, Scope::Account).await
}

async fn remove(call: &Call<'_>, scope: Scope) -> ActionResult {
    let removal = Removal {
        deletion_id: new_id("del"),
        account_id: call.account_id.to_owned(),
        scope,
        by: call.credential_id.to_owned(),
    };
    match call.state.store.remove(&removal).await? {
        Deletion::Removed(removed) => {
            let workspace = match (&removal.scope, &call.state.config.workspace_dir) {
                (Scope::Account, Some(dir)) => {
                    let (dir, account) = (dir.clone(), call.account_id.to_owned());
                    tokio::task::spawn_blocking(move || remove_workspace(&dir, &account))
                        .await
                        .map_err(|e| {
                            ControlError::unavailable(format!("workspace removal failed: {e}"))
                        })?
                }
                _ => (0, 0),
            };
            tracing::info!(
                account_id = call.account_id,
                deletion_id = removed.deletion_id,
                scope = removal.scope.as_str(),
                by = removal.by,
                sessions = removed.session_ids.len(),
                events = removed.events,
                "data removed"
            );
            METRICS.deleted(removal.scope.as_str(), &removed, workspace.1);
            Ok(view(&removal, &removed, workspace))
        }
        Deletion::NotFound => Err(ControlError::not_found(
            "session",
            removal.scope.subject().unwrap_or_default(),
        )),
        Deletion::LiveRun {
            session_id,
            run_id,
            invocation_id,
        } => Err(ControlError::conflict(
            format!(
                "session {session_id:?} has a run in progress (run {run_id:?}, invocation \
                 {invocation_id:?}): cancel it (CancelRun) and delete again; nothing was removed"
            ),
            json!({ "code": "run_in_progress", "SessionId": session_id, "RunId": run_id, "InvocationId": invocation_id }),
        )),
        Deletion::Forked { session_id, forks } => Err(ControlError::conflict(
            format!(
                "session {session_id:?} has forks that read its events ({}): delete them first; \
                 nothing was removed",
                forks.join(", ")
            ),
            json!({ "code": "session_has_forks", "SessionId": session_id, "Forks": forks }),
        )),
        Deletion::Journaled { session_id } => {
            let what = match &session_id {
                Some(id) => format!("the outage journal still holds events of session {id:?}"),
                None => "the session store is unreachable".to_owned(),
            };
            let mut e = ControlError::new(
                503,
                format!(
                    "{what}: a delete now would be undone when the journal is written back; \
                     retry once it is (nothing was removed)"
                ),
                Value::Null,
            );
            e.data = json!({ "code": "journal_pending", "SessionId": session_id });
            e.headers
                .push(("retry-after", JOURNALED_RETRY_SECONDS.to_string()));
            Err(e)
        }
    }
}

/// The envelope's `Data`: the audit row.
fn view(removal: &Removal, r: &Removed, (files, bytes): (u64, u64)) -> Value {
    json!({
        "DeletionId": r.deletion_id,
        "Scope": removal.scope.as_str(),
        "DeletedBy": removal.by,
        "SessionIds": r.session_ids,
        "Sessions": r.session_ids.len(),
        "Events": r.events,
        "EventBytes": r.event_bytes,
        "Invocations": r.invocations,
        "Feedback": r.feedback,
        "IdempotencyKeys": r.idempotency_keys,
        "Attachments": r.attachments,
        "AttachmentBytes": r.attachment_bytes,
        "WorkspaceFiles": files,
        "WorkspaceBytes": bytes,
        "DeletedAt": r.at.to_rfc3339(),
    })
}

/// Removes everything under the account's workspace root (symlinks are removed, never
/// followed); returns the files and bytes removed. A failure is logged, not returned: the
/// log's rows are gone already, and the files are the agent's to write again.
fn remove_workspace(dir: &Path, account_id: &str) -> (u64, u64) {
    let Some(root) = super::workspace::account_dir(dir, account_id) else {
        return (0, 0);
    };
    let (mut files, mut bytes) = (0, 0);
    let mut todo = vec![root.clone()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            match entry.file_type() {
                Ok(t) if t.is_dir() => todo.push(entry.path()),
                Ok(_) => {
                    files += 1;
                    bytes += entry.metadata().map(|m| m.len()).unwrap_or(0);
                }
                Err(_) => {}
            }
        }
    }
    for entry in std::fs::read_dir(&root).into_iter().flatten().flatten() {
        let path = entry.path();
        let removed = match entry.file_type() {
            Ok(t) if t.is_dir() => std::fs::remove_dir_all(&path),
            _ => std::fs::remove_file(&path),
        };
        if let Err(error) = removed {
            tracing::warn!(%error, account_id, path = %path.display(), "workspace file not removed");
        }
    }
    (files, bytes)
}
