//! The control API: `POST /agentengine/api/v1/<Action>` with a JSON body, answered with
//! the `{Code, Message, RequestId, Action, Data}` envelope; every action is scoped to the
//! caller's account, and another account's id is "not found".

mod checkpoints;
mod sessions;
pub mod subscribe;

use pingora::proxy::Session;
use pingora::Result;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use crate::proxy::State;
use crate::respond;

pub use sessions::cancel as sessions_cancel;

pub const PREFIX: &str = "/agentengine/api/v1/";

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
    pub fn bad_request(message: impl Into<String>) -> Self {
        ControlError {
            headers: Vec::new(),
            status: 400,
            message: message.into(),
            data: Value::Null,
        }
    }

    pub fn not_found(what: &str, id: &str) -> Self {
        ControlError {
            headers: Vec::new(),
            status: 404,
            message: format!("{what} {id:?} not found"),
            data: Value::Null,
        }
    }

    pub fn conflict(message: impl Into<String>, data: Value) -> Self {
        ControlError {
            headers: Vec::new(),
            status: 409,
            message: message.into(),
            data,
        }
    }

    pub fn unavailable(error: impl std::fmt::Display) -> Self {
        tracing::error!(%error, "control API: store unavailable");
        ControlError {
            headers: Vec::new(),
            status: 503,
            message: "the session store is unavailable".into(),
            data: Value::Null,
        }
    }
}

impl From<crate::proxy::ApiError> for ControlError {
    fn from(e: crate::proxy::ApiError) -> Self {
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

/// What an action handler gets: the shared state, the caller's account and the body.
pub struct Call<'a> {
    pub state: &'a State,
    pub account_id: &'a str,
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
pub async fn handle(
    state: &State,
    session: &mut Session,
    account_id: &str,
    action: &str,
) -> Result<()> {
    let request_id = crate::runs::new_id("req");
    if action == "SubscribeRunEvents" {
        return subscribe::handle(state, session, account_id, &request_id).await;
    }
    let result = match read_json(state, session).await {
        Ok(body) => {
            let call = Call {
                state,
                account_id,
                body,
            };
            if action == "ResumeRun" {
                match checkpoints::resume_run(&call).await {
                    Ok(checkpoints::Resumed::Stream(run, events)) => {
                        return stream_resumed(session, &run, *events).await
                    }
                    Ok(checkpoints::Resumed::Json(data)) => Ok(data),
                    Err(e) => Err(e),
                }
            } else {
                dispatch(&call, action).await
            }
        }
        Err(e) => Err(e),
    };
    respond_envelope(session, action, &request_id, result).await
}

/// A resumed invocation streamed like a Responses turn (every frame carries `id: <seq>`);
/// the client leaving does not stop it.
async fn stream_resumed(
    session: &mut Session,
    run: &crate::runs::StartedRun,
    mut events: session_log::Subscription,
) -> Result<()> {
    let surface = runtime_adapter::surface(runtime_adapter::Protocol::OpenAiResponses);
    let info = runtime_adapter::RunInfo {
        run_id: run.run_id.clone(),
        session_id: run.session_id.clone(),
        model: run.model.clone(),
        created_at: chrono::Utc::now().timestamp(),
        client: serde_json::Value::Null,
    };
    let headers = [
        ("x-session-id", run.session_id.as_str()),
        ("x-invocation-id", run.invocation_id.as_str()),
    ];
    respond::sse_start(session, &headers).await?;
    let mut renderer = surface.stream_renderer(&info);
    crate::stream::pump(session, &mut events, None, |event| {
        crate::proxy::render_step(&mut *renderer, event)
    })
    .await;
    Ok(())
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
        "UploadAttachment" => crate::attachments::upload(call).await,
        "ListSessionCheckpoints" => checkpoints::list_session_checkpoints(call).await,
        "ListToolReceipts" => checkpoints::list_tool_receipts(call).await,
        "GetCheckpointResumePreview" => checkpoints::get_checkpoint_resume_preview(call).await,
        _ => Err(ControlError {
            headers: Vec::new(),
            status: 404,
            message: format!("unknown action {action:?}"),
            data: Value::Null,
        }),
    }
}

async fn read_json(
    state: &State,
    session: &mut Session,
) -> std::result::Result<Value, ControlError> {
    let body = crate::proxy::read_body(session, &state.input)
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

/// The control API's view of one log event.
pub fn event_json(e: &session_log::Event) -> Value {
    serde_json::to_value(EventView::of(e)).unwrap_or(Value::Null)
}

/// An event as the control API shows it. Serialised straight from the event, without
/// copying its content or building its id and timestamp strings: a replay writes hundreds
/// of thousands of these per second.
#[derive(serde::Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct EventView<'a> {
    event_id: EventId<'a>,
    session_id: &'a str,
    seq_id: i64,
    run_id: &'a Option<String>,
    invocation_id: &'a Option<String>,
    event_type: &'static str,
    role: &'a Option<String>,
    content: &'a Value,
    metadata: &'a Value,
    timestamp: Timestamp,
}

impl<'a> EventView<'a> {
    pub fn of(e: &'a session_log::Event) -> Self {
        EventView {
            event_id: EventId(&e.session_id, e.seq),
            session_id: &e.session_id,
            seq_id: e.seq,
            run_id: &e.run_id,
            invocation_id: &e.invocation_id,
            event_type: e.event_type.as_str(),
            role: &e.role,
            content: &e.content,
            metadata: &e.metadata,
            timestamp: Timestamp(e.created_at),
        }
    }
}

/// `evt_<session>_<seq>`.
struct EventId<'a>(&'a str, i64);

