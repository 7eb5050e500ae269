//! Browser-facing security (issue 40), over real HTTP with raw sockets where the header
//! bytes matter: the Host rule (DNS rebinding), the site rule (cross-site requests, JSON
//! content types), CORS preflights answered by Tether on its own paths, files served
//! inert and workspace files opened without following links, live runs found by account,
//! one spelling per path of Tether's, and a log without colour codes off a terminal.
//! Every refusal is checked in its surface's format and for what did not happen: nothing
//! reached the agent or the log.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::accounts::control;
use crate::auth::{auth_conf, authed_gateway, bearer, KEY_A, KEY_B};
use crate::harness::*;

/// One answer read off a raw connection (`Connection: close`).
struct Raw {
    status: u16,
    head: String,
    body: String,
}

impl Raw {
    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {} {}", self.head, self.body))
    }
}

/// Sends `method path` with `headers` (Host among them, as written) and `body`.
fn raw(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Raw {
    let mut request = format!("{method} {path} HTTP/1.1\r\n");
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        request.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    request.push_str("Connection: close\r\n\r\n");
    request.push_str(body);
    let mut conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    conn.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let _ = conn.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"));
    // Bodies Tether writes itself carry a length; SSE is never read here.
    Raw {
        status,
        head: head.to_owned(),
        body: body.to_owned(),
    }
}

const TURN: &str = r#"{"model":"m","input":"hello"}"#;

/// What the agent and the log hold: the number of requests the agent received and of
/// sessions in the account.
fn untouched(agent: &FakeAgent, store: &TestStore, account: &str) -> (usize, i64) {
    (agent.requests().len(), store.session_count(account))
}

#[test]
fn a_host_tether_is_not_reached_by_is_refused_421_in_each_surfaces_format() {
    let (store, agent, tether) = chat_gateway(&[]);
    let port = tether.port;
    let own = format!("127.0.0.1:{port}");
    let json = ("Content-Type", "application/json");
    for host in [
        "localhost.attacker.example".to_owned(),
        "127.0.0.1.attacker.example".to_owned(),
        format!("attacker.example:{port}"),
        format!("localhost:{}", port.wrapping_add(1)),
        "10.0.0.7".to_owned(),
    ] {
        let h = ("Host", host.as_str());
        // The OpenAI surface: its error object.
        let r = raw(port, "POST", "/v1/responses", &[h, json], TURN);
        assert_eq!(r.status, 421, "{host}: {}", r.body);
        assert_eq!(r.json()["error"]["code"], "misdirected_request", "{host}");
        assert!(r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("allowed_hosts"));
        // The control API: its envelope.
        let r = raw(
            port,
            "POST",
            "/agentengine/api/v1/ListSessionEvents",
            &[h, json],
            r#"{"SessionId":"s"}"#,
        );
        assert_eq!(r.status, 421, "{host}");
        assert_eq!(r.json()["Code"], 421);
        assert_eq!(r.json()["Action"], "ListSessionEvents");
        // The console, the pass-through and health: a plain JSON error; files: the
        // envelope.
        for path in [
            "/ui/",
            "/echo",
            "/healthz",
            "/readyz",
            "/agentengine/api/v1/AttachmentContent?FileUri=a.txt",
        ] {
            let r = raw(port, "GET", path, &[h], "");
            if path.ends_with("healthz") || path.ends_with("readyz") {
                // A probe that addresses the pod by IP is a health check's normal case.
                if host == "10.0.0.7" {
                    assert_eq!(r.status, 200, "{host} {path}");
                    continue;
                }
            }
            assert_eq!(r.status, 421, "{host} {path}: {}", r.body);
            if path.starts_with("/agentengine/") {
                assert_eq!(r.json()["Data"]["code"], "misdirected_request");
            } else {
                assert_eq!(r.json()["error"]["code"], "misdirected_request");
            }
        }
    }
    assert_eq!(untouched(&agent, &store, "local"), (0, 0));
    assert!(tether
        .log_text()
        .contains("refused a request by the host or site rule"));

    // The loopback names, with the listening port or none, are answered.
    for host in [
        own.clone(),
        format!("localhost:{port}"),
        "localhost".to_owned(),
        format!("[::1]:{port}"),
        format!("LocalHost:{port}"),
    ] {
        let r = raw(
            port,
            "POST",
            "/v1/responses",
            &[("Host", &host), json],
            TURN,
        );
        assert_eq!(r.status, 200, "{host}: {}", r.body);
    }
    assert_eq!(untouched(&agent, &store, "local"), (5, 5));
}

/// Runs `tether serve` with `args` until it exits or is ready; returns the exit status
/// (None: it is serving, then killed) and what it printed.
fn serve_once(args: &[&str]) -> (Option<std::process::ExitStatus>, String, Option<u16>) {
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    let store = dir.path().join("s.sqlite");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["serve", "--upstream", "http://127.0.0.1:9", "--store"])
        .arg(&store)
        .arg("--ready-file")
        .arg(&ready)
        .args(args)
        .env_remove("TETHER_CONF")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return (Some(status), err, None);
        }
        if let Ok(addr) = std::fs::read_to_string(&ready) {
            if !addr.is_empty() {
                let port = addr.trim().rsplit(':').next().and_then(|p| p.parse().ok());
                if let Some(port) = port {
                    let r = raw(port, "GET", "/healthz", &[("Host", "gw.test")], "");
                    let probe = raw(port, "GET", "/healthz", &[("Host", "192.0.2.1:8080")], "");
                    let evil = raw(port, "GET", "/healthz", &[("Host", "evil.test")], "");
                    child.kill().unwrap();
                    child.wait().unwrap();
                    assert_eq!((r.status, probe.status, evil.status), (200, 200, 421));
                    return (None, String::new(), Some(port));
                }
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "tether did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_public_address_needs_auth_or_allowed_hosts_and_a_deployment_names_its_hosts() {
    // Neither: refused at start, naming both keys.
    let (status, err, _) = serve_once(&["--listen", "0.0.0.0:0", "--allow-unauthenticated"]);
    assert!(!status.unwrap().success());
    assert!(
        err.contains("[auth]") && err.contains("allowed_hosts"),
        "{err}"
    );
    // The compose example's way: named hosts and consent to serve without credentials.
    let (status, _, port) = serve_once(&[
        "--listen",
        "0.0.0.0:0",
        "--allow-unauthenticated",
        "--allowed-hosts",
        "gw.test",
    ]);
    assert!(status.is_none() && port.is_some());

    // A deployment with [auth] and allowed_hosts: its own name and origin work with a
    // credential, another name does not, whatever the credential.
    let conf = auth_conf("");
    let (store, agent, tether) = chat_gateway(&[
        "--conf",
        &conf.arg(),
        "--allowed-hosts",
        "gw.test,*.corp.test",
    ]);
    let (k, v) = bearer(KEY_A);
    let auth = (k, v.as_str());
    let json = ("Content-Type", "application/json");
    for host in ["gw.test", "gw.test:443", "a.corp.test"] {
        let origin = format!("http://{host}");
        let r = raw(
            tether.port,
            "POST",
            "/v1/responses",
            &[("Host", host), auth, json, ("Origin", &origin)],
            TURN,
        );
        assert_eq!(r.status, 200, "{host}: {}", r.body);
        assert_eq!(r.header("access-control-allow-origin"), None, "own origin");
    }
    for host in ["corp.test", "gw.test.evil.example"] {
        let r = raw(
            tether.port,
            "POST",
            "/v1/responses",
            &[("Host", host), auth, json],
            TURN,
        );
        assert_eq!(r.status, 421, "{host}");
    }
    assert_eq!(untouched(&agent, &store, "acct-a"), (3, 3));
}

/// A request a page of another site makes: method, path, headers, body.
type Attempt<'a> = (&'a str, &'a str, Vec<(&'a str, &'a str)>, String);

#[test]
fn cross_site_requests_change_nothing_and_read_nothing() {
    let (store, agent, tether) = chat_gateway(&[]);
    let port = tether.port;
    let own_host = format!("127.0.0.1:{port}");
    let host = ("Host", own_host.as_str());
    let json = ("Content-Type", "application/json");
    let text = ("Content-Type", "text/plain;charset=UTF-8");
    // A session that exists, for the attempts to read or change it.
    let r = raw(port, "POST", "/v1/responses", &[host, json], TURN);
    assert_eq!(r.status, 200, "{}", r.body);
    let session = r.header("x-session-id").unwrap();
    let before = untouched(&agent, &store, "local");
    let events_before = store.events("local", &session).len();

    let list_events = format!(r#"{{"SessionId":"{session}"}}"#);
    let subscribe = format!("/agentengine/api/v1/SubscribeRunEvents?SessionId={session}");
    let attempts: Vec<Attempt> = vec![
        // fetch(..., {mode: "no-cors"}) from another site: text/plain, no preflight.
        (
            "POST",
            "/v1/responses",
            vec![("Origin", "http://evil.example"), text],
            TURN.into(),
        ),
        (
            "POST",
            "/v1/chat/completions",
            vec![("Origin", "null"), json],
            TURN.into(),
        ),
        (
            "POST",
            "/v1/responses",
            vec![("Origin", "http://localhost:1"), json],
            TURN.into(),
        ),
        (
            "POST",
            "/agentengine/api/v1/ListSessionEvents",
            vec![("Origin", "http://evil.example"), text],
            list_events.clone(),
        ),
        (
            "POST",
            "/agentengine/api/v1/ImportSession",
            vec![("Origin", "http://evil.example"), text],
            r#"{"SessionId":"x","Events":[]}"#.into(),
        ),
        (
            "POST",
            "/agentengine/api/v1/CancelRun",
            vec![
                ("Sec-Fetch-Site", "cross-site"),
                ("Sec-Fetch-Mode", "no-cors"),
                text,
            ],
            r#"{"InvocationId":"inv_1"}"#.into(),
        ),
        (
            "POST",
            "/agentengine/api/v1/UploadAttachment",
            vec![
                ("Sec-Fetch-Site", "same-site"),
                ("Sec-Fetch-Mode", "navigate"),
            ],
            r#"{"Data":"data:text/plain;base64,aGk="}"#.into(),
        ),
        // An <img> or <script> pointing at a file or the console's data from elsewhere.
        (
            "GET",
            "/agentengine/api/v1/AttachmentContent?FileUri=a.txt",
            vec![
                ("Sec-Fetch-Site", "cross-site"),
                ("Sec-Fetch-Mode", "no-cors"),
            ],
            String::new(),
        ),
        (
            "GET",
            &subscribe,
            vec![("Origin", "http://evil.example")],
            String::new(),
        ),
    ];
    for (method, path, headers, body) in &attempts {
        let mut all = vec![host];
        all.extend(headers.iter().copied());
        let r = raw(port, method, path, &all, body);
        assert_eq!(r.status, 403, "{method} {path} {headers:?}: {}", r.body);
        let v = r.json();
        if path.starts_with("/agentengine/") {
            assert_eq!(v["Code"], 403, "{v}");
            assert_eq!(v["Data"]["code"], "cross_site_request", "{v}");
        } else {
            assert_eq!(v["error"]["code"], "cross_site_request", "{v}");
        }
        assert_eq!(r.header("access-control-allow-origin"), None);
    }
    // JSON endpoints take JSON: a text/plain body from no browser at all is refused too,
    // in the surface's format; curl -d's form type passes from a non-browser client.
    let r = raw(port, "POST", "/v1/responses", &[host, text], TURN);
    assert_eq!(r.status, 415, "{}", r.body);
    assert_eq!(r.json()["error"]["code"], "unsupported_media_type");
    let r = raw(
        port,
        "POST",
        "/agentengine/api/v1/ListSessions",
        &[host, text],
        "{}",
    );
    assert_eq!((r.status, r.json()["Code"].clone()), (415, json!(415)));
    assert_eq!(
        untouched(&agent, &store, "local"),
        before,
        "nothing reached the agent or the log"
    );
    assert_eq!(store.events("local", &session).len(), events_before);
    let form = ("Content-Type", "application/x-www-form-urlencoded");
    let r = raw(
        port,
        "POST",
        "/agentengine/api/v1/ListSessions",
        &[host, form],
        "{}",
    );
    assert_eq!(r.status, 200, "curl -d: {}", r.body);
    let r = raw(
        port,
        "POST",
        "/agentengine/api/v1/ListSessions",
        &[host, form, ("Origin", "http://evil.example")],
        "{}",
    );
    assert_eq!(r.status, 403);

    // The gateway's own page, a link followed to the console, and SDKs keep working.
    let own_origin = format!("http://{own_host}");
    for headers in [
        vec![("Origin", own_origin.as_str()), json],
        vec![("Sec-Fetch-Site", "same-origin"), json],
        vec![json],
    ] {
        let mut all = vec![host];
        all.extend(headers.iter().copied());
        let r = raw(
            port,
            "POST",
            "/agentengine/api/v1/ListSessionEvents",
            &all,
            &list_events,
        );
        assert_eq!(r.status, 200, "{headers:?}: {}", r.body);
    }
    let nav = [
        host,
        ("Sec-Fetch-Site", "cross-site"),
        ("Sec-Fetch-Mode", "navigate"),
    ];
    assert_eq!(raw(port, "GET", "/ui/", &nav, "").status, 200);
    // The agent's own paths are the agent's business (and its CORS).
    let r = raw(
        port,
        "POST",
        "/echo",
        &[host, ("Origin", "http://evil.example"), text],
        "x",
    );
    assert_eq!(
        (r.status, r.json()["body"].clone()),
        (200, json!("x")),
        "{}",
        r.body
    );
}

#[test]
fn tether_answers_preflights_on_its_own_paths_granting_only_configured_origins() {
    let (store, agent, tether) = chat_gateway(&["--allowed-origins", "http://app.test:3000"]);
    let port = tether.port;
    let own_host = format!("127.0.0.1:{port}");
    let host = ("Host", own_host.as_str());
    let ask = ("Access-Control-Request-Method", "POST");
    let ask_headers = (
        "Access-Control-Request-Headers",
        "content-type,authorization",
    );
    for path in [
        "/v1/responses",
        "/v1/chat/completions",
        "/v1/conversations",
        "/agentengine/api/v1/CancelRun",
        "/ui/",
    ] {
        let r = raw(
            port,
            "OPTIONS",
            path,
            &[host, ("Origin", "http://evil.example"), ask],
            "",
        );
        assert_eq!(r.status, 403, "{path}: {}", r.body);
        assert_eq!(r.header("access-control-allow-origin"), None, "{path}");
        let app = ("Origin", "http://app.test:3000");
        let r = raw(port, "OPTIONS", path, &[host, app, ask, ask_headers], "");
        assert_eq!(r.status, 204, "{path}: {}", r.body);
        assert_eq!(
            r.header("access-control-allow-origin").as_deref(),
            Some("http://app.test:3000")
        );
        assert_eq!(
            r.header("access-control-allow-headers").as_deref(),
            Some("content-type,authorization")
        );
        assert!(r.header("access-control-allow-credentials").is_none());
    }
    assert_eq!(
        untouched(&agent, &store, "local"),
        (0, 0),
        "no preflight reached the agent"
    );
    // The granted origin reads the answer (and the headers it needs).
    let r = raw(
        port,
        "POST",
        "/v1/responses",
        &[
            host,
            ("Origin", "http://app.test:3000"),
            ("Content-Type", "application/json"),
        ],
        TURN,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.header("access-control-allow-origin").as_deref(),
        Some("http://app.test:3000")
    );
    assert!(r
        .header("access-control-expose-headers")
        .unwrap()
        .contains("x-session-id"));
    // A pass-through preflight is the agent's to answer (the fake agent has no OPTIONS:
    // its server's own 501 page, not a JSON body of Tether's).
    let r = raw(
        port,
        "OPTIONS",
        "/echo",
        &[host, ("Origin", "http://evil.example"), ask],
        "",
    );
    assert_eq!(r.status, 501, "{}", r.body);
    assert!(r.body.contains("Unsupported method"), "{}", r.body);
}

#[test]
fn other_spellings_of_tethers_paths_are_refused_before_anything_else() {
    let (store, agent, tether) = chat_gateway(&[]);
    let port = tether.port;
    let own_host = format!("127.0.0.1:{port}");
    let host = ("Host", own_host.as_str());
    let json = ("Content-Type", "application/json");
    for (path, canonical) in [
        ("/v1//responses", "/v1/responses"),
        ("/v1/%63hat/completions", "/v1/chat/completions"),
        ("/v1/chat/completions;x=1", "/v1/chat/completions"),
        (
            "/agentengine//api/v1/ListSessions",
            "/agentengine/api/v1/ListSessions",
        ),
        ("//v1/responses", "/v1/responses"),
        ("/ui;x/", "/ui/"),
    ] {
        let r = raw(port, "POST", path, &[host, json], TURN);
        assert_eq!(r.status, 400, "{path}: {}", r.body);
        let message = r.json()["error"]["message"].as_str().unwrap().to_owned();
        assert!(
            message.contains(&format!("send {canonical:?}")),
            "{path}: {message}"
        );
    }
    assert_eq!(untouched(&agent, &store, "local"), (0, 0));
    // The agent's own paths are its business, however spelled: it says it has no such
    // route.
    let r = raw(port, "GET", "/echo//x;y", &[host], "");
    assert_eq!(r.status, 404, "{}", r.body);
    assert!(r.body.contains("no route GET /echo//x;y"), "{}", r.body);
}

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDRtiny";

fn svg() -> &'static str {
    r#"<svg xmlns="http://www.w3.org/2000/svg"><script>fetch('/v1/responses')</script></svg>"#
}

#[test]
fn uploads_and_workspace_files_are_served_inert() {
    use base64::Engine;
    let b64 = |s: &[u8]| base64::engine::general_purpose::STANDARD.encode(s);
    let workspace = tempfile::tempdir().unwrap();
    let root = workspace.path().join("local");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("page.html"), "<script>alert(1)</script>").unwrap();
    std::fs::write(workspace.path().join("outside.txt"), "OUTSIDE").unwrap();
    std::os::unix::fs::symlink(workspace.path().join("outside.txt"), root.join("link")).unwrap();
    let fifo = root.join("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let conf =
        Conf::write("[limits]\nattachment_types = [\"image/*\", \"text/*\", \"application/*\"]\n");
    let (_store, _agent, tether) = chat_gateway(&[
        "--conf",
        &conf.arg(),
        "--workspace-dir",
        workspace.path().to_str().unwrap(),
    ]);
    let api = Api::of(&tether);
    let content = |uri: &str| {
        let q: String = form_urlencoded::byte_serialize(uri.as_bytes()).collect();
        get(
            &format!(
                "{}/agentengine/api/v1/AttachmentContent?FileUri={q}",
                tether.url()
            ),
            &[],
        )
    };
    for (mime, bytes, inline) in [
        ("image/svg+xml", svg().as_bytes(), false),
        ("text/html", b"<script>alert(1)</script>".as_slice(), false),
        ("application/xhtml+xml", b"<html/>".as_slice(), false),
        ("text/xml", b"<a/>".as_slice(), false),
        ("text/javascript", b"alert(1)".as_slice(), false),
        ("application/x-unknown", b"\x00\x01".as_slice(), false),
        ("image/png", PNG, true),
        ("text/plain", b"hello".as_slice(), true),
    ] {
        let up = api.ok(
            "UploadAttachment",
            json!({ "Data": format!("data:{mime};base64,{}", b64(bytes)), "FileName": "f" }),
        );
        let r = content(up["FileUri"].as_str().unwrap());
        assert_eq!(r.status, 200, "{mime}: {}", r.body);
        assert_eq!(r.header("content-type"), Some(mime));
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
        assert_eq!(
            r.header("cross-origin-resource-policy"),
            Some("same-origin")
        );
        assert_eq!(
            r.header("content-security-policy"),
            Some("default-src 'none'; sandbox")
        );
        let disposition = r.header("content-disposition").unwrap();
        assert_eq!(
            disposition.starts_with("inline"),
            inline,
            "{mime}: {disposition}"
        );
        assert_eq!(
            disposition.starts_with("attachment"),
            !inline,
            "{mime}: {disposition}"
        );
    }
    let r = content("page.html");
    assert_eq!(
        (r.status, r.header("content-type")),
        (200, Some("text/plain; charset=utf-8"))
    );
    assert_eq!(
        r.header("cross-origin-resource-policy"),
        Some("same-origin")
    );
    // A link is never followed; a FIFO is refused at once instead of hanging the request.
    let r = content("link");
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(!r.body.contains("OUTSIDE"));
    let started = Instant::now();
    let r = content("fifo");
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.json()["Message"]
        .as_str()
        .unwrap()
        .contains("not a regular file"));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let listed = api.ok("ListWorkspaceFiles", json!({}));
    assert_eq!(listed["Files"].as_array().unwrap().len(), 1, "{listed}");
}

