//! Approvals: a run whose answer ends in a request for a person ends `requires_action`,
//! the request is listed (`ListPendingApprovals`) and answered through Tether
//! (`ResolveApproval`) after the agent was killed with -9, in the agent's own protocol:
//! the tool runs once, the log holds request, decision, who, and result in order; a second
//! resolve is 409, another account's 404, and exactly one replica resolves a request, by
//! hand or by timeout.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use session_log::{Event, EventType, RunStatus};

use crate::accounts::control;
use crate::auth::{auth_conf, bearer, KEY_A, KEY_B};
use crate::harness::*;
use crate::interop::interop_python;
use crate::traces::A2aAgent;

/// The fake agent with a tool log that outlives its process.
fn agent_with_tools(port: u16, tools: &std::path::Path) -> FakeAgent {
    FakeAgent::start_with(port, &["--tool-log", tools.to_str().unwrap()])
}

/// A fresh SQLite store, the fake agent with its tool log (in the returned directory, as
/// `tools.jsonl`), and Tether in front of it speaking `openai-responses` with `conf`.
fn responses_gateway(conf: &Conf) -> (tempfile::TempDir, TestStore, FakeAgent, Tether) {
    let dir = tempfile::tempdir().unwrap();
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let agent = agent_with_tools(0, &dir.path().join("tools.jsonl"));
    let tether = Tether::start(
        &agent.url(),
        "openai-responses",
        &store.url,
        &["--conf", &conf.arg()],
    );
    (dir, store, agent, tether)
}

