//! SubscribeRunEvents: an SSE stream of a session's committed events after a cursor —
//! replay from the log, then live — ending with `data: [DONE]` after the invocation's
//! terminal `run_status`, or after the subscription timeout without `[DONE]`.
//!
//! Ids and the cursor are positions in the session's history (`history`): seqs in a
//! session that is not a fork; in a fork, what it inherited first (each at its own seq
//! plus its session's base), then its own events at their seq plus the fork point. So a
//! client that lost the stream anywhere, within the inherited part too, resumes after the
//! last id it saw. The id of a Chat or Responses frame (`runtime_adapter::cursor`) is a
//! cursor here too, for the session the run is in: the stream resumes after the last
//! event that client was shown whole.

use std::collections::HashSet;
use std::io::Write as _;

use pingora::proxy::Session;
use pingora::Result;
use runtime_adapter::cursor::Cursor;
use runtime_adapter::sse::SseFrame;
use session_log::branch::Branch;
use session_log::{Event, EventQuery, Lineage, Subscription};
use tokio::time::Instant;

use super::event::{EventView, Place};
use super::{query_value, respond_envelope, ControlError};
use crate::client::{respond, stream};
use crate::state::State;

const ACTION: &str = "SubscribeRunEvents";

struct Params {
    session_id: String,
    invocation_id: Option<String>,
    /// The cursor as sent.
    cursor: Option<Cursor>,
    /// The position after which to start (the cursor read in the session's lineage).
    after: i64,
}

fn parse(session: &Session) -> std::result::Result<Params, ControlError> {
    let req = session.req_header();
    let mut session_id = None;
    let mut invocation_id = None;
    let mut after = None;
    for pair in req
        .uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v = query_value(v).ok_or_else(|| {
            ControlError::bad_request(format!("{k} is not valid percent-encoding"))
        })?;
        match k {
            "SessionId" => session_id = Some(v),
            "InvocationId" => invocation_id = Some(v),
            "AfterSeqId" => after = Some(v),
            _ => {}
        }
    }
    let after = crate::ids::stream_cursor("AfterSeqId", after.as_deref(), &req.headers)?;
    let session_id = session_id
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ControlError::bad_request("SessionId is required"))?;
    crate::ids::client_id("SessionId", &session_id)?;
    if let Some(id) = invocation_id.as_deref().filter(|s| !s.is_empty()) {
        crate::ids::client_id("InvocationId", id)?;
    }
    Ok(Params {
        session_id,
        invocation_id: invocation_id.filter(|s| !s.is_empty()),
        cursor: after.map(|c| c.cursor),
        after: 0,
    })
}

pub async fn handle(
    state: &State,
    session: &mut Session,
    account_id: &str,
    request_id: &str,
) -> Result<()> {
    let checked = match check(state, session, account_id).await {
        Ok(checked) => checked,
        Err(e) => return respond_envelope(session, ACTION, request_id, Err(e)).await,
    };
    let Checked {
        params,
        query,
        base,
        finished,
        inherited,
        deleted,
    } = checked;
    respond::sse_start(session, &[("x-session-id", &params.session_id)]).await?;
    if let Some(Replay {
        lineage,
        branch,
        events,
    }) = &inherited
    {
        let mut out = Vec::new();
        for event in events {
            let frame = out.len();
            let place = Place::of(lineage, branch, event);
            if branch.is_deleted(place.position) {
                continue;
            }
            let _ = write!(out, "id: {}\ndata: ", place.position);
            if serde_json::to_writer(&mut out, &EventView::placed(event, place)).is_err() {
                out.truncate(frame);
                continue;
            }
            out.extend_from_slice(b"\n\n");
        }
        if finished {
            // An inherited run: its events are all there is.
            let last = events.last().map_or(params.after, |e| lineage.position(e));
            let _ = write!(out, "id: {}\ndata: [DONE]\n\n", done_id(last));
        }
        session
            .write_response_body(Some(out.into()), finished)
            .await?;
        if finished {
            return Ok(());
        }
    }
    if finished {
        // A finished run with nothing after the cursor: nothing to wait for.
        let done = SseFrame::data("[DONE]").with_id(done_id(params.after));
        return stream::write_frames(session, &[done], true).await;
    }
    let mut events = Subscription::open(state.store.clone(), &state.hub, query);
    let deadline = Instant::now() + state.config.subscribe_timeout;
    let follows_one_run = params.invocation_id.is_some();
    let end = stream::pump_encoded(session, &mut events, Some(deadline), |event, out| {
        if !deleted.contains(&(base + event.seq)) {
            encode_event(event, base + event.seq, out);
        }
        let last = follows_one_run && event.is_terminal();
        if last {
            let _ = write!(out, "id: {}\ndata: [DONE]\n\n", done_id(base + event.seq));
        }
        last
    })
    .await;
    if matches!(end, stream::End::Deadline | stream::End::LogUnavailable) {
        // No [DONE]: the client re-subscribes from the last id it saw.
        let _ = session.write_response_body(None, true).await;
    }
    Ok(())
}

/// The `id:` of the `[DONE]` that follows the event at `position`: one past it, so that
/// every frame's id is distinct and increasing. Only a stream that follows one invocation
/// ends with `[DONE]`, and nothing of that invocation comes after its terminal event, so
/// resuming after this id (`AfterSeqId`, `Last-Event-ID`) finds the stream finished and
/// skips nothing.
fn done_id(position: i64) -> i64 {
    position + 1
}

