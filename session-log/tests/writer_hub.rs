//! The writer, hub and subscriptions over a real SQLite store: what a client receives is
//! committed, and a subscription from a cursor yields every later event exactly once, in
//! order, while events are being written.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use session_log::event::run_status_content;
use session_log::sqlite::SqliteStore;
use session_log::{
    Event, EventQuery, EventType, Hub, NewEvent, RunStatus, Store, Subscription, Writer,
    WriterConfig,
};

/// Long enough for any commit on a slow machine; a hang fails instead of blocking forever.
const PATIENCE: Duration = Duration::from_secs(30);

struct Log {
    store: Arc<dyn Store>,
    hub: Hub,
    writer: Writer,
    _dir: tempfile::TempDir,
}

async fn log_with(config: WriterConfig) -> Log {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("log.sqlite");
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(path.to_str().expect("utf-8 path"))
            .await
            .expect("open store"),
    );
    let hub = Hub::new();
    let writer = Writer::spawn(store.clone(), hub.clone(), config);
    Log {
        store,
        hub,
        writer,
        _dir: dir,
    }
}

/// PostgreSQL for the tests that need it; CI must have it.
fn pg_url() -> Option<String> {
    match std::env::var("TEST_DATABASE_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var_os("CI").is_some() => {
            panic!("TEST_DATABASE_URL must be set when CI is set")
        }
        _ => None,
    }
}

async fn log() -> Log {
    log_with(WriterConfig::default()).await
}

fn delta(session: &str, text: &str) -> NewEvent {
    NewEvent::new(
        "acct",
        session,
        EventType::TextDelta,
        json!({ "delta": text }),
    )
}

fn status(session: &str, invocation: &str, status: RunStatus) -> NewEvent {
    NewEvent::new(
        "acct",
        session,
        EventType::RunStatus,
        run_status_content(status, None),
    )
    .in_run("run", invocation)
}

impl Log {
    fn subscribe(&self, session: &str, after_seq: i64) -> Subscription {
        Subscription::open(
            self.store.clone(),
            &self.hub,
            EventQuery {
                after_seq,
                ..EventQuery::session("acct", session)
            },
        )
    }
}

/// A store with no writer in front, for tests that commit and publish by hand and close
/// the store to show that a subscription reads nothing more.
async fn closable_store() -> (tempfile::TempDir, Arc<SqliteStore>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteStore::open(dir.path().join("log.sqlite").to_str().unwrap())
        .await
        .expect("open store");
    (dir, Arc::new(store))
}

/// Commits `events` straight to `store`; returns those committed, with their seqs.
async fn appended(store: &SqliteStore, events: Vec<NewEvent>) -> Vec<Event> {
    let events = store.append(&events).await.expect("append");
    events.into_iter().flatten().collect()
}

async fn next(sub: &mut Subscription) -> Arc<Event> {
    tokio::time::timeout(PATIENCE, sub.next())
        .await
        .expect("an event within the timeout")
        .expect("store read")
        .expect("hub alive")
}

