//! The Conversations API served from the log, through the real binary on both stores: a
//! conversation made with items and metadata is a Tether session (its id works as
//! `conversation` on `/v1/responses` and in the control API), items added are in the
//! agent's next projection, pagination as the OpenAI API pages, a deleted item or
//! conversation is in no read any more while the log keeps it and who deleted it, and
//! another account's conversation is not found.

use serde_json::{json, Value};
use session_log::EventType;

use crate::auth::{auth_conf, KEY_A, KEY_B};
use crate::harness::*;

struct Client {
    base: String,
    auth: String,
}

impl Client {
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Reply {
        let url = format!("{}{path}", self.base);
        request(
            method,
            &url,
            body.as_ref(),
            &[("authorization", &self.auth)],
        )
    }

    /// A call that must answer 200: its body.
    fn ok(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let reply = self.call(method, path, body);
        assert_eq!(reply.status, 200, "{method} {path}: {}", reply.body);
        reply.json()
    }

    /// A turn on `/v1/responses` in `conversation`: the answer's text.
    fn turn(&self, conversation: &str, text: &str) -> String {
        let body = json!({ "model": "fake", "conversation": conversation, "input": text });
        let reply = self.ok("POST", "/v1/responses", Some(body));
        Surface::Responses.text(&reply)
    }

    fn error(&self, method: &str, path: &str, body: Option<Value>, status: u16) -> Value {
        let reply = self.call(method, path, body);
        assert_eq!(reply.status, status, "{method} {path}: {}", reply.body);
        let error = reply.json()["error"].clone();
        assert!(
            error["message"].is_string(),
            "OpenAI's error format: {}",
            reply.body
        );
        error
    }
}

/// The texts of a list's items, as `role: text`.
fn texts(list: &Value) -> Vec<String> {
    list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let text: String = i["content"]
                .as_array()
                .map(|parts| parts.iter().filter_map(|p| p["text"].as_str()).collect())
                .unwrap_or_default();
            format!("{}: {text}", i["role"].as_str().unwrap_or_default())
        })
        .collect()
}