/// Appends the frame of one event: `id: <position>` and its JSON as one `data:` line
/// (compact JSON has no raw line break), the bytes
/// `SseFrame::data(json).with_id(position)` encodes to, serialised straight into `out`.
fn encode_event(event: &Event, position: i64, out: &mut Vec<u8>) {
    let _ = write!(out, "id: {position}\ndata: ");
    let start = out.len();
    if serde_json::to_writer(&mut *out, &EventView::of(event)).is_err() {
        out.truncate(start);
    }
    out.extend_from_slice(b"\n\n");
}

/// What a subscription serves: the parameters, the query of the session's own events to
/// follow, the position of its seq 0 (the fork point; 0 for a session that is not a
/// fork), whether the subscribed invocation is already over with nothing left after the
/// cursor, and what of a fork's inherited history comes first.
struct Checked {
    params: Params,
    query: EventQuery,
    base: i64,
    finished: bool,
    inherited: Option<Replay>,
    /// Positions of the items a client deleted: not sent.
    deleted: HashSet<i64>,
}

/// Events of a fork's inherited history after the cursor, replayed before its own (or an
/// inherited run), each with its position as its id.
struct Replay {
    lineage: Lineage,
    branch: Branch,
    events: Vec<Event>,
}

/// Validates the request against the caller's account. A fork's subscription with a
/// cursor before its own events replays its inherited history after the cursor first; an
/// inherited invocation (a run of an earlier session of the chain, before the fork point)
/// is replayed after the cursor, and is then over.
async fn check(
    state: &State,
    session: &Session,
    account_id: &str,
) -> std::result::Result<Checked, ControlError> {
    let mut params = parse(session)?;
    let store = &*state.store;
    let lineage = Lineage::resolve(store, account_id, &params.session_id)
        .await?
        .ok_or_else(|| ControlError::not_found("session", &params.session_id))?;
    params.after = match params.cursor {
        None => 0,
        Some(Cursor::Number(position)) => position,
        // A Chat or Responses frame's id: the seq is the run's session's own.
        Some(Cursor::Frame(id)) => lineage.own_position(id.after_seq),
    };
    let base = lineage.own_position(0);
    let deleted = lineage.deleted_items(store).await?;
    let mut query = EventQuery {
        after_seq: (params.after - base).max(0),
        ..EventQuery::session(account_id, &params.session_id)
    };
    let Some(invocation_id) = &params.invocation_id else {
        let inherited = if params.after < base {
            let events = lineage
                .events(store, params.after, Some(base), None, i64::MAX)
                .await?;
            let (branch, _) = lineage.branch(store, None).await?;
            Some(Replay {
                lineage,
                branch,
                events,
            })
        } else {
            None
        };
        return Ok(Checked {
            params,
            query,
            base,
            finished: false,
            inherited,
            deleted,
        });
    };
    let not_found = || ControlError::not_found("invocation", invocation_id);
    let invocation = store
        .invocation(account_id, invocation_id)
        .await?
        .ok_or_else(not_found)?;
    query.invocation_id = Some(invocation_id.clone());
    if invocation.session_id != params.session_id {
        let link = lineage
            .links()
            .iter()
            .find(|l| l.session_id == invocation.session_id && l.upto.is_some())
            .ok_or_else(not_found)?;
        let inherited = EventQuery {
            session_id: invocation.session_id.clone(),
            after_seq: 0,
            until_seq: link.upto,
            ..query.clone()
        };
        let events: Vec<Event> = store
            .events(&inherited)
            .await?
            .into_iter()
            .filter(|e| link.base + e.seq > params.after)
            .collect();
        if events.is_empty() && params.after == 0 {
            return Err(not_found());
        }
        let (branch, _) = lineage.branch(store, None).await?;
        return Ok(Checked {
            params,
            query,
            base,
            finished: true,
            inherited: Some(Replay {
                lineage,
                branch,
                events,
            }),
            deleted,
        });
    }
    let finished = invocation.status.is_terminal() && {
        let rest = EventQuery {
            limit: 1,
            ..query.clone()
        };
        store.events(&rest).await?.is_empty()
    };
    Ok(Checked {
        params,
        query,
        base,
        finished,
        inherited: None,
        deleted,
    })
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};
    use serde_json::json;
    use session_log::EventType;

    use super::*;

    #[test]
    fn an_event_frame_is_what_sse_frame_encodes() {
        let mut out = Vec::new();
        for (i, content) in [
            json!({"delta": "one\ntwo\r\u{2028}three"}),
            json!({"text": "caf\u{e9}", "n": [1, 2.5, -3, 1e300, null, true]}),
            json!({}),
        ]
        .into_iter()
        .enumerate()
        {
            let event = Event {
                account_id: "acct".into(),
                session_id: "sess".into(),
                seq: 1000 + i as i64,
                run_id: None,
                invocation_id: Some("inv".into()),
                event_type: EventType::Message,
                role: Some("assistant".into()),
                content,
                metadata: json!({"k": "v"}),
                created_at: Utc.timestamp_opt(1_796_224_172, 5_000).unwrap(),
            };
            encode_event(&event, event.seq, &mut out);
            let mut expected = String::new();
            SseFrame::data(serde_json::to_string(&EventView::of(&event)).unwrap())
                .with_id(event.seq)
                .encode(&mut expected);
            assert_eq!(String::from_utf8(out.clone()).unwrap(), expected);
            out.clear();
        }
    }
}