fn tool_runs(tools: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(tools)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A Responses turn as account `key`, not streamed.
fn turn(tether: &Tether, key: &str, session: &str, text: &str) -> Value {
    let (k, v) = bearer(key);
    let r = post(
        &format!("{}/v1/responses", tether.url()),
        &json!({ "input": text, "conversation": session }).to_string(),
        &[(k, &v)],
    );
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()
}

fn data(r: &Reply) -> Value {
    r.json()["Data"].clone()
}

/// The seq of the first event `f` picks, after `after`.
fn seq_of(events: &[Event], after: i64, what: &str, f: impl Fn(&Event) -> bool) -> i64 {
    events
        .iter()
        .find(|e| e.seq > after && f(e))
        .unwrap_or_else(|| panic!("no {what} after seq {after}: {events:#?}"))
        .seq
}

fn status_is(e: &Event, status: RunStatus) -> bool {
    e.run_status() == Some(status)
}

#[test]
fn a_responses_approval_is_answered_through_tether_after_the_agent_is_killed() {
    let (dir, store, agent, tether) = responses_gateway(&auth_conf(""));
    let tools = dir.path().join("tools.jsonl");

    // The agent asks before it runs the tool: the response shows the request, and the run
    // ends `requires_action` with what is asked.
    let first = turn(&tether, KEY_A, "appr-1", "please approve:deploy");
    let item = first["output"][0].clone();
    assert_eq!(item["type"], "mcp_approval_request", "{first}");
    let request_id = item["id"].as_str().unwrap().to_owned();
    let events = store.wait_for_terminal("acct-a", "appr-1", 1);
    let waiting = events.iter().rev().find(|e| e.is_terminal()).unwrap();
    assert_eq!(waiting.run_status(), Some(RunStatus::RequiresAction));
    let action = &waiting.content["action"];
    assert_eq!(action["kind"], "approval");
    assert_eq!(action["request_id"], request_id.as_str());
    assert_eq!(action["tool"], "deploy");
    assert_eq!(action["arguments"], json!({"x": 1}));
    assert_eq!(action["protocol"], "openai-responses");
    assert!(
        events
            .iter()
            .any(|e| e.event_type == EventType::RunCheckpoint && e.seq < waiting.seq),
        "a checkpoint the answer continues from"
    );
    assert!(tool_runs(&tools).is_empty(), "nothing ran before approval");

    // Listed for its account only, oldest first, filterable.
    let list = |key: &str, body: Value| {
        let r = control(&tether, key, "ListPendingApprovals", body);
        assert_eq!(r.status, 200, "{}", r.body);
        data(&r)
    };
    let mine = list(KEY_A, json!({}));
    assert_eq!(mine["Total"], 1, "{mine}");
    let listed = &mine["Approvals"][0];
    assert_eq!(listed["SessionId"], "appr-1");
    assert_eq!(listed["RequestId"], request_id.as_str());
    assert_eq!(listed["Tool"], "deploy");
    assert_eq!(listed["Arguments"], json!({"x": 1}));
    assert_eq!(listed["Status"], "pending");
    let agent_id = listed["AgentId"].clone();
    assert_eq!(list(KEY_A, json!({ "AgentId": agent_id }))["Total"], 1);
    assert_eq!(list(KEY_A, json!({ "AgentId": "other" }))["Total"], 0);
    assert_eq!(list(KEY_A, json!({ "SessionId": "appr-1" }))["Total"], 1);
    assert_eq!(list(KEY_B, json!({}))["Total"], 0);

    // Another account's request is not found, and stays pending.
    let resolve = |key: &str, body: Value| control(&tether, key, "ResolveApproval", body);
    let body = json!({ "SessionId": "appr-1", "RequestId": request_id, "Decision": "approve",
                       "Comment": "ship it" });
    let foreign = resolve(KEY_B, body.clone());
    assert_eq!(foreign.status, 404, "{}", foreign.body);
    // Bad input changes nothing: a decision that is neither, edited arguments the
    // Responses protocol cannot carry.
    let bad = resolve(
        KEY_A,
        json!({ "SessionId": "appr-1", "RequestId": request_id, "Decision": "maybe" }),
    );
    assert_eq!(bad.status, 400, "{}", bad.body);
    let edited = resolve(
        KEY_A,
        json!({ "SessionId": "appr-1", "RequestId": request_id, "Decision": "approve",
                "Arguments": {"x": 2} }),
    );
    assert_eq!(edited.status, 400, "{}", edited.body);
    assert_eq!(list(KEY_A, json!({}))["Total"], 1);

    // The agent dies while the approval waits; it comes back with no memory.
    let port = agent.kill();
    let agent = agent_with_tools(port, &tools);

    let done = resolve(KEY_A, body.clone());
    assert_eq!(done.status, 200, "{}", done.body);
    let d = data(&done);
    assert_eq!(d["Decision"], "approve");
    assert_eq!(
        d["ResolvedBy"],
        json!({"account_id": "acct-a", "credential": "key:a"})
    );
    assert_eq!(d["Status"], "resolved");
    let answer_invocation = d["AnswerInvocationId"].as_str().unwrap().to_owned();

    let events = store.wait_for_terminal("acct-a", "appr-1", 2);
    let last = events.last().unwrap();
    assert_eq!(last.run_status(), Some(RunStatus::Completed), "{events:#?}");
    assert_eq!(
        last.invocation_id.as_deref(),
        Some(answer_invocation.as_str())
    );

    // The tool ran once, with the request's arguments.
    let runs = tool_runs(&tools);
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["approval_request_id"], request_id.as_str());
    assert_eq!(runs[0]["arguments"], "{\"x\": 1}");
    // The restarted agent was given the request and the answer with the conversation.
    let sent = &agent.requests()[0]["body"]["input"];
    let types: Vec<&str> = sent
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["type"].as_str())
        .collect();
    assert!(
        types.contains(&"mcp_approval_request") && types.contains(&"mcp_approval_response"),
        "{sent}"
    );

    // Request, decision (with who), the answer, and the result, in this order.
    let request = seq_of(&events, 0, "the request item", |e| {
        e.event_type == EventType::Approval && e.content["type"] == "mcp_approval_request"
    });
    let requires = seq_of(&events, request, "requires_action", |e| {
        status_is(e, RunStatus::RequiresAction)
    });
    let decided = seq_of(&events, requires, "approval_resolved", |e| {
        e.event_type == EventType::ApprovalResolved
    });
    let resolved = events.iter().find(|e| e.seq == decided).unwrap();
    assert_eq!(resolved.content["request_id"], request_id.as_str());
    assert_eq!(resolved.content["decision"], "approve");
    assert_eq!(resolved.content["comment"], "ship it");
    assert_eq!(resolved.content["by"]["credential"], "key:a");
    assert_eq!(
        resolved.content["run_id"].as_str(),
        waiting.invocation_id.as_deref()
    );
    let answer = seq_of(&events, decided, "the approval response", |e| {
        e.event_type == EventType::Approval
            && e.content["type"] == "mcp_approval_response"
            && e.content["approve"] == true
    });
    let result = seq_of(&events, answer, "the result", |e| {
        e.event_type == EventType::Message
            && e.role.as_deref() == Some("assistant")
            && e.text() == "deploy ran with {\"x\": 1}"
    });
    let completed = seq_of(&events, result, "completed", |e| {
        status_is(e, RunStatus::Completed)
    });
    assert!(request < requires && requires < decided && decided < answer);
    assert!(answer < result && result < completed);

    // Resolved once: again is a conflict, and nothing is pending.
    let again = resolve(KEY_A, body);
    assert_eq!(again.status, 409, "{}", again.body);
    assert_eq!(again.json()["Data"]["code"], "approval_resolved");
    assert_eq!(again.json()["Data"]["Decision"], "approve");
    assert_eq!(list(KEY_A, json!({}))["Total"], 0);
    assert_eq!(tool_runs(&tools).len(), 1);
}

