//! A TCP proxy between Tether and PostgreSQL that adds latency beyond the commit budget,
//! freezes (holds every byte, half-open: no reset) and resets connections. A run the
//! client was served whole while its commits went to the outage journal must stay
//! readable by every read path — `GET /v1/responses/{id}`, `previous_response_id`,
//! `SubscribeRunEvents`, `ListSessionEvents` — during the fault and after it, and no read
//! may hang. A streamed run rendered again from the log equals, frame for frame, what its
//! client was shown live, whatever the commits took.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::harness::*;

/// What the proxy does to the bytes PostgreSQL sends back.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Pass,
    /// Each chunk from PostgreSQL waits this long.
    Latency(Duration),
    /// Nothing is forwarded either way; connections stay open (no FIN, no RST).
    Freeze,
}

struct PgProxy {
    port: u16,
    mode: Arc<Mutex<Mode>>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
}

impl PgProxy {
    fn start(target: SocketAddr) -> PgProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let mode = Arc::new(Mutex::new(Mode::Pass));
        let conns: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (m, c) = (mode.clone(), conns.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(target) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                if let Ok(mut all) = c.lock() {
                    all.extend([client.try_clone().unwrap(), server.try_clone().unwrap()]);
                }
                pump(
                    client.try_clone().unwrap(),
                    server.try_clone().unwrap(),
                    m.clone(),
                    false,
                );
                pump(server, client, m.clone(), true);
            }
        });
        PgProxy { port, mode, conns }
    }

    fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    /// Resets every connection (RST: linger 0), as a crashed middlebox would.
    fn reset(&self) {
        for conn in self.conns.lock().unwrap().drain(..) {
            let _ = socket2::SockRef::from(&conn).set_linger(Some(Duration::ZERO));
            let _ = conn.shutdown(Shutdown::Both);
        }
    }
}

/// Copies `from` to `to` as the proxy's mode says, until either side closes.
fn pump(mut from: TcpStream, mut to: TcpStream, mode: Arc<Mutex<Mode>>, delayed: bool) {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            loop {
                let now = *mode.lock().unwrap();
                match now {
                    Mode::Freeze => std::thread::sleep(Duration::from_millis(20)),
                    Mode::Latency(d) if delayed => {
                        std::thread::sleep(d);
                        break;
                    }
                    _ => break,
                }
            }
            if to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    });
}

/// The URL with its host and port replaced by the proxy's.
fn through(url: &str, port: u16) -> (String, SocketAddr) {
    let (scheme, rest) = url.split_once("://").unwrap();
    let (authority, tail) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let (user, host_port) = match authority.rsplit_once('@') {
        Some((u, h)) => (format!("{u}@"), h),
        None => (String::new(), authority),
    };
    let host_port = if host_port.contains(':') {
        host_port.to_owned()
    } else {
        format!("{host_port}:5432")
    };
    let target = host_port.to_socket_addrs().unwrap().next().unwrap();
    (format!("{scheme}://{user}127.0.0.1:{port}{tail}"), target)
}

/// Reads must answer within this, whatever PostgreSQL does: no read hangs. In the slow
/// phase every PostgreSQL round trip costs 2.5 s; a turn after `previous_response_id`
/// reads the run, the session's row once (its deleted and archived marks and its fork
/// point together), its checkpoints and later runs, then claims it and reads its history:
/// 7.6 s measured. While PostgreSQL is frozen, a read that the journal does not answer
/// waits out the 10 s read cap before the journal answers instead, and that turn now waits
/// out one: 10.1 s measured (30.0 s when it read the session three times, deleted mark,
/// archived mark and fork point apart). Two caps would fail this bound.
const BOUND: Duration = Duration::from_secs(20);

fn timed<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let out = f();
    let took = started.elapsed();
    eprintln!("slow postgres: {what} answered in {took:?}");
    assert!(took < BOUND, "{what} took {took:?}");
    out
}

