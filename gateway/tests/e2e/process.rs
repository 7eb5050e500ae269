//! The gateway as a process: how it fails to start (one line naming what and where, a
//! non-zero exit, at once), how it stops on SIGTERM (as soon as its runs are done, the
//! grace period being the most it waits), and its command line (bare boolean flags,
//! defaults in `--help`).

use std::net::TcpListener;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use session_log::RunStatus;

use crate::harness::*;

/// Runs `tether` with `args` until it exits or `timeout` passes (then kills it).
/// Returns its exit status (`None`: still running at the timeout), stderr and how long it ran.
fn run_tether(args: &[&str], timeout: Duration) -> (Option<ExitStatus>, String, Duration) {
    let stderr = tempfile::NamedTempFile::new().unwrap();
    let start = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(args)
        .env_remove("TETHER_CONF")
        .stdout(Stdio::null())
        .stderr(stderr.reopen().unwrap())
        .spawn()
        .expect("start tether");
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let elapsed = start.elapsed();
    (
        status,
        std::fs::read_to_string(stderr.path()).unwrap(),
        elapsed,
    )
}

/// The one line a failed start prints, checked to be one and not a panic.
fn one_line(stderr: &str) -> &str {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line of error, not: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    lines[0]
}

fn serve_args<'a>(listen: &'a str, store: &'a str) -> Vec<&'a str> {
    vec![
        "serve",
        "--listen",
        listen,
        "--upstream",
        "http://127.0.0.1:9",
        "--store",
        store,
    ]
}

#[test]
fn a_port_in_use_is_one_line_and_a_failed_exit_at_once() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let listen = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("sessions.sqlite");
    let (status, stderr, elapsed) = run_tether(
        &serve_args(&listen, store.to_str().unwrap()),
        Duration::from_secs(10),
    );
    let status = status.expect("tether exits by itself");
    assert!(!status.success(), "{status}: {stderr}");
    assert!(
        elapsed < Duration::from_secs(1),
        "exited after {elapsed:?}, not within a second"
    );
    let line = one_line(&stderr);
    assert!(line.contains(&listen), "names the address: {line}");
    assert!(line.contains("in use"), "says why: {line}");
    assert!(
        !store.exists(),
        "the store is not touched (a second gateway must not close the first one's runs)"
    );
}

#[test]
fn a_second_gateway_on_the_first_ones_port_fails_and_the_first_serves_on() {
    // The first took port 0 and said which in its ready file (see the harness).
    let (store, _agent, first) = chat_gateway(&[]);
    let listen = format!("127.0.0.1:{}", first.port);
    let (status, stderr, elapsed) =
        run_tether(&serve_args(&listen, &store.url), Duration::from_secs(10));
    let status = status.expect("the second tether exits by itself");
    assert!(!status.success(), "{status}: {stderr}");
    assert!(elapsed < Duration::from_secs(1), "exited after {elapsed:?}");
    let line = one_line(&stderr);
    assert_eq!(
        line,
        format!("tether: cannot listen on {listen}: Address already in use (os error 98)")
    );
    let reply = post_json(
        &format!("{}/v1/chat/completions", first.url()),
        &Surface::Chat.body("hello", None, false),
    );
    assert_eq!(reply.status, 200, "the first still serves: {}", reply.body);
}