/// Reads until the event with seq `last`, checking that seqs run `from..=last` with no gap
/// or duplicate.
async fn read_through(mut sub: Subscription, from: i64, last: i64) -> Vec<Arc<Event>> {
    let mut seen = Vec::new();
    let mut expected = from;
    while expected <= last {
        let event = next(&mut sub).await;
        assert_eq!(event.seq, expected, "gap or duplicate");
        expected += 1;
        seen.push(event);
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn append_returns_committed_events_with_seqs() {
    let log = log().await;
    let first = log
        .writer
        .append(vec![
            status("s", "inv", RunStatus::InProgress),
            delta("s", "a"),
            delta("s", "b"),
        ])
        .await
        .unwrap();
    assert_eq!(
        first.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert_eq!(first[1].text(), "a");

    // The second terminal is dropped, so it is absent from the reply.
    let closed = log
        .writer
        .append(vec![
            status("s", "inv", RunStatus::Completed),
            status("s", "inv", RunStatus::Failed),
        ])
        .await
        .unwrap();
    assert_eq!(closed.len(), 1);
    assert_eq!(
        (closed[0].seq, closed[0].run_status()),
        (4, Some(RunStatus::Completed))
    );

    let stored = log
        .store
        .events(&EventQuery::session("acct", "s"))
        .await
        .unwrap();
    assert_eq!(stored, [first, closed].concat());
    assert_eq!(log.writer.append(vec![]).await, Ok(vec![]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_each_get_their_own_events() {
    let log = log_with(WriterConfig {
        max_batch: 7,
        queue: 16,
        ..WriterConfig::default()
    })
    .await;
    let tasks: Vec<_> = (0..8)
        .map(|task| {
            let writer = log.writer.clone();
            tokio::spawn(async move {
                let mut mine = Vec::new();
                for round in 0..25 {
                    let events = (0..1 + round % 3)
                        .map(|i| delta("s", &format!("{task}/{round}/{i}")))
                        .collect::<Vec<_>>();
                    let texts: Vec<String> = events
                        .iter()
                        .map(|e| e.content["delta"].as_str().unwrap().to_owned())
                        .collect();
                    let committed = writer.append(events).await.unwrap();
                    let got: Vec<&str> = committed.iter().map(|e| e.text()).collect();
                    assert_eq!(got, texts);
                    mine.extend(committed.into_iter().map(|e| e.seq));
                }
                mine
            })
        })
        .collect();
    let mut seqs = Vec::new();
    for task in tasks {
        seqs.extend(task.await.unwrap());
    }
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=seqs.len() as i64).collect::<Vec<_>>());
    let stats = log.writer.stats();
    assert_eq!(
        stats
            .events_committed
            .load(std::sync::atomic::Ordering::Relaxed),
        seqs.len() as u64
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscription_replays_after_the_cursor_then_follows_live() {
    let log = log().await;
    log.writer
        .append((1..=5).map(|i| delta("s", &i.to_string())).collect())
        .await
        .unwrap();
    let mut sub = log.subscribe("s", 2);
    for seq in 3..=5 {
        assert_eq!(next(&mut sub).await.seq, seq);
    }
    assert_eq!(sub.cursor(), 5);

    let writer = log.writer.clone();
    let producer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        writer
            .append(vec![delta("s", "6"), delta("other", "x")])
            .await
            .unwrap();
        writer.append(vec![delta("s", "7")]).await.unwrap();
    });
    let six = next(&mut sub).await;
    assert_eq!((six.seq, six.text()), (6, "6"));
    assert_eq!(next(&mut sub).await.seq, 7);
    producer.await.unwrap();
    // Nothing else is pending for this session.
    assert!(tokio::time::timeout(Duration::from_millis(100), sub.next())
        .await
        .is_err());
}

/// A run's stream reads the store once, when it opens: live events that continue what it
/// has seen (its own or, when it follows one invocation, anyone's) need no read, so they
/// are handed out even when the store cannot be read. A gap still is read.
#[tokio::test]
async fn live_events_that_continue_the_cursor_are_not_read_again() {
    let (_dir, store) = closable_store().await;
    let hub = Hub::new();
    let mine = |text: &str| delta("s", text).in_run("run", "inv-a");
    let other = |text: &str| delta("s", text).in_run("run", "inv-b");
    let committed = |events: Vec<NewEvent>| appended(&store, events);
    committed(vec![other("1"), mine("2")]).await;
    let mut sub = Subscription::open(
        store.clone(),
        &hub,
        EventQuery {
            invocation_id: Some("inv-a".into()),
            ..EventQuery::session("acct", "s")
        },
    );
    assert_eq!(next(&mut sub).await.seq, 2, "replayed from the store");
    let live = committed(vec![mine("3"), other("4"), mine("5")]).await;
    store.close().await;

    hub.publish(&live);
    assert_eq!(next(&mut sub).await.seq, 3);
    assert_eq!(next(&mut sub).await.seq, 5, "4 is another invocation's");
    let after_a_gap = Event::committed(mine("7"), 7, chrono::Utc::now());
    hub.publish([&after_a_gap]);
    let read = tokio::time::timeout(PATIENCE, sub.next())
        .await
        .expect("an answer");
    assert!(
        read.is_err(),
        "a gap is read from the store, which is closed: {read:?}"
    );
}

/// A run's client subscribes before the run's first events are appended: it starts from
/// them and follows the broadcast, reading the store only over a gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_opened_before_an_append_starts_from_it_without_reading() {
    let (_dir, store) = closable_store().await;
    let hub = Hub::new();
    let mine = |text: &str| delta("s", text).in_run("run", "inv-a");
    let other = |text: &str| delta("s", text).in_run("run", "inv-b");
    let append = |events: Vec<NewEvent>| appended(&store, events);
    let query = |after_seq| EventQuery {
        after_seq,
        invocation_id: Some("inv-a".into()),
        ..EventQuery::session("acct", "s")
    };
    append(vec![other("1")]).await;

    let follow = Subscription::before_append(store.clone(), &hub, "acct", "s");
    let started = append(vec![mine("2"), other("3"), mine("4")]).await;
    let mut sub = follow.start(query(1), &started);
    let live = append(vec![mine("5"), other("6"), mine("7")]).await;
    store.close().await;
    // The writer publishes what it commits, the start's events included.
    hub.publish(&started);
    hub.publish(&live);
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(next(&mut sub).await.text().to_owned());
    }
    assert_eq!(
        seen,
        ["2", "4", "5", "7"],
        "the store is closed: nothing was read"
    );
    let after_a_gap = Event::committed(mine("9"), 9, chrono::Utc::now());
    hub.publish([&after_a_gap]);
    let read = tokio::time::timeout(PATIENCE, sub.next())
        .await
        .expect("an answer");
    assert!(read.is_err(), "a gap is read from the store: {read:?}");
}

/// What was appended must be the session's events of one batch; anything else (here, seqs
/// that skip one) and the subscription reads the store from the cursor instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_started_from_a_partial_append_reads_the_store() {
    let log = log().await;
    let follow = Subscription::before_append(log.store.clone(), &log.hub, "acct", "s");
    let appended = log
        .writer
        .append(vec![delta("s", "1"), delta("s", "2"), delta("s", "3")])
        .await
        .unwrap();
    let partial = [appended[0].clone(), appended[2].clone()];
    let sub = follow.start(EventQuery::session("acct", "s"), &partial);
    let texts: Vec<String> = read_through(sub, 1, 3)
        .await
        .iter()
        .map(|e| e.text().to_owned())
        .collect();
    assert_eq!(texts, ["1", "2", "3"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_are_gapless_while_events_are_written() {
    const PRODUCERS: usize = 4;
    const PER_PRODUCER: usize = 1500;
    const TOTAL: i64 = (PRODUCERS * PER_PRODUCER) as i64;
    let log = log_with(WriterConfig {
        max_batch: 64,
        queue: 64,
        ..WriterConfig::default()
    })
    .await;

    // One subscriber from the start, before anything is written, and one that stops
    // reading after the first event until everything is written: it falls far behind the
    // live buffer and must re-read the gap from the store.
    let early = tokio::spawn(read_through(log.subscribe("s", 0), 1, TOTAL));
    let (done_writing, all_written) = tokio::sync::oneshot::channel::<()>();
    let mut lagging_sub = log.subscribe("s", 0);
    let lagging = tokio::spawn(async move {
        assert_eq!(next(&mut lagging_sub).await.seq, 1);
        all_written.await.unwrap();
        read_through(lagging_sub, 2, TOTAL).await;
    });

    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let writer = log.writer.clone();
            tokio::spawn(async move {
                let mut written = 0;
                let mut round = 0;
                while written < PER_PRODUCER {
                    let n = (1 + (p + round) % 9).min(PER_PRODUCER - written);
                    let events = (0..n)
                        .map(|i| delta("s", &format!("{p}/{round}/{i}")))
                        .collect();
                    // Mix waiting appends with fire-and-forget submissions.
                    if round % 2 == 0 {
                        writer.append(events).await.unwrap();
                    } else {
                        writer.submit(events).await.unwrap();
                    }
                    written += n;
                    round += 1;
                    if round % 10 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect();

    // Subscribers that join mid-stream from a cursor.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut late = Vec::new();
    for cursor in [0, 10, 100] {
        late.push(tokio::spawn(read_through(
            log.subscribe("s", cursor),
            cursor + 1,
            TOTAL,
        )));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    for producer in producers {
        producer.await.unwrap();
    }
    log.writer.flush().await.unwrap();
    assert_eq!(log.store.count_events("acct", "s").await.unwrap(), TOTAL);
    done_writing.send(()).unwrap();

    let everything = early.await.unwrap();
    for sub in late {
        sub.await.unwrap();
    }
    lagging.await.unwrap();
    // Each producer's events arrive in the order it wrote them.
    for p in 0..PRODUCERS {
        let prefix = format!("{p}/");
        let order: Vec<(usize, usize)> = everything
            .iter()
            .filter(|e| e.text().starts_with(&prefix))
            .map(|e| {
                let parts: Vec<usize> = e.text().split('/').map(|x| x.parse().unwrap()).collect();
                (parts[1], parts[2])
            })
            .collect();
        assert!(
            order.windows(2).all(|w| w[0] < w[1]),
            "producer {p} reordered"
        );
        assert_eq!(order.len(), PER_PRODUCER);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_spans_several_pages() {
    let log = log().await;
    for chunk in 0..5 {
        log.writer
            .append(
                (0..500)
                    .map(|i| delta("s", &format!("{chunk}/{i}")))
                    .collect(),
            )
            .await
            .unwrap();
    }
    let seen = read_through(log.subscribe("s", 0), 1, 2500).await;
    assert_eq!(seen.last().unwrap().text(), "4/499");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filtered_subscription_sees_only_its_run() {
    let log = log().await;
    let in_run = |text: &str, run: &str| delta("s", text).in_run(run, &format!("{run}-inv"));
    log.writer
        .append(vec![
            in_run("a1", "a"),
            in_run("b1", "b"),
            in_run("a2", "a"),
        ])
        .await
        .unwrap();
    let mut sub = Subscription::open(
        log.store.clone(),
        &log.hub,
        EventQuery {
            run_id: Some("a".into()),
            ..EventQuery::session("acct", "s")
        },
    );
    assert_eq!(next(&mut sub).await.text(), "a1");
    assert_eq!(next(&mut sub).await.text(), "a2");
    log.writer
        .append(vec![in_run("b2", "b"), in_run("a3", "a")])
        .await
        .unwrap();
    let a3 = next(&mut sub).await;
    assert_eq!((a3.text(), a3.seq), ("a3", 5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_terminal_is_never_published() {
    let log = log().await;
    let mut sub = log.subscribe("s", 0);
    log.writer
        .append(vec![status("s", "inv", RunStatus::InProgress)])
        .await
        .unwrap();
    // Two parties race to close the invocation; only one terminal may reach anyone.
    let (a, b) = tokio::join!(
        log.writer
            .append(vec![status("s", "inv", RunStatus::Cancelled)]),
        log.writer
            .append(vec![status("s", "inv", RunStatus::Interrupted)]),
    );
    assert_eq!(a.unwrap().len() + b.unwrap().len(), 1);
    log.writer.append(vec![delta("s", "after")]).await.unwrap();
    let events = [
        next(&mut sub).await,
        next(&mut sub).await,
        next(&mut sub).await,
    ];
    assert_eq!(
        events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert!(events[1].is_terminal());
    assert_eq!(events[2].text(), "after");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_waits_for_prior_submissions() {
    let log = log_with(WriterConfig {
        max_batch: 10,
        queue: 1024,
        ..WriterConfig::default()
    })
    .await;
    let mut total = 0;
    for round in 0..100 {
        let n = 1 + round % 5;
        let events = (0..n)
            .map(|i| delta("s", &format!("{round}/{i}")))
            .collect();
        if round % 2 == 0 {
            log.writer.submit(events).await.unwrap();
        } else {
            log.writer.try_submit(events).unwrap();
        }
        total += n as i64;
    }
    log.writer.flush().await.unwrap();
    assert_eq!(log.store.count_events("acct", "s").await.unwrap(), total);
    let session = log.store.session("acct", "s").await.unwrap().unwrap();
    assert_eq!(session.last_seq, total);
}

/// Records nobody waits for (the tee's) wait for company, and share a commit with the
/// next event somebody waits for, which they never hold back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_records_share_a_commit_and_never_delay_a_waiter() {
    let linger = Duration::from_secs(20);
    let log = log_with(WriterConfig {
        linger,
        ..WriterConfig::default()
    })
    .await;
    for i in 0..10 {
        log.writer
            .try_submit(vec![delta("tee", &i.to_string())])
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        log.store.count_events("acct", "tee").await.unwrap(),
        0,
        "the records wait for company"
    );
    let started = std::time::Instant::now();
    let waited = log.writer.append(vec![delta("run", "now")]).await.unwrap();
    assert_eq!(waited.len(), 1);
    assert!(started.elapsed() < linger / 2, "the waiter was held back");
    assert_eq!(log.store.count_events("acct", "tee").await.unwrap(), 10);
    let stats = log.writer.stats();
    assert_eq!(stats.batches_committed.load(Ordering::Relaxed), 1);
}

/// One event the database refuses costs only itself: the writer splits the batch, commits
/// the rest in order, drops and counts the refused one, and keeps going.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_event_does_not_stall_the_writer() {
    let Some(url) = pg_url() else {
        return eprintln!("TEST_DATABASE_URL is not set: skipping");
    };
    // PostgreSQL refuses NUL bytes in text columns, which makes a real poison event.
    let store: Arc<dyn Store> = Arc::new(
        session_log::postgres::PgStore::connect(&url)
            .await
            .expect("connect"),
    );
    let writer = Writer::spawn(store.clone(), Hub::new(), WriterConfig::default());
    let session = format!("poison-{}", uuid::Uuid::new_v4());
    let events = vec![
        delta(&session, "a"),
        delta("bad\0session", "x"),
        delta(&session, "b"),
    ];
    let committed = tokio::time::timeout(PATIENCE, writer.append(events))
        .await
        .expect("the writer keeps going")
        .expect("writer alive");
    let texts: Vec<&str> = committed.iter().map(|e| e.text()).collect();
    assert_eq!(texts, ["a", "b"]);
    assert_eq!(
        writer
            .stats()
            .rejected
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    let after = tokio::time::timeout(PATIENCE, writer.append(vec![delta(&session, "c")]))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(after[0].seq, 3, "later events commit normally, seqs dense");
}

/// Across replicas two sources publish one session (this process's writer and the tail of
/// other replicas' commits): out of order and twice. A subscriber still gets every event
/// once, in seq order — a gap is re-read from the store, a repeat skipped — also when it
/// follows one invocation and most of the session's events are not its own.
#[tokio::test]
async fn out_of_order_and_repeated_publishes_neither_skip_nor_repeat() {
    let log = log().await;
    let committed = |events: Vec<NewEvent>| {
        let store = log.store.clone();
        async move {
            store
                .append(&events)
                .await
                .expect("append")
                .into_iter()
                .flatten()
                .collect::<Vec<Event>>()
        }
    };
    let mine = |text: &str| delta("s", text).in_run("run", "inv-a");
    let other = |text: &str| delta("s", text).in_run("run", "inv-b");
    // Committed without the hub knowing (as by another replica): 1..=3.
    let first = committed(vec![mine("1"), other("2"), mine("3")]).await;
    let mut all = log.subscribe("s", 0);
    let mut one = Subscription::open(
        log.store.clone(),
        &log.hub,
        EventQuery {
            invocation_id: Some("inv-a".into()),
            ..EventQuery::session("acct", "s")
        },
    );
    for seq in 1..=3 {
        assert_eq!(next(&mut all).await.seq, seq);
    }
    assert_eq!(next(&mut one).await.seq, 1);
    assert_eq!(next(&mut one).await.seq, 3);
    log.hub.publish(&first); // a late repeat of what was replayed

    let later = committed(vec![other("4"), mine("5"), other("6"), mine("7")]).await;
    // 6 and 7 arrive first, then 4 and 5, then 5 again.
    log.hub.publish(&later[2..]);
    log.hub.publish(&later[..2]);
    log.hub.publish(&later[1..2]);
    let end = committed(vec![mine("8")]).await;
    log.hub.publish(&end);

    for seq in 4..=8 {
        assert_eq!(
            next(&mut all).await.seq,
            seq,
            "every event of the session once"
        );
    }
    for seq in [5, 7, 8] {
        assert_eq!(
            next(&mut one).await.seq,
            seq,
            "every event of the invocation once"
        );
    }
    // Nothing else is pending.
    assert!(tokio::time::timeout(Duration::from_millis(200), all.next())
        .await
        .is_err());
    assert!(tokio::time::timeout(Duration::from_millis(200), one.next())
        .await
        .is_err());
}

/// Other replicas learn of every commit on PostgreSQL: the pointers announced for commits
/// in quick succession, merged as they may be, cover every seq of every session once the
/// last commit is announced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_commit_is_announced_to_other_replicas() {
    let Some(url) = pg_url() else {
        return eprintln!("TEST_DATABASE_URL is not set: skipping");
    };
    let mut listener = sqlx::postgres::PgListener::connect(&url)
        .await
        .expect("listen");
    listener
        .listen(session_log::tail::EVENTS_CHANNEL)
        .await
        .expect("listen");
    let store: Arc<dyn Store> = Arc::new(
        session_log::postgres::PgStore::connect(&url)
            .await
            .expect("connect"),
    );
    let writer = Writer::spawn(store, Hub::new(), WriterConfig::default());
    let sessions = [
        format!("announced-{}", uuid::Uuid::new_v4()),
        format!("announced-{}", uuid::Uuid::new_v4()),
    ];
    const PER_SESSION: i64 = 30;
    for i in 0..PER_SESSION {
        for session in &sessions {
            writer
                .append(vec![delta(session, &i.to_string())])
                .await
                .expect("writer alive");
        }
    }
    // Each session's announced spans, in the order they arrive.
    let mut spans: std::collections::HashMap<String, Vec<(i64, i64)>> = Default::default();
    let covered = |spans: &std::collections::HashMap<String, Vec<(i64, i64)>>| {
        sessions.iter().all(|s| {
            spans
                .get(s)
                .is_some_and(|v| v.iter().any(|&(_, last)| last == PER_SESSION))
        })
    };
    while !covered(&spans) {
        let n = tokio::time::timeout(PATIENCE, listener.recv())
            .await
            .expect("every commit is announced")
            .expect("notification");
        let (_, session, first, last): (String, String, i64, i64) =
            serde_json::from_str(n.payload()).expect("a pointer");
        if sessions.contains(&session) {
            spans.entry(session).or_default().push((first, last));
        }
    }
    for session in &sessions {
        let mut next = 1;
        for &(first, last) in &spans[session] {
            assert_eq!(first, next, "pointers of {session} leave no gap: {spans:?}");
            next = last + 1;
        }
        assert_eq!(next, PER_SESSION + 1);
    }
}

/// A session's live-tail state lives as long as somebody follows it: the hub forgets the
/// session when its last subscriber leaves, whether or not anything is committed after
/// (it used to keep the channel, and the last events in its ring, until the session's next
/// commit: for good after its last run), and a later subscriber starts afresh.
#[tokio::test]
async fn the_hub_forgets_a_session_when_its_last_subscriber_leaves() {
    let log = log().await;
    let first = log.subscribe("s", 0);
    let second = log.subscribe("s", 0);
    let other = log.subscribe("t", 0);
    log.writer.append(vec![delta("s", "a")]).await.unwrap();
    assert_eq!(log.hub.channels_kept(), 2);
    drop(first);
    assert_eq!(log.hub.channels_kept(), 2, "one subscriber still follows s");
    drop(second);
    assert_eq!(log.hub.channels_kept(), 1, "nobody follows s any more");
    drop(other);
    assert_eq!(log.hub.channels_kept(), 0);

    // A run whose client left: its later commits create nothing.
    log.writer.append(vec![delta("s", "b")]).await.unwrap();
    assert_eq!(log.hub.channels_kept(), 0);
    let mut again = log.subscribe("s", 0);
    let texts = [next(&mut again).await, next(&mut again).await];
    assert_eq!(texts.map(|e| e.text().to_owned()), ["a", "b"]);
    log.writer.append(vec![delta("s", "c")]).await.unwrap();
    assert_eq!(next(&mut again).await.text(), "c");
    drop(again);
    assert_eq!(log.hub.channels_kept(), 0);
}
