//! llm-comply (PyPI, pinned in tests/interop/requirements-llm-comply.txt, its own venv from
//! tests/interop/venvs.sh): the Open Responses compliance suite and its Chat Completions
//! counterpart, straight against the schema-complete fake agent and through Tether in
//! front of it. Straight, every test passes; through Tether, every test but the one where
//! Tether differs on purpose: a request without `model` is given the configured `model`
//! (README, "Compatibility matrix"), where the suites expect a 400.

use std::process::{Child, Command};

use serde_json::Value;

use crate::harness::*;

/// The fake agent refusing requests without `model`, as the OpenAI API does.
struct StrictAgent {
    child: Child,
    url: String,
}

impl StrictAgent {
    fn start() -> StrictAgent {
        let mut command = Command::new("python3");
        command.arg(repo_root().join("tests/fake_agent.py")).args([
            "--port",
            "0",
            "--require-model",
        ]);
        let (child, port) = spawn_ready_on(command, "fake agent");
        StrictAgent {
            child,
            url: format!("http://127.0.0.1:{port}"),
        }
    }
}

impl Drop for StrictAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One llm-comply run's `--json` report. The model's name lets the reasoning tests run
/// (the suite skips them for models it does not know to reason).
fn llm_comply(python: &str, base_url: &str, format: &str) -> Value {
    let out = Command::new(python)
        .args(["-m", "llm_comply.cli", "--format", format, "-u", base_url])
        .args([
            "-k",
            "none",
            "-m",
            "gpt-5-fake",
            "--json",
            "--timeout",
            "30",
        ])
        .output()
        .expect("run llm-comply");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "llm-comply --json ({e}):\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn failed(report: &Value) -> Vec<String> {
    report["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["status"] != "passed")
        .map(|r| {
            format!(
                "{} ({})",
                r["id"].as_str().unwrap(),
                r["status"].as_str().unwrap()
            )
        })
        .collect()
}

#[test]
fn llm_comply_passes_straight_and_through_tether_but_for_the_default_model() {
    let Some(python) = required_in_ci(
        "TETHER_STACK_PYTHON_LLM_COMPLY",
        "the llm-comply conformance tests",
        "run tests/run (tests/interop/venvs.sh llm-comply)",
    ) else {
        return;
    };
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let agent = StrictAgent::start();
    for (format, protocol, total, missing_model) in [
        ("open-responses", "openai-responses", 13, "error-handling"),
        ("openai-chat", "openai-chat", 9, "chat-error-handling"),
    ] {
        let straight = llm_comply(&python, &format!("{}/v1", agent.url), format);
        assert_eq!(straight["summary"]["total"], total, "{straight}");
        assert_eq!(failed(&straight), Vec::<String>::new(), "{format} straight");

        let tether = Tether::start(&agent.url, protocol, &store.url, &[]);
        let through = llm_comply(&python, &format!("{}/v1", tether.url()), format);
        assert_eq!(through["summary"]["total"], total, "{through}");
        assert_eq!(
            failed(&through),
            [format!("{missing_model} (failed)")],
            "{format} through Tether: {through}\n{}",
            tether.log_text()
        );
        eprintln!(
            "llm-comply {format}: {}/{total} straight, {}/{total} through Tether",
            straight["summary"]["passed"], through["summary"]["passed"]
        );
    }
}
