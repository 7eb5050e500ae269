//! A session the agent forgot (ADK's `404 Session not found`), re-created from Tether's
//! history with `POST …/sessions {session_id, state, events}`: the items as ADK events,
//! each under the author that said it, and the state the last turn left; unless the
//! session was never the client's to have, or the client deleted it.
//!
//! A confirmation the agent was waiting on (`adk_request_confirmation`) cannot be put
//! back: ADK refuses its own protocol calls in session-creation events (400), so that no
//! client can forge one. When the turn answers one, the session is re-created up to the
//! run that asked, that run's message is sent again (`/run`), and the agent asks anew for
//! the same call; the answer then goes to the new request (`readdress`). The tool has not
//! run (it waits for the confirmation), so it runs once, when the answer comes.

use std::collections::{HashMap, HashSet};

use serde_json::{json, Map, Value};
use session_log::{Event, EventType, RunStatus};

use super::content::item_parts;
use super::request::AdkTurn;
use super::{alias, RUN};
use crate::item::Item;
use crate::percent::encode_segment;
use crate::upstream::{AgentRequest, Reask, Restore, TurnCall};
use crate::waited::{waited, ADK_CONFIRMATION, ADK_RESERVED_FUNCTIONS};

/// The `reason` of the compaction marker the gateway appends once the agent confirms the
/// client deleted the session (`Surface::deletes_session`).
const SESSION_DELETED: &str = "session_deleted";

/// ADK's 404 for an unknown session: `Session not found: <id>` from `/run` and
/// `/run_sse`, plain `Session not found` from `GET …/sessions/{id}`.
pub(super) fn forgot(status: u16, body: &[u8]) -> bool {
    status == 404
        && serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|v| v.get("detail").and_then(Value::as_str).map(str::to_owned))
            .is_some_and(|d| d.starts_with("Session not found"))
}

/// The requests that re-create the session in the agent, then the turn's own.
pub(super) fn restore(call: &TurnCall) -> Option<Restore> {
    let t = AdkTurn::of(call);
    let app = t.app.clone()?;
    // What came before the client deleted the session belongs to a session that is gone.
    let events = since_deleted(call.events);
    let recorded: Vec<&Map<String, Value>> = events.iter().filter_map(adk_metadata).collect();
    // A session the agent never answered in (a typo), or that the client deleted, is not
    // the client's to have back: ADK's own 404 stands. A session Tether owns (a turn from
    // another surface) is created even for its first turn.
    let answered = !recorded.is_empty()
        || events
            .iter()
            .any(|e| e.run_status().is_some_and(RunStatus::is_answered));
    if t.from_client && (!answered || call.history.is_empty()) {
        return None;
    }
    // The same session id used by another ADK app or user of the account: not this
    // conversation, so nothing to restore.
    if let Some(last) = recorded.iter().rev().find(|m| m.contains_key("user_id")) {
        let same = |k: &str, v: &str| last.get(k).and_then(Value::as_str).is_none_or(|x| x == v);
        if !same("app_name", &app) || !same("user_id", &t.user) {
            return None;
        }
    }
    // Who said each assistant message, by its text.
    let authors: HashMap<String, String> = events
        .iter()
        .filter(|e| e.event_type == EventType::Message)
        .filter_map(|e| {
            let author = adk_metadata(e)?.get("author")?.as_str()?;
            Some((e.text().to_owned(), author.to_owned()))
        })
        .collect();
    let agent = recorded
        .iter()
        .rev()
        .find_map(|m| m.get("author").and_then(Value::as_str))
        .unwrap_or(&app);
    // A confirmation the turn answers: the session up to the run that asked for it, and
    // that run's message again.
    let waited = waited(call).filter(|w| {
        let ids = confirmation_ids(t.body.clone());
        w.action["request_id"]
            .as_str()
            .is_some_and(|id| ids.iter().any(|i| i == id))
    });
    let (history, events) = match &waited {
        Some(w) => {
            let first = events
                .iter()
                .position(|e| e.run_id.as_deref() == Some(w.run));
            (w.before, &events[..first.unwrap_or(events.len())])
        }
        None => (call.history, events),
    };
    let reask = waited.map(|w| {
        let parts: Vec<Value> = w
            .input
            .iter()
            .flat_map(|item| item_parts(item, &HashMap::new()))
            .collect();
        let mut body = Map::new();
        body.insert("app_name".into(), json!(app));
        body.insert(
            "new_message".into(),
            json!({ "role": "user", "parts": parts }),
        );
        let again = AdkTurn {
            path: RUN,
            app: Some(app.clone()),
            user: t.user.clone(),
            session: t.session.clone(),
            body,
            from_client: t.from_client,
        };
        Reask {
            request: again.request(call.account_id),
            pending: w.action.clone(),
        }
    });
    let state = last_state(events).cloned().unwrap_or_default();
    let create = AgentRequest::post(
        format!(
            "/apps/{}/users/{}/sessions",
            encode_segment(&app),
            encode_segment(&t.agent_user(call.account_id))
        ),
        json!({
            "session_id": t.session,
            "state": state,
            "events": history_events(history, &authors, agent),
        }),
    );
    Some(Restore {
        before: vec![create],
        request: t.request(call.account_id),
        reask,
    })
}

