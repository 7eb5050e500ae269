//! bench-history: what session history costs, against the real stores (SQLite, and
//! PostgreSQL when `TEST_DATABASE_URL` is set), each row with its ratio to a baseline
//! measured in the same run:
//!
//! - a fork of a 10,000-event session against a fork of a 1,000-event one (at the latest
//!   checkpoint, and by checkpoint id): nothing is copied, so it must not grow with the log;
//! - the projection of a 10,000-event session (its history read and turned into the
//!   model's items, as a turn does) with a compaction checkpoint covering all but its last
//!   two turns, against the same session without one.
//!
//! Sessions are turns of 30 events, as streaming makes them: the user's message, the run's
//! start, 25 deltas, the answer, a checkpoint and the run's end.
//!
//! `bench-history [repeats]` (default 50 forks and 20 projections per row).

use std::time::{Duration, Instant};

use serde_json::json;
use session_log::event::run_status_content;
use session_log::history::{fork, ContextCheckpoint};
use session_log::{EventType, Lineage, NewEvent, RunStatus, Store};

/// The gateway's allocator: the store runs under it.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const EVENTS_PER_TURN: usize = 30;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let repeats: usize = std::env::args()
        .nth(1)
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(50);
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("history.sqlite");
    let sqlite = session_log::open(path.to_str().ok_or("non-UTF-8 temp path")?).await?;
    measure("sqlite", &*sqlite, repeats).await?;
    match std::env::var("TEST_DATABASE_URL") {
        Ok(url) => measure("postgres", &*session_log::open(&url).await?, repeats).await?,
        Err(_) => println!("TEST_DATABASE_URL not set: PostgreSQL not measured"),
    }
    Ok(())
}

/// Appends `turns` turns to a new session; returns its id and its checkpoints' ids.
async fn session(
    store: &dyn Store,
    account: &str,
    turns: usize,
) -> Result<(String, Vec<String>), session_log::StoreError> {
    let id = format!("s-{}", uuid::Uuid::new_v4().simple());
    let mut checkpoints = Vec::new();
    let mut batch = Vec::new();
    for t in 0..turns {
        let (run, inv) = (format!("run-{t}"), format!("inv-{t}-{id}"));
        let event = |kind, content| NewEvent::new(account, &id, kind, content).in_run(&run, &inv);
        batch.push(
            event(
                EventType::Message,
                json!({ "text": format!("question {t}: {}", "q".repeat(60)) }),
            )
            .with_role("user"),
        );
        batch.push(event(
            EventType::RunStatus,
            run_status_content(RunStatus::InProgress, None),
        ));
        for d in 0..EVENTS_PER_TURN - 5 {
            batch.push(event(
                EventType::TextDelta,
                json!({ "delta": format!("word{d} ") }),
            ));
        }
        batch.push(
            event(
                EventType::Message,
                json!({ "text": format!("answer {t}: {}", "a".repeat(150)) }),
            )
            .with_role("assistant"),
        );
        let checkpoint = format!("ckpt-{t}-{id}");
        batch.push(event(
            EventType::RunCheckpoint,
            json!({ "checkpoint_id": checkpoint, "phase": "turn_completed" }),
        ));
        checkpoints.push(checkpoint);
        batch.push(event(
            EventType::RunStatus,
            run_status_content(RunStatus::Completed, None),
        ));
        if batch.len() >= 1000 {
            store.append(&std::mem::take(&mut batch)).await?;
        }
    }
    store.append(&batch).await?;
    Ok((id, checkpoints))
}

/// The median of `repeats` timings of `f`.
async fn median<F, Fut>(repeats: usize, mut f: F) -> Result<Duration, session_log::StoreError>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = Result<(), session_log::StoreError>>,
{
    let mut times = Vec::with_capacity(repeats);
    for i in 0..repeats {
        let started = Instant::now();
        f(i).await?;
        times.push(started.elapsed());
    }
    times.sort();
    Ok(times[times.len() / 2])
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn measure(
    backend: &str,
    store: &dyn Store,
    repeats: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let account = format!("bench-{}", uuid::Uuid::new_v4().simple());
    let small = session(store, &account, 1_000 / EVENTS_PER_TURN).await?;
    let large = session(store, &account, 10_000 / EVENTS_PER_TURN).await?;

    // Forks: each into a new session, so the creation is measured each time.
    let fork_of = |(session, checkpoints): &(String, Vec<String>), by_id: bool| {
        let (session, checkpoint) = (session.clone(), checkpoints[checkpoints.len() / 2].clone());
        let account = account.clone();
        move |i: usize| {
            let (session, checkpoint, account) =
                (session.clone(), checkpoint.clone(), account.clone());
            async move {
                let new = format!("fork-{i}-{}", uuid::Uuid::new_v4().simple());
                let id = by_id.then_some(checkpoint.as_str());
                fork(store, &account, &session, id, &new)
                    .await
                    .map(drop)
                    .map_err(|e| session_log::StoreError::Corrupt(e.to_string()))
            }
        }
    };
    for (what, by_id) in [
        ("the latest checkpoint", false),
        ("a checkpoint by id", true),
    ] {
        let base = median(repeats, fork_of(&small, by_id)).await?;
        let big = median(repeats, fork_of(&large, by_id)).await?;
        println!(
            "{backend:<8} fork at {what:<21}   1,000-event session: {:>7.3} ms",
            ms(base)
        );
        println!(
            "{backend:<8} fork at {what:<21}  10,000-event session: {:>7.3} ms ({:.2}x the 1,000-event one)",
            ms(big),
            ms(big) / ms(base)
        );
    }

    // Projections of the large session, then of a copy with a compaction checkpoint.
    let project = |session: String| {
        let account = account.clone();
        move |_| {
            let (session, account) = (session.clone(), account.clone());
            async move {
                let lineage = Lineage::resolve(store, &account, &session)
                    .await?
                    .ok_or_else(|| session_log::StoreError::Corrupt("no session".into()))?;
                let history = lineage.history(store, None).await?;
                let items = runtime_adapter::project(&history);
                std::hint::black_box(items);
                Ok(())
            }
        }
    };
    let projections = repeats.div_ceil(2).max(5);
    let whole = median(projections, project(large.0.clone())).await?;
    let compacted = session(store, &account, 10_000 / EVENTS_PER_TURN).await?;
    let lineage = Lineage::resolve(store, &account, &compacted.0)
        .await?
        .ok_or("no session")?;
    let turns = 10_000 / EVENTS_PER_TURN;
    let checkpoint = ContextCheckpoint {
        summary: "s".repeat(2000),
        seq_start: 1,
        seq_end: lineage.own_position(((turns - 2) * EVENTS_PER_TURN) as i64),
    };
    store
        .append(&checkpoint.events(&account, &compacted.0, json!({ "reason": "bench" })))
        .await?;
    let short = median(projections, project(compacted.0.clone())).await?;
    println!(
        "{backend:<8} projection of a 10,000-event session:                    {:>7.3} ms",
        ms(whole)
    );
    println!(
        "{backend:<8} projection of a 10,000-event session, compacted to 2 turns: {:>7.3} ms ({:.2}x without)",
        ms(short),
        ms(short) / ms(whole)
    );
    Ok(())
}
