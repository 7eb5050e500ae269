//! The end-to-end harness: the real `tether` binary on a free port, fake agents that are
//! real HTTP servers (tests/fake_agent.py) in their own processes, real stores, and a
//! small blocking HTTP client.

use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use session_log::{Event, EventQuery, EventType, RunStatus, Store};

/// Read when the test runs, not when it is built: a target directory shared between two
/// checkouts can hold a test binary built in the other one.
pub fn repo_root() -> PathBuf {
    PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("run by cargo test")).join("..")
}

/// A port nothing listens on, for a process the test starts. Taken from 20000–32767, below
/// Linux's ephemeral range (32768–60999), so no outgoing connection of this or another
/// process can hold it between this check and the process binding it (CI lost runs to that
/// race with ports from the ephemeral range). Each test process walks its own stretch of
/// the range, chosen by its pid, so concurrent test binaries rarely try the same port.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_768;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let start = std::process::id().wrapping_mul(2_654_435_761) % SPAN;
    loop {
        let port = (LOW + (start + NEXT.fetch_add(1, Ordering::Relaxed)) % SPAN) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

pub fn wait_until(what: &str, timeout: Duration, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Where sessions are stored for a test.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum StoreKind {
    Sqlite,
    Postgres,
}

/// The value of `var`: required in CI (a missing one fails the test there), optional on
/// a laptop, where `None` skips `what` and says so.
pub fn required_in_ci(var: &str, what: &str, hint: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(value) if !value.is_empty() => Some(value),
        _ if std::env::var_os("CI").is_some() => panic!("{var} must be set in CI ({hint})"),
        _ => {
            eprintln!("{var} is not set: skipping {what} ({hint})");
            None
        }
    }
}

/// The PostgreSQL URL for tests.
pub fn postgres_url() -> Option<String> {
    required_in_ci(
        "TEST_DATABASE_URL",
        "the PostgreSQL variant",
        "e.g. postgres://postgres@127.0.0.1:5432/test",
    )
}

/// A store location for one test: a fresh SQLite file or the shared test database.
pub struct TestStore {
    pub url: String,
    _dir: Option<tempfile::TempDir>,
}

impl TestStore {
    pub fn new(kind: StoreKind) -> Option<TestStore> {
        match kind {
            StoreKind::Sqlite => {
                let dir = tempfile::tempdir().unwrap();
                let url = dir
                    .path()
                    .join("sessions.sqlite")
                    .to_string_lossy()
                    .into_owned();
                Some(TestStore {
                    url,
                    _dir: Some(dir),
                })
            }
            StoreKind::Postgres => postgres_url().map(|url| TestStore { url, _dir: None }),
        }
    }

    /// The store at `url`, made by someone else (kept as it is when this is dropped).
    pub fn at(url: &str) -> TestStore {
        TestStore {
            url: url.to_owned(),
            _dir: None,
        }
    }

    fn rt() -> &'static tokio::runtime::Runtime {
        static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
        RT.get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap()
        })
    }

    pub fn with_store<T>(&self, f: impl AsyncFnOnce(&dyn Store) -> T) -> T {
        Self::rt().block_on(async {
            let store = session_log::open(&self.url).await.expect("open store");
            f(&*store).await
        })
    }

    /// Every event of a session, in seq order.
    pub fn events(&self, account: &str, session: &str) -> Vec<Event> {
        self.with_store(async |s| {
            s.events(&EventQuery::session(account, session))
                .await
                .unwrap()
        })
    }

    pub fn session_count(&self, account: &str) -> i64 {
        self.with_store(async |s| {
            s.list_sessions(account, &Default::default(), 0, 1)
                .await
                .unwrap()
                .1
        })
    }

    /// Waits until the session's log holds a terminal run_status for every run in it.
    pub fn wait_for_terminal(&self, account: &str, session: &str, runs: usize) -> Vec<Event> {
        let mut events = Vec::new();
        wait_until(
            "terminal run_status in the log",
            Duration::from_secs(30),
            || {
                events = self.events(account, session);
                events.iter().filter(|e| e.is_terminal()).count() >= runs
            },
        );
        events
    }
}

/// Spawns a test server that prints `READY <port>` on stdout once it listens, and waits
/// for that line; returns the process and the port it printed.
pub fn spawn_ready_on(mut command: Command, what: &str) -> (Child, u16) {
    let mut child = command
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start the {what}: {e}"));
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .strip_prefix("READY ")
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("the {what} did not start: {line:?}"));
    (child, port)
}

