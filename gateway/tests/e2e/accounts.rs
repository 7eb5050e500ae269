//! The account boundary through every surface: account B, naming account A's ids, gets
//! "not found" (or its own, separate session) and never A's data.

use serde_json::{json, Value};

use crate::auth::{authed_gateway, bearer, KEY_A, KEY_B};
use crate::harness::*;

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDRtiny";

pub fn png_data_url() -> String {
    use base64::Engine;
    format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(PNG)
    )
}

pub fn control(tether: &Tether, key: &str, action: &str, body: Value) -> Reply {
    let (k, v) = bearer(key);
    post(
        &format!("{}/agentengine/api/v1/{action}", tether.url()),
        &body.to_string(),
        &[(k, &v)],
    )
}

fn run(tether: &Tether, key: &str, body: Value) -> Reply {
    let (k, v) = bearer(key);
    post(
        &format!("{}/v1/responses", tether.url()),
        &body.to_string(),
        &[(k, &v)],
    )
}

fn not_found(r: &Reply, what: &str) {
    assert_eq!(r.status, 404, "{what}: {}", r.body);
    assert!(
        !r.body.contains("zebra42"),
        "{what}: leaked A's data: {}",
        r.body
    );
}

#[test]
fn account_b_never_sees_account_a() {
    let (store, agent, tether) = authed_gateway("");

    // Account A: a conversation named "shared", with a secret and an attachment.
    let a = run(
        &tether,
        KEY_A,
        json!({ "input": "My project is named zebra42", "conversation": "shared" }),
    );
    assert_eq!(a.status, 200, "{}", a.body);
    let response_id = a.json()["id"].as_str().unwrap().to_owned();
    let invocation = a.header("x-invocation-id").unwrap().to_owned();
    let run_id = a.header("x-run-id").unwrap().to_owned();
    let upload = control(
        &tether,
        KEY_A,
        "UploadAttachment",
        json!({ "Data": png_data_url() }),
    );
    assert_eq!(upload.status, 200, "{}", upload.body);
    let uri = upload.json()["Data"]["FileUri"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(uri.starts_with("tether-upload://"), "{uri}");
    let checkpoints = control(
        &tether,
        KEY_A,
        "ListSessionCheckpoints",
        json!({ "SessionId": "shared" }),
    );
    assert_eq!(checkpoints.status, 200, "{}", checkpoints.body);
    let checkpoint = checkpoints.json()["Data"]["Checkpoints"][0]["CheckpointId"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("a checkpoint: {}", checkpoints.body));
    // A can read all of it.
    assert_eq!(
        control(
            &tether,
            KEY_A,
            "ListSessionEvents",
            json!({ "SessionId": "shared" })
        )
        .status,
        200
    );
    let (k, v) = bearer(KEY_A);
    let mine = get(
        &format!(
            "{}/agentengine/api/v1/AttachmentContent?FileUri={uri}",
            tether.url()
        ),
        &[(k, &v)],
    );
    assert_eq!(mine.status, 200);
    assert_eq!(mine.header("content-type"), Some("image/png"));

    // Account B, naming every one of A's ids.
    let list = control(&tether, KEY_B, "ListSessions", json!({}));
    assert_eq!(list.status, 200);
    assert_eq!(list.json()["Data"]["Total"], 0, "{}", list.body);
    not_found(
        &control(
            &tether,
            KEY_B,
            "ListSessionEvents",
            json!({ "SessionId": "shared" }),
        ),
        "ListSessionEvents",
    );
    not_found(
        &control(
            &tether,
            KEY_B,
            "ListSessionCheckpoints",
            json!({ "SessionId": "shared" }),
        ),
        "ListSessionCheckpoints",
    );
    not_found(
        &control(
            &tether,
            KEY_B,
            "ListToolReceipts",
            json!({ "SessionId": "shared" }),
        ),
        "ListToolReceipts",
    );
    let cancel = control(
        &tether,
        KEY_B,
        "CancelRun",
        json!({ "InvocationId": invocation, "SessionId": "shared" }),
    );
    assert!(
        cancel.status == 404 || cancel.json()["Data"]["Found"] == false,
        "CancelRun: {}",
        cancel.body
    );
    let key = json!({ "SessionId": "shared", "RunId": run_id, "CheckpointId": checkpoint });
    not_found(
        &control(&tether, KEY_B, "GetCheckpointResumePreview", key.clone()),
        "GetCheckpointResumePreview",
    );
    not_found(&control(&tether, KEY_B, "ResumeRun", key), "ResumeRun");
    let (k, v) = bearer(KEY_B);
    let sub = get(
        &format!(
            "{}/agentengine/api/v1/SubscribeRunEvents?SessionId=shared&InvocationId={invocation}",
            tether.url()
        ),
        &[(k, &v)],
    );
    not_found(&sub, "SubscribeRunEvents");
    not_found(
        &get(
            &format!("{}/v1/responses/{response_id}", tether.url()),
            &[(k, &v)],
        ),
        "retrieve",
    );
    not_found(
        &get(
            &format!("{}/v1/responses/{response_id}?stream=true", tether.url()),
            &[(k, &v)],
        ),
        "retrieve stream",
    );
    not_found(
        &post(
            &format!("{}/v1/responses/{response_id}/cancel", tether.url()),
            "",
            &[(k, &v)],
        ),
        "cancel",
    );
    not_found(
        &get(
            &format!(
                "{}/agentengine/api/v1/AttachmentContent?FileUri={uri}",
                tether.url()
            ),
            &[(k, &v)],
        ),
        "AttachmentContent",
    );
    not_found(
        &run(
            &tether,
            KEY_B,
            json!({ "input": "hi", "previous_response_id": response_id }),
        ),
        "previous_response_id",
    );

    // B naming A's conversation gets its own session: the agent sees only B's turn.
    let before = agent.requests().len();
    for body in [
        json!({ "input": "What is my project named?", "conversation": "shared" }),
        json!({ "input": "What is my project named?", "session_id": "shared" }),
    ] {
        let b = run(&tether, KEY_B, body);
        assert_eq!(b.status, 200, "{}", b.body);
        assert!(!b.body.contains("zebra42"), "{}", b.body);
    }
    let chat = post(
        &format!("{}/v1/chat/completions", tether.url()),
        &json!({ "messages": [{ "role": "user", "content": "What is my project named?" }], "session_id": "shared" }).to_string(),
        &[(k, &v)],
    );
    assert_eq!(chat.status, 200, "{}", chat.body);
    for request in &agent.requests()[before..] {
        assert_eq!(request["headers"]["x-account-id"], "acct-b");
        let history = history_sent(request);
        assert!(
            history.iter().all(|(_, text)| !text.contains("zebra42")),
            "B's agent request carries A's history: {history:?}"
        );
    }
    // A's session is untouched by B's turns.
    let a_events = store.events("acct-a", "shared");
    assert!(a_events.iter().all(|e| e.account_id == "acct-a"));
    assert_eq!(a_events.iter().filter(|e| e.is_terminal()).count(), 1);
    assert_eq!(
        store
            .events("acct-b", "shared")
            .iter()
            .filter(|e| e.is_terminal())
            .count(),
        3
    );
}
