//! Cursors survive an upgrade (issue 44): the previous release's binary, built from the
//! project's own history, serves a Chat and a Responses stream that its clients leave
//! midway; the new binary, started on the same store, resumes each exactly once from the
//! id the client last got from the old one (a log seq, repeated across an event's frames),
//! on the stream's own surface (`Last-Event-ID`) and on `SubscribeRunEvents` (by header
//! and as `AfterSeqId`); Responses' `starting_after` takes the old `sequence_number`.
//!
//! The previous release is [`PREVIOUS`], the commit before the stream ids changed. Its
//! binary is `TETHER_PREVIOUS_BINARY` when set; otherwise it is built once, with its own
//! `Cargo.lock`, from `git archive` of that commit into a cache outside the clone
//! (`TETHER_UPGRADE_CACHE`, by default `~/.cache/tether-upgrade`), and reused while the
//! stamp there names the commit. Outside CI, a missing binary is built only with
//! `TETHER_UPGRADE_BUILD=1` (it takes minutes); otherwise the test says so and passes
//! without running. In CI (`CI` set) it is built.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::harness::*;

/// The last commit whose Chat and Responses stream ids were log seqs.
const PREVIOUS: &str = "a55fc268ae959b4f041557c618f8cafc8df8a159";

const SLOW: &str = "slow:12:60";

fn expected_text() -> String {
    (1..=12).map(|i| format!("w{i} ")).collect()
}

/// The previous release's `tether`, built if it must be (module doc); `None` to skip.
fn previous_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("TETHER_PREVIOUS_BINARY") {
        return Some(PathBuf::from(path));
    }
    let cache = std::env::var_os("TETHER_UPGRADE_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/tether-upgrade")))
        .expect("HOME or TETHER_UPGRADE_CACHE");
    let target = cache.join("target");
    let binary = target.join("debug/tether");
    let stamp = cache.join("built-from");
    if binary.exists() && std::fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == PREVIOUS) {
        return Some(binary);
    }
    let build = std::env::var_os("CI").is_some()
        || std::env::var("TETHER_UPGRADE_BUILD").is_ok_and(|v| v == "1");
    if !build {
        eprintln!(
            "the previous release's binary is not built: set TETHER_UPGRADE_BUILD=1 (or \
             TETHER_PREVIOUS_BINARY) to run the upgrade test"
        );
        return None;
    }
    let src = cache.join(format!("src-{}", &PREVIOUS[..7]));
    if !src.join("Cargo.lock").exists() {
        std::fs::create_dir_all(&src).unwrap();
        let mut archive = Command::new("git")
            .args(["archive", "--format=tar", PREVIOUS])
            .current_dir(repo_root())
            .stdout(Stdio::piped())
            .spawn()
            .expect("run git archive");
        let tar = archive.stdout.take().expect("git archive's output");
        let status = Command::new("tar")
            .args(["-x", "-C"])
            .arg(&src)
            .stdin(tar)
            .status()
            .expect("run tar");
        let archived = archive.wait().expect("git archive's end");
        assert!(
            archived.success() && status.success() && src.join("Cargo.lock").exists(),
            "cannot unpack commit {PREVIOUS} (a shallow clone lacks it: fetch the history)"
        );
    }
    let started = std::time::Instant::now();
    let status = Command::new(env!("CARGO"))
        .args(["build", "--locked", "-p", "tether", "--bin", "tether"])
        .current_dir(&src)
        .env("CARGO_TARGET_DIR", &target)
        .status()
        .expect("run cargo build");
    assert!(
        status.success(),
        "cannot build the previous release ({PREVIOUS})"
    );
    eprintln!(
        "built the previous release in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    std::fs::write(&stamp, PREVIOUS).unwrap();
    Some(binary)
}

/// The previous release serving on `port`, on `store`, in front of `upstream`.
fn start_previous(binary: &Path, port: u16, upstream: &str, store: &str) -> Child {
    let mut child = Command::new(binary)
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args([
            "--upstream",
            upstream,
            "--protocol",
            "openai-chat",
            "--store",
            store,
        ])
        .env("TETHER_SHUTDOWN_GRACE_SECONDS", "1")
        .env_remove("TETHER_CONF")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the previous release");
    let url = format!("http://127.0.0.1:{port}/healthz");
    wait_until(
        "the previous release to answer",
        Duration::from_secs(30),
        || {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("the previous release exited with {status}");
            }
            ureq::get(&url).call().is_ok()
        },
    );
    child
}

