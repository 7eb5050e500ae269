//! Input limits through the real binary: oversized bodies (runs and pass-through), a
//! client that never finishes its headers, a body that trickles in, deep JSON, and
//! attachments (stored per account, logged as upload URIs, sent to the agent as content;
//! disallowed types and sizes refused with nothing written). The gateway stays healthy.

use std::io::Write;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::accounts::png_data_url;
use crate::harness::*;

fn start(toml: &str) -> (TestStore, FakeAgent, Conf, Tether) {
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let agent = FakeAgent::start();
    let conf = Conf::write(toml);
    let tether = Tether::start(
        &agent.url(),
        "openai-responses",
        &store.url,
        &["--conf", &conf.arg()],
    );
    (store, agent, conf, tether)
}

fn healthy(tether: &Tether) {
    assert_eq!(get(&format!("{}/healthz", tether.url()), &[]).status, 200);
    let ok = post_json(
        &format!("{}/v1/responses", tether.url()),
        &Surface::Responses.body("Reply with OK", None, false),
    );
    assert_eq!(ok.status, 200, "{}", ok.body);
}

#[test]
fn oversized_and_deep_bodies_are_refused_on_every_path() {
    let (store, agent, _conf, tether) =
        start("max_body_bytes = 2048\ntee = false\n[limits]\nmax_json_depth = 8\n");
    let big = json!({ "input": "x".repeat(3000) }).to_string();
    let r = post(&format!("{}/v1/responses", tether.url()), &big, &[]);
    assert_eq!(r.status, 413, "{}", r.body);
    let r = post(
        &format!("{}/agentengine/api/v1/ListSessions", tether.url()),
        &big,
        &[],
    );
    assert_eq!(r.status, 413, "{}", r.body);
    let r = post(
        &format!("{}/echo", tether.url()),
        &big,
        &[("x-session-id", "big")],
    );
    assert_eq!(r.status, 413, "{}", r.body);
    assert_eq!(r.json()["error"]["code"], "request_too_large");
    // A chunked pass-through body has no Content-Length: counted as it streams.
    let chunked = format!(
        "POST /echo HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\nx-session-id: big2\r\n\r\n{:x}\r\n{}\r\n0\r\n\r\n",
        3000,
        "y".repeat(3000)
    );
    let (raw, _) = raw_exchange(tether.port, chunked.as_bytes(), Duration::from_secs(3));
    assert!(
        !statuses(&raw).iter().any(|s| (200..300).contains(s)),
        "{}",
        String::from_utf8_lossy(&raw)
    );
    let deep = format!("{{\"input\": {}\"hi\"{}}}", "[".repeat(20), "]".repeat(20));
    let r = post(&format!("{}/v1/responses", tether.url()), &deep, &[]);
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.json()["error"]["code"], "json_too_deep");
    let r = post(
        &format!("{}/agentengine/api/v1/ListSessions", tether.url()),
        &deep,
        &[],
    );
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(store.session_count("local"), 0, "nothing written");
    assert!(agent.requests().is_empty());
    healthy(&tether);
}

