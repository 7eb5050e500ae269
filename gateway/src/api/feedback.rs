//! Feedback actions of the control API: `CreateFeedback` (thumbs up or down, with an
//! optional comment, on one answer of a session) and `ListFeedback`. Records are stored
//! beside the session log (`feedback`, readable in `feedback_readable`).

use runtime_adapter::{surface, Protocol};
use serde::Deserialize;
use serde_json::{json, Value};
use session_log::{Feedback, Invocation, Rating};

use super::{ActionResult, Call, ControlError};
use crate::ids::new_id;

/// Longest comment accepted, in characters.
pub const MAX_COMMENT_CHARS: usize = 2000;

const DEFAULT_LIMIT: i64 = 50;
const MAX_LIMIT: i64 = 200;

fn record_json(f: &Feedback) -> Value {
    json!({
        "FeedbackId": f.feedback_id,
        "SessionId": f.session_id,
        "RunId": f.run_id,
        "InvocationId": f.invocation_id,
        "ResponseId": f.response_id,
        "Rating": f.rating.as_str(),
        "Comment": f.comment,
        "CreatedAt": f.created_at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
    })
}

/// The run a response id names, on the surfaces whose ids Tether makes (`resp_…`,
/// `chatcmpl-…`).
fn run_of_response(response_id: &str) -> Option<String> {
    [Protocol::OpenAiResponses, Protocol::OpenAiChat]
        .into_iter()
        .find_map(|p| surface(p).run_id(response_id))
}

/// A `Comment` parameter: blank is none; at most [`MAX_COMMENT_CHARS`].
pub fn comment_param(comment: Option<String>) -> Result<Option<String>, ControlError> {
    let comment = comment.filter(|c| !c.trim().is_empty());
    if comment
        .as_ref()
        .is_some_and(|c| c.chars().count() > MAX_COMMENT_CHARS)
    {
        return Err(ControlError::bad_request(format!(
            "Comment must be at most {MAX_COMMENT_CHARS} characters"
        )));
    }
    Ok(comment)
}

/// `CreateFeedback` (`{"SessionId", "ResponseId" or "InvocationId", "Rating": "up"|"down",
/// "Comment"?}`): stores the record and answers it.
pub async fn create(call: &Call<'_>) -> ActionResult {
    #[derive(Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Params {
        session_id: String,
        #[serde(default)]
        response_id: Option<String>,
        #[serde(default)]
        invocation_id: Option<String>,
        rating: String,
        #[serde(default)]
        comment: Option<String>,
    }
    let p: Params = call.params()?;
    if p.session_id.trim().is_empty() {
        return Err(ControlError::bad_request("SessionId must not be empty"));
    }
    let rating = Rating::parse(&p.rating).ok_or_else(|| {
        ControlError::bad_request(format!(
            "Rating must be \"up\" or \"down\", not {:?}",
            p.rating
        ))
    })?;
    let comment = comment_param(p.comment)?;
    let store = &call.state.store;
    let account = call.account_id;
    if store.session(account, &p.session_id).await?.is_none() {
        return Err(ControlError::not_found("session", &p.session_id));
    }
    let in_session = |i: Option<Invocation>| i.filter(|i| i.session_id == p.session_id);
    // Either id names the answer; given both, they must name the same run.
    let by_invocation = match p.invocation_id.as_deref() {
        None => None,
        Some("") => return Err(ControlError::bad_request("InvocationId must not be empty")),
        Some(id) => Some(
            in_session(store.invocation(account, id).await?)
                .ok_or_else(|| ControlError::not_found("invocation", id))?,
        ),
    };
    let by_response = match p.response_id.as_deref() {
        None => None,
        Some("") => return Err(ControlError::bad_request("ResponseId must not be empty")),
        Some(id) => {
            let run = match run_of_response(id) {
                Some(run_id) => in_session(store.run(account, &run_id).await?),
                None => None,
            };
            Some(run.ok_or_else(|| ControlError::not_found("response", id))?)
        }
    };
    let invocation = match (by_invocation, by_response) {
        (Some(i), Some(r)) if i.run_id != r.run_id => {
            return Err(ControlError::bad_request(
                "ResponseId and InvocationId name different runs",
            ))
        }
        (Some(i), _) => i,
        (None, Some(r)) => r,
        (None, None) => {
            return Err(ControlError::bad_request(
                "ResponseId or InvocationId is required",
            ))
        }
    };
    let record =
        Feedback {
            account_id: account.to_owned(),
            feedback_id: new_id("fb"),
            session_id: p.session_id,
            response_id: Some(p.response_id.unwrap_or_else(|| {
                surface(Protocol::OpenAiResponses).response_id(&invocation.run_id)
            })),
            run_id: invocation.run_id,
            invocation_id: Some(invocation.invocation_id),
            rating,
            comment,
            created_at: chrono::Utc::now(),
        };
    store.put_feedback(&record).await?;
    tracing::info!(account_id = account, session_id = %record.session_id, run_id = %record.run_id, rating = rating.as_str(), "feedback recorded");
    Ok(record_json(&record))
}

/// `ListFeedback` (`{"SessionId"?, "Offset", "Limit"}`): the account's feedback, newest
/// first.
pub async fn list(call: &Call<'_>) -> ActionResult {
    #[derive(Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Params {
        #[serde(default)]
        session_id: Option<String>,
        #[serde(flatten)]
        paging: super::Paging,
    }
    let p: Params = call.params()?;
    let (offset, limit) = p.paging.resolve(DEFAULT_LIMIT, MAX_LIMIT)?;
    super::listed_session(call, p.session_id.as_deref()).await?;
    let store = &call.state.store;
    let (records, total) = store
        .list_feedback(call.account_id, p.session_id.as_deref(), offset, limit)
        .await?;
    Ok(json!({
        "Feedback": records.iter().map(record_json).collect::<Vec<_>>(),
        "Total": total,
        "Offset": offset,
        "Limit": limit,
    }))
}