/// [`spawn_ready_on`] for a server whose port the caller chose.
pub fn spawn_ready(command: Command, what: &str) -> Child {
    spawn_ready_on(command, what).0
}

/// The fake agent: keeps nothing between requests but a record of what it received.
pub struct FakeAgent {
    pub port: u16,
    child: Child,
}

impl FakeAgent {
    /// On a port the agent picks itself, so no other process can take it in between.
    pub fn start() -> FakeAgent {
        Self::start_on(0)
    }

    /// On `port` (0: any free port), e.g. the port of an agent that was killed.
    pub fn start_on(port: u16) -> FakeAgent {
        Self::start_with(port, &[])
    }

    /// `start_on` with more of the fake agent's flags (`--tool-log FILE`, …).
    pub fn start_with(port: u16, args: &[&str]) -> FakeAgent {
        let mut command = Command::new("python3");
        command
            .arg(repo_root().join("tests/fake_agent.py"))
            .args(["--port", &port.to_string()])
            .args(args)
            .stderr(Stdio::inherit());
        let (child, port) = spawn_ready_on(command, "fake agent");
        FakeAgent { port, child }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every model request this agent process received, in order.
    pub fn requests(&self) -> Vec<Value> {
        get_json(&format!("{}/_requests", self.url()))
            .1
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Stops the process, losing whatever it held in memory.
    pub fn kill(mut self) -> u16 {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.port
    }

    /// Waits for the process to exit by itself (e.g. after `die:N`).
    pub fn wait_exit(&mut self) {
        wait_until("the fake agent to exit", Duration::from_secs(10), || {
            self.child.try_wait().unwrap().is_some()
        });
    }
}

impl Drop for FakeAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fresh SQLite store, a fake agent, and Tether in front of it speaking `openai-chat`,
/// started with `args`. Bind all three: each lives as long as its binding.
pub fn chat_gateway(args: &[&str]) -> (TestStore, FakeAgent, Tether) {
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let agent = FakeAgent::start();
    let tether = Tether::start(&agent.url(), "openai-chat", &store.url, args);
    (store, agent, tether)
}

/// A long streamed chat run (200 deltas, 50 ms apart) started through `tether`, with its
/// first `events` events read: the stream, its session and its invocation.
pub fn slow_chat_run(tether: &Tether, events: usize) -> (SseStream, String, String) {
    let mut sse = SseStream::post(
        &format!("{}/v1/chat/completions", tether.url()),
        &Surface::Chat.body("slow:200:50", None, true),
    );
    let session = sse.session_id.clone().unwrap();
    let invocation = sse.invocation_id.clone().unwrap();
    for _ in 0..events {
        sse.next_event().unwrap();
    }
    (sse, session, invocation)
}

/// Waits for the session's one run to end and checks that it was cancelled long before
/// the agent's 200 deltas, and that nothing was written after its terminal status.
pub fn assert_cancelled_early(store: &TestStore, session: &str) {
    let events = store.wait_for_terminal("local", session, 1);
    assert_eq!(
        events.last().unwrap().run_status(),
        Some(RunStatus::Cancelled)
    );
    let deltas = events
        .iter()
        .filter(|e| e.event_type == EventType::TextDelta)
        .count();
    assert!(
        deltas < 100,
        "the agent call stopped early ({deltas} deltas)"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        store.events("local", session).len(),
        events.len(),
        "nothing arrives after the terminal status"
    );
}

/// A running `tether serve`.
pub struct Tether {
    pub port: u16,
    child: Child,
    pub log: tempfile::NamedTempFile,
}

impl Tether {
    pub fn start(upstream: &str, protocol: &str, store: &str, extra: &[&str]) -> Tether {
        Self::start_with_env(upstream, protocol, store, extra, &[])
    }

    /// `start` with environment variables set for the gateway process only.
    pub fn start_with_env(
        upstream: &str,
        protocol: &str,
        store: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Tether {
        let log = tempfile::NamedTempFile::new().unwrap();
        // Port 0: Tether binds whatever port is free and writes which to the ready file,
        // so no other process can take the port between a choice and Tether's bind.
        let ready = tempfile::tempdir().unwrap();
        let ready_file = ready.path().join("ready");
        let mut child = Command::new(env!("CARGO_BIN_EXE_tether"))
            .arg("serve")
            .args([
                "--listen",
                "127.0.0.1:0",
                "--upstream",
                upstream,
                "--protocol",
                protocol,
                "--store",
                store,
            ])
            .arg("--ready-file")
            .arg(&ready_file)
            .args(extra)
            .env("TETHER_SHUTDOWN_GRACE_SECONDS", "1")
            .env_remove("TETHER_CONF")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(log.reopen().unwrap())
            .spawn()
            .expect("start tether");
        let mut addr = String::new();
        wait_until("tether's ready file", Duration::from_secs(30), || {
            if let Ok(Some(status)) = child.try_wait() {
                let log = std::fs::read_to_string(log.path()).unwrap_or_default();
                panic!("tether exited with {status}: {log}");
            }
            addr = std::fs::read_to_string(&ready_file).unwrap_or_default();
            !addr.is_empty()
        });
        let port = addr
            .trim()
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("the ready file holds {addr:?}"));
        let mut tether = Tether { port, child, log };
        let url = tether.url();
        wait_until("tether to answer /healthz", Duration::from_secs(30), || {
            if let Ok(Some(status)) = tether.child.try_wait() {
                panic!("tether exited with {status}: {}", tether.log_text());
            }
            ureq::get(&format!("{url}/healthz")).call().is_ok()
        });
        tether
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    /// Sends a signal and waits for the process to exit; returns whether it exited.
    pub fn signal(&mut self, signal: &str, timeout: Duration) -> bool {
        Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        let start = Instant::now();
        while start.elapsed() < timeout {
            if self.child.try_wait().unwrap().is_some() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

impl Drop for Tether {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout_read(Duration::from_secs(30))
        .build()
}

/// A response read whole: status, headers we care about, body.
pub struct Reply {
    pub status: u16,
    pub session_id: Option<String>,
    pub body: String,
    /// Every response header, names lower-cased (the last value of a repeated one).
    pub headers: std::collections::HashMap<String, String>,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

fn reply(result: Result<ureq::Response, ureq::Error>) -> Reply {
    let response = match result {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("request failed: {e}"),
    };
    let status = response.status();
    let session_id = response.header("x-session-id").map(str::to_owned);
    let headers = response
        .headers_names()
        .into_iter()
        .filter_map(|n| {
            let v = response.header(&n)?.to_owned();
            Some((n.to_ascii_lowercase(), v))
        })
        .collect();
    let body = response.into_string().unwrap();
    Reply {
        status,
        session_id,
        body,
        headers,
    }
}

pub fn post(url: &str, body: &str, headers: &[(&str, &str)]) -> Reply {
    let mut req = agent().post(url).set("content-type", "application/json");
    for (k, v) in headers {
        req = req.set(k, v);
    }
    reply(req.send_string(body))
}

pub fn post_json(url: &str, body: &Value) -> Reply {
    post(url, &body.to_string(), &[])
}

pub fn get(url: &str, headers: &[(&str, &str)]) -> Reply {
    let mut req = agent().get(url);
    for (k, v) in headers {
        req = req.set(k, v);
    }
    reply(req.call())
}

/// Any method, with a JSON body when given.
pub fn request(method: &str, url: &str, body: Option<&Value>, headers: &[(&str, &str)]) -> Reply {
    let mut req = agent().request(method, url);
    for (k, v) in headers {
        req = req.set(k, v);
    }
    match body {
        Some(body) => reply(
            req.set("content-type", "application/json")
                .send_string(&body.to_string()),
        ),
        None => reply(req.call()),
    }
}

pub fn get_json(url: &str) -> (u16, Value) {
    let r = get(url, &[]);
    (r.status, r.json())
}

/// One SSE event as a client sees it.
#[derive(Clone, Debug)]
pub struct SseEvent {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
}

impl SseEvent {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or(Value::Null)
    }
}

/// An SSE response read event by event; dropping it closes the connection.
pub struct SseStream {
    pub status: u16,
    pub session_id: Option<String>,
    pub invocation_id: Option<String>,
    reader: BufReader<Box<dyn Read + Send + Sync>>,
}

impl SseStream {
    pub fn post(url: &str, body: &Value) -> SseStream {
        Self::from(
            agent()
                .post(url)
                .set("content-type", "application/json")
                .send_string(&body.to_string()),
        )
    }

    pub fn get(url: &str, headers: &[(&str, &str)]) -> SseStream {
        let mut req = agent().get(url);
        for (k, v) in headers {
            req = req.set(k, v);
        }
        Self::from(req.call())
    }

    fn from(result: Result<ureq::Response, ureq::Error>) -> SseStream {
        let response = match result {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("request failed: {e}"),
        };
        SseStream {
            status: response.status(),
            session_id: response.header("x-session-id").map(str::to_owned),
            invocation_id: response.header("x-invocation-id").map(str::to_owned),
            reader: BufReader::new(response.into_reader()),
        }
    }

    /// The next event, or `None` at the end of the stream.
    pub fn next_event(&mut self) -> Option<SseEvent> {
        let mut event = SseEvent {
            id: None,
            event: None,
            data: String::new(),
        };
        let mut has_data = false;
        loop {
            let mut line = String::new();
            if self.reader.read_line(&mut line).ok()? == 0 {
                return has_data.then_some(event);
            }
            let line = line.trim_end_matches(['\r', '\n']);
            if line.is_empty() {
                if has_data {
                    return Some(event);
                }
                continue;
            }
            if let Some(v) = line.strip_prefix("data:") {
                if has_data {
                    event.data.push('\n');
                }
                event.data.push_str(v.strip_prefix(' ').unwrap_or(v));
                has_data = true;
            } else if let Some(v) = line.strip_prefix("id:") {
                event.id = Some(v.trim().to_owned());
            } else if let Some(v) = line.strip_prefix("event:") {
                event.event = Some(v.trim().to_owned());
            }
        }
    }

    pub fn collect(mut self) -> Vec<SseEvent> {
        std::iter::from_fn(|| self.next_event()).collect()
    }
}

/// The control API of one gateway, as one account (`key`, when authentication is on).
pub struct Api {
    pub base: String,
    pub key: Option<String>,
}

impl Api {
    pub fn of(tether: &Tether) -> Api {
        Api {
            base: tether.url(),
            key: None,
        }
    }

    /// An action's status and envelope; the envelope's `Action` and `Code` are checked.
    pub fn call(&self, action: &str, body: Value) -> (u16, Value) {
        let auth = self.key.as_ref().map(|k| format!("Bearer {k}"));
        let headers: Vec<(&str, &str)> =
            auth.iter().map(|a| ("authorization", a.as_str())).collect();
        let reply = post(
            &format!("{}/agentengine/api/v1/{action}", self.base),
            &body.to_string(),
            &headers,
        );
        let json = reply.json();
        assert_eq!(json["Action"], action, "{json}");
        assert_eq!(
            json["Code"],
            if reply.status == 200 {
                0
            } else {
                reply.status as i64
            },
            "{json}"
        );
        (reply.status, json)
    }

    /// An action that must succeed: its `Data`.
    pub fn ok(&self, action: &str, body: Value) -> Value {
        let (status, json) = self.call(action, body);
        assert_eq!(status, 200, "{action}: {json}");
        json["Data"].clone()
    }

    pub fn checkpoints(&self, session: &str) -> Vec<Value> {
        self.ok("ListSessionCheckpoints", json!({ "SessionId": session }))["Checkpoints"]
            .as_array()
            .cloned()
            .unwrap()
    }
}

/// Request bodies for the two OpenAI surfaces.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Surface {
    Chat,
    Responses,
}

impl Surface {
    pub fn path(self) -> &'static str {
        match self {
            Surface::Chat => "/v1/chat/completions",
            Surface::Responses => "/v1/responses",
        }
    }

    pub fn body(self, text: &str, session: Option<&str>, stream: bool) -> Value {
        let mut body = match self {
            Surface::Chat => {
                json!({ "model": "fake", "messages": [{ "role": "user", "content": text }], "stream": stream })
            }
            Surface::Responses => json!({ "model": "fake", "input": text, "stream": stream }),
        };
        if let Some(s) = session {
            match self {
                Surface::Chat => body["session_id"] = json!(s),
                Surface::Responses => body["conversation"] = json!(s),
            }
        }
        body
    }

    /// The assistant's text in a non-streaming response body.
    pub fn text(self, body: &Value) -> String {
        match self {
            Surface::Chat => body["choices"][0]["message"]["content"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            Surface::Responses => body["output"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|item| item["type"] == "message")
                .flat_map(|item| item["content"].as_array().cloned().unwrap_or_default())
                .filter_map(|part| part["text"].as_str().map(str::to_owned))
                .collect(),
        }
    }

    /// The text carried by one streamed event's deltas.
    pub fn delta(self, event: &SseEvent) -> String {
        let v = event.json();
        match self {
            Surface::Chat => v["choices"][0]["delta"]["content"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            Surface::Responses if v["type"] == "response.output_text.delta" => {
                v["delta"].as_str().unwrap_or_default().to_owned()
            }
            Surface::Responses => String::new(),
        }
    }
}

/// The `(role, text)` of every message the agent received in one request, in order.
pub fn history_sent(request: &Value) -> Vec<(String, String)> {
    let body = &request["body"];
    let items = body
        .get("messages")
        .or_else(|| body.get("input"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    items
        .iter()
        .filter(|m| m.get("role").is_some())
        .map(|m| {
            let text = match &m["content"] {
                Value::String(s) => s.clone(),
                Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
                _ => String::new(),
            };
            (m["role"].as_str().unwrap_or_default().to_owned(), text)
        })
        .collect()
}

/// A configuration file for `--conf`, in a temp dir that lives as long as this.
pub struct Conf {
    _dir: tempfile::TempDir,
    pub path: PathBuf,
}

impl Conf {
    pub fn write(toml: &str) -> Conf {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tether.toml");
        std::fs::write(&path, toml).unwrap();
        Conf { _dir: dir, path }
    }

    pub fn arg(&self) -> String {
        self.path.to_string_lossy().into_owned()
    }
}

/// An account of a test's own (tests share the PostgreSQL database): its id, an API key
/// of it, and the `[[auth.api_keys]]` table that makes the key the account's.
pub fn own_account(prefix: &str) -> (String, String, String) {
    let id = uuid::Uuid::new_v4().simple();
    let (account, key) = (format!("{prefix}-acct-{id}"), format!("{prefix}-key-{id}"));
    let table = format!(
        "[[auth.api_keys]]\nid = \"{prefix}\"\naccount_id = \"{account}\"\nsha256 = \"{}\"\n\n",
        sha256_hex(&key)
    );
    (account, key, table)
}

/// Hex SHA-256, as `[[auth.api_keys]]` stores keys.
pub fn sha256_hex(s: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The test-only keys of the policies crate.
pub fn test_key(name: &str) -> PathBuf {
    repo_root().join("policies/tests/keys").join(name)
}

pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A JWT signed with the RSA test key (`rsa.key.pem`) or another PEM key.
pub fn rs256(claims: &Value, key_file: &str) -> String {
    let pem = std::fs::read(test_key(key_file)).unwrap();
    let key = jsonwebtoken::EncodingKey::from_rsa_pem(&pem).unwrap();
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256),
        claims,
        &key,
    )
    .unwrap()
}

/// The requests a teed session records, in order: each `http_request`, and the request
/// half of each `http_exchange` (a response that came whole is one event).
pub fn teed_requests(events: &[Event]) -> Vec<&Value> {
    events
        .iter()
        .filter_map(|e| match e.event_type {
            session_log::EventType::HttpRequest => Some(&e.content),
            session_log::EventType::HttpExchange => Some(&e.content["request"]),
            _ => None,
        })
        .collect()
}

/// Sends `request` as raw bytes and reads whatever comes back until the server closes
/// the connection or `wait` passes. Returns the bytes and whether the server closed.
pub fn raw_exchange(port: u16, request: &[u8], wait: Duration) -> (Vec<u8>, bool) {
    use std::io::Write;
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.write_all(request).unwrap();
    read_until_closed(&mut stream, wait)
}

pub fn read_until_closed(stream: &mut std::net::TcpStream, wait: Duration) -> (Vec<u8>, bool) {
    let deadline = Instant::now() + wait;
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return (out, false);
        }
        stream.set_read_timeout(Some(left)).unwrap();
        match stream.read(&mut buf) {
            Ok(0) => return (out, true),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return (out, false)
            }
            Err(_) => return (out, true),
        }
    }
}

/// Status codes of every response in a raw byte stream.
pub fn statuses(raw: &[u8]) -> Vec<u16> {
    let text = String::from_utf8_lossy(raw);
    text.match_indices("HTTP/1.")
        .filter_map(|(i, _)| text[i..].split(' ').nth(1)?.get(..3)?.parse().ok())
        .collect()
}

/// The JSON body of the first response in a raw byte stream.
pub fn raw_json(raw: &[u8]) -> Value {
    let text = String::from_utf8_lossy(raw);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    serde_json::from_str(body).unwrap_or(Value::Null)
}