#[test]
fn a_rejected_request_never_runs_the_tool() {
    let dir = tempfile::tempdir().unwrap();
    let tools = dir.path().join("tools.jsonl");
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let agent = agent_with_tools(0, &tools);
    let tether = Tether::start(&agent.url(), "openai-responses", &store.url, &[]);
    let api = Api::of(&tether);
    let r = post_json(
        &format!("{}/v1/responses", tether.url()),
        &json!({ "input": "approve:wipe", "conversation": "appr-2" }),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let request_id = r.json()["output"][0]["id"].as_str().unwrap().to_owned();
    let (status, unknown) = api.call(
        "ResolveApproval",
        json!({ "SessionId": "appr-2", "RequestId": "mcpr_nope", "Decision": "reject" }),
    );
    assert_eq!(status, 404, "{unknown}");
    let d = api.ok(
        "ResolveApproval",
        json!({ "SessionId": "appr-2", "RequestId": request_id, "Decision": "reject",
                "Comment": "not on a Friday" }),
    );
    assert_eq!(d["ResolvedBy"]["credential"], "local");
    let events = store.wait_for_terminal("local", "appr-2", 2);
    assert_eq!(
        events.last().unwrap().run_status(),
        Some(RunStatus::Completed)
    );
    assert!(events
        .iter()
        .any(|e| e.event_type == EventType::Message
            && e.text() == "wipe was not run: not on a Friday"));
    assert!(tool_runs(&tools).is_empty());
    drop(agent);
}

#[test]
fn a_client_that_answers_in_its_own_protocol_leaves_nothing_pending() {
    let dir = tempfile::tempdir().unwrap();
    let tools = dir.path().join("tools.jsonl");
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let agent = agent_with_tools(0, &tools);
    // A timeout that would answer again if the request were still pending.
    let conf = Conf::write(
        "[approvals]\ntimeout_seconds = 1\non_timeout = \"approve\"\nsweep_interval_seconds = 1\n",
    );
    let tether = Tether::start(
        &agent.url(),
        "openai-responses",
        &store.url,
        &["--conf", &conf.arg()],
    );
    let api = Api::of(&tether);
    let url = format!("{}/v1/responses", tether.url());
    let r = post_json(
        &url,
        &json!({ "input": "approve:deploy", "conversation": "appr-3" }),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let request_id = r.json()["output"][0]["id"].as_str().unwrap().to_owned();
    // The OpenAI way: the client sends the approval response itself.
    let answer = json!({ "conversation": "appr-3", "input": [{ "type": "mcp_approval_response",
        "approval_request_id": request_id, "approve": true }] });
    let r = post_json(&url, &answer);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        api.ok("ListPendingApprovals", json!({}))["Total"],
        0,
        "answered in the session: nothing pending"
    );
    std::thread::sleep(Duration::from_millis(2500));
    let events = store.events("local", "appr-3");
    assert_eq!(
        events.iter().filter(|e| e.is_terminal()).count(),
        2,
        "{events:#?}"
    );
    assert!(!events
        .iter()
        .any(|e| e.event_type == EventType::ApprovalResolved));
    assert_eq!(tool_runs(&tools).len(), 1, "the tool ran once");
    let (status, _) = api.call(
        "ResolveApproval",
        json!({ "SessionId": "appr-3", "RequestId": request_id, "Decision": "approve" }),
    );
    assert_eq!(status, 404, "no longer pending");
}

#[test]
fn an_a2a_task_waiting_for_input_is_answered_after_the_agent_is_killed() {
    a2a_input_answered_after_a_kill(None);
}

/// The same with Tether calling the agent over gRPC (`--a2a-upstream-transport grpc`): the
/// waiting task, the probe that finds it forgotten, the restore and the answer all go
/// over gRPC, as the agent's record of its calls shows.
#[test]
fn an_a2a_task_waiting_for_input_is_answered_over_grpc_after_the_agent_is_killed() {
    a2a_input_answered_after_a_kill(Some("grpc"));
}

/// A2A `input-required` answered through Tether after a kill -9 of the a2a-sdk agent,
/// Tether calling it over `transport` (JSON-RPC by default).
fn a2a_input_answered_after_a_kill(transport: Option<&str>) {
    let Some(python) = interop_python() else {
        return;
    };
    let llm = FakeAgent::start();
    let port = free_port();
    let grpc_port = transport.map(|_| free_port());
    let agent = A2aAgent::start_with(&python, port, grpc_port, &llm.url());
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let args: Vec<&str> = transport.map_or(vec![], |t| vec!["--a2a-upstream-transport", t]);
    let tether = Tether::start(
        &format!("http://127.0.0.1:{port}"),
        "a2a",
        &store.url,
        &args,
    );
    let api = Api::of(&tether);
    let send = json!({ "jsonrpc": "2.0", "id": "1", "method": "message/send", "params": {
        "message": { "kind": "message", "role": "user", "messageId": "m-1",
                     "parts": [{ "kind": "text", "text": "need-input" }],
                     "contextId": "appr-a2a" } } });
    let r = post_json(&format!("{}/", tether.url()), &send);
    assert_eq!(r.status, 200, "{}", r.body);
    let task = r.json()["result"].clone();
    assert_eq!(task["status"]["state"], "input-required", "{task}");
    let task_id = task["id"].as_str().unwrap().to_owned();

    let events = store.wait_for_terminal("local", "appr-a2a", 1);
    let waiting = events.last().unwrap();
    assert_eq!(waiting.run_status(), Some(RunStatus::RequiresAction));
    assert_eq!(waiting.content["action"]["kind"], "input");
    assert_eq!(waiting.content["action"]["task_id"], task_id.as_str());
    assert_eq!(waiting.content["action"]["question"], "Go on.");
    let pending = api.ok("ListPendingApprovals", json!({ "SessionId": "appr-a2a" }));
    assert_eq!(pending["Total"], 1, "{pending}");
    let request_id = pending["Approvals"][0]["RequestId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(pending["Approvals"][0]["Kind"], "input");

    agent.kill();
    let _agent = A2aAgent::start_with(&python, port, grpc_port, &llm.url());

    let d = api.ok(
        "ResolveApproval",
        json!({ "SessionId": "appr-a2a", "RequestId": request_id, "Decision": "approve",
                "Comment": "Reply with OK" }),
    );
    let answer_invocation = d["AnswerInvocationId"].as_str().unwrap().to_owned();
    let events = store.wait_for_terminal("local", "appr-a2a", 2);
    let last = events.last().unwrap();
    assert_eq!(last.run_status(), Some(RunStatus::Completed), "{events:#?}");
    assert_eq!(
        last.invocation_id.as_deref(),
        Some(answer_invocation.as_str())
    );
    // The agent had forgotten the task: Tether restored the conversation first.
    let decided = seq_of(&events, 0, "approval_resolved", |e| {
        e.event_type == EventType::ApprovalResolved
    });
    let restored = seq_of(&events, decided, "session_restore", |e| {
        e.event_type == EventType::SessionRestore
    });
    let answered = seq_of(&events, restored, "the answer", |e| {
        e.event_type == EventType::Message
            && e.role.as_deref() == Some("assistant")
            && e.text() == "OK."
    });
    assert!(waiting.seq < decided && answered < last.seq);
    let (_, received) = get_json(&format!("http://127.0.0.1:{port}/_received"));
    let answers: Vec<&Value> = received
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["text"] == "Reply with OK")
        .collect();
    assert_eq!(answers.len(), 1, "{received}");
    let over = if transport == Some("grpc") {
        "grpc"
    } else {
        "http"
    };
    assert!(
        received
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["transport"] == over),
        "{received}"
    );
    let (status, again) = api.call(
        "ResolveApproval",
        json!({ "SessionId": "appr-a2a", "RequestId": request_id, "Decision": "reject" }),
    );
    assert_eq!(status, 409, "{again}");
}

