//! bench-session-search: what finding sessions costs at 100,000 sessions in one account,
//! against the real stores (SQLite, and PostgreSQL when `TEST_DATABASE_URL` is set): the
//! default listing's first page (the baseline), a deep page, each filter of
//! `ListSessions`, and the text search for a common and a rare word, each as p50/p99 over
//! repeated calls and with its p50's ratio to the baseline's.
//!
//! Each session is one turn as the gateway writes it (the user's message, the run's
//! start, the answer, the run's end), ADK metadata on one in two (1,000 users, 10
//! agents), a `session_metadata` on one in ten, a failed run on one in twenty; the
//! messages draw words from a 5,000-word vocabulary plus one word seen only once.
//! Another account holds 10,000 sessions with the same words, so that an index that does
//! not separate accounts would show. PostgreSQL is `ANALYZE`d after seeding, as
//! autovacuum would.
//!
//! `bench-session-search [sessions] [repeats]` (default 100,000 and 50).

use std::time::{Duration, Instant};

use chrono::Utc;
use serde_json::json;
use session_log::event::run_status_content;
use session_log::postgres::PgStore;
use session_log::sqlite::SqliteStore;
use session_log::{
    ArchivedFilter, Deletion, EventType, NewEvent, Removal, RunStatus, Scope, SessionFilter, Store,
    StoreError,
};

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let sessions: usize = args
        .next()
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(100_000);
    let repeats: usize = args.next().map(|n| n.parse()).transpose()?.unwrap_or(50);
    println!(
        "load: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("search.sqlite");
    let sqlite = SqliteStore::open(path.to_str().ok_or("non-UTF-8 temp path")?).await?;
    measure("sqlite", &sqlite, None, sessions, repeats).await?;
    sqlite.close().await;
    match std::env::var("TEST_DATABASE_URL") {
        Ok(url) => {
            let pg = PgStore::connect(&url).await?;
            measure("postgres", &pg, Some(pg.pool()), sessions, repeats).await?;
        }
        Err(_) => println!("TEST_DATABASE_URL not set: PostgreSQL not measured"),
    }
    Ok(())
}

/// A word of the vocabulary (deterministic).
fn word(n: usize) -> String {
    format!("w{}", n % 5000)
}

/// The events of session `i` of `account`.
fn turn(account: &str, i: usize) -> Vec<NewEvent> {
    let id = format!("s{i:07}");
    let (run, inv) = (format!("r{i}"), format!("{account}-i{i}"));
    // A cheap deterministic spread of words.
    let pick = |k: usize| word(i.wrapping_mul(2_654_435_761).wrapping_add(k * 7919) >> 7);
    let question: Vec<String> = (0..12).map(pick).collect();
    let mut user = NewEvent::new(
        account,
        &id,
        EventType::Message,
        json!({ "text": format!("{} unique{i}", question.join(" ")) }),
    )
    .with_role("user");
    if i.is_multiple_of(2) {
        user = user.with_metadata(json!({ "adk": {
            "user_id": format!("u{}", i % 1000), "app_name": format!("agent{}", i % 10),
            "author": "user" } }));
    }
    let end = if i.is_multiple_of(20) {
        RunStatus::Failed
    } else {
        RunStatus::Completed
    };
    let mut events = Vec::new();
    if i.is_multiple_of(10) {
        events.push(NewEvent::new(
            account,
            &id,
            EventType::SessionMetadata,
            json!({ "metadata": { "topic": format!("t{}", i % 100) } }),
        ));
    }
    events.push(user);
    events.push(
        NewEvent::new(
            account,
            &id,
            EventType::RunStatus,
            run_status_content(RunStatus::InProgress, None),
        )
        .in_run(&run, &inv),
    );
    let answer: Vec<String> = (12..40).map(pick).collect();
    events.push(
        NewEvent::new(
            account,
            &id,
            EventType::Message,
            json!({ "text": answer.join(" ") }),
        )
        .with_role("assistant")
        .in_run(&run, &inv),
    );
    events.push(
        NewEvent::new(
            account,
            &id,
            EventType::RunStatus,
            run_status_content(end, None),
        )
        .in_run(&run, &inv),
    );
    events
}

