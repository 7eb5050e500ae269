//! Webhooks: a local receiver (a real HTTP server in the test) verifies every delivery's
//! Standard Webhooks signature and counts deliveries by event id, in front of real
//! gateways: run ends reported, retries after failures, delivery across a gateway killed
//! with -9 and across a PostgreSQL restart, two replicas sharing PostgreSQL, and a
//! receiver that hangs without slowing a run.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use base64::Engine;
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;

use crate::harness::*;
use crate::outage::pg_cluster;

/// The signing secret every test's endpoint uses (Standard Webhooks' `whsec_` form).
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// One delivery the receiver read.
#[derive(Clone, Debug)]
struct Received {
    id: String,
    body: Value,
    /// The signature matched the body, id and timestamp, and the body's id is the
    /// header's.
    verified: bool,
    /// What the receiver answered.
    answered: u16,
}

#[derive(Default)]
struct Inner {
    received: Vec<Received>,
    /// Requests to answer 500 before answering 200.
    fail_first: usize,
    /// Requests are held unanswered until released.
    hang: bool,
    /// Requests being held now.
    holding: usize,
}

/// A webhook receiver on a loopback port, answering each request on a thread of its own.
struct Receiver {
    port: u16,
    state: Arc<(Mutex<Inner>, Condvar)>,
}

impl Receiver {
    fn start(fail_first: usize, hang: bool) -> Receiver {
        Self::on(TcpListener::bind("127.0.0.1:0").unwrap(), fail_first, hang)
    }

    fn on(listener: TcpListener, fail_first: usize, hang: bool) -> Receiver {
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new((
            Mutex::new(Inner {
                fail_first,
                hang,
                ..Default::default()
            }),
            Condvar::new(),
        ));
        let shared = state.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let shared = shared.clone();
                std::thread::spawn(move || answer(stream, &shared));
            }
        });
        Receiver { port, state }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.port)
    }

    fn received(&self) -> Vec<Received> {
        self.state.0.lock().unwrap().received.clone()
    }

    fn holding(&self) -> usize {
        self.state.0.lock().unwrap().holding
    }

    fn release(&self) {
        self.state.0.lock().unwrap().hang = false;
        self.state.1.notify_all();
    }

    /// The answered-200 deliveries of events of `session`, by type.
    fn delivered(&self, session: &str) -> Vec<Received> {
        self.received()
            .into_iter()
            .filter(|r| r.answered == 200 && r.body["data"]["session_id"] == session)
            .collect()
    }

    /// Waits until every type of `types` was delivered for `session`; returns those
    /// deliveries.
    fn wait_for(&self, session: &str, types: &[&str], timeout: Duration) -> Vec<Received> {
        let mut got = Vec::new();
        wait_until(&format!("webhooks {types:?} of {session}"), timeout, || {
            got = self.delivered(session);
            types
                .iter()
                .all(|t| got.iter().any(|r| r.body["type"] == *t))
        });
        got
    }
}

