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
    run_pytest_in(&python, file, protocol, conf, keys, &[], &[]);
}

/// `run_pytest` with pytest run by `python`, `more` added to its environment and `args`
/// to Tether's command line.
fn run_pytest_in(
    python: &str,
    file: &str,
    protocol: &str,
    conf: Option<&Conf>,
    keys: Option<(&str, &str)>,
    more: &[(&str, String)],
    args: &[&str],
) {
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let llm = FakeAgent::start();
    let agent_port = free_port();
    let conf_arg = conf.map(Conf::arg);
    let mut extra: Vec<&str> = match &conf_arg {
        Some(path) => vec!["--conf", path],
        None => vec![],
    };
    extra.extend_from_slice(args);
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
    env.extend(more.iter().cloned());
    pytest(python, file, &env, &[&tether]);
}

/// The python of a stack's own venv (`TETHER_STACK_PYTHON_<STACK>`, which tests/run
/// exports from tests/interop/venvs.sh), or `None` (a failure in CI).
fn stack_python(var: &str) -> Option<String> {
    required_in_ci(var, "an agent stack's interop tests", "run tests/run")
}

/// tests/interop/test_a2a_stacks.py for one A2A agent stack: pytest with the interop venv
/// (the official clients), the agent with `agent_python`. Nothing says how to call the
/// agent: a stack that speaks only A2A v0.3 says so in its card, and Tether calls it so.
fn run_a2a_stack(stack: &str, agent_python: Option<String>) {
    let (Some(python), Some(agent_python)) = (interop_python(), agent_python) else {
        return;
    };
    let more = [
        ("STACK", stack.to_owned()),
        ("TETHER_STACK_PYTHON", agent_python),
    ];
    run_pytest_in(
        &python,
        "tests/interop/test_a2a_stacks.py",
        "a2a",
        None,
        None,
        &more,
        &[],
    );
}

/// kagent's Python ADK runtime (`kagent-adk run --local`, kagent-adk 0.10.4, A2A v0.3):
/// the seed's two turns across a kill -9, streaming and not; cancel; reconnect.
#[test]
fn kagent_adk_through_tether_survives_kill_9() {
    run_a2a_stack("kagent-adk", stack_python("TETHER_STACK_PYTHON_KAGENT"));
}

/// kagent's LangGraph runtime (kagent-langgraph 0.10.4's app, in-memory task store and
/// checkpointer): the same tests.
#[test]
fn kagent_langgraph_through_tether_survives_kill_9() {
    run_a2a_stack(
        "kagent-langgraph",
        stack_python("TETHER_STACK_PYTHON_KAGENT"),
    );
}

/// Google ADK 1.x's `to_a2a()` (google-adk 1.39.1, a2a-sdk 0.3.26, the kagent venv).
#[test]
fn adk_1_to_a2a_through_tether_survives_kill_9() {
    run_a2a_stack("adk-a2a-1x", stack_python("TETHER_STACK_PYTHON_KAGENT"));
}

