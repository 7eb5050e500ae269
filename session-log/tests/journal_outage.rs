//! Outages that lose nothing, against a real PostgreSQL the test stops and starts: what
//! is appended while it is down is committed to the local journal with dense seqs, then
//! backfilled exactly once, in order, when it is back (also across a restart).

#[path = "support/pg_cluster.rs"]
mod pg_cluster;

use std::time::{Duration, Instant};

use serde_json::json;
use session_log::event::run_status_content;
use session_log::journal::{self, BackendState, JournalConfig, JournaledStore};
use session_log::postgres::PgStore;
use session_log::{Claim, Claimed, EventQuery, EventType, NewEvent, RunStatus, Store};

fn config() -> JournalConfig {
    JournalConfig {
        append_timeout: Duration::from_secs(1),
        probe_every: Duration::from_millis(200),
        backfill_timeout: Duration::from_secs(5),
        read_timeout: Duration::from_secs(5),
        local_claims: true,
    }
}

fn delta(session: &str, i: usize) -> NewEvent {
    NewEvent::new(
        "acct",
        session,
        EventType::TextDelta,
        json!({ "delta": format!("w{i} ") }),
    )
    .in_run("run_1", "inv_1")
}

fn status(session: &str, s: RunStatus) -> NewEvent {
    NewEvent::new(
        "acct",
        session,
        EventType::RunStatus,
        run_status_content(s, None),
    )
    .in_run("run_1", "inv_1")
}

/// A journal in front of `cluster`, its file in `dir`, that never probes PostgreSQL: it
/// recovers only when the test calls `recover_now`, so the test orders what happens first.
async fn journal_recovering_on_demand(
    cluster: &pg_cluster::Cluster,
    dir: &tempfile::TempDir,
) -> std::sync::Arc<JournaledStore> {
    let journal_path = dir.path().join("journal.sqlite").display().to_string();
    let config = JournalConfig {
        probe_every: Duration::from_secs(3600),
        ..config()
    };
    journal::open(&cluster.url(), &journal_path, config)
        .await
        .unwrap()
}