/// Reads an SSE answer's head and keeps the stream open: (session, invocation, reader).
fn streaming_turn(tether: &Tether, key: &str) -> (String, String, Box<dyn Read + Send + Sync>) {
    let (k, v) = bearer(key);
    let r = ureq::post(&format!("{}/v1/chat/completions", tether.url()))
        .set(k, &v)
        .set("content-type", "application/json")
        .send_string(&Surface::Chat.body("slow:200:50", None, true).to_string())
        .unwrap();
    let session = r.header("x-session-id").unwrap().to_owned();
    let invocation = r.header("x-invocation-id").unwrap().to_owned();
    (session, invocation, r.into_reader())
}

#[test]
fn live_runs_are_found_by_account_and_imports_never_adopt_a_live_invocation() {
    let (store, _agent, tether) = authed_gateway("");
    let (session_a, invocation_a, mut stream) = streaming_turn(&tether, KEY_A);
    let mut first = [0u8; 64];
    let _ = stream.read(&mut first).unwrap();

    // B imports a session naming A's live invocation as open: refused, nothing written.
    let r = control(
        &tether,
        KEY_B,
        "ImportSession",
        json!({ "SessionId": "copied", "Events": events_naming(&invocation_a) }),
    );
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(r.json()["Data"]["code"], "invocation_exists");
    assert_eq!(store.session_count("acct-b"), 0);
    // B's cancel of that id finds nothing of B's; A's run goes on to complete.
    let r = control(
        &tether,
        KEY_B,
        "CancelRun",
        json!({ "InvocationId": invocation_a }),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["Data"]["Found"], false, "{}", r.body);
    let mut rest = Vec::new();
    stream.read_to_end(&mut rest).unwrap();
    let events = store.wait_for_terminal("acct-a", &session_a, 1);
    assert_eq!(
        events.last().unwrap().run_status(),
        Some(session_log::RunStatus::Completed)
    );
    // A's own cancel finds it, finished.
    let r = control(
        &tether,
        KEY_A,
        "CancelRun",
        json!({ "InvocationId": invocation_a }),
    );
    assert_eq!(r.json()["Data"]["RunnerCancelStatus"], "already_finished");
    // Finished, its id is still A's: an import naming it is refused the same.
    let r = control(
        &tether,
        KEY_B,
        "ImportSession",
        json!({ "SessionId": "copied", "Events": events_naming(&invocation_a) }),
    );
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(r.json()["Data"]["InvocationId"], invocation_a.as_str());
    assert_eq!(store.session_count("acct-b"), 0);
    // Ids no account holds import as before.
    let fresh = format!("inv_{}", uuid::Uuid::new_v4().simple());
    let r = control(
        &tether,
        KEY_B,
        "ImportSession",
        json!({ "SessionId": "copied", "Events": events_naming(&fresh) }),
    );
    assert_eq!(r.status, 200, "{}", r.body);
}

