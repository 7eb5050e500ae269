//! Interop with stateful agents: a real a2a-sdk agent and a real `adk api_server`, both
//! keeping their sessions in memory, behind Tether. pytest (tests/interop/test_a2a.py,
//! test_adk.py, with the official SDKs from the venv `tests/run` makes) owns the agent
//! process: it starts it on the port Tether's `--upstream` names, kills and restarts it
//! mid-conversation, and checks that the conversation survives through Tether only.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::auth::{auth_conf, KEY_A, KEY_B};
use crate::harness::*;

/// Longest a whole pytest file may take before it is stopped (it normally takes < 1 min).
const PYTEST_TIMEOUT: Duration = Duration::from_secs(300);

/// The venv's python, or `None` (a failure in CI) when the venv is missing.
fn interop_python() -> Option<String> {
    required_in_ci(
        "TETHER_INTEROP_PYTHON",
        "the A2A/ADK interop tests",
        "run tests/run",
    )
}

/// Waits for pytest; past the deadline, SIGTERM (its handler kills the agent it started),
/// then SIGKILL.
fn wait_with_timeout(child: &mut Child) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < PYTEST_TIMEOUT {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    std::thread::sleep(Duration::from_secs(3));
    let _ = child.kill();
    let _ = child.wait();
    None
}

