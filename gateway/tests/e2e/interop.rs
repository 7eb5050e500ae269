//! Interop: the official `openai` Python SDK (from PyPI, in the venv `tests/run` makes)
//! streams and non-streams both APIs through Tether and continues conversations.

use std::process::Command;

use crate::harness::*;

/// The venv's python, or `None` (a failure in CI) when the venv is missing.
pub fn interop_python() -> Option<String> {
    required_in_ci(
        "TETHER_INTEROP_PYTHON",
        "the OpenAI SDK interop tests",
        "run tests/run",
    )
}

fn run_pytest(protocol: &str) {
    let Some(python) = interop_python() else {
        return;
    };
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let agent = FakeAgent::start();
    let tether = Tether::start(&agent.url(), protocol, &store.url, &[]);
    let mut pytest = Command::new(python);
    pytest.env("TETHER_URL", tether.url());
    run_pytest_with(
        pytest,
        &[
            "tests/interop/test_openai_sdk.py",
            "tests/interop/test_fake_agent.py",
        ],
        &[&tether],
    );
}

/// Runs pytest on `paths` from the repository's root with `python` as set up; fails with
/// pytest's report and the gateways' logs unless every test ran and passed.
/// The pytest `file`, run by `python`, against a gateway on `store` that speaks `protocol`
/// to the fake agent the file itself starts (and kills) on `AGENT_PORT`; `env` is passed
/// besides `TETHER_URL` and `AGENT_PORT`.
pub fn run_pytest_behind_tether(
    python: String,
    store: &TestStore,
    protocol: &str,
    file: &str,
    env: &[(&str, &str)],
) {
    let agent_port = free_port();
    let tether = Tether::start(
        &format!("http://127.0.0.1:{agent_port}"),
        protocol,
        &store.url,
        &[],
    );
    let mut pytest = Command::new(python);
    pytest
        .env("TETHER_URL", tether.url())
        .env("AGENT_PORT", agent_port.to_string())
        .envs(env.iter().copied());
    run_pytest_with(pytest, &[file], &[&tether]);
}

pub fn run_pytest_with(mut python: Command, paths: &[&str], gateways: &[&Tether]) {
    let out = python
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .args(paths)
        .current_dir(repo_root())
        .output()
        .expect("run pytest");
    let report = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let logs: String = gateways
        .iter()
        .map(|t| format!("\n--- tether log (port {}) ---\n{}", t.port, t.log_text()))
        .collect();
    assert!(
        out.status.success(),
        "pytest {paths:?} failed:\n{report}{logs}"
    );
    assert!(!report.contains(" skipped"), "no test may skip:\n{report}");
}

#[test]
fn openai_sdk_through_tether_to_a_chat_agent() {
    run_pytest("openai-chat");
}

#[test]
fn openai_sdk_through_tether_to_a_responses_agent() {
    run_pytest("openai-responses");
}