/// Reads one request, records it, and answers as the receiver is set to.
fn answer(mut stream: TcpStream, shared: &(Mutex<Inner>, Condvar)) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut headers = std::collections::HashMap::new();
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
        }
    }
    let length: usize = headers
        .get("content-length")
        .and_then(|l| l.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let body = String::from_utf8(body).unwrap();
    let header = |name: &str| headers.get(name).cloned().unwrap_or_default();
    let (id, timestamp, signature) = (
        header("webhook-id"),
        header("webhook-timestamp"),
        header("webhook-signature"),
    );
    let parsed: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let fresh = timestamp
        .parse::<i64>()
        .is_ok_and(|t| (chrono::Utc::now().timestamp() - t).abs() < 300);
    let verified =
        fresh && parsed["id"] == id.as_str() && verify(&id, &timestamp, &body, &signature);
    let (lock, wake) = shared;
    let mut inner = lock.lock().unwrap();
    inner.holding += 1;
    while inner.hang {
        inner = wake.wait(inner).unwrap();
    }
    inner.holding -= 1;
    let failed_so_far = inner.received.iter().filter(|r| r.answered != 200).count();
    let status = if failed_so_far < inner.fail_first {
        500
    } else {
        200
    };
    inner.received.push(Received {
        id,
        body: parsed,
        verified,
        answered: status,
    });
    drop(inner);
    let _ = write!(
        stream,
        "HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    );
}

/// The Standard Webhooks check: one of the space-separated `v1,<base64>` signatures is the
/// HMAC-SHA256 of `{id}.{timestamp}.{body}` under the secret's base64-decoded key.
fn verify(id: &str, timestamp: &str, body: &str, signatures: &str) -> bool {
    let key = base64::engine::general_purpose::STANDARD
        .decode(SECRET.strip_prefix("whsec_").unwrap())
        .unwrap();
    signatures.split(' ').any(|s| {
        let Some(sig) = s
            .strip_prefix("v1,")
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
        else {
            return false;
        };
        let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
        mac.update(format!("{id}.{timestamp}.{body}").as_bytes());
        mac.verify_slice(&sig).is_ok()
    })
}

/// A configuration with one endpoint at `url` receiving every event type.
fn conf(url: &str, extra: &str) -> Conf {
    Conf::write(&format!(
        "[[webhooks]]\nname = \"receiver\"\nurl = \"{url}\"\nsecret = \"{SECRET}\"\n\
         events = [\"run.completed\", \"run.failed\", \"session.idle\", \
         \"approval.requested\", \"approval.resolved\"]\n\
         retry_initial_seconds = 0.2\n{extra}"
    ))
}

/// One non-streaming chat turn; its session id.
fn turn(tether: &Tether, text: &str) -> String {
    let reply = post_json(
        &format!("{}/v1/chat/completions", tether.url()),
        &Surface::Chat.body(text, None, false),
    );
    reply.session_id.expect("x-session-id")
}

fn deliveries(api: &Api, filter: Value) -> Vec<Value> {
    api.ok("ListWebhookDeliveries", filter)["Deliveries"]
        .as_array()
        .cloned()
        .unwrap()
}

fn metric(tether: &Tether, outcome: &str) -> u64 {
    let page = get(&format!("{}/metrics", tether.url()), &[]).body;
    let name = format!("tether_webhook_deliveries_total{{outcome=\"{outcome}\"}} ");
    page.lines()
        .find_map(|l| l.strip_prefix(&name))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {page}"))
}

#[test]
fn run_ends_are_delivered_signed_and_retried_after_failures() {
    let receiver = Receiver::start(2, false);
    let conf = conf(&receiver.url(), "");
    let (_store, _agent, tether) = chat_gateway(&["--conf", &conf.arg()]);
    let completed = turn(&tether, "hello");
    let failed = turn(&tether, "error");

    let ok = receiver.wait_for(
        &completed,
        &["run.completed", "session.idle"],
        Duration::from_secs(30),
    );
    let bad = receiver.wait_for(
        &failed,
        &["run.failed", "session.idle"],
        Duration::from_secs(30),
    );
    let all = receiver.received();
    assert!(
        all.iter().all(|r| r.verified),
        "every signature verifies: {all:?}"
    );
    assert_eq!(
        all.iter().filter(|r| r.answered == 500).count(),
        2,
        "the first two attempts failed and were retried"
    );
    let completed_event = ok
        .iter()
        .find(|r| r.body["type"] == "run.completed")
        .unwrap();
    let data = &completed_event.body["data"];
    assert_eq!(data["account_id"], "local");
    assert_eq!(data["status"], "completed");
    assert!(data["run_id"].as_str().is_some_and(|r| !r.is_empty()));
    assert!(completed_event.id.starts_with("msg_"));
    let failed_event = bad.iter().find(|r| r.body["type"] == "run.failed").unwrap();
    assert_eq!(failed_event.body["data"]["status"], "failed");
    // A cancelled run is not reported as failed, and nothing else was sent.
    let ids: std::collections::HashSet<&str> = all.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids.len(), 4, "four events, each with its own id: {all:?}");

    // What the control API shows: four deliveries, all delivered, the retried ones with
    // their attempts.
    let api = Api::of(&tether);
    let listed = deliveries(&api, json!({}));
    assert_eq!(listed.len(), 4, "{listed:?}");
    assert!(
        listed.iter().all(|d| d["Status"] == "delivered"),
        "{listed:?}"
    );
    let attempts: i64 = listed.iter().map(|d| d["Attempts"].as_i64().unwrap()).sum();
    assert_eq!(
        attempts,
        all.len() as i64,
        "every request is an attempt on record"
    );
    let only_failed = deliveries(&api, json!({ "EventType": "run.failed" }));
    assert_eq!(only_failed.len(), 1);
    assert_eq!(only_failed[0]["SessionId"], failed.as_str());
    assert_eq!(only_failed[0]["EventId"], failed_event.id.as_str());
    assert!(deliveries(&api, json!({ "Status": "pending" })).is_empty());
    let (status, body) = api.call("ListWebhookDeliveries", json!({ "Status": "sent" }));
    assert_eq!(status, 400, "{body}");
    let (status, body) = api.call("ListWebhookDeliveries", json!({ "EventType": "run.done" }));
    assert_eq!(status, 400, "{body}");
    let page = api.ok("ListWebhookDeliveries", json!({ "Limit": 3, "Offset": 3 }));
    assert_eq!(page["Total"], 4);
    assert_eq!(page["Deliveries"].as_array().unwrap().len(), 1);

    assert_eq!(metric(&tether, "delivered"), 4);
    assert_eq!(metric(&tether, "retried"), 2);
    assert_eq!(metric(&tether, "failed"), 0);

    // The CLI shows the same deliveries.
    let out = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args([
            "webhooks",
            "deliveries",
            "--event",
            "run.failed",
            "--url",
            &tether.url(),
        ])
        .env_remove("TETHER_API_KEY")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(&failed_event.id) && text.contains("1 of 1 deliveries"),
        "{text}"
    );
}