fn tail(text: &str, max: usize) -> &str {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// Runs one pytest file against Tether (`--protocol protocol`) in front of a fresh agent
/// port, with the fake LLM as the agents' model. `keys`: the API keys of accounts A and B
/// when `conf` turns authentication on.
pub fn run_pytest(file: &str, protocol: &str, conf: Option<&Conf>, keys: Option<(&str, &str)>) {
    let Some(python) = interop_python() else {
        return;
    };
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let llm = FakeAgent::start();
    let agent_port = free_port();
    let conf_arg = conf.map(Conf::arg);
    let extra: Vec<&str> = match &conf_arg {
        Some(path) => vec!["--conf", path],
        None => vec![],
    };
    let tether = Tether::start(
        &format!("http://127.0.0.1:{agent_port}"),
        protocol,
        &store.url,
        &extra,
    );
    let mut env = vec![
        ("TETHER_URL", tether.url()),
        ("AGENT_PORT", agent_port.to_string()),
        ("FAKE_LLM_URL", llm.url()),
    ];
    if let Some((a, b)) = keys {
        env.push(("TETHER_API_KEY", a.to_owned()));
        env.push(("TETHER_API_KEY_B", b.to_owned()));
    }
    pytest(&python, file, &env, &[&tether]);
}

/// Runs `file` with `env` (and the venv's python), failing with the pytest report and the
/// tail of each gateway's log; no test may skip.
fn pytest(python: &str, file: &str, env: &[(&str, String)], tethers: &[&Tether]) {
    let out_dir = tempfile::tempdir().unwrap();
    let stdout = out_dir.path().join("stdout");
    let stderr = out_dir.path().join("stderr");
    let mut cmd = Command::new(python);
    cmd.args([
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-rfEs",
        "--durations=0",
        "--durations-min=0.5",
        file,
    ])
    .current_dir(repo_root())
    .env("TETHER_INTEROP_PYTHON", python)
    .env("PYTHONUNBUFFERED", "1")
    .env_remove("TETHER_API_KEY")
    .env_remove("TETHER_API_KEY_B")
    .stdin(Stdio::null())
    .stdout(std::fs::File::create(&stdout).unwrap())
    .stderr(std::fs::File::create(&stderr).unwrap());
    for (name, value) in env {
        cmd.env(name, value);
    }
    let started = Instant::now();
    let mut child = cmd.spawn().expect("run pytest");
    let status = wait_with_timeout(&mut child);
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    let report = format!("{}\n{}", read(&stdout), read(&stderr));
    eprintln!(
        "{file} through tether took {:.1}s:\n{}",
        started.elapsed().as_secs_f64(),
        tail(&report, 6000)
    );
    let logs: String = tethers
        .iter()
        .map(|t| {
            format!(
                "--- tether {} log (tail) ---\n{}\n",
                t.url(),
                tail(&t.log_text(), 30_000)
            )
        })
        .collect();
    assert!(
        status.is_some(),
        "pytest {file} timed out after {PYTEST_TIMEOUT:?}:\n{report}\n{logs}"
    );
    assert!(
        status.unwrap().success(),
        "pytest {file} failed against tether:\n{report}\n{logs}"
    );
    assert!(
        !report.contains(" skipped") && report.contains(" passed"),
        "no A2A/ADK interop test may skip:\n{report}"
    );
}

/// tests/interop/test_a2a.py: the official a2a-sdk client (v0.3 and v1.0, streaming and
/// not) and raw JSON-RPC; restore after an agent restart, card rewrite, cancel, resubscribe.
#[test]
fn a2a_sdk_through_tether_survives_agent_restarts() {
    run_pytest("tests/interop/test_a2a.py", "a2a", None, None);
}

/// tests/interop/test_adk.py: `adk api_server` with in-memory sessions; restore after a
/// restart through /run and /run_sse, and the account boundary with two API keys.
#[test]
fn adk_api_server_through_tether_survives_agent_restarts() {
    let conf = auth_conf("");
    run_pytest(
        "tests/interop/test_adk.py",
        "adk",
        Some(&conf),
        Some((KEY_A, KEY_B)),
    );
}

/// tests/interop/test_a2a_grpc.py: A2A's gRPC binding, with the a2a-sdk client and server
/// over grpcio. One agent serves JSON-RPC and gRPC; one gateway calls it over JSON-RPC,
/// another over gRPC (found through its card), both with API keys, a rate-limited account
/// and a small body limit, so that gRPC→gRPC, gRPC→JSON-RPC and JSON-RPC→gRPC, restores
/// after a kill -9, reads from the log, cancel and the error statuses are all exercised. A
/// third calls the agent's gRPC address it is configured with, as for an agent without an
/// HTTP card.
#[test]
fn a2a_over_grpc_through_tether_survives_agent_restarts() {
    let Some(python) = interop_python() else {
        return;
    };
    let conf = auth_conf(&format!(
        "[[auth.api_keys]]\nid = \"c\"\naccount_id = \"acct-c\"\nsha256 = \"{}\"\n\n\
         [rate_limits.accounts.acct-c]\nrequests_per_second = 0.01\nburst = 1\n",
        sha256_hex(KEY_C)
    ));
    let conf_arg = conf.arg();
    let llm = FakeAgent::start();
    let (agent_port, agent_grpc_port) = (free_port(), free_port());
    let upstream = format!("http://127.0.0.1:{agent_port}");
    let start = |store: &TestStore, transport: &str| {
        let args = [
            "--conf",
            &conf_arg,
            "--max-body-bytes",
            MAX_BODY,
            "--a2a-upstream-transport",
            transport,
        ];
        Tether::start(&upstream, "a2a", &store.url, &args)
    };
    let (store, grpc_store) = (
        TestStore::new(StoreKind::Sqlite).unwrap(),
        TestStore::new(StoreKind::Sqlite).unwrap(),
    );
    let (tether, grpc_tether) = (start(&store, "jsonrpc"), start(&grpc_store, "grpc"));
    // An agent without an HTTP card: nothing listens at `upstream`, the gRPC address is
    // configured.
    let grpc_only_store = TestStore::new(StoreKind::Sqlite).unwrap();
    let agent_grpc = format!("127.0.0.1:{agent_grpc_port}");
    let grpc_only = Tether::start(
        &format!("http://127.0.0.1:{}", free_port()),
        "a2a",
        &grpc_only_store.url,
        &[
            "--conf",
            &conf_arg,
            "--a2a-upstream-transport",
            "grpc",
            "--a2a-grpc-upstream",
            &agent_grpc,
        ],
    );
    let env = [
        ("TETHER_URL", tether.url()),
        ("TETHER_GRPC_URL", grpc_tether.url()),
        ("TETHER_GRPC_ONLY_URL", grpc_only.url()),
        ("AGENT_PORT", agent_port.to_string()),
        ("AGENT_GRPC_PORT", agent_grpc_port.to_string()),
        ("FAKE_LLM_URL", llm.url()),
        ("TETHER_API_KEY", KEY_A.to_owned()),
        ("TETHER_API_KEY_B", KEY_B.to_owned()),
        ("TETHER_API_KEY_C", KEY_C.to_owned()),
        ("TETHER_MAX_BODY_BYTES", MAX_BODY.to_owned()),
    ];
    pytest(
        &python,
        "tests/interop/test_a2a_grpc.py",
        &env,
        &[&tether, &grpc_tether],
    );
}

/// The third account's key (rate-limited to one request) for the gRPC tests.
const KEY_C: &str = "tk-account-c-0123456789abcdef";
/// The body limit of the gRPC tests' gateways: a message over it is refused.
const MAX_BODY: &str = "65536";