impl serde::Serialize for EventId<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(&format_args!("evt_{}_{}", self.0, self.1))
    }
}

/// RFC 3339 in UTC with microseconds (`2026-12-02T15:09:32.927406Z`), as
/// `to_rfc3339_opts(SecondsFormat::Micros, true)` writes it, without allocating.
struct Timestamp(chrono::DateTime<chrono::Utc>);

impl serde::Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl std::fmt::Display for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use chrono::{Datelike, Timelike};
        let t = self.0.naive_utc();
        let year = t.year();
        if !(0..=9999).contains(&year) || t.nanosecond() >= 1_000_000_000 {
            // Signed years and leap seconds: rare enough for chrono's own writer.
            let text = self.0.to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
            return f.write_str(&text);
        }
        let mut buf = *b"0000-00-00T00:00:00.000000Z";
        for (range, n) in [
            (0..4, year as u32),
            (5..7, t.month()),
            (8..10, t.day()),
            (11..13, t.hour()),
            (14..16, t.minute()),
            (17..19, t.second()),
            (20..26, t.nanosecond() / 1_000),
        ] {
            let mut n = n;
            for b in buf[range].iter_mut().rev() {
                *b = b'0' + (n % 10) as u8;
                n /= 10;
            }
        }
        f.write_str(std::str::from_utf8(&buf).map_err(|_| std::fmt::Error)?)
    }
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, NaiveDate, SecondsFormat, TimeZone, Utc};
    use serde_json::json;
    use session_log::{Event, EventType};

    use super::*;

    #[test]
    fn timestamps_read_as_chrono_writes_them() {
        let mut times: Vec<DateTime<Utc>> = vec![
            Utc::now(),
            Utc.with_ymd_and_hms(2026, 12, 2, 15, 9, 32).unwrap(),
            Utc.with_ymd_and_hms(1, 1, 1, 0, 0, 0).unwrap(),
            Utc.with_ymd_and_hms(9999, 12, 31, 23, 59, 59).unwrap(),
            Utc.with_ymd_and_hms(10000, 1, 1, 0, 0, 0).unwrap(),
            Utc.with_ymd_and_hms(-1, 6, 15, 12, 0, 0).unwrap(),
        ];
        let leap = NaiveDate::from_ymd_opt(2016, 12, 31)
            .unwrap()
            .and_hms_nano_opt(23, 59, 59, 1_999_999_999)
            .unwrap()
            .and_utc();
        times.push(leap);
        for nanos in [0, 1, 999, 1_000, 123_456_789, 999_999_999] {
            times.push(Utc.timestamp_opt(1_796_224_172, nanos).unwrap());
        }
        for t in times {
            assert_eq!(
                Timestamp(t).to_string(),
                t.to_rfc3339_opts(SecondsFormat::Micros, true)
            );
        }
    }

    #[test]
    fn an_event_view_keeps_its_wire_form() {
        let event = Event {
            account_id: "acct".into(),
            session_id: "sess_1".into(),
            seq: 42,
            run_id: Some("run_1".into()),
            invocation_id: None,
            event_type: EventType::TextDelta,
            role: None,
            content: json!({"delta": "h\u{e9}\"llo\n", "b": 1.5, "a": [1, null]}),
            metadata: json!({}),
            created_at: Utc.timestamp_opt(1_796_224_172, 929_201_123).unwrap(),
        };
        assert_eq!(
            serde_json::to_string(&EventView::of(&event)).unwrap(),
            r#"{"EventId":"evt_sess_1_42","SessionId":"sess_1","SeqId":42,"RunId":"run_1","InvocationId":null,"EventType":"text_delta","Role":null,"Content":{"a":[1,null],"b":1.5,"delta":"hé\"llo\n"},"Metadata":{},"Timestamp":"2026-12-02T15:09:32.929201Z"}"#
        );
        assert_eq!(event_json(&event)["EventId"], "evt_sess_1_42");
        assert_eq!(
            event_json(&event)["Timestamp"],
            "2026-12-02T15:09:32.929201Z"
        );
    }
}