#[test]
fn sigterm_on_an_idle_gateway_exits_within_a_second() {
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let agent = FakeAgent::start();
    // A grace period far longer than the exit may take: an idle gateway must not wait it.
    let mut tether = Tether::start(
        &agent.url(),
        "openai-chat",
        &store.url,
        &["--shutdown-grace-seconds", "30"],
    );
    // One finished run, so that the gateway has served something before it is idle.
    let reply = post_json(
        &format!("{}/v1/chat/completions", tether.url()),
        &Surface::Chat.body("hello", None, false),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    let start = Instant::now();
    assert!(
        tether.signal("TERM", Duration::from_secs(30)),
        "tether exits after SIGTERM"
    );
    let elapsed = start.elapsed();
    // Measured from sending the signal (with `kill`, a process of its own) to the exit.
    assert!(
        elapsed < Duration::from_secs(1),
        "idle SIGTERM took {elapsed:?}: {}",
        tether.log_text()
    );
}

#[test]
fn sigterm_with_no_run_exits_within_a_second_though_a_session_is_followed() {
    // A console left open follows its session (SubscribeRunEvents without an invocation),
    // a stream that never ends by itself: with no run going there is nothing to wait for.
    let (_store, _agent, mut tether) = chat_gateway(&["--shutdown-grace-seconds", "30"]);
    let reply = post_json(
        &format!("{}/v1/chat/completions", tether.url()),
        &Surface::Chat.body("hello", None, false),
    );
    let session = reply.session_id.clone().unwrap();
    let mut follower = SseStream::get(
        &format!(
            "{}/agentengine/api/v1/SubscribeRunEvents?SessionId={session}",
            tether.url()
        ),
        &[],
    );
    // The session's events so far (the message, its run's statuses): the stream is live.
    assert!(follower.next_event().is_some());
    let start = Instant::now();
    assert!(tether.signal("TERM", Duration::from_secs(30)));
    let elapsed = start.elapsed();
    assert!(
        elapsed < Duration::from_secs(1),
        "SIGTERM with a follower took {elapsed:?}: {}",
        tether.log_text()
    );
}

#[test]
fn sigterm_waits_for_a_running_run_which_completes() {
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let agent = FakeAgent::start();
    let mut tether = Tether::start(
        &agent.url(),
        "openai-chat",
        &store.url,
        &["--shutdown-grace-seconds", "30"],
    );
    // 20 deltas 100 ms apart: about 2 s of run left when the signal arrives.
    let mut sse = SseStream::post(
        &format!("{}/v1/chat/completions", tether.url()),
        &Surface::Chat.body("slow:20:100", None, true),
    );
    let session = sse.session_id.clone().unwrap();
    let first = sse.next_event().unwrap();
    let start = Instant::now();
    // Send the signal without waiting, to see a new run refused while the old one drains.
    assert!(!tether.signal("TERM", Duration::ZERO));
    std::thread::sleep(Duration::from_millis(200));
    let refused = post_json(
        &format!("{}/v1/chat/completions", tether.url()),
        &Surface::Chat.body("hello", None, false),
    );
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert!(
        tether.signal("TERM", Duration::from_secs(30)),
        "tether exits once its run is done"
    );
    let elapsed = start.elapsed();
    assert!(
        elapsed > Duration::from_millis(1000),
        "exited after {elapsed:?}, before the run could finish"
    );
    assert!(
        elapsed < Duration::from_secs(10),
        "exited after {elapsed:?}: it waited for more than the run"
    );

    // The client got the whole answer and its end, and the log holds the run completed.
    let mut events = vec![first];
    events.extend(sse.collect());
    let text: String = events.iter().map(|e| Surface::Chat.delta(e)).collect();
    let expected: String = (1..=20).map(|i| format!("w{i} ")).collect();
    assert_eq!(text, expected);
    assert_eq!(events.last().map(|e| e.data.as_str()), Some("[DONE]"));
    let statuses: Vec<RunStatus> = store
        .events("local", &session)
        .iter()
        .filter(|e| e.is_terminal())
        .filter_map(|e| e.run_status())
        .collect();
    assert_eq!(statuses, [RunStatus::Completed]);
}

#[test]
fn sigterm_waits_no_longer_than_the_grace_for_a_run_that_outlives_it() {
    let (store, _agent, mut tether) = chat_gateway(&["--shutdown-grace-seconds", "2"]);
    // 200 deltas 50 ms apart: 10 s of run, far more than the grace.
    let (_sse, session, _) = slow_chat_run(&tether, 3);
    let start = Instant::now();
    assert!(
        tether.signal("TERM", Duration::from_secs(30)),
        "tether exits after SIGTERM"
    );
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_secs(2),
        "exited after {elapsed:?}, before the grace was spent on the run"
    );
    // The grace, then a moment for the client stream to write its end (1 s at most).
    assert!(
        elapsed < Duration::from_millis(4500),
        "exited after {elapsed:?}: longer than the grace"
    );
    let statuses: Vec<RunStatus> = store
        .events("local", &session)
        .iter()
        .filter(|e| e.is_terminal())
        .filter_map(|e| e.run_status())
        .collect();
    assert_eq!(statuses, [RunStatus::Interrupted]);
}

#[test]
fn config_errors_name_file_line_and_key() {
    const UP: &str = "upstream = \"http://127.0.0.1:9\"\n";
    // (the file, the line the error names, what follows `file:line: `)
    let table: &[(String, usize, &str)] = &[
        (
            format!("{UP}\nthreads = \"two\"\n"),
            3,
            "threads: invalid type: string \"two\", expected usize",
        ),
        (
            format!("{UP}[limits]\nmax_json_depth = 0\n"),
            3,
            "limits.max_json_depth: ",
        ),
        (format!("{UP}listen_adress = \"x\"\n"), 2, "listen_adress: "),
        (
            format!("{UP}tee = \"yes\"\n"),
            2,
            "tee: invalid type: string \"yes\", expected a boolean",
        ),
        (
            "upstream = \"ftp://agent\"\n".to_owned(),
            1,
            "upstream: scheme \"ftp\" is not supported",
        ),
        (
            format!("{UP}[[auth.api_keys]]\nid = 3\n"),
            3,
            "auth.api_keys[0].id: ",
        ),
        (
            format!("{UP}[compaction]\n\ntrigger_tokens = 0\n"),
            4,
            "compaction.trigger_tokens: must be greater than 0",
        ),
    ];
    for (toml, line, expected) in table {
        let conf = Conf::write(toml);
        let (status, stderr, _) =
            run_tether(&["serve", "--conf", &conf.arg()], Duration::from_secs(10));
        assert_eq!(status.and_then(|s| s.code()), Some(2), "{toml}: {stderr}");
        let got = one_line(&stderr);
        let want = format!("tether: {}:{line}: {expected}", conf.arg());
        assert!(got.starts_with(&want), "{toml}\nwant: {want}\ngot:  {got}");
    }
}