/// The turn's request with its confirmation response answering `asked` (the request the
/// agent made anew when asked again) instead.
pub(super) fn readdress(call: &TurnCall, asked: &Value) -> Option<AgentRequest> {
    let id = asked["request_id"].as_str()?;
    let mut t = AdkTurn::of(call);
    let mut body = std::mem::take(&mut t.body);
    let answered = {
        let responses = confirmations(&mut body);
        let found = !responses.is_empty();
        for response in responses {
            response.insert("id".into(), json!(id));
        }
        found
    };
    t.body = body;
    answered.then(|| t.request(call.account_id))
}

/// The ids of the confirmation responses in a turn's `new_message`.
fn confirmation_ids(mut body: Map<String, Value>) -> Vec<String> {
    confirmations(&mut body)
        .into_iter()
        .filter_map(|r| r.get("id").and_then(Value::as_str).map(str::to_owned))
        .collect()
}

/// The confirmation responses (`adk_request_confirmation` function responses) in a turn's
/// `new_message`.
fn confirmations(body: &mut Map<String, Value>) -> Vec<&mut Map<String, Value>> {
    let key = alias(body, "new_message", "newMessage");
    let Some(parts) = body
        .get_mut(key)
        .and_then(|m| m.get_mut("parts"))
        .and_then(Value::as_array_mut)
    else {
        return Vec::new();
    };
    parts
        .iter_mut()
        .filter_map(|p| {
            let p = p.as_object_mut()?;
            let key = alias(p, "function_response", "functionResponse");
            p.get_mut(key)?.as_object_mut()
        })
        .filter(|r| r.get("name").and_then(Value::as_str) == Some(ADK_CONFIRMATION))
        .collect()
}

/// The events since the client last deleted the session at the agent (all of them if it
/// never did).
pub(super) fn since_deleted(events: &[Event]) -> &[Event] {
    let deleted = events.iter().rposition(|e| {
        e.event_type == EventType::Compaction
            && e.content.get("reason").and_then(Value::as_str) == Some(SESSION_DELETED)
    });
    deleted.map_or(events, |i| &events[i + 1..])
}

/// What `parse` recorded beside an event's transcript item (author, invocation, app,
/// user, state).
fn adk_metadata(event: &Event) -> Option<&Map<String, Value>> {
    event.metadata.get("adk").and_then(Value::as_object)
}

/// The session state as the last turn that changed it left it.
pub(super) fn last_state(events: &[Event]) -> Option<&Map<String, Value>> {
    events
        .iter()
        .rev()
        .find_map(|e| adk_metadata(e)?.get("state")?.as_object())
}