/// An export's first two events: a message and the start of the run `invocation`.
fn events_naming(invocation: &str) -> Value {
    json!([
        { "SeqId": 1, "EventType": "message", "Content": { "text": "hi" }, "RunId": "run_x",
          "InvocationId": invocation, "Timestamp": "2026-01-02T03:04:01Z" },
        { "SeqId": 2, "EventType": "run_status", "Content": { "status": "in_progress" },
          "RunId": "run_x", "InvocationId": invocation, "Timestamp": "2026-01-02T03:04:02Z" },
    ])
}

#[test]
fn the_log_has_no_colour_codes_off_a_terminal() {
    let (_store, _agent, tether) = chat_gateway(&[]);
    let r = raw(
        tether.port,
        "GET",
        "/healthz",
        &[("Host", "evil.example")],
        "",
    );
    assert_eq!(r.status, 421);
    let log = tether.log_text();
    assert!(
        log.contains("INFO") && log.contains("refused a request"),
        "{log}"
    );
    assert!(
        !log.contains('\u{1b}'),
        "ANSI escapes in a log file: {log:?}"
    );
}

/// tests/ui/test_web_origins.py: a page of another origin in Debian's chromium tries
/// rebinding-style and cross-site requests and opens uploaded SVG and HTML files; nothing
/// runs and nothing changes; the console on loopback and a deployment reached by a name
/// in `allowed_hosts` with `[auth]` keep working for their own origins.
#[test]
fn a_page_from_another_origin_gets_nothing_in_a_real_browser() {
    let (Some(python), Some(chromium)) =
        (crate::interop::interop_python(), crate::browser::chromium())
    else {
        return;
    };
    let agent = FakeAgent::start();
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let limits = Conf::write("[limits]\nattachment_types = [\"image/*\", \"text/*\"]\n");
    let tether = Tether::start(
        &agent.url(),
        "openai-chat",
        &store.url,
        &[
            "--conf",
            &limits.arg(),
            "--workspace-dir",
            workspace.path().to_str().unwrap(),
        ],
    );
    let auth_store = TestStore::new(StoreKind::Sqlite).unwrap();
    let conf = auth_conf("");
    let deployed = Tether::start(
        &agent.url(),
        "openai-chat",
        &auth_store.url,
        &["--conf", &conf.arg(), "--allowed-hosts", "gw.test"],
    );
    let mut pytest = Command::new(python);
    pytest
        .env("TETHER_URL", tether.url())
        .env("TETHER_WORKSPACE", workspace.path())
        .env("TETHER_AUTH_URL", deployed.url())
        .env("TETHER_KEY_A", KEY_A)
        .env("TETHER_KEY_B", KEY_B)
        .env("TETHER_AGENT_URL", agent.url())
        .env("CHROMIUM", chromium);
    crate::interop::run_pytest_with(
        pytest,
        &["tests/ui/test_web_origins.py"],
        &[&tether, &deployed],
    );
}
