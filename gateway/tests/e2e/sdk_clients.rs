//! Client libraries as apps use them, through Tether in front of the fake agent, which the
//! tests kill after turn 1 and start again 1.5 s after turn 2 was sent, while the library's
//! default retries wait (issue 38): the Vercel AI SDK (tests/clients/vercel, Node, pinned by
//! its package-lock.json) and LangChain and LlamaIndex
//! (tests/interop/test_clients_frameworks.py, their own venv). Each checks turn 2's answer
//! and that the log holds every user message once on the session's history.

use std::process::Command;

use crate::harness::*;
use crate::interop::run_pytest_behind_tether;

/// Tether speaking to an agent the client tests own on a port of their own.
fn gateway(store: &TestStore) -> (Tether, u16) {
    let agent_port = free_port();
    let tether = Tether::start(
        &format!("http://127.0.0.1:{agent_port}"),
        "openai-responses",
        &store.url,
        &[],
    );
    (tether, agent_port)
}

#[test]
fn the_vercel_ai_sdk_continues_across_an_agent_restart() {
    let Some(dir) = required_in_ci(
        "TETHER_NODE_CLIENTS",
        "the Vercel AI SDK client tests",
        "run tests/run (npm ci in tests/clients/vercel, then TETHER_NODE_CLIENTS=that folder)",
    ) else {
        return;
    };
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let (tether, agent_port) = gateway(&store);
    let out = Command::new("node")
        .args(["--test", "vercel.test.mjs"])
        .current_dir(&dir)
        .env("TETHER_URL", tether.url())
        .env("AGENT_PORT", agent_port.to_string())
        .env("FAKE_AGENT", repo_root().join("tests/fake_agent.py"))
        .output()
        .expect("run node");
    let report = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "vercel.test.mjs failed:\n{report}\n--- tether log ---\n{}",
        tether.log_text()
    );
    assert!(report.contains("# pass 4"), "every case ran:\n{report}");
}

#[test]
fn langchain_and_llamaindex_continue_across_an_agent_restart() {
    let Some(python) = required_in_ci(
        "TETHER_STACK_PYTHON_OPENAI_CLIENTS",
        "the LangChain and LlamaIndex client tests",
        "run tests/run (tests/interop/venvs.sh openai-clients)",
    ) else {
        return;
    };
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    run_pytest_behind_tether(
        python,
        &store,
        "openai-responses",
        "tests/interop/test_clients_frameworks.py",
        &[],
    );
}