#[test]
fn a_client_that_never_finishes_its_headers_is_cut_off() {
    let (_store, _agent, _conf, tether) = start("[limits]\nheader_timeout_seconds = 1\n");
    let mut slow = std::net::TcpStream::connect(("127.0.0.1", tether.port)).unwrap();
    slow.write_all(b"GET /echo HT").unwrap();
    let started = Instant::now();
    let (got, closed) = read_until_closed(&mut slow, Duration::from_secs(5));
    assert!(closed, "the connection is closed");
    assert!(got.is_empty() || !statuses(&got).iter().any(|s| (200..300).contains(s)));
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    // Trickling one byte at a time does not reset the clock.
    let mut trickle = std::net::TcpStream::connect(("127.0.0.1", tether.port)).unwrap();
    let started = Instant::now();
    let mut closed = false;
    for b in
        b"GET /echo HTTP/1.1\r\nHost: localhost\r\nX-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n"
    {
        if trickle.write_all(&[*b]).is_err() {
            closed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    if !closed {
        closed = read_until_closed(&mut trickle, Duration::from_secs(2)).1;
    }
    assert!(closed, "cut off after {:?}", started.elapsed());
    healthy(&tether);
}

#[test]
fn a_body_that_trickles_in_is_refused_and_writes_nothing() {
    let (store, agent, _conf, tether) = start(
        "tee = false\n[limits]\nheader_timeout_seconds = 1\nmin_body_bytes_per_second = 100\n",
    );
    let body = Surface::Responses
        .body("hello there", None, false)
        .to_string();
    let head = format!(
        "POST /v1/responses HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len() + 2000
    );
    let mut s = std::net::TcpStream::connect(("127.0.0.1", tether.port)).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(&body.as_bytes()[..10]).unwrap();
    let (got, _) = read_until_closed(&mut s, Duration::from_secs(5));
    assert_eq!(
        statuses(&got).first(),
        Some(&408),
        "{}",
        String::from_utf8_lossy(&got)
    );
    // Pass-through too: the body is cut off, no 2xx.
    let mut s = std::net::TcpStream::connect(("127.0.0.1", tether.port)).unwrap();
    s.write_all(
        b"POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5000\r\nx-session-id: slow\r\n\r\nabc",
    )
    .unwrap();
    let (got, _) = read_until_closed(&mut s, Duration::from_secs(5));
    assert!(
        !statuses(&got).iter().any(|s| (200..300).contains(s)),
        "{}",
        String::from_utf8_lossy(&got)
    );
    assert_eq!(store.session_count("local"), 0, "nothing written");
    assert!(agent.requests().is_empty());
    healthy(&tether);
}

#[test]
fn attachments_are_checked_stored_per_account_and_reach_the_agent() {
    let (store, agent, _conf, tether) = start(
        "[limits]\nattachment_max_bytes = 64\nattachment_types = [\"image/png\", \"text/plain\"]\n",
    );
    let url = format!("{}/v1/responses", tether.url());
    let input = |part: Value| {
        json!({ "input": [{ "role": "user", "content": [
            { "type": "input_text", "text": "look" }, part ] }] })
    };
    use base64::Engine;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let refused = [
        (
            "type not allowed",
            input(
                json!({ "type": "input_image", "image_url": format!("data:image/svg+xml;base64,{}", b64(b"<svg/>")) }),
            ),
            415,
        ),
        (
            "content not what it says",
            input(
                json!({ "type": "input_image", "image_url": format!("data:image/png;base64,{}", b64(b"GIF89a....")) }),
            ),
            415,
        ),
        (
            "too big",
            input(
                json!({ "type": "input_file", "filename": "a.txt", "file_data": format!("data:text/plain;base64,{}", b64(&[b'a'; 100])) }),
            ),
            413,
        ),
        (
            "not base64",
            input(
                json!({ "type": "input_file", "filename": "a.txt", "file_data": "data:text/plain;base64,@@@@" }),
            ),
            400,
        ),
    ];
    for (name, body, status) in refused {
        let r = post(&url, &body.to_string(), &[]);
        assert_eq!(r.status, status, "{name}: {}", r.body);
        assert!(r.json()["error"]["message"].is_string(), "{name}");
    }
    assert_eq!(store.session_count("local"), 0, "nothing written");
    assert!(agent.requests().is_empty());

    let image = png_data_url();
    let text = format!("data:text/plain;base64,{}", b64(b"hello file"));
    let body = json!({ "conversation": "att", "input": [{ "role": "user", "content": [
        { "type": "input_text", "text": "look" },
        { "type": "input_image", "image_url": image },
        { "type": "input_file", "filename": "n.txt", "file_data": text } ] }] });
    let r = post(&url, &body.to_string(), &[]);
    assert_eq!(r.status, 200, "{}", r.body);
    // The log holds upload URIs, not the data.
    let events = store.events("local", "att");
    let logged =
        serde_json::to_string(&events.iter().map(|e| &e.content).collect::<Vec<_>>()).unwrap();
    assert!(!logged.contains("base64"), "{logged}");
    let uris: Vec<String> = logged
        .match_indices("tether-upload://")
        .map(|(i, _)| logged[i..].split('"').next().unwrap().to_owned())
        .collect();
    assert_eq!(uris.len(), 2, "{logged}");
    // The agent got the content.
    let sent = agent.requests().last().unwrap()["body"].to_string();
    assert!(sent.contains(&image), "{sent}");
    assert!(sent.contains(&text), "{sent}");
    assert!(!sent.contains("tether-upload://"), "{sent}");
    // A second turn's history still carries usable content.
    let again = post(
        &url,
        &json!({ "conversation": "att", "input": "and again" }).to_string(),
        &[],
    );
    assert_eq!(again.status, 200);
    assert!(agent.requests().last().unwrap()["body"]
        .to_string()
        .contains(&image));
    // Readable back through AttachmentContent, bytes and type intact.
    let back = get(
        &format!(
            "{}/agentengine/api/v1/AttachmentContent?FileUri={}",
            tether.url(),
            uris[1]
        ),
        &[],
    );
    assert_eq!(back.status, 200);
    assert_eq!(back.header("content-type"), Some("text/plain"));
    assert_eq!(back.body, "hello file");
    let missing = get(
        &format!(
            "{}/agentengine/api/v1/AttachmentContent?FileUri=tether-upload://file_nope",
            tether.url()
        ),
        &[],
    );
    assert_eq!(missing.status, 404);
    // The upload action refuses what runs refuse.
    let up = post(
        &format!("{}/agentengine/api/v1/UploadAttachment", tether.url()),
        &json!({ "Data": format!("data:image/svg+xml;base64,{}", b64(b"<svg/>")) }).to_string(),
        &[],
    );
    assert_eq!(up.status, 415, "{}", up.body);
    healthy(&tether);
}