#[test]
fn a_receiver_that_keeps_failing_is_given_up_on() {
    let receiver = Receiver::start(usize::MAX, false);
    // An unknown event type is refused at start, naming the key.
    let bad = Conf::write(&format!(
        "[[webhooks]]\nurl = \"{}\"\nsecret = \"{SECRET}\"\nevents = [\"run.finished\"]\n",
        receiver.url()
    ));
    let out = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args([
            "serve",
            "--upstream",
            "http://127.0.0.1:9",
            "--conf",
            &bad.arg(),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("webhooks[0].events") && err.contains("run.finished"),
        "{err}"
    );

    let conf = Conf::write(&format!(
        "[[webhooks]]\nurl = \"{}\"\nsecret = \"{SECRET}\"\nevents = [\"run.completed\"]\n\
         max_attempts = 3\nretry_initial_seconds = 0.1\n",
        receiver.url()
    ));
    let (_store, _agent, tether) = chat_gateway(&["--conf", &conf.arg()]);
    let session = turn(&tether, "hello");
    let api = Api::of(&tether);
    let mut listed = Vec::new();
    wait_until(
        "the delivery to fail for good",
        Duration::from_secs(30),
        || {
            listed = deliveries(&api, json!({ "Status": "failed" }));
            !listed.is_empty()
        },
    );
    assert_eq!(listed[0]["SessionId"], session.as_str());
    assert_eq!(listed[0]["Attempts"], 3);
    assert_eq!(listed[0]["LastStatusCode"], 500);
    assert_eq!(listed[0]["NextAttemptAt"], Value::Null);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(receiver.received().len(), 3, "no attempt after the last");
    assert_eq!(metric(&tether, "failed"), 1);
    assert_eq!(metric(&tether, "retried"), 2);
}

#[test]
fn a_delivery_outlives_a_gateway_killed_before_it() {
    // The receiver's port is taken but nobody answers yet: every attempt is refused.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let url = format!("http://127.0.0.1:{port}/hook");
    let conf = conf(&url, "max_attempts = 100\n");
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let agent = FakeAgent::start();
    let args = ["--conf", &conf.arg(), "--replica-id", "hooks-1"];
    let mut tether = Tether::start(&agent.url(), "openai-chat", &store.url, &args);
    let session = turn(&tether, "hello");
    let api = Api::of(&tether);
    wait_until("a refused attempt", Duration::from_secs(30), || {
        deliveries(&api, json!({ "EventType": "run.completed" }))
            .first()
            .is_some_and(|d| d["Attempts"].as_i64() >= Some(1))
    });
    assert!(tether.signal("KILL", Duration::from_secs(10)));

    let receiver = Receiver::on(TcpListener::bind(("127.0.0.1", port)).unwrap(), 0, false);
    let tether = Tether::start(&agent.url(), "openai-chat", &store.url, &args);
    let got = receiver.wait_for(
        &session,
        &["run.completed", "session.idle"],
        Duration::from_secs(30),
    );
    assert!(got.iter().all(|r| r.verified));
    let listed = deliveries(&Api::of(&tether), json!({ "EventType": "run.completed" }));
    let event = got
        .iter()
        .find(|r| r.body["type"] == "run.completed")
        .unwrap();
    assert_eq!(
        listed[0]["EventId"],
        event.id.as_str(),
        "the event committed before the kill"
    );
    assert_eq!(listed[0]["Status"], "delivered");
}

#[test]
fn a_postgres_restart_loses_no_webhook() {
    let Some(cluster) = pg_cluster::Cluster::start() else {
        return;
    };
    let receiver = Receiver::start(0, false);
    let conf = conf(&receiver.url(), "");
    let agent = FakeAgent::start();
    let journal = cluster.path().join("tether-journal.sqlite");
    let tether = Tether::start(
        &agent.url(),
        "openai-chat",
        &cluster.url(),
        &[
            "--conf",
            &conf.arg(),
            "--journal-path",
            &journal.display().to_string(),
        ],
    );
    let before = turn(&tether, "hello");
    receiver.wait_for(&before, &["run.completed"], Duration::from_secs(30));

    cluster.down();
    // The run commits to the journal; its webhook waits for PostgreSQL.
    let during = turn(&tether, "Reply with OK");
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        receiver.delivered(&during).is_empty(),
        "nothing is delivered from the journal"
    );
    cluster.up();
    let got = receiver.wait_for(
        &during,
        &["run.completed", "session.idle"],
        Duration::from_secs(60),
    );
    assert!(got.iter().all(|r| r.verified));
    let completed: Vec<&Received> = got
        .iter()
        .filter(|r| r.body["type"] == "run.completed")
        .collect();
    assert!(
        completed.iter().all(|r| r.id == completed[0].id),
        "one event: {completed:?}"
    );
}

