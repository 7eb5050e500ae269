//! The sessions console in a real browser: `tests/ui` (pytest with Playwright, from the
//! venv `tests/run` makes) drives Debian's chromium against the real binary in front of
//! the fake agent — once without `[auth]`, once with two accounts' API keys, and once in
//! front of a Responses agent whose runs wait for approvals (its tools logged to a file).
//! `TETHER_UPDATE_SCREENSHOTS=1` writes the README's screenshots to `docs/`.

use std::process::Command;

use crate::auth::{auth_conf, KEY_A, KEY_B};
use crate::harness::*;
use crate::interop::{interop_python, run_pytest_with};

/// Debian's chromium, or `None` (a failure in CI) when it is not installed.
pub fn chromium() -> Option<String> {
    let found = Command::new("sh")
        .args(["-c", "command -v chromium"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    match found {
        Some(path) if !path.is_empty() => Some(path),
        _ if std::env::var_os("CI").is_some() => {
            panic!("chromium is required in CI (apt-get install chromium; .ci/run installs it)")
        }
        _ => {
            eprintln!("chromium is not installed: skipping the console's browser tests");
            None
        }
    }
}

#[test]
fn the_console_in_a_real_browser() {
    let (Some(python), Some(chromium)) = (interop_python(), chromium()) else {
        return;
    };
    let agent = FakeAgent::start();
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let tether = Tether::start(
        &agent.url(),
        "openai-chat",
        &store.url,
        &["--workspace-dir", workspace.path().to_str().unwrap()],
    );
    let auth_store = TestStore::new(StoreKind::Sqlite).unwrap();
    let conf = auth_conf("");
    let with_auth = Tether::start(
        &agent.url(),
        "openai-chat",
        &auth_store.url,
        &["--conf", &conf.arg()],
    );
    let scratch = tempfile::tempdir().unwrap();
    // Approvals (`approve:NAME`) are a Responses trigger of the fake agent.
    let tool_log = scratch.path().join("tools.jsonl");
    let tools_agent = FakeAgent::start_with(0, &["--tool-log", tool_log.to_str().unwrap()]);
    let approvals_store = TestStore::new(StoreKind::Sqlite).unwrap();
    let approvals = Tether::start(
        &tools_agent.url(),
        "openai-responses",
        &approvals_store.url,
        &[],
    );
    let screenshots = match std::env::var_os("TETHER_UPDATE_SCREENSHOTS") {
        Some(_) => repo_root().join("docs"),
        None => scratch.path().to_path_buf(),
    };
    let mut pytest = Command::new(python);
    pytest
        .env("TETHER_URL", tether.url())
        .env("TETHER_STORE", &store.url)
        .env("TETHER_WORKSPACE", workspace.path())
        .env("TETHER_AUTH_URL", with_auth.url())
        .env("TETHER_KEY_A", KEY_A)
        .env("TETHER_KEY_B", KEY_B)
        .env("TETHER_AGENT_URL", agent.url())
        .env("TETHER_APPROVALS_URL", approvals.url())
        .env("TETHER_TOOL_LOG", &tool_log)
        .env("TETHER_SCREENSHOTS", &screenshots)
        .env("CHROMIUM", chromium);
    // tests/ui/test_web_origins.py needs gateways of its own: see `web_origins`.
    run_pytest_with(
        pytest,
        &["tests/ui/test_console.py"],
        &[&tether, &with_auth, &approvals],
    );
}
