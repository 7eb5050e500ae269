//! Hardening (issue 29), over raw TCP where the bytes matter: the one request-head check
//! (Host, header values, the path rule), whole bodies read within the limits before the
//! agent hears anything, pipelined requests answered in order, the header deadline for
//! long header blocks, the body rate on run and control paths, Tether's own JSON error
//! when the agent is down, other accounts' upload references, one id error shape, and the
//! run supervisor surviving a panic. Each case also checks that nothing reached the agent
//! or the log.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::accounts::{control, png_data_url};
use crate::auth::{authed_gateway, bearer, KEY_A, KEY_B};
use crate::harness::*;

/// A TCP "agent" that records every byte it is sent and answers each connection with a
/// fixed 200: to see whether any byte of a refused request reached the agent.
struct RecordingAgent {
    port: u16,
    received: Arc<Mutex<Vec<u8>>>,
    connections: Arc<Mutex<usize>>,
}

impl RecordingAgent {
    fn start() -> RecordingAgent {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(Mutex::new(0));
        let (r, c) = (received.clone(), connections.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                *c.lock().unwrap() += 1;
                let r = r.clone();
                std::thread::spawn(move || {
                    conn.set_read_timeout(Some(Duration::from_millis(300))).ok();
                    let mut buf = [0u8; 65536];
                    loop {
                        match conn.read(&mut buf) {
                            Ok(0) => return,
                            Ok(n) => r.lock().unwrap().extend_from_slice(&buf[..n]),
                            Err(_) => break,
                        }
                    }
                    let _ = conn.write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                    );
                });
            }
        });
        RecordingAgent {
            port,
            received,
            connections,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn bytes(&self) -> usize {
        self.received.lock().unwrap().len()
    }
}

fn recording_gateway(conf: &str) -> (TestStore, RecordingAgent, Conf, Tether) {
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let agent = RecordingAgent::start();
    let conf = Conf::write(conf);
    let tether = Tether::start(
        &agent.url(),
        "openai-chat",
        &store.url,
        &["--conf", &conf.arg()],
    );
    (store, agent, conf, tether)
}

fn head_of(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    text.split("\r\n\r\n")
        .next()
        .unwrap_or_default()
        .to_lowercase()
}

