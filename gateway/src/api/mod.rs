//! The control API: `POST /agentengine/api/v1/<Action>` with a JSON body, answered with
//! the `{Code, Message, RequestId, Action, Data}` envelope; every action is scoped to the
//! caller's account, and another account's id is "not found". This module reads the
//! request and writes the envelope; each action family has a file of its own.

mod approvals;
mod archive;
mod attachments;
mod bootstrap;
mod checkpoints;
mod deletion;
mod event;
mod feedback;
mod history;
mod import;
pub mod sessions;
mod subscribe;
mod webhooks;
mod workspace;

use std::borrow::Cow;

use http::Method;
use pingora::proxy::Session;
use pingora::Result;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use crate::client::body::read_body;
use crate::client::respond;
use crate::error::ApiError;
use crate::ids::new_id;
use crate::state::State;

pub const PREFIX: &str = "/agentengine/api/v1/";

/// Every action this API answers. Anything else is a 404 before its body is read, and
/// `GetAgentUiBootstrap` derives the features it reports from this list: an action
/// added to `dispatch` but not here is never reached.
const ACTIONS: &[&str] = &[
    "ListSessions",
    "ListSessionEvents",
    "CancelRun",
    "UploadAttachment",
    "AttachmentContent",
    "SubscribeRunEvents",
    "ListSessionCheckpoints",
    "ListToolReceipts",
    "GetCheckpointResumePreview",
    "ResumeRun",
    "ForkSession",
    "CompactSession",
    "GetAgentUiBootstrap",
    "CreateFeedback",
    "ListFeedback",
    "ListWorkspaceFiles",
    "ImportSession",
    "DeleteSession",
    "DeleteUserData",
    "DeleteAccountData",
    "ArchiveSession",
    "UnarchiveSession",
    "ListWebhookDeliveries",
    "ListPendingApprovals",
    "ResolveApproval",
    "PatchSession",
];

/// Whether this API answers `action`.
pub fn answers(action: &str) -> bool {
    ACTIONS.contains(&action)
}

/// A control-API failure: HTTP status, envelope `Code` (= the status), message, and
/// optional details in `Data`.
pub struct ControlError {
    pub status: u16,
    /// Extra response headers (Retry-After and friends on a 429).
    pub headers: Vec<(&'static str, String)>,
    pub message: String,
    pub data: Value,
}

impl ControlError {
    fn new(status: u16, message: impl Into<String>, data: Value) -> Self {
        ControlError {
            status,
            headers: Vec::new(),
            message: message.into(),
            data,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        ControlError::new(400, message, Value::Null)
    }
}

/// `Offset` and `Limit` of a listing's parameters, flattened into each action's own
/// (`#[serde(flatten)]`).
#[derive(serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Paging {
    #[serde(default)]
    offset: Option<i64>,
    #[serde(default)]
    limit: Option<i64>,
}

impl Paging {
    /// `(offset, limit)`, `default_limit` when absent: 400 when out of range.
    fn resolve(&self, default_limit: i64, max_limit: i64) -> Result<(i64, i64), ControlError> {
        let (offset, limit) = (
            self.offset.unwrap_or(0),
            self.limit.unwrap_or(default_limit),
        );
        if offset < 0 {
            return Err(ControlError::bad_request("Offset must be 0 or more"));
        }
        if !(1..=max_limit).contains(&limit) {
            return Err(ControlError::bad_request(format!(
                "Limit must be between 1 and {max_limit}"
            )));
        }
        Ok((offset, limit))
    }
}

/// A listing narrowed to `SessionId`: 400 for a malformed id, 404 when the caller's
/// account has no such session.
async fn listed_session(call: &Call<'_>, id: Option<&str>) -> Result<(), ControlError> {
    if let Some(id) = id {
        id_param("SessionId", id)?;
        if call
            .state
            .store
            .session(call.account_id, id)
            .await?
            .is_none()
        {
            return Err(ControlError::not_found("session", id));
        }
    }
    Ok(())
}

impl From<crate::ids::IdError> for ControlError {
    fn from(e: crate::ids::IdError) -> Self {
        ControlError::new(400, e.message, serde_json::json!({ "Field": e.field }))
    }
}

impl ControlError {
    pub fn not_found(what: &str, id: &str) -> Self {
        ControlError::new(404, format!("{what} {id:?} not found"), Value::Null)
    }

