//! bench-sweep-under-load: the writer's latency while runs stream, without and then with
//! a retention sweep deleting a large backlog of idle sessions at the same time, against
//! the real stores (SQLite, and PostgreSQL when `TEST_DATABASE_URL` is set).
//!
//! Streaming: `streams` concurrent runs, each appending one text delta at a time through
//! the writer and waiting for its commit (as the gateway persists an event before it is
//! forwarded), 10 ms apart. Measured per phase: each append's latency as the run sees it
//! (p50/p99/max) and the writer's commit latency (p99, from its own histogram), and with
//! the sweep its removal rate. The ratio of the two phases' p99 is what the sweep costs a
//! live stream.
//!
//! `bench-sweep-under-load [backlog sessions] [seconds per phase] [streams]` (default
//! 5,000 sessions of 40 events, 10 s, 20 streams).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use session_log::event::run_status_content;
use session_log::postgres::PgStore;
use session_log::retention::{self, RetentionConfig};
use session_log::sqlite::SqliteStore;
use session_log::{EventType, Hub, NewEvent, RunStatus, Store, Writer, WriterConfig};

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let backlog: usize = args.next().map(|n| n.parse()).transpose()?.unwrap_or(5_000);
    let seconds: u64 = args.next().map(|n| n.parse()).transpose()?.unwrap_or(10);
    let streams: usize = args.next().map(|n| n.parse()).transpose()?.unwrap_or(20);
    println!(
        "load: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    let phase = Duration::from_secs(seconds);
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("sweep.sqlite");
    let sqlite: Arc<dyn Store> =
        Arc::new(SqliteStore::open(path.to_str().ok_or("non-UTF-8 temp path")?).await?);
    measure("sqlite", sqlite, backlog, phase, streams).await?;
    match std::env::var("TEST_DATABASE_URL") {
        Ok(url) => {
            let pg: Arc<dyn Store> = Arc::new(PgStore::connect(&url).await?);
            measure("postgres", pg, backlog, phase, streams).await?;
        }
        Err(_) => println!("TEST_DATABASE_URL not set: PostgreSQL not measured"),
    }
    Ok(())
}

/// A backlog of idle sessions, each a turn of 40 events, in `account`.
async fn seed(
    store: &dyn Store,
    account: &str,
    n: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut batch = Vec::new();
    for i in 0..n {
        let id = format!("idle{i:06}");
        let (run, inv) = (format!("r{i}"), format!("{account}-{i}"));
        let event = |kind, content| NewEvent::new(account, &id, kind, content).in_run(&run, &inv);
        batch.push(event(
            EventType::Message,
            json!({ "text": "an old question about nothing" }),
        ));
        batch.push(event(
            EventType::RunStatus,
            run_status_content(RunStatus::InProgress, None),
        ));
        for d in 0..36 {
            batch.push(event(
                EventType::TextDelta,
                json!({ "delta": format!("w{d} ") }),
            ));
        }
        batch.push(event(
            EventType::Message,
            json!({ "text": "an old answer" }),
        ));
        batch.push(event(
            EventType::RunStatus,
            run_status_content(RunStatus::Completed, None),
        ));
        if batch.len() >= 4000 {
            store.append(&batch).await?;
            batch.clear();
        }
    }
    store.append(&batch).await?;
    Ok(())
}

/// Streams for `phase`: every append's latency as its run saw it.
async fn stream(writer: &Writer, account: &str, phase: Duration, streams: usize) -> Vec<Duration> {
    let end = Instant::now() + phase;
    let mut tasks = Vec::new();
    for s in 0..streams {
        let writer = writer.clone();
        let session = format!("live-{s}-{}", uuid::Uuid::new_v4().simple());
        let account = account.to_owned();
        tasks.push(tokio::spawn(async move {
            let mut times = Vec::new();
            let (run, inv) = (format!("run-{s}"), format!("inv-{session}"));
            let mut n = 0;
            while Instant::now() < end {
                let delta = NewEvent::new(
                    &account,
                    &session,
                    EventType::TextDelta,
                    json!({ "delta": format!("w{n} ") }),
                )
                .in_run(&run, &inv);
                let start = Instant::now();
                if writer.append(vec![delta]).await.is_err() {
                    break;
                }
                times.push(start.elapsed());
                n += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            times
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap_or_default());
    }
    all.sort();
    all
}

fn at(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1e3
}

async fn measure(
    name: &str,
    store: Arc<dyn Store>,
    backlog: usize,
    phase: Duration,
    streams: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let run = uuid::Uuid::new_v4().simple().to_string();
    let (idle, live) = (format!("bench-idle-{run}"), format!("bench-live-{run}"));
    let seeded = Instant::now();
    seed(&*store, &idle, backlog).await?;
    println!(
        "\n{name}: backlog of {backlog} idle sessions ({} events) seeded in {:.1} s; {streams} streams, {} s per phase",
        backlog * 40,
        seeded.elapsed().as_secs_f64(),
        phase.as_secs()
    );
    let writer = Writer::spawn(store.clone(), Hub::new(), WriterConfig::default());
    // Idle for a second: the sweep below takes everything older than that.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let quiet = stream(&writer, &live, phase, streams).await;

    // Only the backlog's account is swept (a shared database's other sessions are kept).
    let config = RetentionConfig {
        max_idle: Duration::from_secs(100 * 365 * 86_400),
        accounts: [(idle.clone(), Duration::from_secs(1))].into(),
        interval: Duration::from_secs(3600),
        batch: 100,
        tombstones: retention::TOMBSTONES,
    };
    let sweeper = {
        let store = store.clone();
        tokio::spawn(async move {
            let start = Instant::now();
            let n = retention::sweep(
                &*store,
                "bench",
                &config,
                &|| format!("del-{}", uuid::Uuid::new_v4().simple()),
                &|_| {},
            )
            .await;
            (n, start.elapsed())
        })
    };
    let swept = stream(&writer, &live, phase, streams).await;
    let (removed, took) = sweeper.await?;
    let removed = removed?;
    println!(
        "{:<26} {:>8} {:>9} {:>9} {:>9}",
        "append latency (ms)", "appends", "p50", "p99", "max"
    );
    for (label, times) in [("streaming alone", &quiet), ("streaming + sweep", &swept)] {
        println!(
            "{label:<26} {:>8} {:>9.2} {:>9.2} {:>9.2}",
            times.len(),
            at(times, 0.5),
            at(times, 0.99),
            at(times, 1.0)
        );
    }
    println!(
        "p99 with the sweep / without: {:.2}x; the sweep removed {removed} sessions in {:.1} s ({:.0}/s{})",
        at(&swept, 0.99) / at(&quiet, 0.99),
        took.as_secs_f64(),
        removed as f64 / took.as_secs_f64(),
        if took > phase { ", still running when the phase ended" } else { "" },
    );
    let removal = session_log::Removal {
        deletion_id: format!("del-{}", uuid::Uuid::new_v4().simple()),
        account_id: live,
        scope: session_log::Scope::Account,
        by: "bench".to_owned(),
    };
    store.remove(&removal).await?;
    Ok(())
}