/// Every read path answers for the run `response` (a non-streamed Responses answer).
fn reads_see(tether: &Tether, phase: &str, response: &Value) {
    let url = tether.url();
    let id = response["id"].as_str().unwrap();
    let session = response["conversation"]["id"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_default();
    let got = timed(&format!("{phase}: GET /v1/responses/{{id}}"), || {
        get(&format!("{url}/v1/responses/{id}"), &[])
    });
    assert_eq!(got.status, 200, "{phase}: {}", got.body);
    assert_eq!(got.json()["id"], id);
    assert_eq!(Surface::Responses.text(&got.json()), "OK.", "{phase}");
    assert_eq!(got.json()["created_at"], response["created_at"], "{phase}");

    assert!(
        !session.is_empty(),
        "{phase}: the response names its session"
    );
    let listed = timed(&format!("{phase}: ListSessionEvents"), || {
        Api::of(tether).call("ListSessionEvents", json!({ "SessionId": session }))
    });
    assert_eq!(listed.0, 200, "{phase}: {}", listed.1);
    let invocation = listed.1["Data"]["Events"]
        .as_array()
        .unwrap()
        .iter()
        // The session's first run is the one served (the run above came after it).
        .find_map(|e| e["InvocationId"].as_str())
        .map(str::to_owned);
    let Some(invocation) = invocation else {
        panic!("{phase}: ListSessionEvents shows the run: {}", listed.1)
    };
    let sub = timed(&format!("{phase}: SubscribeRunEvents"), || {
        SseStream::get(
            &format!(
                "{url}/agentengine/api/v1/SubscribeRunEvents?SessionId={session}&InvocationId={invocation}"
            ),
            &[],
        )
        .collect()
    });
    assert_eq!(
        sub.last().map(|e| e.data.as_str()),
        Some("[DONE]"),
        "{phase}: the whole run: {sub:?}"
    );

    let next = timed(&format!("{phase}: previous_response_id"), || {
        post_json(
            &format!("{url}/v1/responses"),
            &json!({ "model": "fake", "input": "Reply with OK", "previous_response_id": id }),
        )
    });
    assert_eq!(next.status, 200, "{phase}: {}", next.body);
}

/// A streamed run rendered again from the log equals the stream its client was shown,
/// frame for frame: ids, `created_at`, sequence numbers, everything.
fn replay_equals_live(tether: &Tether, phase: &str) {
    let url = tether.url();
    let live = timed(&format!("{phase}: a streamed run"), || {
        SseStream::post(
            &format!("{url}/v1/responses"),
            &Surface::Responses.body("slow:5:10", None, true),
        )
        .collect()
    });
    let id = live
        .first()
        .map(|e| {
            e.json()["response"]["id"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .unwrap_or_default();
    assert!(id.starts_with("resp_"), "{phase}: {live:?}");
    let again = timed(&format!("{phase}: the same run streamed again"), || {
        SseStream::get(&format!("{url}/v1/responses/{id}?stream=true"), &[]).collect()
    });
    let frames = |events: &[SseEvent]| -> Vec<(Option<String>, Option<String>, Value)> {
        events
            .iter()
            .map(|e| (e.id.clone(), e.event.clone(), e.json()))
            .collect()
    };
    let (again, live) = (frames(&again), frames(&live));
    assert_eq!(again.len(), live.len(), "{phase}: frames rendered again");
    for (again, live) in again.iter().zip(&live) {
        assert_eq!(again, live, "{phase}: a frame rendered again");
    }
}

fn serve_one(tether: &Tether, phase: &str) -> Value {
    let reply = timed(&format!("{phase}: a run"), || {
        post_json(
            &format!("{}/v1/responses", tether.url()),
            &Surface::Responses.body("Reply with OK", None, false),
        )
    });
    assert_eq!(reply.status, 200, "{phase}: {}", reply.body);
    let body = reply.json();
    assert_eq!(Surface::Responses.text(&body), "OK.");
    let mut body = body;
    if body["conversation"].is_null() {
        if let Some(s) = reply.session_id {
            body["conversation"] = json!({ "id": s });
        }
    }
    body
}

#[test]
fn every_read_path_sees_the_journal_while_postgres_is_slow_frozen_or_reset() {
    let Some(pg) = postgres_url() else {
        return;
    };
    let proxy = PgProxy::start(through(&pg, 1).1);
    let (url, _) = through(&pg, proxy.port);
    let agent = FakeAgent::start();
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal.sqlite").display().to_string();
    let tether = Tether::start(
        &agent.url(),
        "openai-chat",
        &url,
        // One replica: a turn in an existing session (previous_response_id) may start
        // while PostgreSQL cannot take its claim (without this it is refused with 503).
        &["--journal-path", &journal, "--journal-local-claims", "true"],
    );
    let healthy = serve_one(&tether, "healthy");
    replay_equals_live(&tether, "healthy");
    reads_see(&tether, "healthy", &healthy);

    // Slower than the commit budget (2 s): commits go to the journal.
    // Slow, within the commit budget: the start's commit itself takes a second or more.
    proxy.set(Mode::Latency(Duration::from_millis(600)));
    replay_equals_live(&tether, "sluggish");

    proxy.set(Mode::Latency(Duration::from_millis(2500)));
    // First, so that its start is the commit that waits out the budget.
    replay_equals_live(&tether, "slow");
    let slow = serve_one(&tether, "slow");
    reads_see(&tether, "slow", &slow);

    proxy.set(Mode::Freeze);
    let frozen = serve_one(&tether, "frozen");
    replay_equals_live(&tether, "frozen");
    reads_see(&tether, "frozen", &frozen);

    proxy.reset();
    proxy.set(Mode::Pass);
    proxy.reset();
    let after_reset = serve_one(&tether, "reset");
    replay_equals_live(&tether, "reset");
    reads_see(&tether, "reset", &after_reset);

    // After: the journal is backfilled and every run reads the same.
    for (phase, run) in [
        ("slow", &slow),
        ("frozen", &frozen),
        ("reset", &after_reset),
    ] {
        reads_see(&tether, &format!("after ({phase})"), run);
    }
}
