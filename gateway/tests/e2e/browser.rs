//! The sessions console in a real browser: `tests/ui` (pytest with Playwright, from the
//! venv `tests/run` makes) drives Debian's chromium against the real binary in front of
//! the fake agent — once without `[auth]`, once with two accounts' API keys.
//! `TETHER_UPDATE_SCREENSHOTS=1` writes the README's screenshots to `docs/`.

use std::process::Command;

use crate::auth::{auth_conf, KEY_A, KEY_B};
use crate::harness::*;
use crate::interop::interop_python;

/// Debian's chromium, or `None` (a failure in CI) when it is not installed.
fn chromium() -> Option<String> {
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
    let screenshots = match std::env::var_os("TETHER_UPDATE_SCREENSHOTS") {
        Some(_) => repo_root().join("docs"),
        None => scratch.path().to_path_buf(),
    };
    let out = Command::new(python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/ui"])
        .current_dir(repo_root())
        .env("TETHER_URL", tether.url())
        .env("TETHER_STORE", &store.url)
        .env("TETHER_WORKSPACE", workspace.path())
        .env("TETHER_AUTH_URL", with_auth.url())
        .env("TETHER_KEY_A", KEY_A)
        .env("TETHER_KEY_B", KEY_B)
        .env("TETHER_AGENT_URL", agent.url())
        .env("TETHER_SCREENSHOTS", &screenshots)
        .env("CHROMIUM", chromium)
        .output()
        .expect("run pytest");
    let report = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "the console's browser tests failed:\n{report}\n--- tether log ---\n{}\n--- tether ([auth]) log ---\n{}",
        tether.log_text(),
        with_auth.log_text()
    );
    assert!(
        !report.contains(" skipped"),
        "no browser test may skip:\n{report}"
    );
}