/// Google ADK 2.x's `to_a2a()` (google-adk 2.13.0, a2a-sdk 1.3.0, the interop venv).
#[test]
fn adk_2_to_a2a_through_tether_survives_kill_9() {
    run_a2a_stack("adk-a2a", interop_python());
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
    let Some(python) = interop_python() else {
        return;
    };
    // The card test asks for it by another name (as behind a proxy): one it is reached by.
    let args = ["--allowed-hosts", "tether.example:8443"];
    run_pytest_in(
        &python,
        "tests/interop/test_a2a.py",
        "a2a",
        None,
        None,
        &[],
        &args,
    );
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

/// tests/interop/test_langgraph.py: `langgraph dev` (langgraph-api 0.16.7, in memory) with
/// the official langgraph-sdk client, both from the LangGraph venv: the seed's turns across
/// a kill -9 (wait and stream), background runs, join, re-join from Last-Event-ID, cancel,
/// and the account boundary with two API keys.
#[test]
fn langgraph_dev_through_tether_survives_kill_9() {
    let Some(python) = stack_python("TETHER_STACK_PYTHON_LANGGRAPH") else {
        return;
    };
    let conf = auth_conf("");
    let more = [("TETHER_STACK_PYTHON", python.clone())];
    run_pytest_in(
        &python,
        "tests/interop/test_langgraph.py",
        "langgraph",
        Some(&conf),
        Some((KEY_A, KEY_B)),
        &more,
        &[],
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

/// tests/interop/test_a2a_mounted.py: agents mounted under `/agent` (JSON-RPC at
/// `/agent/jsonrpc`, HTTP+JSON below `/agent/api`), one also serving gRPC, one offering
/// only v0.3; gateways in front of them with no `a2a_upstream_transport`, over gRPC and
/// pinned to v0.3.
/// The a2a-sdk client over JSON-RPC, HTTP+JSON and gRPC, on every gateway, across a kill -9.
#[test]
fn a2a_agents_are_called_at_the_urls_their_cards_list() {
    let Some(python) = interop_python() else {
        return;
    };
    let conf = auth_conf("");
    let conf_arg = conf.arg();
    let llm = FakeAgent::start();
    let (mounted_port, mounted_grpc_port, v03_port) = (free_port(), free_port(), free_port());
    let start = |port: u16, store: &TestStore, transport: &str| {
        let upstream = format!("http://127.0.0.1:{port}");
        let args = ["--conf", &conf_arg, "--a2a-upstream-transport", transport];
        Tether::start(&upstream, "a2a", &store.url, &args)
    };
    let stores: Vec<TestStore> = (0..4)
        .map(|_| TestStore::new(StoreKind::Sqlite).unwrap())
        .collect();
    let tether = start(mounted_port, &stores[0], "jsonrpc");
    let grpc_tether = start(mounted_port, &stores[1], "grpc");
    let v03_tether = start(v03_port, &stores[2], "jsonrpc");
    let pinned_tether = start(mounted_port, &stores[3], "jsonrpc-0.3");
    let env = [
        ("TETHER_URL", tether.url()),
        ("TETHER_GRPC_URL", grpc_tether.url()),
        ("TETHER_V03_URL", v03_tether.url()),
        ("TETHER_PINNED_URL", pinned_tether.url()),
        ("MOUNTED_AGENT_PORT", mounted_port.to_string()),
        ("MOUNTED_AGENT_GRPC_PORT", mounted_grpc_port.to_string()),
        ("V03_AGENT_PORT", v03_port.to_string()),
        ("FAKE_LLM_URL", llm.url()),
        ("TETHER_API_KEY", KEY_A.to_owned()),
    ];
    pytest(
        &python,
        "tests/interop/test_a2a_mounted.py",
        &env,
        &[&tether, &grpc_tether, &v03_tether, &pinned_tether],
    );
}

/// The third account's key (rate-limited to one request) for the gRPC tests.
const KEY_C: &str = "tk-account-c-0123456789abcdef";
/// The body limit of the gRPC tests' gateways: a message over it is refused.
const MAX_BODY: &str = "65536";

/// The README's compatibility matrix, checked so that it cannot drift: every test a cell
/// names is a test in the row's pytest file, every version is pinned in the row's
/// requirements file, and the row's Rust test (above) runs that pytest file.
#[test]
fn compatibility_matrix_is_true() {
    let root = repo_root();
    let read = |path: &str| {
        std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
    };
    let readme = read("README.md");
    let section = readme
        .split("\n## Compatibility matrix\n")
        .nth(1)
        .expect("the README has a compatibility matrix");
    let rows: Vec<Vec<&str>> = section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2) // the header and its rule
        .map(|l| {
            l.trim()
                .trim_matches('|')
                .split('|')
                .map(str::trim)
                .collect()
        })
        .collect();
    assert!(rows.len() >= 8, "the matrix lost rows: {rows:?}");
    // Every e2e test file's source: a pytest file is run by the Rust test that names it.
    let rust_tests: String = std::fs::read_dir(root.join("gateway/tests/e2e"))
        .expect("gateway/tests/e2e")
        .map(|entry| {
            std::fs::read_to_string(entry.expect("an e2e file").path()).unwrap_or_default()
        })
        .collect();
    let run_by_a_test =
        |pytest_file: &str| rust_tests.contains(&format!("\"tests/interop/{pytest_file}\""));
    for row in &rows {
        let [stack, versions, _protocol, tests @ .., rust] = row.as_slice() else {
            panic!("a matrix row without its cells: {row:?}");
        };
        assert_eq!(
            tests.len(),
            6,
            "{stack}: turns, streaming, cancel, reconnect, fork, approvals"
        );
        // Versions, pinned where the row says.
        let (versions, pins_file) = versions
            .rsplit_once(" (")
            .and_then(|(v, f)| Some((v, f.strip_suffix(')')?)))
            .unwrap_or_else(|| panic!("{stack}: versions name no requirements file"));
        let pins = read(&format!("tests/interop/{pins_file}")).to_lowercase();
        for pair in versions.split(", ") {
            let (name, version) = pair.rsplit_once(' ').expect("name version");
            let name = name.to_lowercase();
            let pinned = pins.lines().any(|l| {
                l.strip_prefix(name.as_str())
                    .is_some_and(|rest| rest.starts_with(['=', '[']))
                    && l.ends_with(&format!("=={version}"))
            });
            assert!(
                pinned,
                "{stack}: {name} {version} is not pinned in {pins_file}"
            );
        }
        // The Rust test, and the pytest file it runs (itself or through one helper).
        let (rust_fn, pytest_file) = rust.split_once(", ").expect("`rust_test`, file");
        let rust_fn = rust_fn.trim_matches('`');
        let body = fn_body(&rust_tests, rust_fn)
            .unwrap_or_else(|| panic!("{stack}: no test fn {rust_fn} in gateway/tests/e2e"));
        let runs = |text: &str| text.contains(&format!("tests/interop/{pytest_file}"));
        let through_helper = body
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter_map(|name| fn_body(&rust_tests, name))
            .any(runs);
        assert!(
            runs(body) || through_helper,
            "{stack}: {rust_fn} does not run {pytest_file}"
        );
        // Each cell's test, in that file or in `file::test`'s.
        for cell in tests.iter() {
            let named: Vec<&str> = cell.split('`').skip(1).step_by(2).collect();
            assert!(
                !named.is_empty() || *cell == "—",
                "{stack}: a cell is neither a test nor —: {cell}"
            );
            for name in named {
                let (file, test) = name.split_once("::").unwrap_or((pytest_file, name));
                // A Rust e2e test: `file.rs::test_fn`, a #[test] of that file.
                if file.ends_with(".rs") {
                    let source = read(&format!("gateway/tests/e2e/{file}"));
                    assert!(
                        source.contains(&format!("#[test]\nfn {test}(")),
                        "{stack}: gateway/tests/e2e/{file} has no test {test}"
                    );
                    continue;
                }
                assert!(run_by_a_test(file), "{stack}: no Rust test runs {file}");
                let pytest = read(&format!("tests/interop/{file}"));
                assert!(
                    pytest.contains(&format!("def {test}(")),
                    "{stack}: {file} has no test {test}"
                );
            }
        }
    }
}

/// The text of `fn name(` up to the next function in `source`.
fn fn_body<'a>(source: &'a str, name: &str) -> Option<&'a str> {
    if name.is_empty() {
        return None;
    }
    let start = source.find(&format!("fn {name}("))?;
    let rest = &source[start + 3..];
    let end = ["\nfn ", "\n#[test]", "\n///"]
        .iter()
        .filter_map(|next| rest.find(next))
        .min()
        .unwrap_or(rest.len());
    Some(&rest[..end])
}
