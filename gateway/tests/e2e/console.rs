//! What the sessions console stands on, through the real binary: its files under `/ui/`
//! (policy and cache headers, served without a credential), `GetAgentUiBootstrap` flags
//! derived from configuration, protocol and the actions that exist, feedback stored with
//! its run (both stores), workspace files confined to the account's root (the traversal
//! table), `ListSessions`' run states, and bad input to each new action.

use std::path::Path;

use serde_json::{json, Value};
use session_log::Rating;

use crate::accounts::control as control_as;
use crate::auth::{auth_conf, authed_gateway, bearer, KEY_A, KEY_B};
use crate::control::control;
use crate::harness::*;

/// An envelope refusal: status, `Code` = status, the action named, and `Data`.
fn refused(r: &Reply, status: u16, action: &str) -> Value {
    assert_eq!(r.status, status, "{action}: {}", r.body);
    let v = r.json();
    assert_eq!(v["Code"], status, "{}", r.body);
    assert_eq!(v["Action"], action, "{}", r.body);
    assert!(v["RequestId"].as_str().unwrap().starts_with("req_"));
    v["Data"].clone()
}

fn data(r: &Reply) -> Value {
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["Code"], 0, "{}", r.body);
    r.json()["Data"].clone()
}

/// A turn through `/v1/responses`: (session, response id, invocation id).
fn turn(tether: &Tether, session: &str, input: &str) -> (String, String, String) {
    let r = post_json(
        &format!("{}/v1/responses", tether.url()),
        &json!({ "model": "fake", "conversation": session, "input": input }),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    (
        r.session_id.clone().unwrap(),
        r.json()["id"].as_str().unwrap().to_owned(),
        r.header("x-invocation-id").unwrap().to_owned(),
    )
}

#[test]
fn console_files_are_served_with_a_strict_policy_and_revalidated() {
    let (_store, agent, tether) = authed_gateway("");
    let base = tether.url();

    // The page loads without a credential (it asks for one); its data does not.
    let page = get(&format!("{base}/ui/"), &[]);
    assert_eq!(page.status, 200);
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert!(page
        .body
        .contains("<script type=\"module\" src=\"js/app.js\">"));
    let csp = page.header("content-security-policy").unwrap();
    for directive in [
        "default-src 'self'",
        "script-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(directive), "{directive} in {csp}");
    }
    assert!(
        !csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"),
        "{csp}"
    );
    assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(page.header("cache-control"), Some("no-cache"));
    let boot = control(&tether, "GetAgentUiBootstrap", json!({}));
    assert_eq!(boot.status, 401, "{}", boot.body);

    for (path, content_type) in [
        ("/ui/style.css", "text/css; charset=utf-8"),
        ("/ui/js/app.js", "text/javascript; charset=utf-8"),
        ("/ui/js/session.js", "text/javascript; charset=utf-8"),
        ("/ui/icon.svg", "image/svg+xml"),
    ] {
        let r = get(&format!("{base}{path}"), &[]);
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(r.header("content-type"), Some(content_type), "{path}");
        let etag = r.header("etag").unwrap().to_owned();
        assert!(etag.starts_with('"') && etag.len() > 10, "{etag}");
        // Revalidation: the same validator is a 304 with no body, another one the file.
        let again = get(&format!("{base}{path}"), &[("if-none-match", &etag)]);
        assert_eq!((again.status, again.body.as_str()), (304, ""), "{path}");
        let stale = get(&format!("{base}{path}"), &[("if-none-match", "\"old\"")]);
        assert_eq!(
            (stale.status, stale.body.len()),
            (200, r.body.len()),
            "{path}"
        );
    }
    let bare = get(&format!("{base}/ui"), &[]);
    assert_eq!(bare.status, 200, "ureq follows the redirect to /ui/");
    assert!(bare.body.contains("Tether console"));
    assert_eq!(get(&format!("{base}/ui/nope.js"), &[]).status, 404);
    let post_page = post(&format!("{base}/ui/"), "{}", &[]);
    assert_eq!(post_page.status, 405);
    assert_eq!(post_page.header("allow"), Some("GET, HEAD"));
    assert!(
        agent.requests().is_empty(),
        "nothing of the console reaches the agent"
    );
}

#[test]
fn bootstrap_flags_follow_configuration_protocol_and_the_actions_that_exist() {
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let agent = FakeAgent::start();
    let workspace = tempfile::tempdir().unwrap();
    let ws = workspace.path().to_str().unwrap();
    let tether = Tether::start(
        &agent.url(),
        "openai-chat",
        &store.url,
        &["--workspace-dir", ws, "--model", "demo-agent"],
    );

    let boot = data(&control(&tether, "GetAgentUiBootstrap", json!({})));
    assert_eq!(boot["AccountId"], "local");
    assert_eq!(boot["TetherVersion"], env!("CARGO_PKG_VERSION"));
    assert_eq!(
        boot["Agent"],
        json!({ "Name": "demo-agent", "Protocol": "openai-chat", "RunPath": "/v1/responses" })
    );
    assert_eq!(
        boot["RuntimeCapabilities"]["ResumeRun"]["ResumeMode"],
        "history_replay"
    );
    assert_eq!(
        boot["RunLifecycle"],
        json!({ "Checkpoints": true, "CheckpointResume": true, "CheckpointResumePreview": true, "Cancel": true, "Subscribe": true })
    );
    assert_eq!(boot["Features"]["Uploads"], true);
    assert_eq!(boot["Features"]["Feedback"], true);
    assert_eq!(boot["Features"]["WorkspaceFiles"], true);
    // Fork and Compaction are on exactly when the gateway answers their actions (an
    // OpenAI agent writes its own summaries).
    for (flag, action) in [("Fork", "ForkSession"), ("Compaction", "CompactSession")] {
        let r = control(&tether, action, json!({}));
        let exists = !(r.status == 404
            && r.json()["Message"]
                .as_str()
                .unwrap()
                .starts_with("unknown action"));
        assert_eq!(
            boot["Features"][flag], exists,
            "{flag}: {action} answered {}",
            r.body
        );
    }

    // With a session: whether it has a checkpoint that can be resumed now.
    let (plain, _, _) = turn(&tether, "boot-plain", "Reply with OK");
    let with_session = data(&control(
        &tether,
        "GetAgentUiBootstrap",
        json!({ "SessionId": plain }),
    ));
    assert_eq!(with_session["SessionId"], plain);
    assert_eq!(
        with_session["RunLifecycle"]["Checkpoints"], false,
        "a finished plain turn has only a terminal checkpoint"
    );
    let (tools, _, _) = turn(&tether, "boot-tools", "tool:lookup");
    let no_result = data(&control(
        &tether,
        "GetAgentUiBootstrap",
        json!({ "SessionId": tools }),
    ));
    assert_eq!(
        no_result["RunLifecycle"]["Checkpoints"], false,
        "a tool call without its result cannot be resumed"
    );
    let result = post_json(
        &format!("{}/v1/responses", tether.url()),
        &json!({ "conversation": tools, "input": [{"type": "function_call_output", "call_id": "call_1", "output": "42"}] }),
    );
    assert_eq!(result.status, 200, "{}", result.body);
    let with_tools = data(&control(
        &tether,
        "GetAgentUiBootstrap",
        json!({ "SessionId": tools }),
    ));
    assert_eq!(
        with_tools["RunLifecycle"]["Checkpoints"], true,
        "after a tool call and its result the run can be resumed"
    );

    // Bad input: the envelope error.
    refused(
        &control(&tether, "GetAgentUiBootstrap", json!({ "SessionId": 7 })),
        400,
        "GetAgentUiBootstrap",
    );
    refused(
        &control(&tether, "GetAgentUiBootstrap", json!({ "SessionId": "" })),
        400,
        "GetAgentUiBootstrap",
    );
    refused(
        &control(
            &tether,
            "GetAgentUiBootstrap",
            json!({ "SessionId": "nope" }),
        ),
        404,
        "GetAgentUiBootstrap",
    );
    let malformed = post(
        &format!("{}/agentengine/api/v1/GetAgentUiBootstrap", tether.url()),
        "{\"SessionId\":",
        &[],
    );
    refused(&malformed, 400, "GetAgentUiBootstrap");
    drop(tether);

    // In front of a stateful protocol: no run path, no uploads, no resume; no workspace.
    let a2a = Tether::start(&agent.url(), "a2a", &store.url, &[]);
    let boot = data(&control(&a2a, "GetAgentUiBootstrap", json!({})));
    assert_eq!(boot["Agent"]["Protocol"], "a2a");
    assert_eq!(boot["Agent"]["RunPath"], Value::Null);
    assert_eq!(
        boot["RuntimeCapabilities"]["ResumeRun"]["ResumeMode"],
        "unsupported"
    );
    assert_eq!(boot["RunLifecycle"]["CheckpointResume"], false);
    assert_eq!(boot["Features"]["Uploads"], false);
    assert_eq!(boot["Features"]["WorkspaceFiles"], false);
    // A fork works in front of every protocol (its first turn restores it into the agent);
    // compaction needs a summarizer, which an A2A agent is not: the console's Compact
    // button sends no summary of its own, so it is offered only with a summarizer_url.
    assert_eq!(boot["Features"]["Fork"], true);
    assert_eq!(boot["Features"]["Compaction"], false);
    drop(a2a);
    let summarized = Tether::start(
        &agent.url(),
        "a2a",
        &store.url,
        &["--compaction-summarizer-url", &agent.url()],
    );
    let boot = data(&control(&summarized, "GetAgentUiBootstrap", json!({})));
    assert_eq!(boot["Features"]["Compaction"], true);
}

fn feedback_is_stored_with_its_run(kind: StoreKind) {
    let Some(store) = TestStore::new(kind) else {
        return;
    };
    let agent = FakeAgent::start();
    let tether = Tether::start(&agent.url(), "openai-chat", &store.url, &[]);
    let session = format!("fb-{}", uuid::Uuid::new_v4().simple());
    let (_, response_1, invocation_1) = turn(
        &tether,
        &session,
        "My project is named zebra42. Reply with OK.",
    );
    let (_, response_2, invocation_2) = turn(&tether, &session, "What is my project named?");
    let (other, _, other_invocation) = turn(&tether, &format!("{session}-other"), "Reply with OK");

    let up = data(&control(
        &tether,
        "CreateFeedback",
        json!({ "SessionId": session, "InvocationId": invocation_1, "Rating": "up", "Comment": "short and right" }),
    ));
    assert_eq!(up["Rating"], "up");
    assert_eq!(up["InvocationId"], invocation_1);
    assert_eq!(
        up["ResponseId"], response_1,
        "named by the response id the client saw"
    );
    assert!(up["FeedbackId"].as_str().unwrap().starts_with("fb_"));
    let down = data(&control(
        &tether,
        "CreateFeedback",
        json!({ "SessionId": session, "ResponseId": response_2, "Rating": "down", "Comment": "x".repeat(2000) }),
    ));
    assert_eq!(down["InvocationId"], invocation_2);
    assert_eq!(
        down["RunId"],
        format!("run_{}", &response_2["resp_".len()..])
    );

    // Stored in the session log's database, per account, newest first.
    let (stored, total) = store.with_store(async |s| {
        s.list_feedback("local", Some(&session), 0, 10)
            .await
            .unwrap()
    });
    assert_eq!(total, 2);
    assert_eq!(stored[0].rating, Rating::Down);
    assert_eq!(stored[1].rating, Rating::Up);
    assert_eq!(stored[1].comment.as_deref(), Some("short and right"));
    assert_eq!(
        stored[1].invocation_id.as_deref(),
        Some(invocation_1.as_str())
    );
    assert_eq!(stored[0].response_id.as_deref(), Some(response_2.as_str()));

    let listed = data(&control(
        &tether,
        "ListFeedback",
        json!({ "SessionId": session }),
    ));
    assert_eq!(listed["Total"], 2);
    assert_eq!(listed["Feedback"][0]["FeedbackId"], down["FeedbackId"]);
    assert_eq!(listed["Feedback"][1], up);
    let page = data(&control(
        &tether,
        "ListFeedback",
        json!({ "SessionId": session, "Offset": 1, "Limit": 1 }),
    ));
    assert_eq!(
        (
            page["Total"].clone(),
            page["Feedback"][0]["FeedbackId"].clone()
        ),
        (json!(2), up["FeedbackId"].clone())
    );

    // Bad input changes nothing.
    let bad: Vec<(Value, u16)> = vec![
        (json!({}), 400),
        (json!({ "SessionId": session, "Rating": "up" }), 400),
        (
            json!({ "SessionId": session, "InvocationId": invocation_1 }),
            400,
        ),
        (
            json!({ "SessionId": session, "InvocationId": invocation_1, "Rating": "meh" }),
            400,
        ),
        (
            json!({ "SessionId": session, "InvocationId": invocation_1, "Rating": 1 }),
            400,
        ),
        (
            json!({ "SessionId": session, "InvocationId": invocation_1, "Rating": "up", "Comment": "x".repeat(2001) }),
            400,
        ),
        (
            json!({ "SessionId": session, "InvocationId": invocation_1, "Rating": "up", "Comment": 5 }),
            400,
        ),
        (
            json!({ "SessionId": "", "InvocationId": invocation_1, "Rating": "up" }),
            400,
        ),
        (
            json!({ "SessionId": session, "InvocationId": "", "Rating": "up" }),
            400,
        ),
        (
            json!({ "SessionId": session, "InvocationId": invocation_1, "ResponseId": response_2, "Rating": "up" }),
            400,
        ),
        (
            json!({ "SessionId": "nope", "InvocationId": invocation_1, "Rating": "up" }),
            404,
        ),
        (
            json!({ "SessionId": session, "InvocationId": "inv_nope", "Rating": "up" }),
            404,
        ),
        (
            json!({ "SessionId": session, "ResponseId": "resp_nope", "Rating": "up" }),
            404,
        ),
        (
            json!({ "SessionId": session, "InvocationId": other_invocation, "Rating": "up" }),
            404,
        ),
        (
            json!({ "SessionId": other, "InvocationId": invocation_1, "Rating": "up" }),
            404,
        ),
    ];
    for (body, status) in bad {
        refused(
            &control(&tether, "CreateFeedback", body.clone()),
            status,
            "CreateFeedback",
        );
        let (_, total) = store.with_store(async |s| {
            s.list_feedback("local", Some(&session), 0, 1)
                .await
                .unwrap()
        });
        assert_eq!(total, 2, "{body} changed nothing");
    }
    let raw = post(
        &format!("{}/agentengine/api/v1/CreateFeedback", tether.url()),
        "[1]",
        &[],
    );
    refused(&raw, 400, "CreateFeedback");
    for body in [
        json!({ "Limit": 0 }),
        json!({ "Limit": 201 }),
        json!({ "Offset": -1 }),
        json!({ "SessionId": 3 }),
    ] {
        refused(&control(&tether, "ListFeedback", body), 400, "ListFeedback");
    }
    refused(
        &control(&tether, "ListFeedback", json!({ "SessionId": "nope" })),
        404,
        "ListFeedback",
    );
}

#[test]
fn feedback_is_stored_with_its_run_on_sqlite() {
    feedback_is_stored_with_its_run(StoreKind::Sqlite);
}

#[test]
fn feedback_is_stored_with_its_run_on_postgres() {
    feedback_is_stored_with_its_run(StoreKind::Postgres);
}

#[test]
fn feedback_and_bootstrap_are_per_account() {
    let (_store, _agent, tether) = authed_gateway("");
    let (k, v) = bearer(KEY_A);
    let r = post(
        &format!("{}/v1/responses", tether.url()),
        &json!({ "model": "fake", "conversation": "a-fb", "input": "Reply with OK" }).to_string(),
        &[(k, &v)],
    );
    let invocation = r.header("x-invocation-id").unwrap().to_owned();
    data(&control_as(
        &tether,
        KEY_A,
        "CreateFeedback",
        json!({ "SessionId": "a-fb", "InvocationId": invocation, "Rating": "up" }),
    ));
    assert_eq!(
        data(&control_as(
            &tether,
            KEY_A,
            "GetAgentUiBootstrap",
            json!({})
        ))["AccountId"],
        "acct-a"
    );

    // B names A's session and invocation: not found, and B's list is empty.
    let body = json!({ "SessionId": "a-fb", "InvocationId": invocation, "Rating": "down" });
    refused(
        &control_as(&tether, KEY_B, "CreateFeedback", body),
        404,
        "CreateFeedback",
    );
    refused(
        &control_as(
            &tether,
            KEY_B,
            "ListFeedback",
            json!({ "SessionId": "a-fb" }),
        ),
        404,
        "ListFeedback",
    );
    refused(
        &control_as(
            &tether,
            KEY_B,
            "GetAgentUiBootstrap",
            json!({ "SessionId": "a-fb" }),
        ),
        404,
        "GetAgentUiBootstrap",
    );
    assert_eq!(
        data(&control_as(&tether, KEY_B, "ListFeedback", json!({})))["Total"],
        0
    );
    assert_eq!(
        data(&control_as(&tether, KEY_A, "ListFeedback", json!({})))["Total"],
        1
    );
}

#[test]
fn list_sessions_says_each_sessions_latest_run_state() {
    let (store, _agent, tether) = chat_gateway(&[]);
    turn(&tether, "st-done", "Reply with OK");
    let failed = post_json(
        &format!("{}/v1/responses", tether.url()),
        &json!({ "conversation": "st-failed", "input": "error" }),
    );
    assert_ne!(failed.status, 200);
    let mut slow = SseStream::post(
        &format!("{}/v1/responses", tether.url()),
        &json!({ "conversation": "st-slow", "input": "slow:40:100", "stream": true }),
    );
    slow.next_event().unwrap();
    let states = |tether: &Tether| -> Vec<(String, Value)> {
        let list = data(&control(tether, "ListSessions", json!({ "PageSize": 10 })));
        let mut v: Vec<_> = list["Sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["SessionId"].as_str().unwrap().to_owned(),
                    s["LastRunStatus"].clone(),
                )
            })
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    };
    assert_eq!(
        states(&tether),
        vec![
            ("st-done".to_owned(), json!("completed")),
            ("st-failed".to_owned(), json!("failed")),
            ("st-slow".to_owned(), json!("in_progress")),
        ]
    );
    let invocation = slow.invocation_id.clone().unwrap();
    data(&control(
        &tether,
        "CancelRun",
        json!({ "InvocationId": invocation }),
    ));
    store.wait_for_terminal("local", "st-slow", 1);
    assert_eq!(
        states(&tether)[2],
        ("st-slow".to_owned(), json!("cancelled"))
    );
}

