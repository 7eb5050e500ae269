//! The operator CLI (`tether sessions|events|runs|export|import|health`) as an operator runs
//! it: the real binary against running gateways, scoped by API key, with tables, JSON,
//! following a live run, and a session exported from one gateway imported into another.

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::auth::{auth_conf, authed_gateway, bearer, KEY_A, KEY_B};
use crate::harness::*;

/// Runs `tether ARGS` with a clean environment for its connection settings.
fn cli(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(args)
        .env_remove("TETHER_URL")
        .env_remove("TETHER_API_KEY")
        .env_remove("TETHER_LISTEN")
        .output()
        .expect("run tether")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `tether ARGS`, which must succeed; its stdout.
fn ok(args: &[&str]) -> String {
    let out = cli(args);
    assert!(
        out.status.success(),
        "tether {args:?} failed: {}",
        stderr(&out)
    );
    stdout(&out)
}

/// `tether ARGS`, which must fail with exit code 1 and one line on stderr; that line.
fn fails(args: &[&str]) -> String {
    let out = cli(args);
    assert_eq!(
        out.status.code(),
        Some(1),
        "tether {args:?}: {}",
        stdout(&out)
    );
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    err
}

fn control(tether: &Tether, action: &str, body: &Value, key: &str) -> Reply {
    let (name, value) = bearer(key);
    post(
        &format!("{}/agentengine/api/v1/{action}", tether.url()),
        &body.to_string(),
        &[(name, value.as_str())],
    )
}

fn turn(tether: &Tether, session: &str, text: &str, key: &str) -> Reply {
    let (name, value) = bearer(key);
    let body = Surface::Responses.body(text, Some(session), false);
    let reply = post(
        &format!("{}/v1/responses", tether.url()),
        &body.to_string(),
        &[(name, value.as_str())],
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply
}

/// Every event of a session as ListSessionEvents shows it.
fn listed(tether: &Tether, session: &str, key: &str) -> Vec<Value> {
    let r = control(
        tether,
        "ListSessionEvents",
        &json!({ "SessionId": session, "Limit": 500 }),
        key,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()["Data"]["Events"].as_array().cloned().unwrap()
}

#[test]
fn sessions_events_and_cancels_through_the_cli_see_only_their_account() {
    let (store, _agent, tether) = authed_gateway("");
    let url = tether.url();
    turn(
        &tether,
        "cli-a",
        "My project is named zebra42. Reply with OK.",
        KEY_A,
    );
    turn(&tether, "cli-a", "tool:lookup", KEY_A);
    turn(&tether, "cli-b", "hello from b", KEY_B);

    // A table for people, JSON for scripts; each account sees only its own sessions.
    let table = ok(&["sessions", "list", "--url", &url, "--api-key", KEY_A]);
    assert!(table.starts_with("SESSION "), "{table}");
    assert!(table.contains("cli-a"), "{table}");
    assert!(!table.contains("cli-b"), "{table}");
    assert!(table.contains("1 sessions (page 1 of 1)"), "{table}");
    let data: Value = serde_json::from_str(&ok(&[
        "sessions",
        "list",
        "--url",
        &url,
        "--api-key",
        KEY_B,
        "--json",
    ]))
    .unwrap();
    assert_eq!(data["Total"], 1);
    assert_eq!(data["Sessions"][0]["SessionId"], "cli-b");

    // `show`: the runs and the conversation.
    let shown = ok(&[
        "sessions",
        "show",
        "cli-a",
        "--url",
        &url,
        "--api-key",
        KEY_A,
    ]);
    assert!(shown.contains("2 runs"), "{shown}");
    assert!(shown.contains("completed"), "{shown}");
    assert!(shown.contains("My project is named zebra42"), "{shown}");
    assert!(shown.contains("calls lookup"), "{shown}");
    let summary: Value = serde_json::from_str(&ok(&[
        "sessions",
        "show",
        "cli-a",
        "--url",
        &url,
        "--api-key",
        KEY_A,
        "--json",
    ]))
    .unwrap();
    let events = listed(&tether, "cli-a", KEY_A);
    assert_eq!(summary["LastSeqId"], events.last().unwrap()["SeqId"]);
    assert_eq!(summary["Runs"].as_array().unwrap().len(), 2);
    assert!(summary["Runs"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["Status"] == "completed"));
    // Another account's session is not found; a wrong key and a gateway that is not there
    // say so.
    let err = fails(&[
        "sessions",
        "show",
        "cli-a",
        "--url",
        &url,
        "--api-key",
        KEY_B,
    ]);
    assert!(
        err.contains("session \"cli-a\" not found (HTTP 404)"),
        "{err}"
    );
    let err = fails(&[
        "sessions",
        "list",
        "--url",
        &url,
        "--api-key",
        "tk-wrong-key-0123456789",
    ]);
    assert!(err.contains("refused the credential (HTTP 401)"), "{err}");
    assert!(err.contains("TETHER_API_KEY"), "{err}");
    let err = fails(&["sessions", "list", "--url", &url]);
    assert!(err.contains("HTTP 401"), "{err}");
    let nowhere = format!("http://127.0.0.1:{}", free_port());
    let err = fails(&["sessions", "list", "--url", &nowhere, "--api-key", KEY_A]);
    assert!(
        err.contains(&format!("cannot reach the gateway at {nowhere}")),
        "{err}"
    );
    assert!(err.contains("refused"), "{err}");

    // `events --after N --json`: the log after seq N, one JSON event per line, as
    // ListSessionEvents has it.
    let lines = ok(&[
        "events",
        "cli-a",
        "--after",
        "2",
        "--url",
        &url,
        "--api-key",
        KEY_A,
        "--json",
    ]);
    let printed: Vec<Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(printed, events[2..].to_vec());
    let human = ok(&["events", "cli-a", "--url", &url, "--api-key", KEY_A]);
    assert_eq!(human.lines().count(), events.len());
    assert!(human.lines().next().unwrap().contains("message"), "{human}");

    // `runs cancel`: a slow run in the background, found in the log, cancelled.
    let slow = {
        let url = url.clone();
        std::thread::spawn(move || {
            let (name, value) = bearer(KEY_A);
            let body = Surface::Responses.body("slow:50:200", Some("cli-slow"), false);
            post(
                &format!("{url}/v1/responses"),
                &body.to_string(),
                &[(name, value.as_str())],
            )
        })
    };
    let started = Instant::now();
    let invocation = loop {
        let r = control(
            &tether,
            "ListSessionEvents",
            &json!({ "SessionId": "cli-slow" }),
            KEY_A,
        );
        if let Some(inv) = r.json()["Data"]["Events"][0]["InvocationId"].as_str() {
            break inv.to_owned();
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the slow run never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let err = fails(&[
        "runs",
        "cancel",
        &invocation,
        "--url",
        &url,
        "--api-key",
        KEY_B,
    ]);
    assert!(err.contains("no invocation"), "{err}");
    let said = ok(&[
        "runs",
        "cancel",
        &invocation,
        "--url",
        &url,
        "--api-key",
        KEY_A,
    ]);
    assert_eq!(said, format!("{invocation}: cancelling (accepted)\n"));
    let _ = slow.join();
    let ended = store.wait_for_terminal("acct-a", "cli-slow", 1);
    assert_eq!(
        ended.last().unwrap().run_status(),
        Some(session_log::RunStatus::Cancelled)
    );
    let again: Value = serde_json::from_str(&ok(&[
        "runs",
        "cancel",
        &invocation,
        "--url",
        &url,
        "--api-key",
        KEY_A,
        "--json",
    ]))
    .unwrap();
    assert_eq!(again["RunnerCancelStatus"], "already_finished");

    // `export --format markdown`: the conversation for people.
    let md = ok(&[
        "export",
        "cli-a",
        "--format",
        "markdown",
        "--url",
        &url,
        "--api-key",
        KEY_A,
    ]);
    assert!(md.starts_with("# Session `cli-a`"), "{md}");
    assert!(md.contains("**user** · seq 1"), "{md}");
    assert!(
        md.contains("> My project is named zebra42. Reply with OK."),
        "{md}"
    );
    assert!(md.contains("(tool call)"), "{md}");
    assert!(md.contains(": completed*"), "{md}");
}

#[test]
fn events_follow_prints_a_live_run_as_it_is_committed() {
    let (store, _agent, tether) = chat_gateway(&[]);
    let url = tether.url();
    let first = post_json(
        &format!("{url}/v1/responses"),
        &Surface::Responses.body("Reply with OK", Some("cli-follow"), false),
    );
    assert_eq!(first.status, 200);
    let mut follower = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["events", "cli-follow", "--follow", "--json", "--url", &url])
        .env_remove("TETHER_API_KEY")
        .stdout(Stdio::piped())
        .spawn()
        .expect("start tether events --follow");
    let mut lines = BufReader::new(follower.stdout.take().unwrap()).lines();
    // What was there first...
    let mut seen: Vec<Value> = Vec::new();
    let before = store.events("local", "cli-follow").len();
    while seen.len() < before {
        seen.push(serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap());
    }
    // ...then a streaming run, printed as it goes, to its terminal status.
    let run = std::thread::spawn(move || {
        SseStream::post(
            &format!("{url}/v1/responses"),
            &Surface::Responses.body("slow:5:100", Some("cli-follow"), true),
        )
        .collect()
    });
    loop {
        let event: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        let done = event["EventType"] == "run_status" && event["Content"]["status"] == "completed";
        seen.push(event);
        if done && seen.len() > before + 2 {
            break;
        }
    }
    let _ = follower.kill();
    let _ = follower.wait();
    run.join().unwrap();
    let seqs: Vec<i64> = seen.iter().map(|e| e["SeqId"].as_i64().unwrap()).collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as i64).collect::<Vec<_>>(),
        "every event once, in order"
    );
    let deltas = seen
        .iter()
        .filter(|e| e["EventType"] == "text_delta")
        .count();
    assert!(deltas >= 5, "the live run's deltas were followed: {seen:?}");
    let logged = store.events("local", "cli-follow");
    assert_eq!(seqs.len(), logged.len());
}

/// A session exported from a gateway on SQLite and imported (by the CLI) into one on
/// PostgreSQL, under another account: the same events with the same seqs, and the same
/// history for the next turn.
#[test]
fn a_session_exported_from_one_gateway_imports_into_another_with_its_seqs() {
    let Some(pg) = TestStore::new(StoreKind::Postgres) else {
        return;
    };
    let sqlite = TestStore::new(StoreKind::Sqlite).unwrap();
    let agent = FakeAgent::start();
    let conf = auth_conf("");
    let source = Tether::start(
        &agent.url(),
        "openai-chat",
        &sqlite.url,
        &["--conf", &conf.arg()],
    );
    let target = Tether::start(
        &agent.url(),
        "openai-chat",
        &pg.url,
        &["--conf", &conf.arg()],
    );
    let session = format!("cli-import-{}", uuid::Uuid::new_v4().simple());
    turn(
        &source,
        &session,
        "My project is named zebra42. Reply with OK.",
        KEY_A,
    );
    turn(&source, &session, "tool:lookup", KEY_A);

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("session.jsonl");
    let file = file.to_str().unwrap();
    let src = source.url();
    assert_eq!(
        ok(&[
            "export",
            &session,
            "--output",
            file,
            "--url",
            &src,
            "--api-key",
            KEY_A
        ]),
        ""
    );
    let exported = listed(&source, &session, KEY_A);
    assert_eq!(
        std::fs::read_to_string(file).unwrap().lines().count(),
        exported.len()
    );

    let dst = target.url();
    let said = ok(&["import", file, "--url", &dst, "--api-key", KEY_B]);
    let last = exported.last().unwrap()["SeqId"].as_i64().unwrap();
    assert_eq!(
        said,
        format!(
            "imported session {session} into {dst}: {} events, last seq {last}\n",
            exported.len()
        )
    );
    assert_eq!(
        listed(&target, &session, KEY_B),
        exported,
        "same events, seqs and times"
    );
    // Account-scoped: the importing key's account has it, the other does not.
    let r = control(
        &target,
        "ListSessionEvents",
        &json!({ "SessionId": session }),
        KEY_A,
    );
    assert_eq!(r.status, 404);

    // The next turn on each gateway: the agent gets the same history from both.
    agent_requests_reset(&agent);
    turn(&source, &session, "What is my project named?", KEY_A);
    let answer = turn(&target, &session, "What is my project named?", KEY_B);
    assert_eq!(Surface::Responses.text(&answer.json()), "zebra42");
    let requests = agent.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(history_sent(&requests[0]), history_sent(&requests[1]));
    let after = listed(&target, &session, KEY_B);
    assert_eq!(
        after[exported.len()]["SeqId"],
        last + 1,
        "seqs go on after the import"
    );

    // Importing it again is refused, and changes nothing.
    let err = fails(&["import", file, "--url", &dst, "--api-key", KEY_B]);
    assert!(
        err.contains("already exists in this account (HTTP 409)"),
        "{err}"
    );
    assert_eq!(listed(&target, &session, KEY_B).len(), after.len());
    // A file that is not an export says where.
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"SessionId\": \"x\"}\nnot json\n").unwrap();
    let err = fails(&[
        "import",
        bad.to_str().unwrap(),
        "--url",
        &dst,
        "--api-key",
        KEY_B,
    ]);
    assert!(err.contains("bad.jsonl:2: not a JSON event"), "{err}");
}

/// A fork of a fork, exported from one gateway and imported into another: the file holds
/// the history the fork inherited, and the imported session (a session of its own there)
/// gives the agent the same history as the fork does where it was made.
#[test]
fn a_fork_of_a_fork_exports_its_inherited_history_and_imports_with_it() {
    let source_store = TestStore::new(StoreKind::Sqlite).unwrap();
    let target_store = TestStore::new(StoreKind::Postgres)
        .unwrap_or_else(|| TestStore::new(StoreKind::Sqlite).unwrap());
    let agent = FakeAgent::start();
    let conf = auth_conf("");
    let source = Tether::start(
        &agent.url(),
        "openai-chat",
        &source_store.url,
        &["--conf", &conf.arg()],
    );
    let target = Tether::start(
        &agent.url(),
        "openai-chat",
        &target_store.url,
        &["--conf", &conf.arg()],
    );
    let id = |what: &str| format!("{what}-{}", uuid::Uuid::new_v4().simple());
    let (root, fork1, fork2) = (id("root"), id("fork1"), id("fork2"));
    let fork = |from: &str, to: &str| {
        let r = control(
            &source,
            "ForkSession",
            &json!({ "SessionId": from, "NewSessionId": to }),
            KEY_A,
        );
        assert_eq!(r.status, 200, "{}", r.body);
    };
    turn(
        &source,
        &root,
        "My project is named zebra42. Reply with OK.",
        KEY_A,
    );
    turn(&source, &root, "The colour is teal.", KEY_A);
    fork(&root, &fork1);
    turn(&source, &root, "Only the root: the shape is round.", KEY_A);
    turn(&source, &fork1, "The size is large.", KEY_A);
    fork(&fork1, &fork2);
    turn(&source, &fork1, "Only fork1: the weight is light.", KEY_A);
    turn(&source, &fork2, "My project is now named koala7.", KEY_A);
    turn(&source, &fork2, "The mood is calm.", KEY_A);
    // A compaction in the fork of a fork, of what it inherited: its range is in positions
    // of the whole history.
    let r = control(
        &source,
        "CompactSession",
        &json!({ "SessionId": fork2, "KeepLastTurns": 2, "Summary": "Earlier: colour teal; size large." }),
        KEY_A,
    );
    assert_eq!(r.status, 200, "{}", r.body);

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("fork2.jsonl");
    let file = file.to_str().unwrap();
    let src = source.url();
    ok(&[
        "export",
        &fork2,
        "--output",
        file,
        "--url",
        &src,
        "--api-key",
        KEY_A,
    ]);
    let exported = listed(&source, &fork2, KEY_A);
    let lines: Vec<Value> = std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines, exported, "the file is the fork's whole history");
    let from: std::collections::BTreeSet<&str> = lines
        .iter()
        .map(|e| e["SessionId"].as_str().unwrap())
        .collect();
    assert_eq!(
        from,
        [root.as_str(), fork1.as_str(), fork2.as_str()].into(),
        "inherited events from both sessions up the chain"
    );

    let dst = target.url();
    let said = ok(&["import", file, "--url", &dst, "--api-key", KEY_B]);
    let last = exported.last().unwrap()["Position"].as_i64().unwrap();
    // Nothing added: the runs cut at a fork point (a turn's end) had completed.
    assert_eq!(
        said,
        format!(
            "imported session {fork2} into {dst}: {} events, last seq {last}\n",
            lines.len()
        )
    );
    // The same history, event by event, each at its position, all of the imported session.
    let imported = listed(&target, &fork2, KEY_B);
    let shape = |e: &Value, seq: &str| {
        json!([
            e[seq],
            e["EventType"],
            e["Role"],
            e["Content"],
            e["Timestamp"],
            e["Superseded"]
        ])
    };
    let want: Vec<Value> = exported.iter().map(|e| shape(e, "Position")).collect();
    let got: Vec<Value> = imported.iter().map(|e| shape(e, "SeqId")).collect();
    assert_eq!(got, want);
    assert!(imported
        .iter()
        .all(|e| e["SessionId"] == json!(fork2) && e["Inherited"] == json!(false)));
    // Neither the root nor the first fork came along as sessions of their own.
    for other in [&root, &fork1] {
        let r = control(
            &target,
            "ListSessionEvents",
            &json!({ "SessionId": other }),
            KEY_B,
        );
        assert_eq!(r.status, 404, "{other}: {}", r.body);
    }

    // The next turn: the agent gets the same history from both gateways, which knows what
    // the chain said before each fork and nothing the root or the first fork said later.
    agent_requests_reset(&agent);
    let asked = "What is my project named?";
    let a = turn(&source, &fork2, asked, KEY_A);
    let b = turn(&target, &fork2, asked, KEY_B);
    assert_eq!(Surface::Responses.text(&a.json()), "koala7");
    assert_eq!(Surface::Responses.text(&b.json()), "koala7");
    let requests = agent.requests();
    assert_eq!(requests.len(), 2);
    let history = history_sent(&requests[0]);
    assert_eq!(history, history_sent(&requests[1]));
    let said: String = history.iter().map(|(_, t)| format!("{t}\n")).collect();
    assert!(
        said.contains("Earlier: colour teal; size large.") && said.contains("The mood is calm."),
        "{said}"
    );
    for gone in ["zebra42", "Only the root", "Only fork1"] {
        assert!(!said.contains(gone), "{gone}: {said}");
    }
}