#[test]
fn two_replicas_deliver_every_event_once_each_way() {
    let Some(url) = postgres_url() else {
        return;
    };
    let receiver = Receiver::start(0, false);
    let conf = conf(&receiver.url(), "");
    let agent = FakeAgent::start();
    let tethers: Vec<Tether> = ["hooks-a", "hooks-b"]
        .iter()
        .map(|id| {
            Tether::start(
                &agent.url(),
                "openai-chat",
                &url,
                &["--conf", &conf.arg(), "--replica-id", id],
            )
        })
        .collect();
    let sessions: Vec<String> = (0..8).map(|i| turn(&tethers[i % 2], "hello")).collect();
    for session in &sessions {
        let got = receiver.wait_for(
            session,
            &["run.completed", "session.idle"],
            Duration::from_secs(30),
        );
        assert!(got.iter().all(|r| r.verified));
        // Duplicates (at least once) carry the same id and body.
        for r in &got {
            let same: Vec<&Received> = got.iter().filter(|o| o.id == r.id).collect();
            assert!(same.iter().all(|o| o.body == r.body));
        }
    }
    // Each event was posted by one replica at a time: nothing failed, nothing was sent
    // twice while both workers claimed the same rows.
    let ours: Vec<Received> = receiver
        .received()
        .into_iter()
        .filter(|r| {
            sessions
                .iter()
                .any(|s| r.body["data"]["session_id"] == s.as_str())
        })
        .collect();
    let ids: std::collections::HashSet<&str> = ours.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids.len(), 16, "two events per run");
    assert_eq!(ours.len(), 16, "no event delivered twice: {ours:?}");
}

#[test]
fn a_hanging_receiver_does_not_slow_runs() {
    let receiver = Receiver::start(0, true);
    let conf = conf(&receiver.url(), "timeout_seconds = 60\nconcurrency = 2\n");
    let (store, _agent, tether) = chat_gateway(&["--conf", &conf.arg()]);
    let session = turn(&tether, "hello");
    wait_until(
        "the receiver to hold a delivery",
        Duration::from_secs(30),
        || receiver.holding() > 0,
    );
    // Runs go on while every delivery slot is held by the receiver.
    let body = |text: &str| Surface::Chat.body(text, Some(&session), false);
    for text in ["second", "third"] {
        let reply = post_json(
            &format!("{}/v1/chat/completions", tether.url()),
            &body(text),
        );
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    store.wait_for_terminal("local", &session, 3);
    assert!(receiver.holding() > 0, "the receiver has not answered yet");
    assert!(
        receiver.received().is_empty(),
        "nothing was answered before the runs ended"
    );
    receiver.release();
    wait_until("three run.completed", Duration::from_secs(30), || {
        receiver
            .delivered(&session)
            .iter()
            .filter(|r| r.body["type"] == "run.completed")
            .count()
            == 3
    });
    assert!(receiver.received().iter().all(|r| r.verified));
}