/// Which ADK event a history item goes into.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// The user's message (and system messages: ADK sessions have no system turn).
    User,
    /// The model's text and tool calls.
    Model,
    /// Tool results.
    Results,
}

/// ADK session-creation events for a history. Messages keep their roles (system
/// messages, such as a compaction summary, go in as the user's); assistant messages
/// carry the author that said them; tool calls and results become
/// `functionCall`/`functionResponse` parts, grouped as ADK groups them; reasoning and
/// approvals are left out, as are ADK's own protocol calls (refused).
fn history_events(history: &[Item], authors: &HashMap<String, String>, agent: &str) -> Vec<Value> {
    let mut names = HashMap::new();
    let mut reserved = HashSet::new();
    for item in history {
        if let Item::ToolCall { call_id, name, .. } = item {
            names.insert(call_id.as_str(), name.as_str());
            if ADK_RESERVED_FUNCTIONS.contains(&name.as_str()) {
                reserved.insert(call_id.as_str());
            }
        }
    }
    let mut events: Vec<(&str, Kind, Vec<Value>)> = Vec::new();
    for item in history {
        let (author, kind) = match item {
            Item::Message { role, .. } if role == "assistant" => {
                let author = authors.get(&item.text()).map_or(agent, String::as_str);
                (author, Kind::Model)
            }
            Item::Message { .. } => ("user", Kind::User),
            Item::ToolCall { call_id, .. } if !reserved.contains(call_id.as_str()) => {
                (agent, Kind::Model)
            }
            Item::ToolResult { call_id, .. }
                if !reserved.contains(call_id.as_str()) && names.contains_key(call_id.as_str()) =>
            {
                (agent, Kind::Results)
            }
            _ => continue,
        };
        let parts = item_parts(item, &names);
        if parts.is_empty() {
            continue;
        }
        let is_tool = matches!(item, Item::ToolCall { .. } | Item::ToolResult { .. });
        match events.last_mut() {
            // Parallel calls (and text before them) share one model event, their results
            // one response event, as ADK records them.
            Some((a, k, p)) if is_tool && *k == kind && *a == author => p.extend(parts),
            _ => events.push((author, kind, parts)),
        }
    }
    events
        .into_iter()
        .map(|(author, kind, parts)| {
            let role = if kind == Kind::Model { "model" } else { "user" };
            json!({ "author": author, "content": { "role": role, "parts": parts } })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use session_log::NewEvent;

    use super::*;
    use crate::adk::test_support::*;
    use crate::adk::AdkUpstream;
    use crate::item::Block;
    use crate::upstream::Upstream;

    fn answered(seq: i64, text: &str, meta: Value) -> Event {
        event(
            seq,
            Item::assistant_text(text)
                .to_event("acct", "s-run")
                .in_run("r0", "i0")
                .with_metadata(meta),
        )
    }

    #[test]
    fn forgot_is_adks_session_not_found() {
        let up = AdkUpstream;
        assert!(up.forgot(404, RUN_UNKNOWN_SESSION.as_bytes()));
        assert!(up.forgot(404, br#"{"detail":"Session not found"}"#));
        assert!(!up.forgot(404, br#"{"detail":"Not Found"}"#));
        assert!(!up.forgot(409, br#"{"detail":"Session already exists: s-run"}"#));
        assert!(!up.forgot(200, RUN_TURN1.as_bytes()));
        assert!(!up.forgot(404, b"Session not found"));
    }

    #[test]
    fn restore_recreates_the_session_from_history() {
        let turn = run_turn("/run", body("s-run", "What is my project named?"));
        let history = vec![
            Item::Message {
                role: "system".into(),
                content: vec![Block::Text("Earlier: greetings.".into())],
            },
            Item::user_text("My project is named zebra42."),
            Item::assistant_text("Noted: zebra42."),
            Item::Reasoning { text: "hmm".into() },
            Item::assistant_text("Handing over."),
            Item::ToolCall {
                call_id: "c1".into(),
                name: "lookup".into(),
                arguments: r#"{"q":"zebra"}"#.into(),
            },
            Item::ToolCall {
                call_id: "c2".into(),
                name: "adk_request_confirmation".into(),
                arguments: "{}".into(),
            },
            Item::ToolCall {
                call_id: "c3".into(),
                name: "count".into(),
                arguments: "[1]".into(),
            },
            Item::ToolResult {
                call_id: "c1".into(),
                output: r#"{"hits":1}"#.into(),
            },
            Item::ToolResult {
                call_id: "c2".into(),
                output: r#"{"confirmed":true}"#.into(),
            },
            Item::ToolResult {
                call_id: "c3".into(),
                output: "3".into(),
            },
            Item::ToolResult {
                call_id: "orphan".into(),
                output: "x".into(),
            },
            Item::Message {
                role: "user".into(),
                content: vec![
                    Block::Text("see".into()),
                    Block::Image {
                        url: "data:image/png;base64,AAAA".into(),
                        detail: None,
                    },
                ],
            },
        ];
        let meta = |author: &str| json!({"adk": {"author": author, "invocation_id": "e-1", "app_name": "adk_agent", "user_id": "u1"}});
        let mut with_state = meta("helper");
        with_state["adk"]["state"] = json!({"k": 1});
        let events = vec![
            answered(2, "Noted: zebra42.", meta("assistant")),
            answered(5, "Handing over.", with_state),
        ];
        let restore = AdkUpstream
            .restore(&call(&turn, &history, &events))
            .unwrap();
        assert_eq!(
            restore.request,
            AdkUpstream.request(&call(&turn, &history, &events))
        );
        assert_eq!(restore.before.len(), 1);
        let create = &restore.before[0];
        assert_eq!(create.method, "POST");
        assert_eq!(create.path, "/apps/adk_agent/users/acct~u1/sessions");
        assert_eq!(
            create.body,
            Some(json!({
                "session_id": "s-run",
                "state": {"k": 1},
                "events": [
                    {"author": "user", "content": {"role": "user", "parts": [{"text": "Earlier: greetings."}]}},
                    {"author": "user", "content": {"role": "user", "parts": [{"text": "My project is named zebra42."}]}},
                    {"author": "assistant", "content": {"role": "model", "parts": [{"text": "Noted: zebra42."}]}},
                    {"author": "helper", "content": {"role": "model", "parts": [
                        {"text": "Handing over."},
                        {"functionCall": {"id": "c1", "name": "lookup", "args": {"q": "zebra"}}},
                        {"functionCall": {"id": "c3", "name": "count", "args": {"value": [1]}}}]}},
                    {"author": "helper", "content": {"role": "user", "parts": [
                        {"functionResponse": {"id": "c1", "name": "lookup", "response": {"hits": 1}}},
                        {"functionResponse": {"id": "c3", "name": "count", "response": {"result": 3}}}]}},
                    {"author": "user", "content": {"role": "user", "parts": [
                        {"text": "see"}, {"inlineData": {"mimeType": "image/png", "data": "AAAA"}}]}}
                ]
            }))
        );
    }

    #[test]
    fn a_confirmation_the_turn_answers_is_asked_for_again() {
        let meta =
            json!({"adk": {"author": "assistant", "app_name": "adk_agent", "user_id": "u1"}});
        let status = |seq: i64, run: &str, content: Value| {
            event(
                seq,
                NewEvent::new("acct", "s-run", EventType::RunStatus, content).in_run(run, run),
            )
        };
        let action = json!({"kind": "approval", "request_id": "adk-c1", "tool": "deploy",
            "arguments": {"x": 1}, "protocol": "adk"});
        let confirmation = Item::ToolCall {
            call_id: "adk-c1".into(),
            name: "adk_request_confirmation".into(),
            arguments: "{}".into(),
        };
        let deploy = Item::ToolCall {
            call_id: "call_1".into(),
            name: "deploy".into(),
            arguments: r#"{"x":1}"#.into(),
        };
        let history = vec![
            Item::user_text("hi"),
            Item::assistant_text("hello"),
            Item::user_text("tool:deploy"),
            deploy.clone(),
            confirmation.clone(),
        ];
        let events = vec![
            event(
                1,
                Item::user_text("hi")
                    .to_event("acct", "s-run")
                    .in_run("r1", "r1"),
            ),
            answered(2, "hello", meta.clone()),
            status(3, "r1", json!({"status": "completed"})),
            event(
                4,
                Item::user_text("tool:deploy")
                    .to_event("acct", "s-run")
                    .in_run("r2", "r2"),
            ),
            event(5, deploy.to_event("acct", "s-run").in_run("r2", "r2")),
            event(6, confirmation.to_event("acct", "s-run").in_run("r2", "r2")),
            status(
                7,
                "r2",
                json!({"status": "requires_action", "action": action}),
            ),
        ];
        let answer = |id: &str| {
            run_turn(
                "/run_sse",
                json!({"app_name": "adk_agent", "user_id": "u1", "session_id": "s-run",
                    "new_message": {"role": "user", "parts": [{"function_response": {
                        "id": id, "name": "adk_request_confirmation",
                        "response": {"confirmed": true}}}]}}),
            )
        };
        let turn = answer("adk-c1");
        let restore = AdkUpstream
            .restore(&call(&turn, &history, &events))
            .unwrap();
        // The session up to the run that asked, then that run's message again.
        assert_eq!(
            restore.before[0].body.as_ref().unwrap()["events"],
            json!([
                {"author": "user", "content": {"role": "user", "parts": [{"text": "hi"}]}},
                {"author": "assistant", "content": {"role": "model", "parts": [{"text": "hello"}]}}
            ])
        );
        let reask = restore.reask.unwrap();
        assert_eq!(reask.pending, action);
        assert_eq!(reask.request.path, "/run");
        assert_eq!(
            reask.request.body,
            Some(
                json!({"app_name": "adk_agent", "user_id": "acct~u1", "session_id": "s-run",
                "new_message": {"role": "user", "parts": [{"text": "tool:deploy"}]}})
            )
        );
        // The answer goes to the request asked anew.
        let asked = json!({"request_id": "adk-c2"});
        let request = AdkUpstream
            .readdress(&call(&turn, &history, &events), &asked)
            .unwrap();
        let body = request.body.unwrap();
        assert_eq!(
            body["new_message"]["parts"][0]["function_response"]["id"],
            "adk-c2"
        );
        assert_eq!(body["user_id"], "acct~u1");

        // A turn that answers something else, or a run that ran another tool, is restored
        // as a conversation only.
        let other = answer("adk-other");
        let restore = AdkUpstream
            .restore(&call(&other, &history, &events))
            .unwrap();
        assert_eq!(restore.reask, None);
        let mut ran = history.clone();
        let lookup = Item::ToolCall {
            call_id: "call_0".into(),
            name: "lookup".into(),
            arguments: "{}".into(),
        };
        ran.insert(3, lookup.clone());
        let mut with_lookup = events.clone();
        with_lookup.insert(
            4,
            event(5, lookup.to_event("acct", "s-run").in_run("r2", "r2")),
        );
        let restore = AdkUpstream
            .restore(&call(&turn, &ran, &with_lookup))
            .unwrap();
        assert_eq!(restore.reask, None);
    }

    #[test]
    fn restore_falls_back_to_the_app_name_and_empty_state() {
        let turn = run_turn("/run_sse", body("s-run", "next"));
        let history = vec![Item::user_text("a"), Item::assistant_text("b")];
        let events = vec![event(
            1,
            NewEvent::new(
                "acct",
                "s-run",
                EventType::RunStatus,
                json!({"status": "completed"}),
            ),
        )];
        let restore = AdkUpstream
            .restore(&call(&turn, &history, &events))
            .unwrap();
        let body = restore.before[0].body.clone().unwrap();
        assert_eq!(body["state"], json!({}));
        assert_eq!(body["events"][1]["author"], "adk_agent");
        assert_eq!(restore.request.path, "/run_sse");
    }

    #[test]
    fn restore_declines_what_the_agent_never_had() {
        // The agent never answered in this session: ADK's own 404 stands.
        let turn = run_turn("/run", body("typo", "hi"));
        assert_eq!(AdkUpstream.restore(&call(&turn, &[], &[])), None);
        let failed = [event(
            1,
            NewEvent::new(
                "acct",
                "typo",
                EventType::RunStatus,
                json!({"status": "failed"}),
            ),
        )];
        assert_eq!(
            AdkUpstream.restore(&call(&turn, &[Item::user_text("hi")], &failed)),
            None
        );
        // The same session id used earlier by another user of the account.
        let history = [Item::user_text("a"), Item::assistant_text("b")];
        let theirs = [answered(
            2,
            "b",
            json!({"adk": {"author": "assistant", "app_name": "adk_agent", "user_id": "u2"}}),
        )];
        assert_eq!(AdkUpstream.restore(&call(&turn, &history, &theirs)), None);
        // No app name anywhere: no path to create the session under.
        let turn = run_turn("/run", json!({"user_id": "u1", "session_id": "s"}));
        let ours = [answered(
            2,
            "b",
            json!({"adk": {"author": "assistant", "user_id": "u1"}}),
        )];
        assert_eq!(AdkUpstream.restore(&call(&turn, &history, &ours)), None);
    }

    #[test]
    fn a_session_the_client_deleted_is_not_restored() {
        let turn = run_turn("/run", body("s-run", "still there?"));
        let meta = json!({"adk": {"author": "assistant", "app_name": "adk_agent", "user_id": "u1", "state": {"k": 1}}});
        let before = vec![
            event(1, Item::user_text("hi").to_event("acct", "s-run")),
            answered(2, "hello", meta.clone()),
            event(
                3,
                NewEvent::new(
                    "acct",
                    "s-run",
                    EventType::RunStatus,
                    json!({"status": "completed"}),
                ),
            ),
        ];
        let history = [Item::user_text("hi"), Item::assistant_text("hello")];
        assert!(AdkUpstream
            .restore(&call(&turn, &history, &before))
            .is_some());

        // After the marker the projection is empty, while `events` still holds the old
        // answers: ADK's own 404 stands.
        let mut events = before.clone();
        events.push(event(4, deleted_marker()));
        assert_eq!(AdkUpstream.restore(&call(&turn, &[], &events)), None);
        // An empty history alone is nothing to restore either.
        assert_eq!(AdkUpstream.restore(&call(&turn, &[], &before)), None);

        // A new session under the same id, then forgotten: restored from what followed
        // the deletion only (its state, not the deleted session's).
        events.push(answered(
            6,
            "again",
            json!({"adk": {"author": "helper", "app_name": "adk_agent", "user_id": "u1"}}),
        ));
        let history = [Item::user_text("back"), Item::assistant_text("again")];
        let restore = AdkUpstream
            .restore(&call(&turn, &history, &events))
            .unwrap();
        assert_eq!(
            restore.before[0].body,
            Some(json!({
                "session_id": "s-run",
                "state": {},
                "events": [
                    {"author": "user", "content": {"role": "user", "parts": [{"text": "back"}]}},
                    {"author": "helper", "content": {"role": "model", "parts": [{"text": "again"}]}}
                ]
            }))
        );
    }
}