/// Two replicas on one PostgreSQL.
fn replicas(agent: &FakeAgent, url: &str, conf: Option<&Conf>) -> (Tether, Tether) {
    let args: Vec<String> = conf
        .map(|c| vec!["--conf".to_owned(), c.arg()])
        .unwrap_or_default();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let a = Tether::start(&agent.url(), "openai-responses", url, &args);
    let b = Tether::start(&agent.url(), "openai-responses", url, &args);
    (a, b)
}

fn waiting_request(tether: &Tether, session: &str) -> String {
    let r = post_json(
        &format!("{}/v1/responses", tether.url()),
        &json!({ "input": "approve:deploy", "conversation": session }),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()["output"][0]["id"].as_str().unwrap().to_owned()
}

#[test]
fn two_replicas_resolving_at_once_resolve_once() {
    let Some(url) = postgres_url() else { return };
    let store = TestStore::new(StoreKind::Postgres).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let tools = dir.path().join("tools.jsonl");
    let agent = agent_with_tools(0, &tools);
    let (a, b) = replicas(&agent, &url, None);
    let session = format!("appr-race-{}", uuid::Uuid::new_v4().simple());
    let request_id = waiting_request(&a, &session);
    let body = json!({ "SessionId": session, "RequestId": request_id, "Decision": "approve" });
    let (url_a, url_b) = (a.url(), b.url());
    let race = |base: String, body: Value| {
        std::thread::spawn(move || {
            post(
                &format!("{base}/agentengine/api/v1/ResolveApproval"),
                &body.to_string(),
                &[],
            )
            .status
        })
    };
    let (x, y) = (race(url_a, body.clone()), race(url_b, body));
    let mut statuses = [x.join().unwrap(), y.join().unwrap()];
    statuses.sort();
    assert_eq!(statuses, [200, 409]);
    let events = store.wait_for_terminal("local", &session, 2);
    let resolved = events
        .iter()
        .filter(|e| e.event_type == EventType::ApprovalResolved)
        .count();
    assert_eq!(resolved, 1);
    wait_until("the tool ran", Duration::from_secs(10), || {
        tool_runs(&tools).len() == 1
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(tool_runs(&tools).len(), 1, "the tool ran once");
}

#[test]
fn a_timeout_is_applied_once_across_two_replicas() {
    let Some(url) = postgres_url() else { return };
    let store = TestStore::new(StoreKind::Postgres).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let tools = dir.path().join("tools.jsonl");
    let agent = agent_with_tools(0, &tools);
    let conf = Conf::write(
        "[approvals]\ntimeout_seconds = 2\non_timeout = \"reject\"\nsweep_interval_seconds = 1\n",
    );
    let (a, b) = replicas(&agent, &url, Some(&conf));
    let run = uuid::Uuid::new_v4().simple().to_string();
    let sessions: Vec<String> = (0..4).map(|i| format!("appr-timeout-{run}-{i}")).collect();
    let requests: Vec<String> = sessions
        .iter()
        .enumerate()
        .map(|(i, session)| waiting_request(if i % 2 == 0 { &a } else { &b }, session))
        .collect();
    let pending = Api::of(&a).ok("ListPendingApprovals", json!({}));
    let ours = pending["Approvals"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["SessionId"].as_str().unwrap().contains(&run))
        .count();
    assert_eq!(ours, 4, "{pending}");
    for session in &sessions {
        let events = store.wait_for_terminal("local", session, 2);
        let resolutions: Vec<&Event> = events
            .iter()
            .filter(|e| e.event_type == EventType::ApprovalResolved)
            .collect();
        assert_eq!(resolutions.len(), 1, "{session}: {events:#?}");
        assert_eq!(resolutions[0].content["by"], json!({"timeout": true}));
        assert_eq!(resolutions[0].content["decision"], "reject");
        assert_eq!(
            events.last().unwrap().run_status(),
            Some(RunStatus::Completed)
        );
        assert!(events
            .iter()
            .any(|e| e.event_type == EventType::Message
                && e.text() == "deploy was not run: rejected"));
    }
    // Nothing more comes: each request was answered once, by one replica.
    std::thread::sleep(Duration::from_secs(2));
    for session in &sessions {
        let events = store.events("local", session);
        assert_eq!(events.iter().filter(|e| e.is_terminal()).count(), 2);
    }
    assert!(tool_runs(&tools).is_empty());
    // Each request's resolution is logged by the one replica that made it.
    for id in &requests {
        let by = |t: &Tether| {
            t.log_text()
                .lines()
                .any(|l| l.contains("approval resolved") && l.contains(id.as_str()))
        };
        assert!(by(&a) ^ by(&b), "{id}: resolved by exactly one replica");
    }
}

/// `langgraph dev` (in memory, from the LangGraph venv) serving
/// tests/agents/langgraph_agent/approval_graph.py as `approval`, in a fresh directory per
/// start: a restarted server has forgotten every thread.
struct LangGraphDev {
    child: Child,
    _work: tempfile::TempDir,
}

impl LangGraphDev {
    fn start(python: &str, port: u16, tools: &std::path::Path) -> LangGraphDev {
        let work = tempfile::tempdir().unwrap();
        std::fs::copy(
            repo_root().join("tests/agents/langgraph_agent/approval_graph.py"),
            work.path().join("approval_graph.py"),
        )
        .unwrap();
        std::fs::write(
            work.path().join("langgraph.json"),
            r#"{"dependencies": ["."], "graphs": {"approval": "./approval_graph.py:graph"}}"#,
        )
        .unwrap();
        let cli = std::path::Path::new(python).with_file_name("langgraph");
        let child = Command::new(cli)
            .args(["dev", "--no-browser", "--no-reload", "--host", "127.0.0.1"])
            .args(["--port", &port.to_string()])
            .current_dir(work.path())
            .env("APPROVAL_TOOL_LOG", tools)
            .env("LANGSMITH_TRACING", "false")
            .env("LANGGRAPH_CLI_NO_ANALYTICS", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start langgraph dev");
        let url = format!("http://127.0.0.1:{port}/ok");
        wait_until("langgraph dev", Duration::from_secs(90), || {
            ureq::get(&url).call().is_ok()
        });
        LangGraphDev { child, _work: work }
    }

    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for LangGraphDev {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_langgraph_interrupt_is_resumed_through_tether_after_the_server_is_killed() {
    let Some(python) = required_in_ci(
        "TETHER_STACK_PYTHON_LANGGRAPH",
        "the LangGraph approvals test",
        "run tests/run",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let tools = dir.path().join("tools.jsonl");
    let port = free_port();
    let server = LangGraphDev::start(&python, port, &tools);
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let tether = Tether::start(
        &format!("http://127.0.0.1:{port}"),
        "langgraph",
        &store.url,
        &[],
    );
    let api = Api::of(&tether);
    let thread = uuid::Uuid::new_v4().to_string();
    let created = post_json(
        &format!("{}/threads", tether.url()),
        &json!({ "thread_id": thread }),
    );
    assert_eq!(created.status, 200, "{}", created.body);
    let r = post_json(
        &format!("{}/threads/{thread}/runs/wait", tether.url()),
        &json!({ "assistant_id": "approval",
                 "input": { "messages": [{ "role": "user", "content": "approve:deploy" }] } }),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let events = store.wait_for_terminal("local", &thread, 1);
    let waiting = events.last().unwrap();
    assert_eq!(
        waiting.run_status(),
        Some(RunStatus::RequiresAction),
        "{events:#?}"
    );
    let action = &waiting.content["action"];
    assert_eq!(action["kind"], "approval");
    assert_eq!(action["tool"], "deploy");
    assert_eq!(action["arguments"], json!({"x": 1}));
    assert_eq!(action["graph_id"], "approval");
    let request_id = action["request_id"].as_str().unwrap().to_owned();
    let pending = api.ok("ListPendingApprovals", json!({ "SessionId": thread }));
    assert_eq!(pending["Approvals"][0]["RequestId"], request_id.as_str());
    assert!(tool_runs(&tools).is_empty());

    server.kill();
    let _server = LangGraphDev::start(&python, port, &tools);

    let d = api.ok(
        "ResolveApproval",
        json!({ "SessionId": thread, "RequestId": request_id, "Decision": "approve",
                "Arguments": {"x": 7}, "Comment": "with x = 7" }),
    );
    assert_eq!(d["ResolvedArguments"], json!({"x": 7}));
    let events = store.wait_for_terminal("local", &thread, 2);
    let last = events.last().unwrap();
    assert_eq!(last.run_status(), Some(RunStatus::Completed), "{events:#?}");
    let runs = tool_runs(&tools);
    assert_eq!(runs, vec![json!({"tool": "deploy", "arguments": {"x": 7}})]);
    let decided = seq_of(&events, waiting.seq, "approval_resolved", |e| {
        e.event_type == EventType::ApprovalResolved
    });
    let resolved = events.iter().find(|e| e.seq == decided).unwrap();
    assert_eq!(resolved.content["arguments"], json!({"x": 7}));
    let restored = seq_of(&events, decided, "session_restore", |e| {
        e.event_type == EventType::SessionRestore
    });
    let result = seq_of(&events, restored, "the result", |e| {
        e.event_type == EventType::AgentEvent && e.content.to_string().contains("deploy ran with")
    });
    assert!(result < last.seq);
    let (status, _) = api.call(
        "ResolveApproval",
        json!({ "SessionId": thread, "RequestId": request_id, "Decision": "approve" }),
    );
    assert_eq!(status, 409);
}

/// `tether approvals list|approve|reject` through the control API, as the API key's
/// account.
#[test]
fn the_cli_lists_and_resolves_approvals() {
    let (dir, store, _agent, tether) = responses_gateway(&auth_conf(""));
    let tools = dir.path().join("tools.jsonl");
    let first = turn(&tether, KEY_A, "appr-cli", "approve:deploy");
    let request_id = first["output"][0]["id"].as_str().unwrap().to_owned();
    let url = tether.url();
    let cli = |key: &str, args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_tether"))
            .args(args)
            .args(["--url", &url, "--api-key", key])
            .env_remove("TETHER_URL")
            .env_remove("TETHER_API_KEY")
            .output()
            .expect("run tether");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, table, err) = cli(KEY_A, &["approvals", "list"]);
    assert!(ok, "{err}");
    assert!(
        table.contains(&request_id) && table.contains("deploy"),
        "{table}"
    );
    assert!(table.ends_with("1 pending\n"), "{table}");
    let (ok, table, _) = cli(KEY_B, &["approvals", "list"]);
    assert!(ok && table.ends_with("0 pending\n"), "{table}");
    let (ok, _, err) = cli(KEY_B, &["approvals", "approve", "appr-cli", &request_id]);
    assert!(!ok && err.contains("not found"), "{err}");
    let (ok, out, err) = cli(
        KEY_A,
        &[
            "approvals",
            "reject",
            "appr-cli",
            &request_id,
            "--comment",
            "no",
            "--json",
        ],
    );
    assert!(ok, "{err}");
    let data: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(data["Decision"], "reject");
    assert_eq!(data["ResolvedBy"]["credential"], "key:a");
    let events = store.wait_for_terminal("acct-a", "appr-cli", 2);
    assert!(events.iter().any(|e| e.text() == "deploy was not run: no"));
    let (ok, _, err) = cli(KEY_A, &["approvals", "approve", "appr-cli", &request_id]);
    assert!(!ok && err.contains("already resolved"), "{err}");
    assert!(tool_runs(&tools).is_empty());
}

/// ADK's `api_server` (sessions in memory) serving tests/agents/adk_approval_agent, whose
/// tool needs confirmation, with the fake LLM as its model: a restarted server has
/// forgotten every session, and the confirmation it was waiting on with it.
struct AdkServer {
    child: Child,
}

impl AdkServer {
    fn start(python: &str, port: u16, llm: &FakeAgent, tools: &std::path::Path) -> AdkServer {
        let adk = std::path::Path::new(python).with_file_name("adk");
        let child = Command::new(adk)
            .args(["api_server", "--session_service_uri", "memory://"])
            .args(["--host", "127.0.0.1", "--port", &port.to_string(), "."])
            .current_dir(repo_root().join("tests/agents"))
            .env("FAKE_LLM_URL", format!("{}/v1", llm.url()))
            .env("APPROVAL_TOOL_LOG", tools)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start adk api_server");
        let url = format!("http://127.0.0.1:{port}/list-apps");
        wait_until("adk api_server", Duration::from_secs(90), || {
            ureq::get(&url).call().is_ok()
        });
        AdkServer { child }
    }

    /// SIGKILL, as `kill -9`.
    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for AdkServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Creates an ADK session through Tether and runs `tool:deploy` in it: the run ends
/// `requires_action` on ADK's `adk_request_confirmation`. Returns the waiting status.
fn adk_waiting_on_deploy(tether: &Tether, store: &TestStore, session: &str) -> Event {
    let created = post_json(
        &format!(
            "{}/apps/adk_approval_agent/users/u1/sessions/{session}",
            tether.url()
        ),
        &json!({}),
    );
    assert_eq!(created.status, 200, "{}", created.body);
    let run = post_json(
        &format!("{}/run_sse", tether.url()),
        &json!({ "app_name": "adk_approval_agent", "user_id": "u1", "session_id": session,
                 "new_message": { "role": "user", "parts": [{ "text": "tool:deploy" }] } }),
    );
    assert_eq!(run.status, 200, "{}", run.body);
    let events = store.wait_for_terminal("local", session, 1);
    let waiting = events.last().unwrap().clone();
    assert_eq!(
        waiting.run_status(),
        Some(RunStatus::RequiresAction),
        "{events:#?}"
    );
    let action = &waiting.content["action"];
    assert_eq!(action["tool"], "deploy");
    assert_eq!(action["arguments"], json!({"x": 1}));
    assert_eq!(action["app_name"], "adk_approval_agent");
    assert_eq!(action["user_id"], "u1");
    waiting
}

/// The answer's run after `waiting`: the decision (with who), then `between` (a restore,
/// when the agent had forgotten), then the tool's result in the model's answer, then the
/// end, in seq order; the answer's run completed. Returns the events.
fn assert_answered_in_order(
    events: &[Event],
    waiting: &Event,
    credential: &str,
    between: Option<&dyn Fn(&Event) -> bool>,
    result: &dyn Fn(&Event) -> bool,
) {
    let last = events.last().unwrap();
    assert_eq!(last.run_status(), Some(RunStatus::Completed), "{events:#?}");
    let decided = seq_of(events, waiting.seq, "approval_resolved", |e| {
        e.event_type == EventType::ApprovalResolved
    });
    let resolved = events.iter().find(|e| e.seq == decided).unwrap();
    assert_eq!(resolved.content["decision"], "approve");
    assert_eq!(resolved.content["by"]["credential"], credential);
    let mut after = decided;
    if let Some(between) = between {
        after = seq_of(events, after, "the restore", between);
    }
    let answered = seq_of(events, after, "the tool's result", result);
    assert!(answered < last.seq, "{events:#?}");
}

/// `adk api_server` answering a confirmation through Tether: the answer goes back as ADK's
/// own `adk_request_confirmation` function response and the tool runs.
#[test]
fn an_adk_confirmation_is_answered_through_tether() {
    let Some(python) = interop_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let tools = dir.path().join("tools.jsonl");
    let llm = FakeAgent::start();
    let port = free_port();
    let _server = AdkServer::start(&python, port, &llm, &tools);
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let tether = Tether::start(&format!("http://127.0.0.1:{port}"), "adk", &store.url, &[]);
    let api = Api::of(&tether);
    let session = format!("appr-adk-{}", uuid::Uuid::new_v4().simple());
    let waiting = adk_waiting_on_deploy(&tether, &store, &session);
    assert!(tool_runs(&tools).is_empty());
    let request_id = waiting.content["action"]["request_id"].as_str().unwrap();
    api.ok(
        "ResolveApproval",
        json!({ "SessionId": session, "RequestId": request_id, "Decision": "approve" }),
    );
    let events = store.wait_for_terminal("local", &session, 2);
    assert_answered_in_order(&events, &waiting, "local", None, &|e| {
        e.event_type == EventType::Message && e.text() == r#"tool said: {"result": 42}"#
    });
    assert_eq!(
        tool_runs(&tools),
        vec![json!({"tool": "deploy", "arguments": {"x": 1}})]
    );
}

/// The same across a `kill -9` of `adk api_server` while the confirmation waits. ADK keeps
/// the confirmation in its session and refuses it in a re-created one, so Tether puts the
/// conversation back up to the turn that asked, sends that turn's message again (the
/// agent asks anew, for the same call) and answers the new request: the tool runs once,
/// and the log shows request, decision with who, the restore, and the result, in order.
#[test]
fn an_adk_confirmation_is_answered_through_tether_after_the_agent_is_killed() {
    let Some(python) = interop_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let tools = dir.path().join("tools.jsonl");
    let llm = FakeAgent::start();
    let port = free_port();
    let server = AdkServer::start(&python, port, &llm, &tools);
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let tether = Tether::start(
        &format!("http://127.0.0.1:{port}"),
        "adk",
        &store.url,
        &["--conf", &auth_conf("").arg()],
    );
    let session = format!("appr-adk-kill-{}", uuid::Uuid::new_v4().simple());
    // An earlier turn, which the restore puts back.
    let (k, v) = bearer(KEY_A);
    let created = post(
        &format!(
            "{}/apps/adk_approval_agent/users/u1/sessions/{session}",
            tether.url()
        ),
        "{}",
        &[(k, &v)],
    );
    assert_eq!(created.status, 200, "{}", created.body);
    let run = |text: &str| {
        let body = json!({ "app_name": "adk_approval_agent", "user_id": "u1",
            "session_id": session,
            "new_message": { "role": "user", "parts": [{ "text": text }] } });
        let r = post(
            &format!("{}/run_sse", tether.url()),
            &body.to_string(),
            &[(k, &v)],
        );
        assert_eq!(r.status, 200, "{}", r.body);
    };
    run("My project is named zebra42.");
    run("tool:deploy");
    let events = store.wait_for_terminal("acct-a", &session, 2);
    let waiting = events.last().unwrap().clone();
    assert_eq!(
        waiting.run_status(),
        Some(RunStatus::RequiresAction),
        "{events:#?}"
    );
    let action = &waiting.content["action"];
    assert_eq!(
        (&action["tool"], &action["arguments"]),
        (&json!("deploy"), &json!({"x": 1}))
    );
    let request_id = action["request_id"].as_str().unwrap().to_owned();
    let asked = seq_of(&events, 0, "the confirmation request", |e| {
        e.event_type == EventType::AgentEvent
            && e.content.to_string().contains("adk_request_confirmation")
    });
    assert!(asked < waiting.seq);

    // The agent dies while the confirmation waits, and comes back with no sessions.
    server.kill();
    let _server = AdkServer::start(&python, port, &llm, &tools);
    assert!(tool_runs(&tools).is_empty(), "nothing ran before approval");

    let resolved = control(
        &tether,
        KEY_A,
        "ResolveApproval",
        json!({ "SessionId": session, "RequestId": request_id, "Decision": "approve",
                "Comment": "go" }),
    );
    assert_eq!(resolved.status, 200, "{}", resolved.body);
    let events = store.wait_for_terminal("acct-a", &session, 3);
    assert_answered_in_order(
        &events,
        &waiting,
        "key:a",
        Some(&|e: &Event| {
            e.event_type == EventType::SessionRestore
                && e.content["asked_again"]["request_id"] == request_id.as_str()
        }),
        &|e| e.event_type == EventType::Message && e.text() == r#"tool said: {"result": 42}"#,
    );
    assert_eq!(
        tool_runs(&tools),
        vec![json!({"tool": "deploy", "arguments": {"x": 1}})],
        "the tool ran once, after the decision"
    );
    // The restored session holds the earlier turn: the agent still knows it.
    let answered = events.last().unwrap().seq;
    run("What is my project named?");
    let events = store.wait_for_terminal("acct-a", &session, 4);
    assert!(
        events.iter().any(|e| e.seq > answered
            && e.event_type == EventType::Message
            && e.role.as_deref() == Some("assistant")
            && e.text().contains("zebra42")),
        "{events:#?}"
    );
    assert_eq!(tool_runs(&tools).len(), 1);
}

/// kagent's Python runtime (`kagent-adk run --local`, sessions in memory) serving
/// tests/agents/kagent/kagent_adk_approval_agent, whose tool `deploy` needs approval.
struct KagentAdk {
    child: Child,
}

impl KagentAdk {
    fn start(python: &str, port: u16, llm: &FakeAgent, tools: &std::path::Path) -> KagentAdk {
        let cli = std::path::Path::new(python).with_file_name("kagent-adk");
        let child = Command::new(cli)
            .args([
                "run",
                "kagent_adk_approval_agent",
                "--local",
                "--working-dir",
            ])
            .arg(repo_root().join("tests/agents/kagent"))
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .env("FAKE_LLM_URL", format!("{}/v1", llm.url()))
            .env("APPROVAL_TOOL_LOG", tools)
            // kagent's runtime reads these at import; in local mode nothing calls KAGENT_URL.
            .env("KAGENT_URL", "http://127.0.0.1:9")
            .env("KAGENT_NAME", "kagent-adk-approval")
            .env("KAGENT_NAMESPACE", "kagent")
            .env("OTEL_SDK_DISABLED", "true")
            .env("LOG_LEVEL", "warning")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start kagent-adk");
        let url = format!("http://127.0.0.1:{port}/.well-known/agent-card.json");
        wait_until("kagent-adk", Duration::from_secs(90), || {
            ureq::get(&url).call().is_ok()
        });
        KagentAdk { child }
    }

    /// SIGKILL, as `kill -9`.
    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for KagentAdk {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// kagent-adk asking to approve a tool call (an A2A task in `input-required` carrying
/// ADK's `adk_request_confirmation`), answered through Tether after a `kill -9` of the
/// agent. kagent keeps the pending confirmation in its in-memory ADK session and reads
/// the decision against it, so Tether puts the conversation back up to the turn that
/// asked, sends that turn's message again (kagent asks anew, in a new task, for the same
/// call) and sends the decision into that task: the tool runs once, the turn completes,
/// and the log shows request, decision with who, the restore, and the result, in order.
#[test]
fn a_kagent_tool_approval_is_answered_through_tether_after_the_agent_is_killed() {
    let Some(python) = required_in_ci(
        "TETHER_STACK_PYTHON_KAGENT",
        "the kagent approvals test",
        "run tests/run",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let tools = dir.path().join("tools.jsonl");
    let llm = FakeAgent::start();
    let port = free_port();
    let agent = KagentAdk::start(&python, port, &llm, &tools);
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let tether = Tether::start(
        &format!("http://127.0.0.1:{port}"),
        "a2a",
        &store.url,
        &["--conf", &auth_conf("").arg()],
    );
    let session = format!("appr-kagent-{}", uuid::Uuid::new_v4().simple());
    let (k, v) = bearer(KEY_A);
    let send = |text: &str, id: &str| {
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": "message/send", "params": {
            "message": { "kind": "message", "role": "user", "messageId": id,
                         "parts": [{ "kind": "text", "text": text }],
                         "contextId": session } } });
        let r = post(&format!("{}/", tether.url()), &body.to_string(), &[(k, &v)]);
        assert_eq!(r.status, 200, "{}", r.body);
        r.json()["result"].clone()
    };
    let first = send("My project is named zebra42.", "m-1");
    assert_eq!(first["status"]["state"], "completed", "{first}");
    let task = send("tool:deploy", "m-2");
    assert_eq!(task["status"]["state"], "input-required", "{task}");
    let events = store.wait_for_terminal("acct-a", &session, 2);
    let waiting = events.last().unwrap().clone();
    assert_eq!(
        waiting.run_status(),
        Some(RunStatus::RequiresAction),
        "{events:#?}"
    );
    let action = &waiting.content["action"];
    assert_eq!(action["kind"], "approval", "{action}");
    assert_eq!(action["tool"], "deploy", "{action}");
    assert_eq!(action["arguments"], json!({"x": 1}), "{action}");
    assert_eq!(action["task_id"], task["id"]);
    let pending = control(
        &tether,
        KEY_A,
        "ListPendingApprovals",
        json!({ "SessionId": session }),
    );
    assert_eq!(pending.status, 200, "{}", pending.body);
    let request_id = data(&pending)["Approvals"][0]["RequestId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(action["request_id"], request_id.as_str());
    let asked = seq_of(&events, 0, "the approval request", |e| {
        e.event_type == EventType::AgentEvent && e.content.to_string().contains("input-required")
    });
    assert!(asked < waiting.seq);

    agent.kill();
    let _agent = KagentAdk::start(&python, port, &llm, &tools);
    assert!(tool_runs(&tools).is_empty(), "nothing ran before approval");

    let resolved = control(
        &tether,
        KEY_A,
        "ResolveApproval",
        json!({ "SessionId": session, "RequestId": request_id, "Decision": "approve" }),
    );
    assert_eq!(resolved.status, 200, "{}", resolved.body);
    let events = store.wait_for_terminal("acct-a", &session, 3);
    assert_answered_in_order(
        &events,
        &waiting,
        "key:a",
        Some(&|e: &Event| {
            e.event_type == EventType::SessionRestore
                && e.content["asked_again"]["request_id"] == request_id.as_str()
        }),
        &|e| {
            e.event_type == EventType::AgentEvent && e.content.to_string().contains("tool said: 42")
        },
    );
    assert_eq!(
        tool_runs(&tools),
        vec![json!({"tool": "deploy", "arguments": {"x": 1}})],
        "the tool ran once, after the decision"
    );
    let again = control(
        &tether,
        KEY_A,
        "ResolveApproval",
        json!({ "SessionId": session, "RequestId": request_id, "Decision": "reject" }),
    );
    assert_eq!(again.status, 409, "{}", again.body);
}