fn agent_requests_reset(agent: &FakeAgent) {
    ureq::delete(&format!("{}/_requests", agent.url()))
        .call()
        .unwrap();
}

/// ImportSession itself: an export's unfinished run is closed as interrupted, and bad
/// input is a 400 that names the event and writes nothing.
#[test]
fn import_session_closes_unfinished_runs_and_refuses_bad_events() {
    let (store, _agent, tether) = chat_gateway(&[]);
    let url = format!("{}/agentengine/api/v1/ImportSession", tether.url());
    let event = |seq: i64, kind: &str, content: Value, inv: Option<&str>| {
        json!({ "SeqId": seq, "EventType": kind, "Content": content, "RunId": inv.map(|_| "run_1"),
                "InvocationId": inv, "Timestamp": format!("2026-01-02T03:04:0{seq}.000001Z") })
    };
    let events = json!([
        event(1, "message", json!({ "text": "hi" }), Some("inv_1")),
        event(
            2,
            "run_status",
            json!({ "status": "in_progress" }),
            Some("inv_1")
        ),
        event(3, "text_delta", json!({ "delta": "h" }), Some("inv_1")),
    ]);
    let r = post_json(&url, &json!({ "SessionId": "imp-open", "Events": events }));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.json()["Data"],
        json!({ "SessionId": "imp-open", "ImportedEvents": 3, "LastSeqId": 4, "InterruptedInvocations": ["inv_1"] })
    );
    let log = store.events("local", "imp-open");
    assert_eq!(log.len(), 4);
    assert_eq!(
        log[0].created_at.to_rfc3339(),
        "2026-01-02T03:04:01.000001+00:00"
    );
    assert_eq!(
        log[3].content,
        json!({ "status": "interrupted", "reason": "imported_unfinished" })
    );

    for (body, says) in [
        (
            json!({ "SessionId": "imp-bad", "Events": [event(2, "message", json!({}), None), event(1, "message", json!({}), None)] }),
            "Events: seq 1: seqs must be 1 or more and strictly increasing",
        ),
        (
            json!({ "SessionId": "imp-bad", "Events": [event(1, "shout", json!({}), None)] }),
            "Events[0]: unknown EventType \"shout\"",
        ),
        (
            json!({ "SessionId": "imp-bad", "Events": [event(1, "run_status", json!({ "status": "completed" }), Some("inv_9"))] }),
            "ends without having started",
        ),
        (
            json!({ "SessionId": "imp bad", "Events": [event(1, "message", json!({}), None)] }),
            "SessionId \"imp bad\" is not a valid id",
        ),
        (
            json!({ "SessionId": "imp-bad", "Events": [] }),
            "there are no events",
        ),
        (
            json!({ "SessionId": "imp-bad", "Events": [{ "SeqId": "one" }] }),
            "invalid parameters",
        ),
    ] {
        let r = post_json(&url, &body);
        assert_eq!(r.status, 400, "{body}: {}", r.body);
        let message = r.json()["Message"].as_str().unwrap().to_owned();
        assert!(message.contains(says), "{message} lacks {says}");
    }
    assert_eq!(
        store.session_count("local"),
        1,
        "nothing of a refused import was written"
    );
    let r = post_json(
        &url,
        &json!({ "SessionId": "imp-open", "Events": [event(1, "message", json!({}), None)] }),
    );
    assert_eq!(r.status, 409);
    assert_eq!(r.json()["Data"]["code"], "session_exists");
}

#[test]
fn health_answers_for_container_checks() {
    let (_store, _agent, tether) = chat_gateway(&[]);
    assert_eq!(ok(&["health", "--url", &tether.url()]), "ready\n");
    // Without --url it asks where TETHER_LISTEN says the gateway listens, on loopback.
    let out = Command::new(env!("CARGO_BIN_EXE_tether"))
        .arg("health")
        .env_remove("TETHER_URL")
        .env("TETHER_LISTEN", format!("0.0.0.0:{}", tether.port))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let nowhere = format!("http://127.0.0.1:{}", free_port());
    let err = fails(&["health", "--url", &nowhere]);
    assert!(err.starts_with("tether: cannot reach the gateway"), "{err}");
}
