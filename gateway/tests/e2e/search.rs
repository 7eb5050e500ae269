//! Finding sessions end to end, on both stores: `ListSessions`' filters (last run's
//! status, metadata set through the Conversations API and `PatchSession`, archived, time)
//! and its text search, `tether sessions list` with the same filters, and the text index
//! in step with deletes (a deleted session or conversation item cannot be found).

use serde_json::{json, Value};

use crate::harness::*;

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

/// The ids `ListSessions` answers for `params`, in order.
fn listed(api: &Api, params: Value) -> Vec<String> {
    let data = api.ok("ListSessions", params);
    let ids: Vec<String> = data["Sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["SessionId"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(data["Total"], ids.len(), "{data}");
    ids
}

/// A Responses turn as `key`'s account; its status.
fn turn(tether: &Tether, key: &str, session: &str, text: &str) -> u16 {
    let body = json!({ "model": "fake", "conversation": session, "input": text });
    let bearer = format!("Bearer {key}");
    post(
        &format!("{}/v1/responses", tether.url()),
        &body.to_string(),
        &[("authorization", &bearer)],
    )
    .status
}

fn sessions_are_found_by_filters_and_text(kind: StoreKind) {
    let Some(store) = TestStore::new(kind) else {
        return;
    };
    let (account, key, auth_table) = own_account("search");
    let conf = Conf::write(&auth_table);
    let agent = FakeAgent::start();
    let tether = Tether::start(
        &agent.url(),
        "openai-chat",
        &store.url,
        &["--conf", &conf.arg()],
    );
    let api = Api {
        base: tether.url(),
        key: Some(key.clone()),
    };
    let bearer = format!("Bearer {key}");
    let auth = [("authorization", bearer.as_str())];
    let (done, failed, patched) = (unique("done"), unique("failed"), unique("patched"));
    assert_eq!(
        turn(&tether, &key, &done, "Tell me about the marmalade factory"),
        200
    );
    assert_ne!(
        turn(&tether, &key, &failed, "error in the marmalade pipeline"),
        200
    );
    assert_eq!(turn(&tether, &key, &patched, "Reply with OK"), 200);
    for s in [&done, &failed, &patched] {
        store.wait_for_terminal(&account, s, 1);
    }
    // A conversation created with metadata through the Conversations API.
    let created = post(
        &format!("{}/v1/conversations", tether.url()),
        &json!({ "metadata": { "team": "blue" }, "items": [
            { "type": "message", "role": "user", "content": "quarterly marmalade report" }] })
        .to_string(),
        &auth,
    );
    assert_eq!(created.status, 200, "{}", created.body);
    let conv = created.json()["id"].as_str().unwrap().to_owned();

    assert_eq!(listed(&api, json!({ "Query": "marmalade" })).len(), 3);
    assert_eq!(
        listed(&api, json!({ "Query": "Marmalade FACTORY" })),
        [done.as_str()]
    );
    assert_eq!(
        listed(
            &api,
            json!({ "Query": "marmalade", "LastRunStatus": "failed" })
        ),
        [failed.as_str()]
    );
    assert_eq!(
        listed(&api, json!({ "Metadata": { "team": "blue" } })),
        [conv.as_str()]
    );

    // PatchSession sets and removes keys; the listing filters on the result.
    let patch = api.ok(
        "PatchSession",
        json!({ "SessionId": patched, "Metadata": { "team": "blue", "tier": "gold" } }),
    );
    assert_eq!(patch["Metadata"], json!({ "team": "blue", "tier": "gold" }));
    let blue = listed(&api, json!({ "Metadata": { "team": "blue" } }));
    assert_eq!(
        blue,
        [patched.as_str(), conv.as_str()],
        "most recently active first"
    );
    let patch = api.ok(
        "PatchSession",
        json!({ "SessionId": patched, "Metadata": { "team": null } }),
    );
    assert_eq!(patch["Metadata"], json!({ "tier": "gold" }));
    assert_eq!(
        listed(&api, json!({ "Metadata": { "team": "blue" } })),
        [conv.as_str()]
    );
    let row = &api.ok("ListSessions", json!({ "Metadata": { "tier": "gold" } }))["Sessions"][0];
    assert_eq!(row["Metadata"], json!({ "tier": "gold" }));
    assert_eq!(row["LastRunStatus"], "completed");
    // Refusals change nothing.
    let events = store.events(&account, &patched).len();
    for bad in [
        json!({ "SessionId": patched, "Metadata": { "n": 1 } }),
        json!({ "SessionId": patched, "Metadata": { "k": "v".repeat(513) } }),
    ] {
        let (status, _) = api.call("PatchSession", bad);
        assert_eq!(status, 400);
    }
    let (status, _) = api.call(
        "PatchSession",
        json!({ "SessionId": "no-such", "Metadata": {} }),
    );
    assert_eq!(status, 404);
    api.ok("ArchiveSession", json!({ "SessionId": patched }));
    let (status, envelope) = api.call(
        "PatchSession",
        json!({ "SessionId": patched, "Metadata": { "a": "b" } }),
    );
    assert_eq!(status, 409);
    assert_eq!(envelope["Data"]["code"], "session_archived");
    assert_eq!(store.events(&account, &patched).len(), events);
    assert!(listed(&api, json!({ "Metadata": { "tier": "gold" } })).is_empty());
    assert_eq!(
        listed(
            &api,
            json!({ "Metadata": { "tier": "gold" }, "IncludeArchived": true })
        ),
        [patched.as_str()]
    );
    assert_eq!(
        listed(&api, json!({ "Archived": true })),
        [patched.as_str()]
    );
    for bad in [
        json!({ "LastRunStatus": "done" }),
        json!({ "CreatedAfter": "yesterday" }),
        json!({ "Archived": true, "IncludeArchived": true }),
        json!({ "Metadata": { "a\"b": "c" } }),
    ] {
        let (status, _) = api.call("ListSessions", bad.clone());
        assert_eq!(status, 400, "{bad}");
    }
    // Time: everything is newer than a minute ago, nothing is newer than now.
    let now = chrono::Utc::now();
    let minute_ago = (now - chrono::Duration::minutes(1)).to_rfc3339();
    assert_eq!(
        listed(
            &api,
            json!({ "CreatedAfter": minute_ago, "IncludeArchived": true })
        )
        .len(),
        4
    );
    assert!(listed(&api, json!({ "ActiveAfter": now.to_rfc3339() })).is_empty());

    // `tether sessions list` passes the same filters.
    let url = tether.url();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tether"))
        .args([
            "sessions",
            "list",
            "--search",
            "marmalade",
            "--status",
            "completed",
        ])
        .args(["--json", "--url", &url, "--api-key", &key])
        .env_remove("TETHER_URL")
        .env_remove("TETHER_API_KEY")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let data: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(data["Sessions"][0]["SessionId"], done.as_str(), "{data}");
    assert_eq!(data["Total"], 1);

    // What is deleted cannot be found: a hard-deleted session, a deleted item.
    api.ok("DeleteSession", json!({ "SessionId": done }));
    assert!(listed(&api, json!({ "Query": "factory" })).is_empty());
    let deleted = request(
        "DELETE",
        &format!("{}/v1/conversations/{conv}/items/item_2", tether.url()),
        None,
        &auth,
    );
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    assert!(listed(&api, json!({ "Query": "quarterly" })).is_empty());
    assert_eq!(
        listed(&api, json!({ "Query": "marmalade" })),
        [failed.as_str()]
    );
}

#[test]
fn sessions_are_found_by_filters_and_text_sqlite() {
    sessions_are_found_by_filters_and_text(StoreKind::Sqlite);
}

#[test]
fn sessions_are_found_by_filters_and_text_postgres() {
    sessions_are_found_by_filters_and_text(StoreKind::Postgres);
}