/// A workspace for two accounts, and files and links that try to leave it.
fn workspace_fixture(base: &Path) -> std::path::PathBuf {
    let ws = base.join("ws");
    let own = ws.join("acct-a");
    std::fs::create_dir_all(own.join("notes/deeper")).unwrap();
    std::fs::create_dir_all(ws.join("acct-b")).unwrap();
    std::fs::write(own.join("notes/todo.txt"), "buy milk\n").unwrap();
    std::fs::write(own.join("notes/deeper/x.txt"), "x").unwrap();
    std::fs::write(own.join("chart.png"), b"\x89PNG\r\n\x1a\n\0\0\0\rIHDRtiny").unwrap();
    std::fs::write(own.join("report.pdf"), b"%PDF-1.7 ...").unwrap();
    std::fs::write(own.join("page.html"), "<script>alert(1)</script>").unwrap();
    std::fs::write(own.join("blob.bin"), [0u8, 159, 146, 150, 0]).unwrap();
    std::fs::write(own.join("big.txt"), "y".repeat(3000)).unwrap();
    std::fs::write(own.join("caf\u{e9}.txt"), "accent").unwrap();
    std::fs::write(ws.join("acct-b/secret.txt"), "B's secret").unwrap();
    std::fs::write(base.join("outside.txt"), "OUTSIDE-CONTENT").unwrap();
    std::os::unix::fs::symlink(base.join("outside.txt"), own.join("escape")).unwrap();
    std::os::unix::fs::symlink(ws.join("acct-b"), own.join("to-b")).unwrap();
    std::os::unix::fs::symlink(own.join("notes/todo.txt"), own.join("todo-link")).unwrap();
    ws
}

