//! Two real `tether` processes on one PostgreSQL: a run driven by replica A is followed
//! live from replica B (every event once, in order, then `[DONE]`), cancelled through B,
//! and — when A is killed — closed as `interrupted` by B within the lease timeout, with
//! everything A committed still replayable from B.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use session_log::{Event, RunStatus};

use crate::harness::*;

/// Short leases so the kill test is quick: heartbeats every second.
const LEASE: &[&str] = &["--run-lease-seconds", "3"];

fn subscribe_url(tether: &Tether, session: &str, invocation: &str) -> String {
    format!(
        "{}/agentengine/api/v1/SubscribeRunEvents?SessionId={session}&InvocationId={invocation}",
        tether.url()
    )
}

/// The events of a subscription up to `[DONE]` (exclusive), and whether `[DONE]` came.
fn read_to_done(sse: SseStream) -> (Vec<Value>, bool) {
    let mut events = Vec::new();
    for frame in sse.collect() {
        if frame.data == "[DONE]" {
            return (events, true);
        }
        let v = frame.json();
        assert_eq!(
            frame.id.as_deref().and_then(|i| i.parse::<i64>().ok()),
            v["SeqId"].as_i64(),
            "the SSE id is the seq"
        );
        events.push(v);
    }
    (events, false)
}

fn invocation_events(events: &[Event], invocation: &str) -> Vec<i64> {
    events
        .iter()
        .filter(|e| e.invocation_id.as_deref() == Some(invocation))
        .map(|e| e.seq)
        .collect()
}

fn two_replicas(agent: &FakeAgent, url: &str) -> (Tether, Tether) {
    let a = Tether::start(&agent.url(), "openai-chat", url, LEASE);
    let b = Tether::start(&agent.url(), "openai-chat", url, LEASE);
    (a, b)
}

#[test]
fn a_run_on_one_replica_is_followed_live_from_another() {
    let Some(url) = postgres_url() else { return };
    let store = TestStore::new(StoreKind::Postgres).unwrap();
    let agent = FakeAgent::start();
    let (a, b) = two_replicas(&agent, &url);

    let mut original = SseStream::post(
        &format!("{}/v1/chat/completions", a.url()),
        &Surface::Chat.body("slow:25:60", None, true),
    );
    let session = original.session_id.clone().unwrap();
    let invocation = original.invocation_id.clone().unwrap();
    for _ in 0..3 {
        original.next_event().unwrap();
    }
    // Mid-stream, from the other replica: what is committed is replayed, the rest
    // arrives through B's listener as A commits it.
    let started = Instant::now();
    let (seen, done) = read_to_done(SseStream::get(
        &subscribe_url(&b, &session, &invocation),
        &[],
    ));
    assert!(done, "B's stream ends with [DONE]");
    assert!(
        started.elapsed() > Duration::from_millis(500),
        "B followed the run live rather than finding it finished"
    );
    let seqs: Vec<i64> = seen.iter().map(|e| e["SeqId"].as_i64().unwrap()).collect();
    let logged = store.wait_for_terminal("local", &session, 1);
    assert_eq!(
        seqs,
        invocation_events(&logged, &invocation),
        "every event of the invocation exactly once, in order"
    );
    assert_eq!(seen.last().unwrap()["EventType"], "run_status");
    assert_eq!(seen.last().unwrap()["Content"]["status"], "completed");
    let text: String = seen
        .iter()
        .filter(|e| e["EventType"] == "text_delta")
        .map(|e| e["Content"]["delta"].as_str().unwrap().to_owned())
        .collect();
    let expected: String = (1..=25).map(|i| format!("w{i} ")).collect();
    assert_eq!(text, expected);
    drop(original);

    // One active run per session across replicas: while a run of the session goes on
    // at A, a new turn in it at B is refused.
    let mut busy = SseStream::post(
        &format!("{}/v1/chat/completions", a.url()),
        &Surface::Chat.body("slow:20:100", Some(&session), true),
    );
    busy.next_event().unwrap();
    let second = post_json(
        &format!("{}/v1/chat/completions", b.url()),
        &Surface::Chat.body("hello", Some(&session), false),
    );
    assert_eq!(second.status, 409, "{}", second.body);
    assert_eq!(second.json()["error"]["code"], "conversation_busy");
}

#[test]
fn cancel_sent_to_another_replica_stops_the_run() {
    let Some(url) = postgres_url() else { return };
    let store = TestStore::new(StoreKind::Postgres).unwrap();
    let agent = FakeAgent::start();
    let (a, b) = two_replicas(&agent, &url);

    let mut original = SseStream::post(
        &format!("{}/v1/chat/completions", a.url()),
        &Surface::Chat.body("slow:100:50", None, true),
    );
    let session = original.session_id.clone().unwrap();
    let invocation = original.invocation_id.clone().unwrap();
    original.next_event().unwrap();

    let reply = post_json(
        &format!("{}/agentengine/api/v1/CancelRun", b.url()),
        &json!({ "InvocationId": invocation }),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    let data = &reply.json()["Data"];
    assert_eq!(data["RunnerCancelStatus"], "forwarded", "{data}");
    assert_eq!(data["Cancelled"], true);

    let started = Instant::now();
    let frames = original.collect();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "A stopped the run promptly"
    );
    assert!(
        frames.last().unwrap().json()["error"].is_object(),
        "A's client learns of the cancel"
    );
    assert_cancelled_early(&store, &session);
}

#[test]
fn a_killed_replica_s_run_is_closed_by_the_survivor_and_replayable() {
    let Some(url) = postgres_url() else { return };
    let store = TestStore::new(StoreKind::Postgres).unwrap();
    let agent = FakeAgent::start();
    let (mut a, b) = two_replicas(&agent, &url);

    let (_original, session, invocation) = slow_chat_run(&a, 4);
    // A follower on B, before the kill.
    let follower = SseStream::get(&subscribe_url(&b, &session, &invocation), &[]);
    assert!(a.signal("KILL", Duration::from_secs(5)));
    let killed_at = Instant::now();
    let committed = store.events("local", &session);
    assert!(
        committed.iter().all(|e| !e.is_terminal()),
        "nobody closed the run yet"
    );

    let events = store.wait_for_terminal("local", &session, 1);
    let took = killed_at.elapsed();
    // Lease 3 s, checked every second, plus a commit; generous for a loaded machine, and
    // still far below anything but a live replica noticing the lost lease.
    assert!(
        took < Duration::from_secs(15),
        "closed {took:?} after the kill"
    );
    assert_eq!(
        events.last().unwrap().run_status(),
        Some(RunStatus::Interrupted)
    );
    // Closed by B's sweep, or by any other replica of the shared test database starting
    // up meanwhile (which closes expired leases too): either way, not by A.
    let reason = events.last().unwrap().content["reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        ["run_owner_lost", "gateway_restarted"].contains(&reason.as_str()),
        "{reason}"
    );
    assert_eq!(
        &events[..committed.len()],
        &committed[..],
        "what A committed is kept"
    );
    assert_eq!(events.iter().filter(|e| e.is_terminal()).count(), 1);

    // The follower on B ends with [DONE]; a new subscriber on B replays everything.
    let (followed, done) = read_to_done(follower);
    assert!(done);
    let (replayed, done) = read_to_done(SseStream::get(
        &subscribe_url(&b, &session, &invocation),
        &[],
    ));
    assert!(done);
    let expected = invocation_events(&events, &invocation);
    for seen in [followed, replayed] {
        let seqs: Vec<i64> = seen.iter().map(|e| e["SeqId"].as_i64().unwrap()).collect();
        assert_eq!(seqs, expected);
    }
}
