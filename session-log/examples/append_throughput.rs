//! Measures `Store::append` throughput (events/s) for SQLite and, when
//! `TEST_DATABASE_URL` is set, PostgreSQL, at several batch sizes; each row also prints
//! its ratio to one-event batches measured in the same run. Text deltas (what a stream
//! writes), then whole messages of 40 words from a 5,000-word vocabulary (what a turn's
//! end writes, and what the text search indexes).
//!
//! It measures what Tether's writer does: `Store::append_seqs` on a batch it owns (no
//! copy), under the gateway's allocator.
//!
//! `cargo run --release -p session-log --example append_throughput [events-per-case]`

use std::time::Instant;

use serde_json::json;
use session_log::{EventType, NewEvent, Store};

/// The gateway's allocator (see `gateway/src/main.rs`): the writer runs under it.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// (batch size, sessions each batch spreads over). 20 over 20 is what the writer sees
/// from many concurrent streams: one delta of each in a commit.
const CASES: [(usize, usize); 6] = [(1, 1), (20, 20), (100, 1), (1000, 1), (1000, 16), (5000, 1)];
/// Message cases, (batch size, sessions), after the deltas'.
const MESSAGE_CASES: [(usize, usize); 2] = [(20, 20), (1000, 16)];

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let events: usize = std::env::args()
        .nth(1)
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(200_000);

    let dir = tempfile::tempdir()?;
    let path = dir.path().join("bench.sqlite");
    let sqlite = session_log::open(path.to_str().ok_or("non-UTF-8 temp path")?).await?;
    measure(&*sqlite, events).await?;

    match std::env::var("TEST_DATABASE_URL") {
        Ok(url) => measure(&*session_log::open(&url).await?, events).await?,
        Err(_) => println!("TEST_DATABASE_URL not set: PostgreSQL not measured"),
    }
    Ok(())
}

async fn measure(store: &dyn Store, events: usize) -> Result<(), session_log::StoreError> {
    let account = format!("bench-{}", uuid::Uuid::new_v4());
    let mut baseline = None;
    let cases = CASES
        .iter()
        .map(|&(b, s)| (b, s, EventType::TextDelta))
        .chain(
            MESSAGE_CASES
                .iter()
                .map(|&(b, s)| (b, s, EventType::Message)),
        );
    for (batch_size, sessions, kind) in cases {
        // One-event batches pay a transaction each; fewer of them keep the run short.
        let total = if batch_size == 1 { events / 20 } else { events };
        let batches = total.div_ceil(batch_size);
        // Random ids put the sessions in the middle of the key space, as in production,
        // not at the end of the indexes where inserts are cheapest.
        let session_ids: Vec<String> = (0..sessions)
            .map(|_| uuid::Uuid::new_v4().to_string())
            .collect();
        let mut prepared: Vec<Vec<NewEvent>> = (0..batches)
            .map(|b| {
                (0..batch_size)
                    .map(|i| {
                        let content = match kind {
                            EventType::Message => json!({ "text": words(b * batch_size + i) }),
                            _ => json!({ "delta": format!("token {b}/{i} of a streamed answer") }),
                        };
                        NewEvent::new(&account, &session_ids[i % sessions], kind, content)
                            .in_run("run-0001", "inv-0001")
                            .with_metadata(json!({ "upstream": "responses", "index": i }))
                    })
                    .collect()
            })
            .collect();
        let started = Instant::now();
        for batch in &mut prepared {
            store.append_seqs(batch).await?;
        }
        let elapsed = started.elapsed().as_secs_f64();
        let rate = (batches * batch_size) as f64 / elapsed;
        let ratio = rate / *baseline.get_or_insert(rate);
        println!(
            "{:<8} {:<10} batch {batch_size:>5} over {sessions:>2} session(s): {:>9.0} events/s \
             ({:>6} events in {elapsed:.2}s, {ratio:>6.1}x one-event batches)",
            store.backend(),
            kind.as_str(),
            rate,
            batches * batch_size,
        );
    }
    Ok(())
}

/// The text of message `n`: 40 words of a 5,000-word vocabulary (deterministic).
fn words(n: usize) -> String {
    (0..40)
        .map(|k| {
            format!(
                "w{}",
                (n.wrapping_mul(2_654_435_761) >> 7).wrapping_add(k * 7919) % 5000
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}