    pub fn conflict(message: impl Into<String>, data: Value) -> Self {
        ControlError::new(409, message, data)
    }

    pub fn unavailable(error: impl std::fmt::Display) -> Self {
        tracing::error!(%error, "control API: store unavailable");
        ControlError::new(503, "the session store is unavailable", Value::Null)
    }
}

impl From<ApiError> for ControlError {
    fn from(e: ApiError) -> Self {
        ControlError {
            status: e.status,
            message: e.message,
            data: json!({ "code": e.code }),
            headers: e.headers,
        }
    }
}

impl From<session_log::StoreError> for ControlError {
    fn from(e: session_log::StoreError) -> Self {
        ControlError::unavailable(e)
    }
}

pub type ActionResult = std::result::Result<Value, ControlError>;

/// Refuses a required text field that is empty or blank.
/// A client-supplied id parameter: present, and valid by the one id validator.
fn id_param(name: &str, value: &str) -> std::result::Result<(), ControlError> {
    non_empty(name, value)?;
    crate::ids::client_id(name, value)?;
    Ok(())
}

fn non_empty(name: &str, value: &str) -> std::result::Result<(), ControlError> {
    if value.trim().is_empty() {
        return Err(ControlError::bad_request(format!(
            "{name} must not be empty"
        )));
    }
    Ok(())
}

/// What an action handler gets: the shared state, the caller's account and credential,
/// and the body.
pub struct Call<'a> {
    pub state: &'a State,
    pub account_id: &'a str,
    /// The credential the caller used (`key:<id>`, `jwt:<sub>`, `local`): the audit
    /// trail's "by whom".
    pub credential_id: &'a str,
    pub body: Value,
}

impl Call<'_> {
    /// The body as the action's parameter struct; wrong types are a 400 naming the field.
    pub fn params<T: DeserializeOwned>(&self) -> std::result::Result<T, ControlError> {
        serde_json::from_value(self.body.clone())
            .map_err(|e| ControlError::bad_request(format!("invalid parameters: {e}")))
    }
}

/// Answers a control-API request. `action` is the path after the prefix.
pub async fn serve(
    state: &State,
    session: &mut Session,
    account_id: &str,
    credential_id: &str,
    method: Method,
    action: &str,
) -> Result<()> {
    if !answers(action) {
        let e = ControlError::new(404, format!("unknown action {action:?}"), Value::Null);
        return respond_envelope(session, action, &new_id("req"), Err(e)).await;
    }
    let allowed = if matches!(action, "SubscribeRunEvents" | "AttachmentContent") {
        Method::GET
    } else {
        Method::POST
    };
    if method != allowed {
        let mut e = ControlError::new(405, format!("{action} takes {allowed}"), Value::Null);
        e.headers.push(("allow", allowed.as_str().to_owned()));
        return respond_envelope(session, action, &new_id("req"), Err(e)).await;
    }
    let request_id = new_id("req");
    match action {
        "AttachmentContent" => attachments::content(state, session, account_id, &request_id).await,
        "SubscribeRunEvents" => subscribe::handle(state, session, account_id, &request_id).await,
        _ => {
            let caller = (account_id, credential_id);
            handle(state, session, caller, action, &request_id).await
        }
    }
}

/// The actions that write to the log or the store beside it.
const WRITES: [&str; 8] = [
    "CancelRun",
    "ResumeRun",
    "UploadAttachment",
    "ForkSession",
    "CompactSession",
    "CreateFeedback",
    "ImportSession",
    "ResolveApproval",
];

