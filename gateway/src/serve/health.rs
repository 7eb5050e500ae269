//! `/readyz` (the store answers) and `/metrics` (the Prometheus page), answered before
//! authentication.

use std::time::Duration;

use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use pingora::Result;
use serde_json::json;

use crate::client::respond;
use crate::metrics::{self, Gauges, METRICS};
use crate::state::State;

pub async fn readyz(state: &State, session: &mut Session) -> Result<()> {
    let store = state.store.clone();
    // A store that answers reads but cannot write (a full disk, a read-only file) is not
    // ready: new runs would be refused.
    if let Err(why) = state.writer.health().writable() {
        let body =
            json!({ "status": "unavailable", "store": store.backend(), "error": why.to_string() });
        let retry = session_log::health::RETRY_AFTER_SECS.to_string();
        return respond::json(session, 503, &body, &[("retry-after", &retry)]).await;
    }
    let ping = tokio::time::timeout(Duration::from_secs(2), store.ping()).await;
    let (status, body) = match ping {
        Ok(Ok(())) => (200, json!({ "status": "ready", "store": store.backend() })),
        Ok(Err(e)) => (
            503,
            json!({ "status": "unavailable", "store": store.backend(), "error": e.to_string() }),
        ),
        Err(_) => (
            503,
            json!({ "status": "unavailable", "store": store.backend(), "error": "store did not answer in 2s" }),
        ),
    };
    respond::json(session, status, &body, &[]).await
}

pub async fn metrics(state: &State, session: &mut Session) -> Result<()> {
    let page = metrics::render(
        &METRICS,
        &Gauges {
            writer: state.writer.stats(),
            backend: state.store.backend(),
            subscribers: state.hub.subscribers(),
            followed_sessions: state.hub.active_sessions(),
            active_runs: state.runs.active_count(),
            unwritable: state.writer.health().writable().err(),
        },
    );
    let mut header = ResponseHeader::build(200, Some(3))?;
    header.insert_header("content-type", "text/plain; version=0.0.4; charset=utf-8")?;
    header.insert_header("content-length", page.len().to_string())?;
    header.insert_header("cache-control", "no-store")?;
    session
        .write_response_header(Box::new(header), false)
        .await?;
    session
        .write_response_body(Some(Bytes::from(page)), true)
        .await
}
