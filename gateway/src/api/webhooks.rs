//! `ListWebhookDeliveries`: the account's webhook deliveries (one per event and endpoint)
//! with where each stands, newest first, filtered by event type, status or session.

use serde::Deserialize;
use serde_json::{json, Value};
use session_log::outbox::{Delivery, DeliveryQuery, DeliveryStatus, Kind};

use super::{ActionResult, Call, ControlError};

const DEFAULT_LIMIT: i64 = 50;
const MAX_LIMIT: i64 = 200;

fn time(t: Option<chrono::DateTime<chrono::Utc>>) -> Value {
    t.map_or(Value::Null, |t| {
        json!(t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
    })
}

fn delivery_json(d: &Delivery) -> Value {
    json!({
        "EventId": d.event_id,
        "EventType": d.kind,
        "Endpoint": d.endpoint,
        "SessionId": d.session_id,
        "RunId": d.run_id,
        "Status": d.status,
        "Attempts": d.attempts,
        "CreatedAt": time(Some(d.created_at)),
        "LastAttemptAt": time(d.last_attempt_at),
        "NextAttemptAt": time(d.next_attempt_at),
        "LastStatusCode": d.last_status_code,
        "LastError": d.last_error,
        "DeliveredAt": time(d.delivered_at),
    })
}

/// `ListWebhookDeliveries` (`{"EventType"?, "Status"?, "SessionId"?, "Offset", "Limit"}`).
pub async fn list(call: &Call<'_>) -> ActionResult {
    #[derive(Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Params {
        #[serde(default)]
        event_type: Option<String>,
        #[serde(default)]
        status: Option<String>,
        #[serde(default)]
        session_id: Option<String>,
        #[serde(flatten)]
        paging: super::Paging,
    }
    let p: Params = call.params()?;
    let (offset, limit) = p.paging.resolve(DEFAULT_LIMIT, MAX_LIMIT)?;
    if let Some(t) = p.event_type.as_deref().filter(|t| Kind::parse(t).is_none()) {
        let known: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
        return Err(ControlError::bad_request(format!(
            "EventType {t:?} is not one of {}",
            known.join(", ")
        )));
    }
    if let Some(s) = p
        .status
        .as_deref()
        .filter(|s| DeliveryStatus::parse(s).is_none())
    {
        return Err(ControlError::bad_request(format!(
            "Status {s:?} is not one of pending, delivered, failed"
        )));
    }
    let query = DeliveryQuery {
        account_id: call.account_id.to_owned(),
        kind: p.event_type,
        status: p.status,
        session_id: p.session_id,
        offset,
        limit,
    };
    let (deliveries, total) = call.state.store.list_webhook_deliveries(&query).await?;
    Ok(json!({
        "Deliveries": deliveries.iter().map(delivery_json).collect::<Vec<_>>(),
        "Total": total,
        "Offset": offset,
        "Limit": limit,
    }))
}