/// A slow run on `surface` read for 3 deltas, then left: (the text so far, the last id,
/// the last `sequence_number` on Responses, the response id, session, invocation).
struct Left {
    before: String,
    last_id: String,
    last_sequence_number: Option<i64>,
    response_id: String,
    session: String,
    invocation: String,
}

fn leave_midway(base: &str, surface: Surface) -> Left {
    let mut sse = SseStream::post(
        &format!("{base}{}", surface.path()),
        &surface.body(SLOW, None, true),
    );
    assert_eq!(sse.status, 200);
    let (mut before, mut deltas, mut last) = (String::new(), 0, None);
    let mut response_id = None;
    while deltas < 3 {
        let frame = sse.next_event().expect("the stream ended early");
        let v = frame.json();
        response_id = response_id.or_else(|| match surface {
            Surface::Chat => v["id"].as_str().map(str::to_owned),
            Surface::Responses => v["response"]["id"].as_str().map(str::to_owned),
        });
        let delta = surface.delta(&frame);
        if !delta.is_empty() {
            deltas += 1;
            before.push_str(&delta);
        }
        last = Some(frame);
    }
    let last = last.unwrap();
    let last_id = last.id.clone().expect("an id");
    assert!(
        last_id.parse::<i64>().is_ok(),
        "the previous release's ids are bare seqs: {last_id}"
    );
    Left {
        before,
        last_id,
        last_sequence_number: last.json()["sequence_number"].as_i64(),
        response_id: response_id.expect("a frame names the response"),
        session: sse.session_id.clone().unwrap(),
        invocation: sse.invocation_id.clone().unwrap(),
    }
}

/// The text deltas of a `SubscribeRunEvents` stream.
fn subscribed_text(frames: &[SseEvent]) -> String {
    frames
        .iter()
        .filter(|f| f.data != "[DONE]")
        .map(SseEvent::json)
        .filter(|v| v["EventType"] == "text_delta")
        .map(|v| v["Content"]["delta"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_stream_cut_by_an_upgrade_resumes_exactly_once_on_the_new_release() {
    let Some(binary) = previous_binary() else {
        return;
    };
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let agent = FakeAgent::start();
    let port = free_port();
    let mut old = start_previous(&binary, port, &agent.url(), &store.url);
    let old_url = format!("http://127.0.0.1:{port}");
    let left: Vec<(Surface, Left)> = [Surface::Chat, Surface::Responses]
        .into_iter()
        .map(|s| (s, leave_midway(&old_url, s)))
        .collect();
    for (_, l) in &left {
        store.wait_for_terminal("local", &l.session, 1);
    }
    // The upgrade: the old release stops, the new one starts on its store.
    Command::new("kill")
        .args(["-TERM", &old.id().to_string()])
        .status()
        .unwrap();
    old.wait().unwrap();
    let tether = Tether::start(&agent.url(), "openai-chat", &store.url, &[]);

    for (surface, l) in &left {
        let stream_url = format!(
            "{}{}/{}?stream=true",
            tether.url(),
            surface.path(),
            l.response_id
        );
        let resumed = SseStream::get(&stream_url, &[("last-event-id", &l.last_id)]).collect();
        let after: String = resumed.iter().map(|f| surface.delta(f)).collect();
        assert_eq!(
            format!("{}{after}", l.before),
            expected_text(),
            "{surface:?}: the old id as Last-Event-ID on the new release"
        );
        if let Some(n) = l.last_sequence_number {
            let resumed =
                SseStream::get(&format!("{stream_url}&starting_after={n}"), &[]).collect();
            let after: String = resumed.iter().map(|f| surface.delta(f)).collect();
            assert_eq!(
                format!("{}{after}", l.before),
                expected_text(),
                "starting_after"
            );
        }
        let subscribe = format!(
            "{}/agentengine/api/v1/SubscribeRunEvents?SessionId={}&InvocationId={}",
            tether.url(),
            l.session,
            l.invocation
        );
        let by_header = SseStream::get(&subscribe, &[("last-event-id", &l.last_id)]).collect();
        let by_param =
            SseStream::get(&format!("{subscribe}&AfterSeqId={}", l.last_id), &[]).collect();
        for (how, frames) in [("Last-Event-ID", by_header), ("AfterSeqId", by_param)] {
            assert_eq!(
                format!("{}{}", l.before, subscribed_text(&frames)),
                expected_text(),
                "{surface:?}: the old id on SubscribeRunEvents by {how}"
            );
        }
    }
}