#[test]
fn a_refused_variable_is_named_with_its_key() {
    // clap alone would name a flag the user never typed (`--threads <THREADS>`).
    let table = [
        (
            "TETHER_THREADS",
            "two",
            "tether: configuration key `threads`: TETHER_THREADS=\"two\" is not a valid value: \
             invalid digit found in string",
        ),
        (
            "TETHER_TEE",
            "yes",
            "tether: configuration key `tee`: TETHER_TEE=\"yes\" is not a valid value; \
             use true or false",
        ),
    ];
    for (variable, value, expected) in table {
        let out = Command::new(env!("CARGO_BIN_EXE_tether"))
            .args(["serve", "--upstream", "http://127.0.0.1:9"])
            .env(variable, value)
            .env_remove("TETHER_CONF")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            format!("{expected}\n")
        );
    }
    // The same value as a flag is clap's error about that flag.
    let out = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args([
            "serve",
            "--upstream",
            "http://127.0.0.1:9",
            "--threads",
            "two",
        ])
        .env_remove("TETHER_CONF")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr)
        .starts_with("error: invalid value 'two' for '--threads <THREADS>'"));
}

#[test]
fn an_unusable_sqlite_store_is_named_by_its_path() {
    // A path under a regular file cannot be created, even by root.
    let file = tempfile::NamedTempFile::new().unwrap();
    let store = file.path().join("sub/sessions.sqlite");
    let store = store.to_str().unwrap();
    let listen = "127.0.0.1:0".to_owned();
    let (status, stderr, _) = run_tether(&serve_args(&listen, store), Duration::from_secs(10));
    let status = status.expect("tether exits by itself");
    assert!(!status.success(), "{stderr}");
    let line = one_line(&stderr);
    assert!(line.contains(store), "names the path: {line}");
}

#[test]
fn an_unreachable_postgres_is_named_by_host_and_port_without_the_password() {
    let listen = "127.0.0.1:0".to_owned();
    // Nothing listens there: the pool times out (after its 10 s acquire timeout).
    let port = free_port();
    let url = format!("postgres://tether:s3cret-pw@127.0.0.1:{port}/log");
    let (status, stderr, _) = run_tether(&serve_args(&listen, &url), Duration::from_secs(30));
    let status = status.expect("tether exits by itself");
    assert!(!status.success(), "{stderr}");
    let line = one_line(&stderr);
    assert!(line.contains(&format!("127.0.0.1:{port}")), "{line}");
    assert!(line.contains("log"), "names the database: {line}");
    assert!(!stderr.contains("s3cret-pw"), "no password: {stderr}");
}

#[test]
fn an_unusable_journal_is_named_by_its_path() {
    let Some(url) = postgres_url() else { return };
    let file = tempfile::NamedTempFile::new().unwrap();
    let journal = file.path().join("sub/journal.sqlite");
    let journal = journal.to_str().unwrap();
    let listen = "127.0.0.1:0".to_owned();
    let mut args = serve_args(&listen, &url);
    args.extend(["--journal-path", journal]);
    let (status, stderr, _) = run_tether(&args, Duration::from_secs(30));
    let status = status.expect("tether exits by itself");
    assert!(!status.success(), "{stderr}");
    // Whatever else it logged on the way (PostgreSQL's own warnings), the error names it.
    let error = stderr
        .lines()
        .find(|l| l.starts_with("tether: "))
        .unwrap_or_else(|| panic!("no error line: {stderr}"));
    assert!(error.contains(journal), "{error}");
}

#[test]
fn boolean_flags_work_bare() {
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let agent = FakeAgent::start();
    // Bare, followed by another flag, and with a value: all three forms.
    let tether = Tether::start(
        &agent.url(),
        "openai-chat",
        &store.url,
        &[
            "--tee",
            "--forward-authorization",
            "--checkpoint-replay-allowed=false",
            "--allow-unauthenticated",
            "false",
        ],
    );
    let reply = post_json(
        &format!("{}/v1/chat/completions", tether.url()),
        &Surface::Chat.body("hello", None, false),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
}

#[test]
fn help_shows_defaults_and_what_is_required() {
    let out = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let (status, help) = (out.status, String::from_utf8_lossy(&out.stdout));
    assert!(status.success());
    for expected in [
        "[default: 127.0.0.1:8080]",
        "[default: .tether/sessions.sqlite]",
        "[default: 10]",
        "--tee [<TEE>]",
        "Required",
    ] {
        assert!(
            help.contains(expected),
            "--help lacks {expected:?}:\n{help}"
        );
    }
}