fn conversations_on(kind: StoreKind) {
    let Some(store) = TestStore::new(kind) else {
        return;
    };
    let agent = FakeAgent::start();
    let conf = auth_conf("");
    let tether = Tether::start(
        &agent.url(),
        "openai-chat",
        &store.url,
        &["--conf", &conf.arg()],
    );
    let a = Client {
        base: tether.url(),
        auth: format!("Bearer {KEY_A}"),
    };
    let b = Client {
        base: tether.url(),
        auth: format!("Bearer {KEY_B}"),
    };

    // Made with an item and metadata.
    let made = a.ok(
        "POST",
        "/v1/conversations",
        Some(json!({
            "items": [{ "type": "message", "role": "user", "content": "My project is named zebra42." }],
            "metadata": { "topic": "projects" },
        })),
    );
    let id = made["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("conv_"), "{made}");
    assert_eq!(made["object"], "conversation");
    assert_eq!(made["metadata"], json!({ "topic": "projects" }));
    assert!(made["created_at"].as_i64().unwrap() > 1_700_000_000);
    let path = format!("/v1/conversations/{id}");
    assert_eq!(a.ok("GET", &path, None), made);

    // Metadata replaced; ListSessions shows the same metadata for the session.
    let updated = a.ok(
        "POST",
        &path,
        Some(json!({ "metadata": { "topic": "renamed" } })),
    );
    assert_eq!(updated["metadata"], json!({ "topic": "renamed" }));
    assert_eq!(updated["id"], made["id"]);
    let api = Api {
        base: tether.url(),
        key: Some(KEY_A.into()),
    };
    let listed = api.ok("ListSessions", json!({}));
    let row = listed["Sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["SessionId"] == id.as_str())
        .cloned()
        .expect("the conversation is a session");
    assert_eq!(row["Metadata"], json!({ "topic": "renamed" }));

    // Items added are in the agent's next projection.
    let items = format!("{path}/items");
    let added = a.ok(
        "POST",
        &items,
        Some(json!({ "items": [{ "type": "message", "role": "user",
            "content": [{ "type": "input_text", "text": "My project is now named koala7." }] }] })),
    );
    assert_eq!(added["object"], "list");
    assert_eq!(texts(&added), ["user: My project is now named koala7."]);
    let koala = added["data"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(a.turn(&id, "What is my project named?"), "koala7");

    // The items, in both orders and in pages.
    let all = a.ok("GET", &format!("{items}?order=asc"), None);
    let expected = [
        "user: My project is named zebra42.",
        "user: My project is now named koala7.",
        "user: What is my project named?",
        "assistant: koala7",
    ];
    assert_eq!(texts(&all), expected);
    assert_eq!(all["has_more"], false);
    assert_eq!(all["first_id"], all["data"][0]["id"]);
    assert_eq!(all["last_id"], all["data"][3]["id"]);
    let newest_first = a.ok("GET", &items, None);
    let mut reversed = expected.to_vec();
    reversed.reverse();
    assert_eq!(texts(&newest_first), reversed, "desc by default");
    let page = a.ok("GET", &format!("{items}?order=asc&limit=3"), None);
    assert_eq!(texts(&page), expected[..3]);
    assert_eq!(page["has_more"], true);
    let rest = a.ok(
        "GET",
        &format!(
            "{items}?order=asc&limit=3&after={}",
            page["last_id"].as_str().unwrap()
        ),
        None,
    );
    assert_eq!(texts(&rest), expected[3..]);
    assert_eq!(rest["has_more"], false);
    let one = a.ok("GET", &format!("{items}/{koala}"), None);
    assert_eq!(one["id"], koala.as_str());
    assert_eq!(one["type"], "message");
    for (query, param) in [
        ("limit=0", "limit"),
        ("order=up", "order"),
        ("after=x", "after"),
    ] {
        let e = a.error("GET", &format!("{items}?{query}"), None, 400);
        assert_eq!(e["param"], param, "{query}");
    }

    // An item deleted: in no read and no projection, and the log says who deleted it.
    let after_delete = a.ok("DELETE", &format!("{items}/{koala}"), None);
    assert_eq!(after_delete["object"], "conversation");
    let e = a.error("GET", &format!("{items}/{koala}"), None, 404);
    assert_eq!(e["code"], "item_not_found");
    let left = a.ok("GET", &format!("{items}?order=asc"), None);
    assert_eq!(
        texts(&left),
        [expected[0], expected[2], expected[3]],
        "the deleted item is not listed"
    );
    let events = api.ok(
        "ListSessionEvents",
        json!({ "SessionId": id, "Limit": 500 }),
    );
    let events = events["Events"].as_array().unwrap().clone();
    assert!(
        !events
            .iter()
            .any(|e| e["Content"]["text"] == "My project is now named koala7."),
        "ListSessionEvents hides the deleted item"
    );
    let deleted = events
        .iter()
        .find(|e| e["EventType"] == "item_deleted")
        .expect("the deletion is in the log");
    assert_eq!(deleted["Content"]["item_id"], koala.as_str());
    assert_eq!(deleted["Metadata"]["actor"], "key:a", "who deleted it");
    assert_eq!(a.turn(&id, "What is my project named?"), "zebra42");
    let sent = history_sent(agent.requests().last().expect("the agent was asked"));
    assert!(
        sent.iter()
            .any(|(_, text)| text == "My project is named zebra42."),
        "{sent:?}"
    );
    assert!(
        !sent
            .iter()
            .any(|(role, text)| role == "user" && text.contains("koala7")),
        "the deleted item is not in the agent's projection: {sent:?}"
    );
    let logged = store.events("acct-a", &id);
    assert!(
        logged.iter().any(|e| e.event_type == EventType::Message
            && e.content["text"] == "My project is now named koala7."),
        "the log keeps the deleted item"
    );

    // Another account's conversation is not found, whatever it asks.
    for (method, p) in [
        ("GET", path.clone()),
        ("GET", items.clone()),
        ("DELETE", path.clone()),
    ] {
        let e = b.error(method, &p, None, 404);
        assert_eq!(e["code"], "conversation_not_found", "{method} {p}");
    }
    let e = b.error("POST", &items, Some(json!({ "items": [] })), 404);
    assert_eq!(e["code"], "conversation_not_found");

    // Bad input changes nothing.
    let before = store.events("acct-a", &id).len();
    for body in [
        json!({ "metadata": { "k": 1 } }),
        json!({ "metadata": "x" }),
        json!({}),
    ] {
        let e = a.error("POST", &path, Some(body.clone()), 400);
        assert_eq!(e["param"], "metadata", "{body}");
    }
    let e = a.error(
        "POST",
        &items,
        Some(json!({ "items": [{ "type": "message", "role": "robot", "content": "x" }] })),
        400,
    );
    assert_eq!(e["param"], "items[0].role");
    let e = a.error("POST", &items, Some(json!({ "items": [] })), 400);
    assert_eq!(e["param"], "items");
    assert_eq!(
        store.events("acct-a", &id).len(),
        before,
        "nothing was written"
    );
    let e = a.error("GET", "/v1/conversations/conv_nope", None, 404);
    assert_eq!(e["code"], "conversation_not_found");
    let e = a.error("GET", "/v1/conversations/bad%20id", None, 400);
    assert_eq!(e["code"], "invalid_id");

    // The conversation deleted: every read says not found, the log keeps it all.
    let response_id = {
        let body = json!({ "model": "fake", "conversation": id, "input": "Reply with OK" });
        a.ok("POST", "/v1/responses", Some(body))["id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let gone = a.ok("DELETE", &path, None);
    assert_eq!(
        gone,
        json!({ "id": id, "object": "conversation.deleted", "deleted": true })
    );
    for p in [&path, &items] {
        let e = a.error("GET", p, None, 404);
        assert_eq!(e["code"], "conversation_not_found");
    }
    let e = a.error("GET", &format!("/v1/responses/{response_id}"), None, 404);
    assert_eq!(e["code"], "response_not_found");
    let body = json!({ "model": "fake", "conversation": id, "input": "hello" });
    let e = a.error("POST", "/v1/responses", Some(body), 404);
    assert_eq!(e["code"], "conversation_not_found");
    let body = json!({ "model": "fake", "previous_response_id": response_id, "input": "hello" });
    let e = a.error("POST", "/v1/responses", Some(body), 404);
    assert_eq!(e["code"], "previous_response_not_found");
    let (status, _) = api.call("ListSessionEvents", json!({ "SessionId": id }));
    assert_eq!(status, 404);
    let listed = api.ok("ListSessions", json!({}));
    assert!(
        !listed["Sessions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["SessionId"] == id.as_str()),
        "ListSessions leaves it out"
    );
    let subscribe = get(
        &format!(
            "{}/agentengine/api/v1/SubscribeRunEvents?SessionId={id}",
            tether.url()
        ),
        &[("authorization", &a.auth)],
    );
    assert_eq!(subscribe.status, 404, "{}", subscribe.body);
    let logged = store.events("acct-a", &id);
    let last = logged.last().unwrap();
    assert_eq!(last.event_type, EventType::SessionDeleted);
    assert_eq!(last.metadata["actor"], "key:a");
    drop(tether);
}

#[test]
fn conversations_are_sessions_served_from_the_log_sqlite() {
    conversations_on(StoreKind::Sqlite);
}

#[test]
fn conversations_are_sessions_served_from_the_log_postgres() {
    conversations_on(StoreKind::Postgres);
}