async fn wait_recovered(store: &JournaledStore) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while store.state() != BackendState::Healthy || store.journal_len().await.unwrap() != 0 {
        assert!(
            Instant::now() < deadline,
            "the journal was not backfilled in 30 s (state {:?})",
            store.state()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every event of the session in PostgreSQL itself: seqs 1..=n, each once.
async fn assert_dense_in_postgres(url: &str, session: &str, n: usize) -> Vec<session_log::Event> {
    let pg = PgStore::connect(url).await.unwrap();
    let events = pg
        .events(&EventQuery::session("acct", session))
        .await
        .unwrap();
    let seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        (1..=n as i64).collect::<Vec<_>>(),
        "seqs in PostgreSQL"
    );
    let last = pg.session("acct", session).await.unwrap().unwrap().last_seq;
    assert_eq!(last, n as i64, "sessions.last_seq");
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_during_an_outage_are_journaled_then_backfilled_once() {
    let Some(cluster) = pg_cluster::Cluster::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let journal_path = dir.path().join("journal.sqlite").display().to_string();
    let store = journal::open(&cluster.url(), &journal_path, config())
        .await
        .unwrap();
    let session = "s_outage";

    let mut appended = Vec::new();
    let mut batch = vec![status(session, RunStatus::InProgress)];
    batch.extend((0..5).map(|i| delta(session, i)));
    appended.extend(store.append(&batch).await.unwrap());
    for i in 5..10 {
        appended.extend(store.append(&[delta(session, i)]).await.unwrap());
    }
    assert_eq!(store.state(), BackendState::Healthy);

    cluster.down();
    for i in 10..30 {
        appended.extend(
            store
                .append(&[delta(session, i), delta(session, i + 100)])
                .await
                .unwrap(),
        );
    }
    assert_eq!(store.state(), BackendState::Degraded);
    assert!(store.journal_len().await.unwrap() >= 40);
    // The run ends during the outage; a second terminal status is still refused.
    appended.extend(
        store
            .append(&[status(session, RunStatus::Completed)])
            .await
            .unwrap(),
    );
    let again = store
        .append(&[status(session, RunStatus::Cancelled)])
        .await
        .unwrap();
    assert_eq!(
        again,
        vec![None],
        "one terminal status per invocation, journal included"
    );
    // A reader that resumes after a seq the journal handed out is served from it.
    let tail = store
        .events(&EventQuery {
            after_seq: 20,
            ..EventQuery::session("acct", session)
        })
        .await
        .unwrap();
    assert_eq!(tail.first().map(|e| e.seq), Some(21));
    assert_eq!(tail.last().map(|e| e.seq), Some(appended.len() as i64));

    let seqs: Vec<i64> = appended.iter().map(|e| e.as_ref().unwrap().seq).collect();
    assert_eq!(
        seqs,
        (1..=appended.len() as i64).collect::<Vec<_>>(),
        "dense seqs across the outage"
    );

    cluster.up();
    wait_recovered(&store).await;
    // After recovery the session is handed back to PostgreSQL.
    appended.extend(
        store
            .append(&[NewEvent::new(
                "acct",
                session,
                EventType::Message,
                json!({"text": "after"}),
            )])
            .await
            .unwrap(),
    );
    let n = appended.len();
    let events = assert_dense_in_postgres(&cluster.url(), session, n).await;
    for (stored, sent) in events.iter().zip(&appended) {
        assert_eq!(
            Some(stored),
            sent.as_ref(),
            "what PostgreSQL holds is what was returned"
        );
    }
    let terminals = events.iter().filter(|e| e.is_terminal()).count();
    assert_eq!(terminals, 1);
    let inv = store.invocation("acct", "inv_1").await.unwrap().unwrap();
    assert_eq!(inv.status, RunStatus::Completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journal_left_by_a_stopped_process_is_backfilled_at_the_next_start() {
    let Some(cluster) = pg_cluster::Cluster::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let journal_path = dir.path().join("journal.sqlite").display().to_string();
    let session = "s_restart";
    {
        let store = journal::open(&cluster.url(), &journal_path, config())
            .await
            .unwrap();
        store
            .append(&[status(session, RunStatus::InProgress), delta(session, 0)])
            .await
            .unwrap();
        cluster.down();
        for i in 1..10 {
            store.append(&[delta(session, i)]).await.unwrap();
        }
        assert_eq!(store.journal_len().await.unwrap(), 9);
        // The process "dies" here: nothing is flushed, the journal stays on disk.
    }
    cluster.up();
    let store = journal::open(&cluster.url(), &journal_path, config())
        .await
        .unwrap();
    assert_eq!(store.journal_len().await.unwrap(), 0, "backfilled at start");
    assert_dense_in_postgres(&cluster.url(), session, 11).await;
    let next = store.append(&[delta(session, 10)]).await.unwrap();
    assert_eq!(next[0].as_ref().unwrap().seq, 12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journaled_seqs_another_writer_took_are_renumbered_not_lost() {
    let Some(cluster) = pg_cluster::Cluster::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let session = "s_collide";
    // No probe during the test: the other writer must go first.
    let store = journal_recovering_on_demand(&cluster, &dir).await;
    store.append(&[delta(session, 0)]).await.unwrap();
    cluster.down();
    // Journaled as seqs 2 and 3.
    store
        .append(&[delta(session, 1), delta(session, 2)])
        .await
        .unwrap();
    cluster.up();
    // Another replica, unaware of the journal, writes seqs 2 and 3 first.
    let other = PgStore::connect(&cluster.url()).await.unwrap();
    other
        .append(&[delta(session, 900), delta(session, 901)])
        .await
        .unwrap();
    store.recover_now().await;
    wait_recovered(&store).await;
    let events = assert_dense_in_postgres(&cluster.url(), session, 5).await;
    let texts: Vec<&str> = events.iter().map(|e| e.text()).collect();
    assert_eq!(texts, vec!["w0 ", "w900 ", "w901 ", "w1 ", "w2 "]);
}

/// The chaos soak's one violation (seed 1796516449): a run's delta `w13` logged after
/// `w14`..`w17` across a PostgreSQL restart. The session held an expired run of another
/// replica (its claim outlived its request) next to the live run; while this replica
/// journaled the live run's deltas, the other replica's sweeper closed the expired run in
/// PostgreSQL at the seq of the first journaled delta only. The backfill must keep the
/// journaled deltas together, in their order, after the sweeper's status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seq_taken_by_another_replica_keeps_the_journaled_run_in_order() {
    let Some(cluster) = pg_cluster::Cluster::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store = journal_recovering_on_demand(&cluster, &dir).await;
    let other = PgStore::connect(&cluster.url()).await.unwrap();
    let session = "s_taken_once";
    // Replica B's claim whose request never started a run: nobody renews it.
    let lease = Duration::from_millis(500);
    let stale = Claim {
        run_id: "run_x",
        invocation_id: "inv_x",
        ..claim_of(session, "replica-b", lease)
    };
    assert_eq!(other.claim(&stale).await.unwrap(), Claimed::Granted);
    // Expired for more than a lease: the session is free for a new run, and the stale
    // run is still open until a sweeper closes it.
    tokio::time::sleep(2 * lease + Duration::from_millis(300)).await;
    assert_eq!(
        store
            .claim(&claim_of(session, "replica-a", lease))
            .await
            .unwrap(),
        Claimed::Granted
    );
    // The live run's heartbeat keeps it out of any sweep for the rest of the test.
    store
        .renew_leases("replica-a", &["inv_1".to_owned()], Duration::from_secs(60))
        .await
        .unwrap();
    let mut sent = Vec::new();
    sent.extend(
        store
            .append(&[status(session, RunStatus::InProgress)])
            .await
            .unwrap(),
    );
    for i in 0..13 {
        sent.extend(store.append(&[delta(session, i)]).await.unwrap());
    }

    cluster.down();
    for i in 13..18 {
        sent.extend(store.append(&[delta(session, i)]).await.unwrap());
    }
    let journaled: Vec<i64> = sent[14..].iter().map(|e| e.as_ref().unwrap().seq).collect();
    assert_eq!(journaled, vec![15, 16, 17, 18, 19], "w13..w17 journaled");
    cluster.up();
    // Replica B's sweeper finds the stale run and closes it: at seq 15, w13's.
    let other = PgStore::connect(&cluster.url()).await.unwrap();
    let abandoned = other.abandoned_invocations(None).await.unwrap();
    let ids: Vec<&str> = abandoned.iter().map(|i| i.invocation_id.as_str()).collect();
    assert_eq!(ids, vec!["inv_x"]);
    let closed = other
        .append(&[NewEvent::new(
            "acct",
            session,
            EventType::RunStatus,
            run_status_content(RunStatus::Interrupted, Some("run_owner_lost")),
        )
        .in_run("run_x", "inv_x")])
        .await
        .unwrap();
    assert_eq!(closed[0].as_ref().unwrap().seq, 15);

    store.recover_now().await;
    wait_recovered(&store).await;
    // The run goes on and ends after the recovery.
    store.append(&[delta(session, 18)]).await.unwrap();
    store
        .append(&[status(session, RunStatus::Completed)])
        .await
        .unwrap();

    let events = assert_dense_in_postgres(&cluster.url(), session, 22).await;
    let deltas: Vec<&str> = events
        .iter()
        .filter(|e| e.event_type == EventType::TextDelta)
        .map(|e| e.text())
        .collect();
    let expected: Vec<String> = (0..19).map(|i| format!("w{i} ")).collect();
    assert_eq!(
        deltas, expected,
        "the run's deltas in the order it sent them"
    );
    assert_eq!(events[14].invocation_id.as_deref(), Some("inv_x"));
    assert_eq!(events[14].run_status(), Some(RunStatus::Interrupted));
    for inv in ["inv_1", "inv_x"] {
        let terminals = events
            .iter()
            .filter(|e| e.invocation_id.as_deref() == Some(inv) && e.is_terminal())
            .count();
        assert_eq!(terminals, 1, "one terminal status for {inv}");
    }
    assert!(
        events.iter().all(|e| !e.is_late()),
        "nothing was taken over"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_claimed_during_an_outage_reaches_postgres_once() {
    let Some(cluster) = pg_cluster::Cluster::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let journal_path = dir.path().join("journal.sqlite").display().to_string();
    let store = journal::open(&cluster.url(), &journal_path, config())
        .await
        .unwrap();
    let session = "s_claim_outage";
    let in_run = |e: NewEvent| e.in_run("run_2", "inv_2");
    let claim = Claim {
        account_id: "acct",
        session_id: session,
        run_id: "run_2",
        invocation_id: "inv_2",
        owner: "replica-a",
        lease: Duration::from_secs(30),
        fresh: false,
    };

    cluster.down();
    // PostgreSQL is not waited on for longer than an append would be.
    let started = Instant::now();
    assert_eq!(store.claim(&claim).await.unwrap(), Claimed::Granted);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "claim took {:?}",
        started.elapsed()
    );
    assert_eq!(store.state(), BackendState::Degraded);
    // Degraded already: answered from the journal at once.
    let other = Claim {
        run_id: "run_3",
        invocation_id: "inv_3",
        ..claim.clone()
    };
    let started = Instant::now();
    assert_eq!(
        store.claim(&other).await.unwrap(),
        Claimed::Busy {
            run_id: "run_2".into(),
            invocation_id: "inv_2".into()
        },
        "one live run per session, journal included"
    );
    assert!(started.elapsed() < Duration::from_millis(500));
    // The new session's history is read from the journal.
    assert!(store
        .events(&EventQuery::session("acct", session))
        .await
        .unwrap()
        .is_empty());

    let mut appended = Vec::new();
    let mut batch = vec![in_run(NewEvent::new(
        "acct",
        session,
        EventType::RunStatus,
        run_status_content(RunStatus::InProgress, None),
    ))];
    batch.extend((0..3).map(|i| {
        in_run(NewEvent::new(
            "acct",
            session,
            EventType::TextDelta,
            json!({ "delta": format!("w{i} ") }),
        ))
    }));
    appended.extend(store.append(&batch).await.unwrap());
    // The owner's lease renewal does not lose the run while PostgreSQL is down.
    let renewed = store
        .renew_leases("replica-a", &["inv_2".to_owned()], Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(
        renewed
            .iter()
            .map(|r| r.invocation_id.as_str())
            .collect::<Vec<_>>(),
        vec!["inv_2"]
    );
    appended.extend(
        store
            .append(&[in_run(NewEvent::new(
                "acct",
                session,
                EventType::RunStatus,
                run_status_content(RunStatus::Completed, None),
            ))])
            .await
            .unwrap(),
    );
    assert!(appended.iter().all(Option::is_some), "nothing dropped");
    assert_eq!(store.journal_len().await.unwrap(), 5);

    cluster.up();
    wait_recovered(&store).await;
    let events = assert_dense_in_postgres(&cluster.url(), session, 5).await;
    for (stored, sent) in events.iter().zip(&appended) {
        assert_eq!(Some(stored), sent.as_ref());
    }
    let terminals: Vec<_> = events
        .iter()
        .filter(|e| e.is_terminal())
        .map(|e| e.run_status())
        .collect();
    assert_eq!(terminals, vec![Some(RunStatus::Completed)]);
    let pg = PgStore::connect(&cluster.url()).await.unwrap();
    let rows: Vec<(String, String, Option<String>)> = sqlx::query_as(
        "SELECT invocation_id, status, owner FROM invocations \
         WHERE account_id = 'acct' AND session_id = $1",
    )
    .bind(session)
    .fetch_all(pg.pool())
    .await
    .unwrap();
    assert_eq!(
        rows,
        vec![(
            "inv_2".to_owned(),
            "completed".to_owned(),
            Some("replica-a".to_owned())
        )],
        "the invocation, once, closed, with its owner"
    );
    // The session is PostgreSQL's again: the next run is claimed there.
    assert_eq!(store.claim(&other).await.unwrap(), Claimed::Granted);
    let lease = pg.lease("acct", "inv_3").await.unwrap().unwrap();
    assert!(lease.live);
}

/// A new conversation's claim is granted without asking PostgreSQL and written by the
/// start's append. When that append is journaled instead, the journal takes the claim
/// over: the run stays its owner's through the outage, and its row reaches PostgreSQL
/// with that owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_claim_whose_start_is_journaled_keeps_its_owner() {
    let Some(cluster) = pg_cluster::Cluster::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let journal_path = dir.path().join("journal.sqlite").display().to_string();
    let store = journal::open(&cluster.url(), &journal_path, config())
        .await
        .unwrap();
    let session = "s_fresh_outage";
    let claim = Claim {
        account_id: "acct",
        session_id: session,
        run_id: "run_1",
        invocation_id: "inv_f",
        owner: "replica-a",
        lease: Duration::from_secs(30),
        fresh: true,
    };
    assert_eq!(store.claim(&claim).await.unwrap(), Claimed::Granted);
    assert_eq!(store.state(), BackendState::Healthy);

    cluster.down();
    let started = store
        .append(&[opened_by(session, "inv_f", RunStatus::InProgress)])
        .await
        .unwrap();
    assert!(started[0].is_some());
    assert_eq!(store.state(), BackendState::Degraded);
    let renewed = store
        .renew_leases("replica-a", &["inv_f".to_owned()], Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(renewed.len(), 1, "the run is still its owner's");
    store
        .append(&[opened_by(session, "inv_f", RunStatus::Completed)])
        .await
        .unwrap();

    cluster.up();
    wait_recovered(&store).await;
    let pg = PgStore::connect(&cluster.url()).await.unwrap();
    let rows: Vec<(String, Option<String>)> = sqlx::query_as(
        "SELECT status, owner FROM invocations \
         WHERE account_id = 'acct' AND invocation_id = 'inv_f'",
    )
    .fetch_all(pg.pool())
    .await
    .unwrap();
    assert_eq!(
        rows,
        vec![("completed".to_owned(), Some("replica-a".to_owned()))],
        "the invocation, once, closed, with its owner"
    );
}

/// An invocation of session `session` opened (`in_progress`) as `inv`.
fn opened_by(session: &str, inv: &str, s: RunStatus) -> NewEvent {
    NewEvent::new(
        "acct",
        session,
        EventType::RunStatus,
        run_status_content(s, None),
    )
    .in_run("run_1", inv)
}

/// The agent's handles for runs (A2A task ids) set while PostgreSQL is down are found at
/// once from the journal, and reach PostgreSQL after the sessions are backfilled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_refs_survive_an_outage() {
    let Some(cluster) = pg_cluster::Cluster::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let journal_path = dir.path().join("journal.sqlite").display().to_string();
    let config = JournalConfig {
        append_timeout: Duration::from_secs(1),
        probe_every: Duration::from_secs(600), // recovery only by recover_now
        backfill_timeout: Duration::from_secs(5),
        read_timeout: Duration::from_secs(5),
        local_claims: true,
    };
    let store = journal::open(&cluster.url(), &journal_path, config.clone())
        .await
        .unwrap();

    store
        .append(&[opened_by("s1", "inv_a", RunStatus::InProgress)])
        .await
        .unwrap();
    store
        .set_agent_ref("acct", "inv_a", "task-a")
        .await
        .unwrap();
    let a = store
        .invocation_by_agent_ref("acct", "task-a")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(a.invocation_id, "inv_a");

    cluster.down();
    // Found out by the handle write itself.
    store
        .set_agent_ref("acct", "inv_a", "task-a2")
        .await
        .unwrap();
    assert_eq!(store.state(), BackendState::Degraded);
    let claim = Claim {
        account_id: "acct",
        session_id: "s2",
        run_id: "run_1",
        invocation_id: "inv_b",
        owner: "me",
        lease: Duration::from_secs(60),
        fresh: false,
    };
    assert_eq!(store.claim(&claim).await.unwrap(), Claimed::Granted);
    store
        .set_agent_ref("acct", "inv_b", "task-b")
        .await
        .unwrap();
    let opened = store
        .append(&[opened_by("s2", "inv_b", RunStatus::InProgress)])
        .await
        .unwrap();
    assert!(opened[0].is_some());
    // An invocation opened by a journaled in_progress without a claim.
    store
        .append(&[opened_by("s3", "inv_c", RunStatus::InProgress)])
        .await
        .unwrap();
    store
        .set_agent_ref("acct", "inv_c", "task-c")
        .await
        .unwrap();
    assert!(store
        .invocation_by_agent_ref("acct", "task-b")
        .await
        .is_err());

    cluster.up();
    // PostgreSQL is back but nothing is backfilled yet: lookups consult the journal.
    let b = store
        .invocation_by_agent_ref("acct", "task-b")
        .await
        .unwrap()
        .expect("b from journal");
    assert_eq!(
        (b.session_id.as_str(), b.invocation_id.as_str(), b.status),
        ("s2", "inv_b", RunStatus::InProgress)
    );
    assert_eq!(b.agent_ref.as_deref(), Some("task-b"));
    let c = store
        .invocation_by_agent_ref("acct", "task-c")
        .await
        .unwrap()
        .expect("c from journal");
    assert_eq!(
        (c.session_id.as_str(), c.invocation_id.as_str()),
        ("s3", "inv_c")
    );
    let a2 = store
        .invocation_by_agent_ref("acct", "task-a2")
        .await
        .unwrap()
        .expect("a2 via journal");
    assert_eq!(a2.invocation_id, "inv_a");
    // While sessions are pending (degraded flag cleared by a ping only in recover), set again.
    store.recover_now().await;
    assert_eq!(store.state(), BackendState::Healthy);
    assert_eq!(store.journal_len().await.unwrap(), 0);

    let pg = PgStore::connect(&cluster.url()).await.unwrap();
    for (task, inv) in [
        ("task-a2", "inv_a"),
        ("task-b", "inv_b"),
        ("task-c", "inv_c"),
    ] {
        let found = pg
            .invocation_by_agent_ref("acct", task)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{task} in PostgreSQL"));
        assert_eq!(found.invocation_id, inv);
    }
    assert_eq!(
        pg.invocation_by_agent_ref("acct", "task-a").await.unwrap(),
        None
    );
    let n: i64 = {
        let j = sqlx::SqlitePool::connect(&format!("sqlite:{journal_path}"))
            .await
            .unwrap();
        sqlx::query_scalar("SELECT COUNT(*) FROM journal_agent_refs")
            .fetch_one(&j)
            .await
            .unwrap()
    };
    assert_eq!(n, 0, "journal handles applied and forgotten");
}

/// A fork whose creation reaches the journal (PostgreSQL went down after its checks):
/// its `session_fork` is journaled as seq 1, the fork goes on in the journal, and once
/// backfilled its history follows its parent up to the fork point, in PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_created_during_an_outage_reads_its_parent_once_backfilled() {
    let Some(cluster) = pg_cluster::Cluster::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let journal_path = dir.path().join("journal.sqlite").display().to_string();
    let store = journal::open(&cluster.url(), &journal_path, config())
        .await
        .unwrap();
    let text = |session: &str, t: &str| {
        NewEvent::new("acct", session, EventType::Message, json!({ "text": t })).with_role("user")
    };
    store
        .append(&[
            text("s_parent", "My project is named zebra42."),
            NewEvent::new(
                "acct",
                "s_parent",
                EventType::RunCheckpoint,
                json!({"checkpoint_id": "ckpt_1"}),
            ),
            text("s_parent", "later, not inherited"),
        ])
        .await
        .unwrap();

    cluster.down();
    let point = session_log::ForkPoint {
        session_id: "s_parent".into(),
        seq: 2,
        checkpoint_id: "ckpt_1".into(),
    };
    let fork = NewEvent::new("acct", "s_fork", EventType::SessionFork, point.content());
    let created = store.create_session(&fork).await.unwrap().expect("created");
    assert_eq!(created.seq, 1);
    assert_eq!(store.state(), BackendState::Degraded);
    assert_eq!(store.create_session(&fork).await.unwrap(), None, "taken");
    let own = store
        .append(&[text("s_fork", "My project is now named koala7.")])
        .await
        .unwrap();
    assert_eq!(own[0].as_ref().unwrap().seq, 2);

    cluster.up();
    wait_recovered(&store).await;
    let lineage = session_log::Lineage::resolve(&*store, "acct", "s_fork")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lineage.session.forked_from, Some(point));
    let history = lineage
        .events(&*store, 0, None, None, i64::MAX)
        .await
        .unwrap();
    let seen: Vec<(&str, i64)> = history
        .iter()
        .map(|e| (e.session_id.as_str(), e.seq))
        .collect();
    assert_eq!(
        seen,
        [
            ("s_parent", 1),
            ("s_parent", 2),
            ("s_fork", 1),
            ("s_fork", 2)
        ]
    );
    assert_dense_in_postgres(&cluster.url(), "s_fork", 2).await;
}

fn claim_of<'a>(session: &'a str, owner: &'a str, lease: Duration) -> Claim<'a> {
    Claim {
        account_id: "acct",
        session_id: session,
        run_id: "run_1",
        invocation_id: "inv_1",
        owner,
        lease,
        fresh: false,
    }
}

/// A replica regaining PostgreSQL renews the leases of the runs it drives before anything
/// else: a lease that ran out while PostgreSQL was down is live again once the journal
/// recovers, so no sweeper finds the run abandoned, and the run's journaled events land
/// at the seqs they were given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovery_renews_the_leases_of_live_runs_before_the_backfill() {
    let Some(cluster) = pg_cluster::Cluster::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store = journal_recovering_on_demand(&cluster, &dir).await;
    let session = "s_renew_first";
    let lease = Duration::from_secs(2);
    assert_eq!(
        store
            .claim(&claim_of(session, "replica-a", lease))
            .await
            .unwrap(),
        Claimed::Granted
    );
    let mut batch = vec![status(session, RunStatus::InProgress)];
    batch.extend((0..3).map(|i| delta(session, i)));
    store.append(&batch).await.unwrap();

    cluster.down();
    for i in 3..6 {
        store.append(&[delta(session, i)]).await.unwrap();
    }
    // The owner's heartbeat goes on; PostgreSQL cannot take it.
    assert!(store
        .renew_leases("replica-a", &["inv_1".to_owned()], lease)
        .await
        .is_err());
    tokio::time::sleep(lease + Duration::from_millis(500)).await;
    // Still beating, every third of the lease in a gateway.
    assert!(store
        .renew_leases("replica-a", &["inv_1".to_owned()], lease)
        .await
        .is_err());
    cluster.up();

    let pg = PgStore::connect(&cluster.url()).await.unwrap();
    let before = pg.lease("acct", "inv_1").await.unwrap().unwrap();
    assert!(!before.live, "the lease ran out while PostgreSQL was down");
    store.recover_now().await;
    let after = pg.lease("acct", "inv_1").await.unwrap().unwrap();
    assert!(after.live, "the recovery renewed the run's lease");
    assert_eq!(after.owner.as_deref(), Some("replica-a"));
    assert!(
        pg.abandoned_invocations(None).await.unwrap().is_empty(),
        "no sweeper finds the live run abandoned"
    );
    wait_recovered(&store).await;
    let events = assert_dense_in_postgres(&cluster.url(), session, 7).await;
    assert!(events.iter().all(|e| !e.is_terminal() && !e.is_late()));
}

/// The true partition case: another replica closed the run (a legitimate takeover) while
/// this one journaled its later events. The backfill writes no second terminal status and
/// renumbers nothing silently: the late events are kept after the takeover's status,
/// flagged `late` with the seqs the owner gave them, and left out of the history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_backfill_after_a_takeover_keeps_one_terminal_status_and_flags_late_events() {
    let Some(cluster) = pg_cluster::Cluster::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store = journal_recovering_on_demand(&cluster, &dir).await;
    let session = "s_fenced";
    let lease = Duration::from_secs(1);
    assert_eq!(
        store
            .claim(&claim_of(session, "replica-a", lease))
            .await
            .unwrap(),
        Claimed::Granted
    );
    let mut batch = vec![status(session, RunStatus::InProgress)];
    batch.extend((0..2).map(|i| delta(session, i)));
    store.append(&batch).await.unwrap(); // seqs 1..=3

    cluster.down();
    let mut journaled = Vec::new();
    for i in 2..5 {
        journaled.extend(store.append(&[delta(session, i)]).await.unwrap());
    }
    journaled.extend(
        store
            .append(&[status(session, RunStatus::Completed)])
            .await
            .unwrap(),
    );
    let journaled: Vec<i64> = journaled.into_iter().map(|e| e.unwrap().seq).collect();
    assert_eq!(journaled, vec![4, 5, 6, 7], "the owner's seqs");
    cluster.up();
    // The owner could not renew: its lease ran out, and another replica, which saw
    // PostgreSQL all along, took the run over (a sweep closes only expired leases).
    tokio::time::sleep(lease).await;
    let pg = PgStore::connect(&cluster.url()).await.unwrap();
    let abandoned = pg.abandoned_invocations(None).await.unwrap();
    assert!(abandoned.iter().any(|i| i.invocation_id == "inv_1"));
    let closed = pg
        .append(&[NewEvent::new(
            "acct",
            session,
            EventType::RunStatus,
            run_status_content(RunStatus::Interrupted, Some("run_owner_lost")),
        )
        .in_run("run_1", "inv_1")])
        .await
        .unwrap();
    assert_eq!(closed[0].as_ref().unwrap().seq, 4);

    store.recover_now().await;
    wait_recovered(&store).await;
    let events = assert_dense_in_postgres(&cluster.url(), session, 7).await;
    let terminals: Vec<_> = events.iter().filter(|e| e.is_terminal()).collect();
    assert_eq!(terminals.len(), 1, "one terminal status: {terminals:?}");
    assert_eq!(terminals[0].seq, 4);
    assert_eq!(terminals[0].run_status(), Some(RunStatus::Interrupted));
    let late: Vec<(i64, String, i64)> = events
        .iter()
        .filter(|e| e.is_late())
        .map(|e| {
            (
                e.seq,
                e.text().to_owned(),
                e.metadata["late"]["original_seq"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        late,
        vec![
            (5, "w2 ".to_owned(), 4),
            (6, "w3 ".to_owned(), 5),
            (7, "w4 ".to_owned(), 6)
        ],
        "the late events, after the takeover, with the seqs the owner gave them"
    );
    assert!(events[..3].iter().all(|e| !e.is_late()));
    // Projections leave them out.
    let lineage = session_log::Lineage::resolve(&pg, "acct", session)
        .await
        .unwrap()
        .unwrap();
    let history = lineage.history(&pg, None).await.unwrap();
    let seqs: Vec<i64> = history.events.iter().map(|e| e.seq).collect();
    assert!(
        !seqs.iter().any(|s| [5, 6, 7].contains(s)),
        "late events in the history: {seqs:?}"
    );
    assert!(seqs.contains(&4), "the takeover's status is: {seqs:?}");
}

/// Two replicas on one PostgreSQL: this one journals events of a session while cut off;
/// meanwhile the other, which reaches PostgreSQL, removes the session. The backfill finds
/// the removal's tombstone newer than what it journaled and discards those rows: the
/// session does not come back, in PostgreSQL or through this replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_removed_by_another_replica_is_not_brought_back_by_the_backfill() {
    let Some(cluster) = pg_cluster::Cluster::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let session = "s_removed_elsewhere";
    let kept = "s_kept";
    let store = journal_recovering_on_demand(&cluster, &dir).await;
    store
        .append(&[delta(session, 0), delta(kept, 0)])
        .await
        .unwrap();
    cluster.down();
    // Journaled here: the removal below does not know of them.
    store
        .append(&[delta(session, 1), delta(session, 2), delta(kept, 1)])
        .await
        .unwrap();
    assert!(store.journal_len().await.unwrap() >= 3);
    cluster.up();
    let other = PgStore::connect(&cluster.url()).await.unwrap();
    let removal = session_log::Removal {
        deletion_id: "del_elsewhere".into(),
        account_id: "acct".into(),
        scope: session_log::Scope::Session(session.into()),
        by: "key:other-replica".into(),
    };
    assert!(matches!(
        other.remove(&removal).await.unwrap(),
        session_log::Deletion::Removed(_)
    ));
    store.recover_now().await;
    wait_recovered(&store).await;
    let left = other
        .events(&EventQuery::session("acct", session))
        .await
        .unwrap();
    assert!(left.is_empty(), "the backfill brought back {left:?}");
    assert!(other.session("acct", session).await.unwrap().is_none());
    assert!(store.session("acct", session).await.unwrap().is_none());
    // Another session journaled in the same outage is backfilled as usual.
    assert_dense_in_postgres(&cluster.url(), kept, 2).await;
}

/// A backfill chunk that ends one run and opens the next in the same session writes the
/// first run's `session.idle`: the session was idle when that run ended, as an append
/// during no outage would have found. A run still in progress when another ended keeps
/// that end from being idle, even if it ends later in the same chunk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_that_ends_one_run_and_opens_the_next_writes_session_idle() {
    use session_log::outbox::{DeliveryQuery, Kind, Route};
    let Some(cluster) = pg_cluster::Cluster::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store = journal_recovering_on_demand(&cluster, &dir).await;
    store.route_webhooks(vec![Route {
        endpoint: "ep".into(),
        kinds: Kind::ALL.to_vec(),
        accounts: None,
    }]);
    let session = "s_idle";
    let run = |r: &str, s: RunStatus| {
        NewEvent::new(
            "acct",
            session,
            EventType::RunStatus,
            run_status_content(s, None),
        )
        .in_run(r, r)
    };
    let deliveries = || async {
        let query = DeliveryQuery {
            account_id: "acct".into(),
            limit: 100,
            ..Default::default()
        };
        let (rows, _) = store.list_webhook_deliveries(&query).await.unwrap();
        let mut kinds: Vec<(String, String)> = rows
            .into_iter()
            .map(|d| (d.kind, d.run_id.unwrap_or_default()))
            .collect();
        kinds.sort();
        kinds
    };
    let pair = |k: &str, r: &str| (k.to_owned(), r.to_owned());
    cluster.down();
    // r1 ends with nothing else in progress; r2 opens; r3 opens, r2 ends while r3 is in
    // progress, and r3 ends: r1 and r3 left the session idle, r2 did not.
    for (r, s) in [
        ("r1", RunStatus::InProgress),
        ("r1", RunStatus::Completed),
        ("r2", RunStatus::InProgress),
        ("r3", RunStatus::InProgress),
        ("r2", RunStatus::Completed),
        ("r3", RunStatus::Completed),
        ("r4", RunStatus::InProgress),
    ] {
        store.append(&[run(r, s)]).await.unwrap();
    }
    assert_eq!(store.state(), BackendState::Degraded);
    cluster.up();
    store.recover_now().await;
    wait_recovered(&store).await;
    assert_eq!(
        deliveries().await,
        vec![
            pair("run.completed", "r1"),
            pair("run.completed", "r2"),
            pair("run.completed", "r3"),
            pair("session.idle", "r1"),
            pair("session.idle", "r3"),
        ]
    );
}
