//! What one turn asks of the agent: an ADK client's own `/run` or `/run_sse` body, or a
//! turn from another surface put into one; and the request that sends it.

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use super::content::item_parts;
use super::namespace::agent_user_id;
use super::{field_str, DEFAULT_USER, RUN, RUN_SSE};
use crate::upstream::{AgentRequest, TurnCall};

pub(super) struct AdkTurn {
    /// `/run` or `/run_sse`.
    pub path: &'static str,
    pub app: Option<String>,
    /// The client's user id (before namespacing).
    pub user: String,
    /// The ADK session id.
    pub session: String,
    /// The body to send, before the user and session are set.
    pub body: Map<String, Value>,
    /// Whether the turn came from an ADK client (which names its own session in ADK)
    /// rather than from a surface Tether translates (whose session Tether owns).
    pub from_client: bool,
}

impl AdkTurn {
    pub fn of(call: &TurnCall) -> AdkTurn {
        let turn = call.turn;
        let adk = turn.extra.get("adk");
        if let Some(Value::Object(body)) = adk.and_then(|a| a.get("body")) {
            let path = adk.and_then(|a| a.get("path")).and_then(Value::as_str);
            return AdkTurn {
                path: if path == Some(RUN) { RUN } else { RUN_SSE },
                app: field_str(body, "app_name", "appName").map(str::to_owned),
                user: field_str(body, "user_id", "userId")
                    .unwrap_or(DEFAULT_USER)
                    .to_owned(),
                // The id the client created the session under (the same as Tether's
                // session id today, and still right if Tether ever scopes its own).
                session: field_str(body, "session_id", "sessionId")
                    .unwrap_or(call.session_id)
                    .to_owned(),
                body: body.clone(),
                from_client: true,
            };
        }
        // Another surface's turn (an OpenAI client): streamed, in a session Tether names.
        let app = turn
            .model
            .clone()
            .unwrap_or_else(|| call.default_model.to_owned());
        let parts: Vec<Value> = turn
            .input
            .iter()
            .flat_map(|item| item_parts(item, &HashMap::new()))
            .collect();
        let mut body = Map::new();
        body.insert("app_name".into(), app.clone().into());
        body.insert(
            "new_message".into(),
            json!({ "role": "user", "parts": parts }),
        );
        body.insert("streaming".into(), turn.stream.into());
        AdkTurn {
            path: RUN_SSE,
            app: Some(app),
            user: DEFAULT_USER.to_owned(),
            session: call.session_id.to_owned(),
            body,
            from_client: false,
        }
    }

    /// The user id the agent knows this turn's user by.
    pub fn agent_user(&self, account_id: &str) -> String {
        agent_user_id(account_id, &self.user)
    }

    /// The body, addressed to the caller's namespaced user and to the session.
    pub fn request(self, account_id: &str) -> AgentRequest {
        let user = self.agent_user(account_id);
        let mut body = self.body;
        for key in ["userId", "user_id", "sessionId", "session_id"] {
            body.remove(key);
        }
        body.insert("user_id".into(), user.into());
        body.insert("session_id".into(), self.session.into());
        AgentRequest::post(self.path, Value::Object(body))
    }
}

#[cfg(test)]
mod tests {
    use crate::adk::test_support::*;
    use crate::adk::AdkUpstream;
    use crate::item::Item;
    use crate::protocol::Protocol;
    use crate::turn::TurnRequest;
    use crate::upstream::Upstream;
    use serde_json::json;

    #[test]
    fn the_run_request_carries_the_namespaced_user() {
        let turn = run_turn(
            "/run_sse",
            json!({"appName": "adk_agent", "userId": "u1", "user_id": "other", "sessionId": "s-run",
                   "newMessage": {"role": "user", "parts": [{"text": "hi"}]}, "streaming": true}),
        );
        let req = AdkUpstream.request(&call(&turn, &[], &[]));
        assert_eq!(req.method, "POST");
        assert_eq!(req.path, "/run_sse");
        assert_eq!(
            req.body,
            Some(
                json!({"appName": "adk_agent", "user_id": "acct~u1", "session_id": "s-run",
                        "newMessage": {"role": "user", "parts": [{"text": "hi"}]}, "streaming": true})
            )
        );
        let turn = run_turn("/run", body("s-run", "hi"));
        let req = AdkUpstream.request(&call(&turn, &[], &[]));
        assert_eq!(req.path, "/run");
        assert_eq!(req.body.unwrap()["user_id"], "acct~u1");
    }

    #[test]
    fn a_turn_from_another_surface_gets_a_streamed_adk_request() {
        let mut turn = TurnRequest::new(Protocol::OpenAiChat);
        turn.input = vec![Item::user_text("hello")];
        turn.stream = false;
        let req = AdkUpstream.request(&call(&turn, &[], &[]));
        assert_eq!(req.path, "/run_sse");
        assert_eq!(
            req.body,
            Some(
                json!({"app_name": "default_app", "user_id": "acct~tether", "session_id": "s-run",
                        "new_message": {"role": "user", "parts": [{"text": "hello"}]}, "streaming": false})
            )
        );
        // Tether owns that session, so even its first turn may create it in the agent.
        let restore = AdkUpstream.restore(&call(&turn, &[], &[])).unwrap();
        assert_eq!(
            restore.before[0].path,
            "/apps/default_app/users/acct~tether/sessions"
        );
    }
}