#[test]
fn a_malformed_request_head_gets_400_with_connection_close_and_reaches_nobody() {
    let (store, agent, _conf, tether) = recording_gateway("tee = true\n");
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "no Host on HTTP/1.1",
            b"GET /echo HTTP/1.1\r\n\r\n".to_vec(),
            "host",
        ),
        (
            "no Host on a health check",
            b"GET /healthz HTTP/1.1\r\n\r\n".to_vec(),
            "host",
        ),
        (
            "two Hosts",
            b"GET /echo HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n".to_vec(),
            "host",
        ),
        (
            "non-ASCII session id",
            "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nx-session-id: s\u{e9}ance\r\ncontent-length: 2\r\n\r\n{}"
                .as_bytes()
                .to_vec(),
            "x-session-id",
        ),
        (
            "CL and TE",
            b"POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".to_vec(),
            "content-length",
        ),
        (
            "an encoded slash in a run path",
            b"POST /v1/chat%2Fcompletions HTTP/1.1\r\nHost: localhost\r\ncontent-length: 2\r\n\r\n{}".to_vec(),
            "path",
        ),
        (
            "an encoded slash in a control path",
            b"POST /agentengine/api%2Fv1/ListSessions HTTP/1.1\r\nHost: localhost\r\ncontent-length: 2\r\n\r\n{}".to_vec(),
            "path",
        ),
        (
            "a dot segment",
            b"GET /x/../v1/responses HTTP/1.1\r\nHost: localhost\r\n\r\n".to_vec(),
            "dot segment",
        ),
        (
            "an encoded dot segment",
            b"GET /x/%2e%2E/echo HTTP/1.1\r\nHost: localhost\r\n\r\n".to_vec(),
            "dot segment",
        ),
    ];
    let mut failures = Vec::new();
    for (name, request, names) in &cases {
        let (raw, _) = raw_exchange(tether.port, request, Duration::from_secs(3));
        let head = head_of(&raw);
        let body = raw_json(&raw);
        let message = body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_lowercase();
        // Pingora's parser refuses some heads itself (a second Host), with an empty 400
        // and Connection: close; everything else gets Tether's JSON naming the problem.
        let by_pingora = *name == "two Hosts" && head.contains("content-length: 0");
        let ok = statuses(&raw) == vec![400]
            && head.contains("connection: close")
            && (by_pingora
                || (head.contains("content-type: application/json")
                    && body["error"]["code"] == "malformed_request"
                    && message.contains(names)));
        if !ok {
            failures.push(format!("{name}: {}", String::from_utf8_lossy(&raw)));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(agent.bytes(), 0, "nothing reached the agent");
    assert_eq!(store.session_count("local"), 0, "nothing in the log");
    // An encoded slash outside Tether's own paths is the agent's business.
    let (raw, _) = raw_exchange(
        tether.port,
        b"GET /files/a%2Fb HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        Duration::from_secs(3),
    );
    assert_eq!(
        statuses(&raw),
        vec![200],
        "{}",
        String::from_utf8_lossy(&raw)
    );
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let (_store, agent, tether) = chat_gateway(&[]);
    let _ = &agent;
    let request = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n\
GET /echo?n=2 HTTP/1.1\r\nHost: localhost\r\n\r\n\
POST /agentengine/api/v1/ListSessions HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2\r\n\r\n{}\
GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    let mut s = TcpStream::connect(("127.0.0.1", tether.port)).unwrap();
    s.write_all(request).unwrap();
    let (raw, closed) = read_until_closed(&mut s, Duration::from_secs(5));
    let text = String::from_utf8_lossy(&raw);
    assert_eq!(statuses(&raw), vec![200, 200, 200, 200], "{text}");
    assert!(closed, "closed after the last, which asked for it");
    // In order: the control answer (an envelope) comes third, between the others.
    let echo = text.find("n=2").expect("the echo answer");
    let envelope = text.find("\"Code\"").expect("the control answer");
    assert!(echo < envelope, "{text}");
}

#[test]
fn an_oversized_chunked_pass_through_body_reaches_nothing() {
    let (_store, agent, _conf, tether) = recording_gateway("max_body_bytes = 100000\ntee = true\n");
    // 300 KB in 10 KB chunks: the limit is crossed well past Pingora's 64 KiB replay
    // buffer, where bytes used to stream to the agent before the 413.
    let mut request =
        b"POST /echo HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..30 {
        request.extend_from_slice(format!("{:x}\r\n", 10_000).as_bytes());
        request.extend_from_slice(&[b'z'; 10_000]);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"0\r\n\r\n");
    let (raw, _) = raw_exchange(tether.port, &request, Duration::from_secs(5));
    assert_eq!(
        statuses(&raw),
        vec![413],
        "{}",
        String::from_utf8_lossy(&raw)
    );
    assert_eq!(raw_json(&raw)["error"]["code"], "request_too_large");
    // With Content-Length too.
    let mut request = format!(
        "POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n",
        300_000
    )
    .into_bytes();
    request.extend_from_slice(&[b'z'; 300_000]);
    let (raw, _) = raw_exchange(tether.port, &request, Duration::from_secs(5));
    assert_eq!(
        statuses(&raw),
        vec![413],
        "{}",
        String::from_utf8_lossy(&raw)
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        agent.bytes(),
        0,
        "no byte of a refused body reached the agent"
    );
    assert_eq!(
        *agent.connections.lock().unwrap(),
        0,
        "the agent was not even called"
    );
}

