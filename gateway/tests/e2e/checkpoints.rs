//! Checkpoints, tool receipts, resume preview and ResumeRun against the real gateway and
//! the fake agent: two tool calls whose results the client supplies turn by turn.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use session_log::RunStatus;

use crate::harness::*;

fn chat(tether: &Tether, session: &str, messages: Value) -> Value {
    let body = json!({ "model": "fake", "session_id": session, "messages": messages });
    let reply = post_json(&format!("{}/v1/chat/completions", tether.url()), &body);
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.json()
}

fn text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
        _ => String::new(),
    }
}

fn field<'a>(items: &'a [Value], key: &str) -> Vec<&'a Value> {
    items.iter().map(|c| &c[key]).collect()
}

#[test]
fn checkpoints_receipts_preview_and_resume() {
    let (store, agent, tether) = chat_gateway(&["--side-effect-free-tools", "search,lookup"]);
    let api = Api::of(&tether);
    let session = "ckpt-session-1";

    // Turn 1: the agent calls `search`; the client runs it.
    let reply = chat(
        &tether,
        session,
        json!([{ "role": "user", "content": "tool:search the docs" }]),
    );
    assert_eq!(
        reply["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
        "search"
    );
    // Turn 2: the search result, and a request that makes the agent call `write_file`.
    let reply = chat(
        &tether,
        session,
        json!([
            { "role": "tool", "tool_call_id": "call_1", "content": "found 3 docs" },
            { "role": "user", "content": "now tool:write_file please" }
        ]),
    );
    assert_eq!(
        reply["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
        "write_file"
    );
    store.wait_for_terminal("local", session, 2);

    // Before its result arrives, the write_file receipt is pending and the checkpoint
    // after it cannot be resumed (there is nothing to replay).
    let receipts =
        api.ok("ListToolReceipts", json!({ "SessionId": session }))["ToolReceipts"].clone();
    assert_eq!(
        field(receipts.as_array().unwrap(), "Status"),
        ["succeeded", "pending"]
    );
    let cps = api.checkpoints(session);
    assert_eq!(cps[3]["Phase"], "after_tool_call");
    assert_eq!(cps[3]["CheckpointStatus"], "disabled");
    assert!(cps[3]["ResumeDisabledReason"]
        .as_str()
        .unwrap()
        .contains("call_1"));

    // Turn 3: the write_file result; the agent answers from it.
    let reply = chat(
        &tether,
        session,
        json!([{ "role": "tool", "tool_call_id": "call_1", "content": "written" }]),
    );
    assert_eq!(
        reply["choices"][0]["message"]["content"],
        "tool said: written"
    );
    store.wait_for_terminal("local", session, 3);

    // Checkpoints: after each tool call and tool result, and at each completed turn.
    let cps = api.checkpoints(session);
    assert_eq!(
        field(&cps, "Phase"),
        [
            "after_tool_call",
            "turn_completed",
            "after_tool_result",
            "after_tool_call",
            "turn_completed",
            "after_tool_result",
            "turn_completed"
        ]
    );
    assert_eq!(
        field(&cps, "CheckpointStatus"),
        ["active", "terminal", "active", "active", "terminal", "active", "terminal"]
    );
    let run1 = cps[0]["RunId"].as_str().unwrap().to_owned();
    let run2 = cps[2]["RunId"].as_str().unwrap().to_owned();
    assert_ne!(run1, run2);
    for c in &cps {
        for key in [
            "EventId",
            "SessionId",
            "InvocationId",
            "RunId",
            "CheckpointId",
            "Framework",
            "IsResumable",
            "ResumeStatus",
            "IsTerminal",
            "ResumeDisabledReason",
            "NextNode",
            "Backend",
            "Scope",
            "Durable",
            "LastResumedAt",
            "ResumeCount",
            "ReplayAllowed",
            "ExpiresAt",
            "CheckpointStatus",
        ] {
            assert!(c.get(key).is_some(), "{key} missing in {c}");
        }
        assert_eq!(c["Framework"], "tether");
        assert_eq!(c["Backend"], "sqlite");
        assert_eq!(c["SessionId"], session);
        assert!(c["CheckpointId"].as_str().unwrap().starts_with("ckpt_"));
    }
    assert_eq!(cps[0]["ToolCallIds"], json!(["call_1"]));
    assert_eq!(cps[0]["ResumeStatus"], "resumable");
    assert_eq!(cps[1]["ResumeStatus"], "terminal");
    assert_eq!(cps[1]["IsTerminal"], true);
    let resumable = api.ok(
        "ListSessionCheckpoints",
        json!({ "SessionId": session, "OnlyResumable": true }),
    );
    assert_eq!(resumable["Total"], 4);
    let page = api.ok(
        "ListSessionCheckpoints",
        json!({ "SessionId": session, "RunId": run2, "Limit": 2, "Offset": 1, "AgentId": "x" }),
    );
    assert_eq!(
        (
            page["Total"].clone(),
            page["Limit"].clone(),
            page["Offset"].clone()
        ),
        (json!(3), json!(2), json!(1))
    );
    assert_eq!(
        field(page["Checkpoints"].as_array().unwrap(), "Phase"),
        ["after_tool_call", "turn_completed"]
    );
    let other = api.ok(
        "ListSessionCheckpoints",
        json!({ "SessionId": session, "Framework": "langgraph" }),
    );
    assert_eq!(other["Total"], 0);

    // Receipts: both calls succeeded, each tied to its run and the checkpoint after it.
    let receipts = api.ok("ListToolReceipts", json!({ "SessionId": session }))["ToolReceipts"]
        .as_array()
        .cloned()
        .unwrap();
    assert_eq!(field(&receipts, "ToolName"), ["search", "write_file"]);
    assert_eq!(field(&receipts, "Status"), ["succeeded", "succeeded"]);
    assert_eq!(field(&receipts, "ToolCallId"), ["call_1", "call_1"]);
    assert_eq!(field(&receipts, "Replayed"), [false, false]);
    assert_eq!(receipts[0]["RunId"], run1.as_str());
    assert_eq!(receipts[0]["CheckpointId"], cps[0]["CheckpointId"]);
    assert_eq!(receipts[1]["CheckpointId"], cps[3]["CheckpointId"]);
    assert_eq!(
        receipts[1]["Metadata"],
        json!({ "tool_name": "write_file" })
    );
    assert_ne!(receipts[0]["IdempotencyKey"], receipts[1]["IdempotencyKey"]);
    assert!(receipts[0]["ReceiptId"]
        .as_str()
        .unwrap()
        .starts_with("rcpt_"));
    let by_run = api.ok(
        "ListToolReceipts",
        json!({ "SessionId": session, "RunId": run2 }),
    );
    assert_eq!(by_run["ToolReceipts"].as_array().unwrap().len(), 1);
    let by_ckpt = api.ok(
        "ListToolReceipts",
        json!({ "SessionId": session, "CheckpointId": cps[0]["CheckpointId"] }),
    );
    assert_eq!(
        field(by_ckpt["ToolReceipts"].as_array().unwrap(), "ToolName"),
        ["search"]
    );

    // Preview: resuming turn 2 before the model answered the search result could call
    // write_file (a side effect) again.
    let preview = api.ok(
        "GetCheckpointResumePreview",
        json!({ "SessionId": session, "RunId": run2, "CheckpointId": cps[2]["CheckpointId"] }),
    )["Preview"]
        .clone();
    assert_eq!(preview["CanResume"], true);
    assert_eq!(preview["ExpectedAction"], "resume_from_checkpoint");
    assert_eq!(preview["NextNode"], "model");
    assert_eq!(preview["Capabilities"]["IdempotentToolReplay"], true);
    assert_eq!(
        field(preview["ToolReceipts"].as_array().unwrap(), "ToolName"),
        ["write_file"]
    );
    assert_eq!(
        preview["Risk"],
        json!({ "Level": "medium", "DuplicateSideEffectRisk": true, "SideEffectReceiptCount": 1, "FailedReceiptCount": 0 })
    );
    assert_eq!(preview["Summary"]["ToolReceiptCount"], 1);
    assert_eq!(preview["Summary"]["Phase"], "after_tool_result");
    let terminal = api.ok(
        "GetCheckpointResumePreview",
        json!({ "SessionId": session, "RunId": run1, "CheckpointId": cps[1]["CheckpointId"] }),
    )["Preview"]
        .clone();
    assert_eq!(
        (
            terminal["CanResume"].clone(),
            terminal["ExpectedAction"].clone()
        ),
        (json!(false), json!("noop"))
    );
    assert_eq!(terminal["Risk"]["Level"], "none");

    // Resume from the first checkpoint with an instruction.
    let before = agent.requests().len();
    let first = cps[0]["CheckpointId"].clone();
    let resumed = api.ok(
        "ResumeRun",
        json!({ "SessionId": session, "RunId": run1, "CheckpointId": first,
                "ResumeInstructionEnabled": true, "ResumeInstruction": "Answer briefly.", "Stream": false }),
    );
    assert_eq!(resumed["object"], "response");
    assert_eq!(
        Surface::Responses.text(&resumed),
        "You said: Answer briefly."
    );
    let requests = agent.requests();
    assert_eq!(requests.len(), before + 1);
    // Exactly the history up to the checkpoint (the search call), the search result
    // replayed from its receipt, and the instruction.
    let sent = requests[before]["body"]["messages"]
        .as_array()
        .cloned()
        .unwrap();
    let shape: Vec<(String, String)> = sent
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or_default().to_owned(),
                text(&m["content"]),
            )
        })
        .collect();
    assert_eq!(
        shape,
        [
            ("user".to_owned(), "tool:search the docs".to_owned()),
            ("assistant".to_owned(), String::new()),
            ("tool".to_owned(), "found 3 docs".to_owned()),
            ("user".to_owned(), "Answer briefly.".to_owned()),
        ],
        "{sent:?}"
    );
    assert_eq!(sent[1]["tool_calls"][0]["function"]["name"], "search");
    assert_eq!(sent[2]["tool_call_id"], "call_1");

    // A second resume while one is running is refused with the running invocation.
    let base = tether.url();
    let body = json!({ "SessionId": session, "RunId": run1, "CheckpointId": first,
                       "ResumeInstructionEnabled": true, "ResumeInstruction": "slow:30:50" });
    let slow = std::thread::spawn(move || {
        post_json(&format!("{base}/agentengine/api/v1/ResumeRun"), &body)
    });
    let start = Instant::now();
    let running = loop {
        let events = store.events("local", session);
        let open = events
            .iter()
            .rev()
            .find(|e| e.run_status() == Some(RunStatus::InProgress))
            .cloned();
        if let Some(e) = open.filter(|e| {
            !events
                .iter()
                .any(|t| t.is_terminal() && t.invocation_id == e.invocation_id)
        }) {
            break e.invocation_id.unwrap();
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the slow resume did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let (status, conflict) = api.call(
        "ResumeRun",
        json!({ "SessionId": session, "RunId": run1, "CheckpointId": first }),
    );
    assert_eq!(status, 409, "{conflict}");
    assert_eq!(conflict["Data"]["code"], "resume_already_running");
    assert_eq!(conflict["Data"]["InvocationId"], running.as_str());
    assert_eq!(conflict["Data"]["RunId"], run1.as_str());
    assert_eq!(conflict["Data"]["SessionId"], session);
    let slow = slow.join().unwrap();
    assert_eq!(slow.status, 200, "{}", slow.body);
    assert!(Surface::Responses
        .text(&slow.json()["Data"])
        .starts_with("w1 w2"));

    // Resume counts and statuses.
    let cps = api.checkpoints(session);
    assert_eq!(cps[0]["ResumeCount"], 2);
    assert_eq!(cps[0]["CheckpointStatus"], "resumed");
    assert!(cps[0]["LastResumedAt"].is_string());
    assert_eq!(cps[2]["ResumeCount"], 0);
    assert_eq!(cps[2]["CheckpointStatus"], "active");
    // The resumed invocations completed their turns: more terminal checkpoints in run 1.
    let run1_terminal = cps
        .iter()
        .filter(|c| c["RunId"] == run1.as_str() && c["Phase"] == "turn_completed")
        .count();
    assert_eq!(run1_terminal, 3);
    let events = store.events("local", session);
    let resumed_starts = events
        .iter()
        .filter(|e| e.run_status() == Some(RunStatus::InProgress))
        .filter(|e| e.metadata["resumed_from_checkpoint"] == first)
        .count();
    assert_eq!(resumed_starts, 2);

    // A terminal checkpoint: nothing to do.
    let noop = api.ok(
        "ResumeRun",
        json!({ "SessionId": session, "RunId": run1, "CheckpointId": cps[1]["CheckpointId"] }),
    );
    assert_eq!(noop["status"], "noop");
    assert_eq!(noop["CheckpointId"], cps[1]["CheckpointId"]);
    assert!(noop["ResumeAttemptId"]
        .as_str()
        .unwrap()
        .starts_with("resume_"));
    assert!(!noop["Reason"].as_str().unwrap().is_empty());

    // Bad input: 400 with the envelope, nothing written.
    let count = store.events("local", session).len();
    let ckpt = cps[2]["CheckpointId"].clone();
    for (action, body) in [
        ("ListSessionCheckpoints", json!({})),
        ("ListSessionCheckpoints", json!({ "SessionId": 5 })),
        (
            "ListSessionCheckpoints",
            json!({ "SessionId": session, "Limit": 0 }),
        ),
        (
            "ListSessionCheckpoints",
            json!({ "SessionId": session, "Limit": 201 }),
        ),
        (
            "ListSessionCheckpoints",
            json!({ "SessionId": session, "OnlyResumable": "yes" }),
        ),
        ("ListToolReceipts", json!({ "RunId": run1 })),
        (
            "GetCheckpointResumePreview",
            json!({ "SessionId": session, "RunId": run2 }),
        ),
        (
            "ResumeRun",
            json!({ "SessionId": session, "RunId": run2, "CheckpointId": ckpt, "ResumeInstructionEnabled": true }),
        ),
        (
            "ResumeRun",
            json!({ "SessionId": session, "RunId": run2, "CheckpointId": ckpt, "Stream": "yes" }),
        ),
        (
            "ResumeRun",
            json!({ "SessionId": session, "RunId": run2, "CheckpointId": ckpt, "ResumeInstruction": 7 }),
        ),
        (
            "ResumeRun",
            json!({ "SessionId": "", "RunId": run2, "CheckpointId": ckpt }),
        ),
    ] {
        let (status, reply) = api.call(action, body.clone());
        assert_eq!(status, 400, "{action} {body}: {reply}");
        assert!(reply["RequestId"].is_string() && reply["Message"].is_string());
    }
    let malformed = post(
        &format!("{}/agentengine/api/v1/ResumeRun", tether.url()),
        "{nope",
        &[],
    );
    assert_eq!(malformed.status, 400);

    // Unknown ids: 404.
    for (action, body) in [
        (
            "ListSessionCheckpoints",
            json!({ "SessionId": "no-such-session" }),
        ),
        (
            "ListSessionCheckpoints",
            json!({ "SessionId": session, "RunId": "run_nope" }),
        ),
        (
            "ListToolReceipts",
            json!({ "SessionId": session, "CheckpointId": "ckpt_nope" }),
        ),
        (
            "GetCheckpointResumePreview",
            json!({ "SessionId": session, "RunId": run2, "CheckpointId": "ckpt_nope" }),
        ),
        // A checkpoint of another run is not this run's.
        (
            "GetCheckpointResumePreview",
            json!({ "SessionId": session, "RunId": run1, "CheckpointId": ckpt }),
        ),
        (
            "ResumeRun",
            json!({ "SessionId": session, "RunId": "run_nope", "CheckpointId": ckpt }),
        ),
        (
            "ResumeRun",
            json!({ "SessionId": "no-such-session", "RunId": run2, "CheckpointId": ckpt }),
        ),
    ] {
        let (status, reply) = api.call(action, body.clone());
        assert_eq!(status, 404, "{action} {body}: {reply}");
    }
    assert_eq!(
        store.events("local", session).len(),
        count,
        "bad input changed nothing"
    );
}

/// With `checkpoint_replay_allowed = false`, a checkpoint resumes once; the second try
/// is 409 `checkpoint_not_resumable`.
/// Two finished runs in `session`: one that called `lookup`, one that gave it the result.
fn lookup_and_answer(tether: &Tether, store: &TestStore, session: &str) {
    chat(
        tether,
        session,
        json!([{ "role": "user", "content": "tool:lookup x" }]),
    );
    chat(
        tether,
        session,
        json!([{ "role": "tool", "tool_call_id": "call_1", "content": "42" }]),
    );
    store.wait_for_terminal("local", session, 2);
}

#[test]
fn checkpoints_without_replay_resume_once() {
    let (store, _agent, tether) = chat_gateway(&[
        "--checkpoint-replay-allowed",
        "false",
        "--checkpoint-ttl-seconds",
        "3600",
    ]);
    let api = Api::of(&tether);
    let session = "ckpt-session-2";
    lookup_and_answer(&tether, &store, session);
    let cps = api.checkpoints(session);
    assert_eq!(cps[0]["ReplayAllowed"], false);
    assert!(cps[0]["ExpiresAt"].is_string());
    let body = json!({ "SessionId": session, "RunId": cps[0]["RunId"], "CheckpointId": cps[0]["CheckpointId"] });
    let first = api.ok("ResumeRun", body.clone());
    assert_eq!(first["object"], "response");
    let (status, again) = api.call("ResumeRun", body);
    assert_eq!(status, 409, "{again}");
    assert_eq!(again["Data"]["code"], "checkpoint_not_resumable");
    assert_eq!(again["Data"]["resume_status"], "disabled");
    assert_eq!(again["Data"]["is_terminal"], false);
    assert_eq!(api.checkpoints(session)[0]["CheckpointStatus"], "disabled");
}

/// `Stream: true` streams the resumed invocation as Responses events, each with its seq,
/// and the agent receives the history up to the checkpoint plus the instruction.
#[test]
fn a_resume_can_be_streamed() {
    let (store, agent, tether) = chat_gateway(&[]);
    let api = Api::of(&tether);
    let session = "ckpt-stream";
    lookup_and_answer(&tether, &store, session);
    let first = api.checkpoints(session)[0].clone();
    let body = json!({
        "SessionId": session, "RunId": first["RunId"], "CheckpointId": first["CheckpointId"],
        "ResumeInstructionEnabled": true, "ResumeInstruction": "Reply with OK", "Stream": true,
    });
    let sse = SseStream::post(
        &format!("{}/agentengine/api/v1/ResumeRun", tether.url()),
        &body,
    );
    assert_eq!(sse.status, 200);
    let frames = sse.collect();
    let types: Vec<String> = frames
        .iter()
        .map(|f| f.json()["type"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(
        types.first().map(String::as_str),
        Some("response.created"),
        "{types:?}"
    );
    assert_eq!(
        types.last().map(String::as_str),
        Some("response.completed"),
        "{types:?}"
    );
    assert!(
        frames.iter().all(|f| f.id.is_some()),
        "every frame carries its seq"
    );
    let text: String = frames.iter().map(|f| Surface::Responses.delta(f)).collect();
    assert_eq!(text, "OK.");

    let last = agent.requests().last().cloned().unwrap();
    let sent = history_sent(&last);
    assert_eq!(
        sent.last().unwrap(),
        &("user".to_owned(), "Reply with OK".to_owned())
    );
    assert_eq!(
        sent.first().unwrap(),
        &("user".to_owned(), "tool:lookup x".to_owned())
    );
    let events = store.events("local", session);
    let resumed = events
        .iter()
        .filter(|e| e.run_status() == Some(RunStatus::Completed))
        .count();
    assert_eq!(resumed, 3, "two turns and the resume each completed once");
}

/// Quotas: a ResumeRun starts a new invocation (the one it resumes has ended), so it is
/// checked at its start as a turn is: past `event_bytes` it is refused 413
/// `quota_exceeded`, naming the quota, before anything is stored or reaches the agent;
/// under the quota the same resume goes ahead.
#[test]
fn a_resume_is_a_run_start_checked_against_the_quotas() {
    let (store, agent, tether) = chat_gateway(&[]);
    let session = "ckpt-quota";
    lookup_and_answer(&tether, &store, session);
    let first = Api::of(&tether).checkpoints(session)[0].clone();
    drop(tether);
    let body = json!({ "SessionId": session, "RunId": first["RunId"], "CheckpointId": first["CheckpointId"] });
    let gateway = |quota: &str| {
        let conf = Conf::write(&format!("[quotas]\nevent_bytes = {quota}\n"));
        let tether = Tether::start(
            &agent.url(),
            "openai-chat",
            &store.url,
            &["--conf", &conf.arg()],
        );
        (conf, tether)
    };

    // The session's events have passed a quota of 1 byte.
    let (_conf, limited) = gateway("1");
    let (events, requests) = (store.events("local", session).len(), agent.requests().len());
    let (status, refused) = Api::of(&limited).call("ResumeRun", body.clone());
    assert_eq!(status, 413, "{refused}");
    assert_eq!(refused["Data"]["code"], "quota_exceeded");
    assert!(
        refused["Message"]
            .as_str()
            .unwrap_or_default()
            .contains("'event_bytes'"),
        "{refused}"
    );
    assert_eq!(
        store.events("local", session).len(),
        events,
        "nothing stored"
    );
    assert_eq!(
        agent.requests().len(),
        requests,
        "nothing sent to the agent"
    );
    drop(limited);

    let (_conf, roomy) = gateway("100000000");
    let resumed = Api::of(&roomy).ok("ResumeRun", body);
    assert_eq!(resumed["object"], "response");
}