/// Answers an action that takes a JSON body.
async fn handle(
    state: &State,
    session: &mut Session,
    (account_id, credential_id): (&str, &str),
    action: &str,
    request_id: &str,
) -> Result<()> {
    // A write the store cannot take now is refused at once, not held until it can.
    let writable = match WRITES.contains(&action) {
        true => state.writer.health().writable(),
        false => Ok(()),
    };
    let result = match writable.map_err(ApiError::store_unwritable) {
        Err(e) => Err(e.into()),
        Ok(()) => match read_json(state, session).await {
            Ok(body) => {
                let call = Call {
                    state,
                    account_id,
                    credential_id,
                    body,
                };
                if action == "ResumeRun" {
                    match checkpoints::resume_run(&call).await {
                        Ok(checkpoints::Resumed::Stream(run, events)) => {
                            return checkpoints::stream_resumed(session, &run, *events).await
                        }
                        Ok(checkpoints::Resumed::Json(data)) => Ok(data),
                        Err(e) => Err(e),
                    }
                } else {
                    dispatch(&call, action).await
                }
            }
            Err(e) => Err(e),
        },
    };
    respond_envelope(session, action, request_id, result).await
}

/// A refusal made before the action was looked at (authentication, rate limits), in
/// the envelope. `action` is the path after the prefix.
pub async fn refuse(session: &mut Session, action: &str, e: ApiError) -> Result<()> {
    respond_envelope(session, action, &new_id("req"), Err(e.into())).await
}

pub async fn respond_envelope(
    session: &mut Session,
    action: &str,
    request_id: &str,
    result: ActionResult,
) -> Result<()> {
    let (status, body, headers) = match result {
        Ok(data) => (
            200,
            json!({ "Code": 0, "Message": "Success", "RequestId": request_id, "Action": action, "Data": data }),
            Vec::new(),
        ),
        Err(e) => (
            e.status,
            json!({ "Code": e.status, "Message": e.message, "RequestId": request_id, "Action": action, "Data": e.data }),
            e.headers,
        ),
    };
    let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    respond::json(session, status, &body, &headers).await
}

async fn dispatch(call: &Call<'_>, action: &str) -> ActionResult {
    match action {
        "ListSessions" => sessions::list_sessions(call).await,
        "ListSessionEvents" => sessions::list_session_events(call).await,
        "CancelRun" => sessions::cancel_run(call).await,
        "UploadAttachment" => attachments::upload(call).await,
        "ListSessionCheckpoints" => checkpoints::list_session_checkpoints(call).await,
        "ListToolReceipts" => checkpoints::list_tool_receipts(call).await,
        "GetCheckpointResumePreview" => checkpoints::get_checkpoint_resume_preview(call).await,
        "ForkSession" => history::fork_session(call).await,
        "CompactSession" => history::compact_session(call).await,
        "GetAgentUiBootstrap" => bootstrap::get_agent_ui_bootstrap(call).await,
        "CreateFeedback" => feedback::create(call).await,
        "ListFeedback" => feedback::list(call).await,
        "ListWorkspaceFiles" => workspace::list_files(call).await,
        "ImportSession" => import::import_session(call).await,
        "DeleteSession" => deletion::delete_session(call).await,
        "DeleteUserData" => deletion::delete_user_data(call).await,
        "DeleteAccountData" => deletion::delete_account_data(call).await,
        "ArchiveSession" => archive::archive(call, true).await,
        "UnarchiveSession" => archive::archive(call, false).await,
        "ListWebhookDeliveries" => webhooks::list(call).await,
        "ListPendingApprovals" => approvals::list(call).await,
        "ResolveApproval" => approvals::resolve(call).await,
        "PatchSession" => archive::patch(call).await,
        _ => Err(ControlError::new(
            404,
            format!("unknown action {action:?}"),
            Value::Null,
        )),
    }
}