#[test]
fn workspace_files_stay_inside_the_accounts_root() {
    let base = tempfile::tempdir().unwrap();
    let ws = workspace_fixture(&base.path().canonicalize().unwrap());
    let conf = auth_conf("[limits]\nattachment_max_bytes = 2048\n");
    let (_store, agent, tether) = chat_gateway(&[
        "--conf",
        &conf.arg(),
        "--workspace-dir",
        ws.to_str().unwrap(),
    ]);
    let content = |key: &str, raw_query: &str| -> Reply {
        let (k, v) = bearer(key);
        get(
            &format!(
                "{}/agentengine/api/v1/AttachmentContent?FileUri={raw_query}",
                tether.url()
            ),
            &[(k, &v)],
        )
    };

    let root = data(&control_as(&tether, KEY_A, "ListWorkspaceFiles", json!({})));
    let names: Vec<(&str, bool)> = root["Files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["Name"].as_str().unwrap(),
                f["IsDirectory"].as_bool().unwrap(),
            )
        })
        .collect();
    // Directories first, then names; links are not listed (none is ever followed, not
    // even one to a file inside: it could be re-pointed between a check and a read).
    assert_eq!(
        names,
        vec![
            ("notes", true),
            ("big.txt", false),
            ("blob.bin", false),
            ("caf\u{e9}.txt", false),
            ("chart.png", false),
            ("page.html", false),
            ("report.pdf", false),
        ]
    );
    assert_eq!(root["Path"], "");
    let notes = data(&control_as(
        &tether,
        KEY_A,
        "ListWorkspaceFiles",
        json!({ "Path": "notes" }),
    ));
    assert_eq!(notes["Path"], "notes");
    assert_eq!(notes["Files"][0]["Path"], "notes/deeper");
    assert_eq!(notes["Files"][1]["Path"], "notes/todo.txt");
    assert_eq!(notes["Files"][1]["SizeBytes"], 9);

    // Reading: typed by content; only images and plain text inline; never sniffable,
    // never embeddable by another site, sandboxed when opened.
    for (query, content_type, inline) in [
        ("notes/todo.txt", "text/plain; charset=utf-8", true),
        ("notes%2Ftodo.txt", "text/plain; charset=utf-8", true),
        ("chart.png", "image/png", true),
        ("page.html", "text/plain; charset=utf-8", true),
        ("report.pdf", "application/pdf", false),
        ("blob.bin", "application/octet-stream", false),
        ("caf%C3%A9.txt", "text/plain; charset=utf-8", true),
    ] {
        let r = content(KEY_A, query);
        assert_eq!(r.status, 200, "{query}: {}", r.body);
        assert_eq!(r.header("content-type"), Some(content_type), "{query}");
        assert_eq!(
            r.header("x-content-type-options"),
            Some("nosniff"),
            "{query}"
        );
        assert_eq!(
            r.header("cross-origin-resource-policy"),
            Some("same-origin"),
            "{query}"
        );
        assert_eq!(
            r.header("content-security-policy"),
            Some("default-src 'none'; sandbox"),
            "{query}"
        );
        let disposition = r.header("content-disposition").unwrap();
        assert_eq!(
            disposition.starts_with("inline;"),
            inline,
            "{query}: {disposition}"
        );
        assert_eq!(
            disposition.starts_with("attachment;"),
            !inline,
            "{query}: {disposition}"
        );
    }
    assert_eq!(content(KEY_A, "notes/todo.txt").body, "buy milk\n");
    assert!(content(KEY_A, "caf%C3%A9.txt")
        .header("content-disposition")
        .unwrap()
        .contains("filename*=UTF-8''caf%C3%A9%2Etxt"));
    let big = content(KEY_A, "big.txt");
    assert_eq!(
        refused(&big, 413, "AttachmentContent")["code"],
        "file_too_large"
    );

    // The traversal table: every way out is a 400 (logged), on both actions.
    let table = [
        ("..", ".."),
        ("../acct-b/secret.txt", "../acct-b/secret.txt"),
        (
            "notes/../../acct-b/secret.txt",
            "notes/../../acct-b/secret.txt",
        ),
        ("%2e%2e/acct-b/secret.txt", "../acct-b/secret.txt"),
        ("%2E%2E%2Facct-b%2Fsecret.txt", "../acct-b/secret.txt"),
        (
            "%252e%252e%252facct-b%252fsecret.txt",
            "%2e%2e%2facct-b%2fsecret.txt",
        ),
        ("..%252f..%252fetc%252fpasswd", "..%2f..%2fetc%2fpasswd"),
        ("/etc/passwd", "/etc/passwd"),
        ("%2Fetc%2Fpasswd", "/etc/passwd"),
        (
            "notes%5C..%5C..%5Cacct-b%5Csecret.txt",
            "notes\\..\\..\\acct-b\\secret.txt",
        ),
        ("..%5Cacct-b", "..\\acct-b"),
        ("notes%00.txt", "notes\0.txt"),
        ("escape", "escape"),
        ("to-b/secret.txt", "to-b/secret.txt"),
        ("to-b", "to-b"),
        ("todo-link", "todo-link"),
    ];
    for (query, path) in table {
        let r = content(KEY_A, query);
        let d = refused(&r, 400, "AttachmentContent");
        assert_eq!(d["code"], "path_not_allowed", "{query}: {}", r.body);
        assert!(
            !r.body.contains("B's secret") && !r.body.contains("OUTSIDE-CONTENT"),
            "{query}: {}",
            r.body
        );
        let listed = control_as(
            &tether,
            KEY_A,
            "ListWorkspaceFiles",
            json!({ "Path": path }),
        );
        // A link is refused as a link, whatever it points at.
        let d = refused(&listed, 400, "ListWorkspaceFiles");
        assert_eq!(
            d["code"], "path_not_allowed",
            "Path {path:?}: {}",
            listed.body
        );
    }
    // Encodings that are not UTF-8 (overlong dots) are refused by the query decoder.
    refused(
        &content(KEY_A, "%c0%ae%c0%ae/acct-b"),
        400,
        "AttachmentContent",
    );
    assert!(
        tether.log_text().matches("workspace path refused").count() >= table.len() * 2,
        "{}",
        tether.log_text()
    );

    // Another account's files are not found, and B's own root is B's.
    refused(&content(KEY_B, "notes/todo.txt"), 404, "AttachmentContent");
    let b_root = data(&control_as(&tether, KEY_B, "ListWorkspaceFiles", json!({})));
    assert_eq!(b_root["Files"][0]["Name"], "secret.txt");
    assert_eq!(content(KEY_B, "secret.txt").body, "B's secret");
    refused(
        &control_as(
            &tether,
            KEY_B,
            "ListWorkspaceFiles",
            json!({ "Path": "notes" }),
        ),
        404,
        "ListWorkspaceFiles",
    );

    // Other bad input.
    refused(&content(KEY_A, "nope.txt"), 404, "AttachmentContent");
    refused(&content(KEY_A, "notes"), 400, "AttachmentContent");
    refused(
        &control_as(
            &tether,
            KEY_A,
            "ListWorkspaceFiles",
            json!({ "Path": "notes/todo.txt" }),
        ),
        400,
        "ListWorkspaceFiles",
    );
    refused(
        &control_as(&tether, KEY_A, "ListWorkspaceFiles", json!({ "Path": 1 })),
        400,
        "ListWorkspaceFiles",
    );
    refused(
        &control_as(
            &tether,
            KEY_A,
            "ListWorkspaceFiles",
            json!({ "Path": "nope" }),
        ),
        404,
        "ListWorkspaceFiles",
    );
    assert!(agent.requests().is_empty(), "nothing reached the agent");
    assert_eq!(
        std::fs::read_to_string(base.path().join("outside.txt")).unwrap(),
        "OUTSIDE-CONTENT"
    );
}

#[test]
fn workspace_files_are_off_by_default_and_a_bad_workspace_dir_is_refused_at_start() {
    let (store, agent, tether) = chat_gateway(&[]);
    let off = refused(
        &control(&tether, "ListWorkspaceFiles", json!({})),
        404,
        "ListWorkspaceFiles",
    );
    assert_eq!(off["code"], "workspace_files_disabled");
    let r = get(
        &format!(
            "{}/agentengine/api/v1/AttachmentContent?FileUri=Cargo.toml",
            tether.url()
        ),
        &[],
    );
    refused(&r, 404, "AttachmentContent");

    let missing = tempfile::tempdir().unwrap().path().join("missing");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tether"))
        .args([
            "serve",
            "--upstream",
            &agent.url(),
            "--store",
            &store.url,
            "--listen",
            &format!("127.0.0.1:{}", free_port()),
        ])
        .arg("--workspace-dir")
        .arg(&missing)
        .env_remove("TETHER_CONF")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("configuration key `workspace_dir`")
            && stderr.contains("is not a directory"),
        "{stderr}"
    );
}