#[test]
fn a_large_pass_through_body_within_the_limit_arrives_whole() {
    // Longer than Pingora replays (64 KiB), so Tether sends it itself: the agent gets
    // every byte, once, and the client the agent's answer.
    let (store, agent, tether) = chat_gateway(&["--max-body-bytes", "1000000"]);
    let _ = &agent;
    let body: String = (0..200_000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    for chunked in [false, true] {
        let framing = if chunked {
            "Transfer-Encoding: chunked".to_owned()
        } else {
            format!("Content-Length: {}", body.len())
        };
        let mut request = format!(
            "POST /echo?chunked={chunked} HTTP/1.1\r\nHost: localhost\r\nx-session-id: big-{chunked}\r\nConnection: close\r\n{framing}\r\n\r\n"
        )
        .into_bytes();
        if chunked {
            for piece in body.as_bytes().chunks(30_000) {
                request.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
                request.extend_from_slice(piece);
                request.extend_from_slice(b"\r\n");
            }
            request.extend_from_slice(b"0\r\n\r\n");
        } else {
            request.extend_from_slice(body.as_bytes());
        }
        let (raw, _) = raw_exchange(tether.port, &request, Duration::from_secs(10));
        assert_eq!(
            statuses(&raw),
            vec![200],
            "{}",
            String::from_utf8_lossy(&raw[..raw.len().min(500)])
        );
        let echoed = raw_json(&raw);
        let got = echoed["body"].as_str().unwrap_or_default();
        assert_eq!(
            got.len(),
            body.len(),
            "chunked={chunked}: {}",
            &got[..got.len().min(200)]
        );
        assert_eq!(got, body, "chunked={chunked}");
        // And the tee recorded the exchange.
        let teed = teed_requests(&wait_events(&store, &format!("big-{chunked}")))
            .iter()
            .map(|r| r["path"].as_str().unwrap_or_default().to_owned())
            .collect::<Vec<_>>();
        assert_eq!(teed.len(), 1, "{teed:?}");
    }
}

fn wait_events(store: &TestStore, session: &str) -> Vec<session_log::Event> {
    let started = Instant::now();
    loop {
        let events = store.events("local", session);
        if !events.is_empty() || started.elapsed() > Duration::from_secs(5) {
            return events;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_header_deadline_holds_past_64_kib() {
    let conf = Conf::write("[limits]\nheader_timeout_seconds = 1\n");
    let (_store, _agent, tether) = chat_gateway(&["--conf", &conf.arg()]);
    let mut s = TcpStream::connect(("127.0.0.1", tether.port)).unwrap();
    let started = Instant::now();
    s.write_all(b"GET /echo HTTP/1.1\r\nHost: localhost\r\n")
        .unwrap();
    s.write_all(format!("X-Long: {}\r\n", "a".repeat(70_000)).as_bytes())
        .unwrap();
    let mut closed = false;
    while started.elapsed() < Duration::from_secs(6) {
        if s.write_all(b"X-More: b\r\n").is_err() {
            closed = true;
            break;
        }
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut buf = [0u8; 256];
        match s.read(&mut buf) {
            Ok(0) => {
                closed = true;
                break;
            }
            Ok(_) => {}
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => {
                closed = true;
                break;
            }
        }
    }
    assert!(closed, "still open after {:?}", started.elapsed());
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(get(&format!("{}/healthz", tether.url()), &[]).status, 200);
}

#[test]
fn a_body_trickling_at_40_bytes_a_second_is_cut_off_on_run_and_control_paths() {
    let conf = Conf::write(
        "tee = false\n[limits]\nmin_body_bytes_per_second = 100\nheader_timeout_seconds = 1\n",
    );
    let (store, agent, tether) = chat_gateway(&["--conf", &conf.arg()]);
    for path in [
        "/v1/chat/completions",
        "/agentengine/api/v1/ListSessions",
        "/echo",
    ] {
        let body = Surface::Chat.body("hello", None, false).to_string();
        let padded = format!("{body}{}", " ".repeat(2000));
        let mut s = TcpStream::connect(("127.0.0.1", tether.port)).unwrap();
        s.write_all(
            format!(
                "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                padded.len()
            )
            .as_bytes(),
        )
        .unwrap();
        let started = Instant::now();
        // 40 bytes a second, in 4-byte pieces, for as long as the gateway listens.
        let mut sent = 0;
        let mut cut = false;
        while started.elapsed() < Duration::from_secs(12) && sent < padded.len() {
            if s.write_all(&padded.as_bytes()[sent..sent + 4]).is_err() {
                cut = true;
                break;
            }
            sent += 4;
            std::thread::sleep(Duration::from_millis(100));
            s.set_nonblocking(true).unwrap();
            let mut buf = [0u8; 1024];
            let answered = matches!(s.read(&mut buf), Ok(n) if n > 0);
            s.set_nonblocking(false).unwrap();
            if answered {
                cut = true;
                break;
            }
        }
        assert!(cut, "{path}: still reading after {:?}", started.elapsed());
        assert!(
            started.elapsed() < Duration::from_secs(6),
            "{path}: cut off after {:?}",
            started.elapsed()
        );
    }
    assert_eq!(store.session_count("local"), 0, "nothing written");
    assert!(agent.requests().is_empty());
}

#[test]
fn pass_through_to_a_down_agent_answers_tethers_json_error() {
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let down = free_port();
    let tether = Tether::start(
        &format!("http://127.0.0.1:{down}"),
        "openai-chat",
        &store.url,
        &["--max-body-bytes", "100000"],
    );
    let r = get(&format!("{}/echo", tether.url()), &[]);
    assert_eq!(r.status, 502, "{}", r.body);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.json()["error"]["type"], "upstream_error", "{}", r.body);
    // A refusal of Tether's own, on the same path, is not told as the agent's.
    let r = post(&format!("{}/echo", tether.url()), &"x".repeat(300_000), &[]);
    assert_eq!(r.status, 413, "{}", r.body);
    assert_eq!(r.json()["error"]["code"], "request_too_large");
}

#[test]
fn one_id_error_shape_and_other_accounts_uploads_are_not_found() {
    let (store, agent, tether) = authed_gateway("");
    let (k, a) = bearer(KEY_A);
    let (_, b) = bearer(KEY_B);
    let chat = format!("{}/v1/chat/completions", tether.url());
    // An ASCII session id that breaks the rule, in the header and in the body.
    for (body, headers) in [
        (
            Surface::Chat.body("hi", None, false),
            vec![(k, a.as_str()), ("x-session-id", "a/b")],
        ),
        (
            json!({ "messages": [{ "role": "user", "content": "hi" }], "session_id": "a b" }),
            vec![(k, a.as_str())],
        ),
    ] {
        let r = post(&chat, &body.to_string(), &headers);
        assert_eq!(r.status, 400, "{}", r.body);
        let e = &r.json()["error"];
        assert!(
            e["message"].as_str().unwrap().contains("is not a valid id"),
            "{}",
            r.body
        );
    }
    let r = post(
        &format!("{}/v1/responses", tether.url()),
        &json!({ "input": "hi", "conversation": "x".repeat(200) }).to_string(),
        &[(k, &a)],
    );
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.json()["error"]["code"], "invalid_id", "{}", r.body);
    assert_eq!(r.json()["error"]["param"], "conversation", "{}", r.body);
    // Control actions: the envelope, the same message.
    let r = control(
        &tether,
        KEY_A,
        "ForkSession",
        json!({ "SessionId": "s", "NewSessionId": "a/b" }),
    );
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        r.json()["Message"]
            .as_str()
            .unwrap()
            .contains("is not a valid id"),
        "{}",
        r.body
    );
    for (action, body) in [
        ("ListSessionEvents", json!({ "SessionId": "a b" })),
        ("CancelRun", json!({ "InvocationId": "inv/1" })),
        (
            "ListSessionCheckpoints",
            json!({ "SessionId": "x".repeat(129) }),
        ),
    ] {
        let r = control(&tether, KEY_A, action, body);
        assert_eq!(r.status, 400, "{action}: {}", r.body);
        assert!(
            r.json()["Message"]
                .as_str()
                .unwrap()
                .contains("is not a valid id"),
            "{action}: {}",
            r.body
        );
    }
    let r = get(
        &format!(
            "{}/agentengine/api/v1/SubscribeRunEvents?SessionId=a%20b",
            tether.url()
        ),
        &[(k, &a)],
    );
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("is not a valid id"), "{}", r.body);
    // A's upload, named by B in a run: not found, for that reference, nothing written.
    let upload = control(
        &tether,
        KEY_A,
        "UploadAttachment",
        json!({ "Data": png_data_url() }),
    );
    assert_eq!(upload.status, 200, "{}", upload.body);
    let uri = upload.json()["Data"]["FileUri"]
        .as_str()
        .unwrap()
        .to_owned();
    let turn = |key: &str| {
        json!({ "input": [{ "role": "user", "content": [
            { "type": "input_text", "text": "look" },
            { "type": "input_image", "image_url": uri } ] }],
            "conversation": format!("up-{key}") })
    };
    let r = post(
        &format!("{}/v1/responses", tether.url()),
        &turn("b").to_string(),
        &[(k, &b)],
    );
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(r.json()["error"]["code"], "upload_not_found", "{}", r.body);
    assert!(r.body.contains(&uri), "{}", r.body);
    assert_eq!(store.session_count("acct-b"), 0, "nothing written for B");
    // A can use it.
    let r = post(
        &format!("{}/v1/responses", tether.url()),
        &turn("a").to_string(),
        &[(k, &a)],
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(agent.requests().len(), 1, "only A's run reached the agent");
}

#[test]
fn a_panicking_run_is_closed_failed_and_the_gateway_keeps_serving() {
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let agent = FakeAgent::start();
    let tether = Tether::start_with_env(
        &agent.url(),
        "openai-chat",
        &store.url,
        &[],
        &[("TETHER_TEST_FAULTS", "parser,drive")],
    );
    let chat = format!("{}/v1/chat/completions", tether.url());
    for session in ["fault-a", "fault-b"] {
        let r = post(
            &chat,
            &Surface::Chat.body("hi", Some(session), true).to_string(),
            &[],
        );
        // The run fails before the agent has answered: refused as the same request
        // unstreamed is, with the gateway's error and not the panic's message.
        assert_eq!(r.status, 502, "{}", r.body);
        assert_eq!(r.json()["error"]["code"], "internal_error", "{}", r.body);
        assert!(!r.body.contains("injected fault"), "{}", r.body);
        let events = store.wait_for_terminal("local", session, 1);
        let terminals: Vec<_> = events
            .iter()
            .filter_map(|e| e.run_status())
            .filter(|s| s.is_terminal())
            .collect();
        assert_eq!(terminals, vec![session_log::RunStatus::Failed], "{session}");
    }
    // Others go on normally, on the same gateway.
    let ok = post(
        &chat,
        &Surface::Chat.body("hi", Some("fine"), false).to_string(),
        &[],
    );
    assert_eq!(ok.status, 200, "{}", ok.body);
    let metrics = get(&format!("{}/metrics", tether.url()), &[]).body;
    assert!(metrics.contains("tether_panics_total 2"), "{metrics}");
    assert!(tether.log_text().contains("a run panicked"), "logged");
    let _: Value = json!(null);
}