async fn seed(store: &dyn Store, account: &str, n: usize) -> Result<Duration, StoreError> {
    let start = Instant::now();
    let mut batch = Vec::new();
    for i in 0..n {
        batch.extend(turn(account, i));
        if batch.len() >= 2000 {
            store.append(&batch).await?;
            batch.clear();
        }
    }
    if !batch.is_empty() {
        store.append(&batch).await?;
    }
    Ok(start.elapsed())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// Removes the account's data (the run's own accounts, so a shared database is left as
/// it was).
async fn remove(store: &dyn Store, account: &str) -> Result<(), Box<dyn std::error::Error>> {
    let removal = Removal {
        deletion_id: format!("del-{}", uuid::Uuid::new_v4().simple()),
        account_id: account.to_owned(),
        scope: Scope::Account,
        by: "bench".to_owned(),
    };
    match store.remove(&removal).await? {
        Deletion::Removed(_) | Deletion::NotFound => Ok(()),
        other => Err(format!("removing {account}: {other:?}").into()),
    }
}

async fn measure(
    name: &str,
    store: &dyn Store,
    pg: Option<&sqlx::PgPool>,
    sessions: usize,
    repeats: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let run = uuid::Uuid::new_v4().simple().to_string();
    let (account, neighbour) = (
        format!("bench-search-{run}"),
        format!("bench-neighbour-{run}"),
    );
    let seeded = seed(store, &account, sessions).await?;
    seed(store, &neighbour, sessions / 10).await?;
    println!(
        "\n{name}: {sessions} sessions in one account seeded in {:.1} s",
        seeded.as_secs_f64()
    );
    if let Some(pool) = pg {
        sqlx::query("ANALYZE sessions, events, message_text")
            .execute(pool)
            .await?;
    }
    let all = SessionFilter::default();
    let at = |f: SessionFilter| f;
    let hour_ago = Utc::now() - chrono::Duration::hours(1);
    let cases: Vec<(&str, SessionFilter, i64)> = vec![
        ("default listing, page 1 (baseline)", all.clone(), 0),
        ("default listing, page 1,000", all.clone(), 20_000),
        (
            "user id",
            at(SessionFilter {
                user_id: Some("u8".into()),
                ..all.clone()
            }),
            0,
        ),
        (
            "agent",
            at(SessionFilter {
                agent_id: Some("agent4".into()),
                ..all.clone()
            }),
            0,
        ),
        (
            "last run failed",
            at(SessionFilter {
                last_run_status: Some(RunStatus::Failed),
                ..all.clone()
            }),
            0,
        ),
        (
            "metadata topic=t40",
            at(SessionFilter {
                metadata: vec![("topic".into(), "t40".into())],
                ..all.clone()
            }),
            0,
        ),
        (
            "created in the last hour",
            at(SessionFilter {
                created_after: Some(hour_ago),
                ..all.clone()
            }),
            0,
        ),
        (
            "archived only",
            at(SessionFilter {
                archived: ArchivedFilter::Only,
                ..all.clone()
            }),
            0,
        ),
        (
            "text: a common word",
            at(SessionFilter {
                text: Some("w42".into()),
                ..all.clone()
            }),
            0,
        ),
        (
            "text: two common words",
            at(SessionFilter {
                text: Some("w42 w43".into()),
                ..all.clone()
            }),
            0,
        ),
        (
            "text: a rare word",
            at(SessionFilter {
                text: Some(format!("unique{}", sessions / 2)),
                ..all.clone()
            }),
            0,
        ),
        (
            "text + user id",
            at(SessionFilter {
                text: Some("w42".into()),
                user_id: Some("u8".into()),
                ..all.clone()
            }),
            0,
        ),
    ];
    println!(
        "{:<38} {:>9} {:>10} {:>10} {:>8}",
        "listing (20 per page, with the total)", "matches", "p50 ms", "p99 ms", "x base"
    );
    let mut base = None;
    for (label, filter, offset) in cases {
        let mut times = Vec::with_capacity(repeats);
        let mut total = 0;
        for _ in 0..repeats {
            let start = Instant::now();
            let (_, t) = store.list_sessions(&account, &filter, offset, 20).await?;
            times.push(start.elapsed());
            total = t;
        }
        times.sort();
        let (p50, p99) = (percentile(&times, 0.5), percentile(&times, 0.99));
        let base = *base.get_or_insert(p50);
        println!(
            "{label:<38} {total:>9} {:>10.2} {:>10.2} {:>8.1}",
            p50.as_secs_f64() * 1e3,
            p99.as_secs_f64() * 1e3,
            p50.as_secs_f64() / base.as_secs_f64()
        );
    }
    let start = Instant::now();
    remove(store, &account).await?;
    remove(store, &neighbour).await?;
    println!(
        "(removed both accounts in {:.1} s)",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