async fn read_json(
    state: &State,
    session: &mut Session,
) -> std::result::Result<Value, ControlError> {
    let body = read_body(session, &state.input)
        .await
        .map_err(ControlError::from)?;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    match serde_json::from_slice::<Value>(&body) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err(ControlError::bad_request("the body must be a JSON object")),
        Err(e) => Err(ControlError::bad_request(format!("malformed JSON: {e}"))),
    }
}

/// The value of a query-string parameter as sent (`+` for a space, `%XX` escapes)
/// decoded; `None` when an escape is malformed or the result is not UTF-8, which the
/// actions refuse rather than guess at.
fn query_value(raw: &str) -> Option<String> {
    let malformed = raw.split('%').skip(1).any(|escape| {
        !escape
            .get(..2)
            .is_some_and(|hex| hex.bytes().all(|b| b.is_ascii_hexdigit()))
    });
    if malformed {
        return None;
    }
    let spaced = raw.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced)
        .decode_utf8()
        .ok()
        .map(Cow::into_owned)
}

#[cfg(test)]
mod tests {
    use super::query_value;

    #[test]
    fn query_values_decode_as_forms_write_them() {
        assert_eq!(query_value("sess_1").as_deref(), Some("sess_1"));
        assert_eq!(query_value("a+b%2Bc%20d").as_deref(), Some("a b+c d"));
        assert_eq!(
            query_value("tether-upload%3A%2F%2Ffile_1").as_deref(),
            Some("tether-upload://file_1")
        );
        assert_eq!(query_value("caf%C3%A9").as_deref(), Some("caf\u{e9}"));
        assert_eq!(query_value("100%"), None);
        assert_eq!(query_value("%zz"), None);
        assert_eq!(query_value("%ff"), None);
    }
}

/// docs/control-api.md documents every action this API answers with a request a reader can paste.
#[cfg(test)]
mod documented {
    use super::ACTIONS;

    /// The Control API's walkthrough, docs/control-api.md.
    fn control_api_section() -> String {
        // At run time, not build time: a shared target directory may hold a binary built
        // in another checkout.
        let crate_dir = std::env::var("CARGO_MANIFEST_DIR").expect("run by cargo test");
        std::fs::read_to_string(format!("{crate_dir}/../docs/control-api.md")).unwrap()
    }

    /// The shell command (its continuation lines joined) that holds `at`.
    fn command_at(text: &str, at: usize) -> String {
        let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
        let mut end = at;
        loop {
            end = text[end..].find('\n').map_or(text.len(), |i| end + i);
            if !text[..end].ends_with('\\') || end == text.len() {
                return text[start..end].to_owned();
            }
            end += 1;
        }
    }

    #[test]
    fn every_action_has_a_row_and_a_curl_example_with_its_request() {
        let section = control_api_section();
        let mut missing = Vec::new();
        for action in ACTIONS {
            if !section.contains(&format!("| `{action}`")) {
                missing.push(format!("{action}: no row in the table"));
            }
            let call = format!("curl -s $A/{action}");
            let call_n = format!("curl -sN $A/{action}");
            let quoted = format!("\"$A/{action}?");
            let examples: Vec<String> = section
                .match_indices(&call)
                .chain(section.match_indices(&call_n))
                .chain(section.match_indices(&quoted))
                .map(|(at, _)| command_at(&section, at))
                .collect();
            // A POST with its JSON body inline, or a GET with its query string.
            let with_request = examples.iter().any(|c| {
                c.contains(&format!("$A/{action} -d '{{"))
                    || c.contains(&format!("$A/{action}?"))
                        && c[c.find(&format!("$A/{action}?")).unwrap()..].contains('=')
            });
            if !with_request {
                missing.push(format!(
                    "{action}: no curl example with its request body ({} examples)",
                    examples.len()
                ));
            }
        }
        assert!(
            missing.is_empty(),
            "docs/control-api.md:\n{}",
            missing.join("\n")
        );
    }
}
