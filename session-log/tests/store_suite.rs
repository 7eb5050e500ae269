//! One behavioural suite for every `Store` backend: each test runs against SQLite (a fresh
//! file) and against PostgreSQL (`TEST_DATABASE_URL`; required when `CI` is set).
//!
//! Tests share the PostgreSQL database and run in parallel, so every test works under
//! its own random account ids.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use session_log::event::run_status_content;
use session_log::postgres::PgStore;
use session_log::sqlite::SqliteStore;
use session_log::{
    EventQuery, EventType, Feedback, Hub, NewEvent, Rating, RunStatus, Store, Subscription, Writer,
    WriterConfig,
};
use sqlx::Row;

/// A store under test, with raw access for what the trait does not expose (the view).
struct Backend {
    store: Arc<dyn Store>,
    raw: Raw,
    /// Where the store is, to open more stores on it (as more gateways would).
    url: String,
    /// Keeps the SQLite file alive for the test.
    _dir: Option<tempfile::TempDir>,
}

enum Raw {
    Sqlite(sqlx::SqlitePool),
    Postgres(sqlx::PgPool),
}

impl Backend {
    async fn sqlite() -> Backend {
        let dir = tempfile::tempdir().expect("tempdir");
        // A nested path: opening must create the missing directories.
        let path = dir.path().join("nested/dir/sessions.sqlite");
        let url = path.to_str().expect("utf-8 path").to_owned();
        let store = SqliteStore::open(&url).await.expect("open sqlite store");
        Backend {
            raw: Raw::Sqlite(store.pool().clone()),
            store: Arc::new(store),
            url,
            _dir: Some(dir),
        }
    }

    /// `None` (after a notice) when PostgreSQL is not configured outside CI.
    async fn postgres() -> Option<Backend> {
        let url = database_url()?;
        let store = PgStore::connect(&url)
            .await
            .expect("connect to TEST_DATABASE_URL");
        Some(Backend {
            raw: Raw::Postgres(store.pool().clone()),
            store: Arc::new(store),
            url,
            _dir: None,
        })
    }

    /// The store under test and `n - 1` more on the same database: writers that race in
    /// the database, as several gateways do (one store commits on one connection).
    async fn replicas(&self, n: usize) -> Vec<Arc<dyn Store>> {
        let mut stores = vec![self.store.clone()];
        for _ in 1..n {
            stores.push(
                session_log::open(&self.url)
                    .await
                    .expect("open another store"),
            );
        }
        stores
    }

    /// The `session_events_readable` rows of a session, in seq order.
    async fn readable(&self, account_id: &str, session_id: &str) -> Vec<Readable> {
        const COLUMNS: &str = "seq, event_type, message_role, message_text, tool_name, \
                               lifecycle_status";
        match &self.raw {
            Raw::Sqlite(pool) => sqlx::query(&format!(
                "SELECT {COLUMNS}, created_at FROM session_events_readable \
                 WHERE account_id = ? AND session_id = ? ORDER BY seq"
            ))
            .bind(account_id)
            .bind(session_id)
            .fetch_all(pool)
            .await
            .expect("read view")
            .iter()
            .map(|row| Readable::from_row(row, row.get::<String, _>("created_at")))
            .collect(),
            Raw::Postgres(pool) => sqlx::query(&format!(
                "SELECT {COLUMNS}, created_at FROM session_events_readable \
                 WHERE account_id = $1 AND session_id = $2 ORDER BY seq"
            ))
            .bind(account_id)
            .bind(session_id)
            .fetch_all(pool)
            .await
            .expect("read view")
            .iter()
            .map(|row| {
                let at: chrono::DateTime<chrono::Utc> = row.get("created_at");
                Readable::from_row(row, at.to_rfc3339())
            })
            .collect(),
        }
    }
}

#[derive(Debug, PartialEq)]
struct Readable {
    seq: i64,
    event_type: String,
    message_role: Option<String>,
    message_text: Option<String>,
    tool_name: Option<String>,
    lifecycle_status: Option<String>,
    created_at: String,
}

impl Readable {
    fn from_row<R: Row>(row: &R, created_at: String) -> Readable
    where
        for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
        for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
        for<'r> &'r str: sqlx::ColumnIndex<R>,
    {
        Readable {
            seq: row.get("seq"),
            event_type: row.get("event_type"),
            message_role: row.get("message_role"),
            message_text: row.get("message_text"),
            tool_name: row.get("tool_name"),
            lifecycle_status: row.get("lifecycle_status"),
            created_at,
        }
    }
}

fn database_url() -> Option<String> {
    match std::env::var("TEST_DATABASE_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var_os("CI").is_some() => {
            panic!("TEST_DATABASE_URL must be set in CI (e.g. postgres://postgres@127.0.0.1:5432/test)")
        }
        _ => {
            eprintln!("TEST_DATABASE_URL is not set: skipping the PostgreSQL store tests");
            None
        }
    }
}

/// Runs each listed test against both backends.
macro_rules! store_suite {
    ($($test:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test(super::Backend::sqlite().await).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    if let Some(backend) = super::Backend::postgres().await {
                        super::$test(backend).await;
                    }
                }
            )*
        }
    };
}

store_suite!(
    ping_and_empty_batch,
    seqs_start_at_one_and_increase_per_session,
    accounts_are_isolated_under_the_same_session_id,
    events_after_a_cursor_and_filtered_by_run_and_invocation,
    a_run_is_read_from_the_stretch_its_invocations_cover,
    exactly_one_terminal_status_per_invocation,
    many_runs_start_and_end_in_one_batch,
    racing_terminal_statuses_close_once,
    open_invocations_lists_only_unfinished_ones,
    run_returns_the_latest_invocation,
    concurrent_appends_never_duplicate_or_skip_seqs,
    list_sessions_most_recent_first_with_total_and_paging,
    readable_view_flattens_content,
    json_round_trips_exactly,
    nul_characters_do_not_fail_a_batch,
    events_filtered_by_type,
    leases_claim_renew_expire_and_carry_cancels,
    a_sweep_closes_a_run_only_while_its_lease_is_still_expired,
    fresh_claims_are_written_by_the_append_that_opens_them,
    agent_refs_find_the_latest_invocation_of_the_account,
    feedback_is_listed_newest_first_per_account_and_session_and_readable,
    an_idempotency_key_names_one_run_per_account_within_its_window_until_released,
    an_imported_session_keeps_its_seqs_and_nothing_existing_is_overwritten,
    approvals_are_pending_until_one_resolver_wins,
);

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4())
}

fn message(account: &str, session: &str, role: &str, text: &str) -> NewEvent {
    NewEvent::new(
        account,
        session,
        EventType::Message,
        json!({ "text": text }),
    )
    .with_role(role)
}

fn delta(account: &str, session: &str, text: &str) -> NewEvent {
    NewEvent::new(
        account,
        session,
        EventType::TextDelta,
        json!({ "delta": text }),
    )
}

fn status(
    account: &str,
    session: &str,
    run: &str,
    invocation: &str,
    status: RunStatus,
) -> NewEvent {
    NewEvent::new(
        account,
        session,
        EventType::RunStatus,
        run_status_content(status, None),
    )
    .in_run(run, invocation)
}

fn seqs(events: &[Option<session_log::Event>]) -> Vec<Option<i64>> {
    events.iter().map(|e| e.as_ref().map(|e| e.seq)).collect()
}

async fn all_events(store: &dyn Store, account: &str, session: &str) -> Vec<session_log::Event> {
    store
        .events(&EventQuery::session(account, session))
        .await
        .expect("read events")
}

async fn ping_and_empty_batch(b: Backend) {
    b.store.ping().await.expect("ping");
    assert!(["sqlite", "postgres"].contains(&b.store.backend()));
    // An opened store names itself as its URL does before it is opened (for errors that
    // come before it exists), and never with the password.
    assert_eq!(b.store.describe(), session_log::describe(&b.url));
    if let Some((_, password)) = b.url.split_once("://").and_then(|(_, r)| {
        let userinfo = r.split_once('@')?.0;
        userinfo.split_once(':')
    }) {
        assert!(!b.store.describe().contains(password));
    }
    assert!(b.store.append(&[]).await.expect("empty append").is_empty());
    let account = unique("acct");
    assert_eq!(b.store.session(&account, "nope").await.unwrap(), None);
    assert_eq!(b.store.count_events(&account, "nope").await.unwrap(), 0);
    assert!(all_events(&*b.store, &account, "nope").await.is_empty());
    assert_eq!(
        b.store
            .list_sessions(&account, &Default::default(), 0, 10)
            .await
            .unwrap(),
        (vec![], 0)
    );
}

async fn seqs_start_at_one_and_increase_per_session(b: Backend) {
    let account = unique("acct");
    let (x, y) = (unique("x"), unique("y"));
    let first = b
        .store
        .append(&[
            message(&account, &x, "user", "x1"),
            message(&account, &y, "user", "y1"),
            delta(&account, &x, "x2"),
            delta(&account, &x, "x3"),
            delta(&account, &y, "y2"),
        ])
        .await
        .unwrap();
    assert_eq!(
        seqs(&first),
        vec![Some(1), Some(1), Some(2), Some(3), Some(2)]
    );
    let first: Vec<_> = first.into_iter().flatten().collect();
    assert!(first.iter().all(|e| e.created_at == first[0].created_at));
    assert_eq!(first[0].content, json!({"text": "x1"}));
    assert_eq!(first[0].role.as_deref(), Some("user"));

    let second = b
        .store
        .append(&[delta(&account, &y, "y3"), delta(&account, &x, "x4")])
        .await
        .unwrap();
    assert_eq!(seqs(&second), vec![Some(3), Some(4)]);

    let xs = all_events(&*b.store, &account, &x).await;
    assert_eq!(
        xs.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    assert_eq!(
        xs.iter().map(|e| e.text()).collect::<Vec<_>>(),
        vec!["x1", "x2", "x3", "x4"]
    );
    // What append returned is exactly what is stored.
    assert_eq!(xs[0], first[0]);
    assert_eq!(Some(&xs[3]), second[1].as_ref());

    let session = b
        .store
        .session(&account, &x)
        .await
        .unwrap()
        .expect("session");
    assert_eq!(session.last_seq, 4);
    assert_eq!(session.created_at, first[0].created_at);
    assert!(session.updated_at >= session.created_at);
    assert_eq!(b.store.count_events(&account, &x).await.unwrap(), 4);
    assert_eq!(b.store.count_events(&account, &y).await.unwrap(), 3);
}

async fn accounts_are_isolated_under_the_same_session_id(b: Backend) {
    let (alice, bob) = (unique("alice"), unique("bob"));
    let session = unique("shared-session");
    let (run, invocation) = (unique("run"), unique("inv"));
    b.store
        .append(&[
            status(&alice, &session, &run, &invocation, RunStatus::InProgress),
            message(&alice, &session, "user", "alice's secret"),
        ])
        .await
        .unwrap();
    // Bob uses the same ids; his events must not touch Alice's session or invocation.
    let bobs = b
        .store
        .append(&[
            message(&bob, &session, "user", "bob"),
            status(&bob, &session, &run, &invocation, RunStatus::Completed),
        ])
        .await
        .unwrap();
    assert_eq!(
        seqs(&bobs),
        vec![Some(1), None],
        "bob never opened the invocation"
    );
    assert_eq!(
        b.store
            .invocation(&alice, &invocation)
            .await
            .unwrap()
            .unwrap()
            .status,
        RunStatus::InProgress
    );
    assert_eq!(b.store.invocation(&bob, &invocation).await.unwrap(), None);
    assert_eq!(b.store.run(&bob, &run).await.unwrap(), None);
    assert_eq!(
        b.store
            .run(&alice, &run)
            .await
            .unwrap()
            .unwrap()
            .invocation_id,
        invocation
    );

    let alices = all_events(&*b.store, &alice, &session).await;
    let bobs = all_events(&*b.store, &bob, &session).await;
    assert_eq!(alices.len(), 2);
    assert_eq!(bobs.len(), 1);
    assert!(alices.iter().all(|e| e.account_id == alice));
    assert_eq!(bobs[0].text(), "bob");
    let filtered = EventQuery {
        run_id: Some(run.clone()),
        ..EventQuery::session(&bob, &session)
    };
    assert!(b.store.events(&filtered).await.unwrap().is_empty());

    assert_eq!(
        b.store
            .session(&alice, &session)
            .await
            .unwrap()
            .unwrap()
            .last_seq,
        2
    );
    assert_eq!(
        b.store
            .session(&bob, &session)
            .await
            .unwrap()
            .unwrap()
            .last_seq,
        1
    );
    assert_eq!(b.store.count_events(&bob, &session).await.unwrap(), 1);
    let (listed, total) = b
        .store
        .list_sessions(&bob, &Default::default(), 0, 10)
        .await
        .unwrap();
    assert_eq!(total, 1);
    assert_eq!(listed[0].account_id, bob);
    let stranger = unique("carol");
    assert_eq!(b.store.session(&stranger, &session).await.unwrap(), None);
    assert_eq!(
        b.store
            .list_sessions(&stranger, &Default::default(), 0, 10)
            .await
            .unwrap()
            .1,
        0
    );
}

async fn events_after_a_cursor_and_filtered_by_run_and_invocation(b: Backend) {
    let account = unique("acct");
    let session = unique("s");
    let run = unique("run");
    let (first, resumed) = (unique("inv"), unique("inv"));
    let other_run = unique("run");
    let other_invocation = unique("inv");
    let batch = vec![
        message(&account, &session, "user", "hello"), // 1, no run
        status(&account, &session, &run, &first, RunStatus::InProgress), // 2
        delta(&account, &session, "a").in_run(&run, &first), // 3
        status(&account, &session, &run, &first, RunStatus::Interrupted), // 4
        status(&account, &session, &run, &resumed, RunStatus::InProgress), // 5
        delta(&account, &session, "b").in_run(&run, &resumed), // 6
        delta(&account, &session, "c").in_run(&other_run, &other_invocation), // 7
        status(&account, &session, &run, &resumed, RunStatus::Completed), // 8
    ];
    let committed = b.store.append(&batch).await.unwrap();
    assert!(committed.iter().all(Option::is_some));

    let query = |after_seq, run_id: Option<&str>, invocation_id: Option<&str>, limit| EventQuery {
        after_seq,
        run_id: run_id.map(str::to_owned),
        invocation_id: invocation_id.map(str::to_owned),
        limit,
        ..EventQuery::session(&account, &session)
    };
    let seqs_of =
        |events: Vec<session_log::Event>| events.iter().map(|e| e.seq).collect::<Vec<_>>();

    let after = b
        .store
        .events(&query(5, None, None, i64::MAX))
        .await
        .unwrap();
    assert_eq!(seqs_of(after), vec![6, 7, 8]);
    let page = b.store.events(&query(2, None, None, 2)).await.unwrap();
    assert_eq!(seqs_of(page), vec![3, 4]);
    let of_run = b
        .store
        .events(&query(0, Some(&run), None, i64::MAX))
        .await
        .unwrap();
    assert_eq!(seqs_of(of_run), vec![2, 3, 4, 5, 6, 8]);
    let of_run_after = b
        .store
        .events(&query(4, Some(&run), None, 2))
        .await
        .unwrap();
    assert_eq!(seqs_of(of_run_after), vec![5, 6]);
    let of_invocation = b
        .store
        .events(&query(0, None, Some(&resumed), i64::MAX))
        .await
        .unwrap();
    assert_eq!(seqs_of(of_invocation), vec![5, 6, 8]);
    let both = b
        .store
        .events(&query(0, Some(&run), Some(&first), i64::MAX))
        .await
        .unwrap();
    assert_eq!(seqs_of(both), vec![2, 3, 4]);
    let mismatched = b
        .store
        .events(&query(0, Some(&other_run), Some(&first), i64::MAX))
        .await
        .unwrap();
    assert!(mismatched.is_empty());
    assert!(b
        .store
        .events(&query(8, None, None, 10))
        .await
        .unwrap()
        .is_empty());
    assert!(b
        .store
        .events(&query(0, None, None, 0))
        .await
        .unwrap()
        .is_empty());
    assert!(b
        .store
        .events(&query(0, None, None, -1))
        .await
        .unwrap()
        .is_empty());
}

/// A run's events are read from the stretch of the session between its first invocation's
/// start and its last one's end, whichever way each invocation was opened and closed
/// (claimed or not; in a batch with other runs, or one that opens and closes it at once).
/// Events tagged with the run outside that stretch are not the run's; where an invocation
/// does not know its bounds (rows from before they were recorded), the whole session is.
async fn a_run_is_read_from_the_stretch_its_invocations_cover(b: Backend) {
    use session_log::{Claim, Claimed};
    let store = &*b.store;
    let (account, session) = (unique("acct"), unique("s"));
    let (run, first, resumed) = (unique("run"), unique("inv"), unique("inv"));
    let (other, other_inv) = (unique("run"), unique("inv"));
    let (open_run, open_inv) = (unique("run"), unique("inv"));
    let untracked = unique("run");
    let d = |text: &str, run: &str, invocation: &str| {
        delta(&account, &session, text).in_run(run, invocation)
    };
    let st = |run: &str, invocation: &str, s| status(&account, &session, run, invocation, s);
    let batches = [
        // 1, 2, 3: before the runs start, events already tagged with them.
        vec![
            message(&account, &session, "user", "hi"),
            d("early", &run, &first),
            d("early", &other, &other_inv),
        ],
        // 4, 5: the run's input and start, after a claim.
        vec![
            message(&account, &session, "user", "go").in_run(&run, &first),
            st(&run, &first, RunStatus::InProgress),
        ],
        // 6, 7, 8: the run, and another one starting beside it.
        vec![
            d("a", &run, &first),
            st(&other, &other_inv, RunStatus::InProgress),
            d("x", &other, &other_inv),
        ],
        // 9..13: the first invocation ends, the resumed one starts and ends.
        vec![
            d("b", &run, &first),
            st(&run, &first, RunStatus::Interrupted),
            st(&run, &resumed, RunStatus::InProgress),
            d("c", &run, &resumed),
            st(&run, &resumed, RunStatus::Completed),
        ],
        // 14: the other run ends.
        vec![st(&other, &other_inv, RunStatus::Completed)],
        // 15, 16: late, tagged with the finished runs; 17: a run that stays open; 18: one
        // tagged but never started.
        vec![
            d("late", &run, &resumed),
            d("late", &other, &other_inv),
            st(&open_run, &open_inv, RunStatus::InProgress),
            delta(&account, &session, "u").in_run(&untracked, "no-such-invocation"),
        ],
        // 19
        vec![d("y", &open_run, &open_inv)],
    ];
    for (i, batch) in batches.iter().enumerate() {
        if i == 1 {
            let claim = Claim {
                account_id: &account,
                session_id: &session,
                run_id: &run,
                invocation_id: &first,
                owner: "replica",
                lease: Duration::from_secs(60),
                fresh: false,
            };
            assert_eq!(store.claim(&claim).await.unwrap(), Claimed::Granted);
        }
        let committed = store.append(batch).await.unwrap();
        assert!(
            committed.iter().all(Option::is_some),
            "batch {i}: {committed:?}"
        );
    }

    let read = |run_id: Option<&str>, invocation_id: Option<&str>, after_seq| {
        let query = EventQuery {
            after_seq,
            run_id: run_id.map(str::to_owned),
            invocation_id: invocation_id.map(str::to_owned),
            ..EventQuery::session(&account, &session)
        };
        async move {
            let events = store.events(&query).await.expect("read");
            events.iter().map(|e| e.seq).collect::<Vec<_>>()
        }
    };
    assert_eq!(
        read(Some(&run), None, 0).await,
        vec![4, 5, 6, 9, 10, 11, 12, 13]
    );
    assert_eq!(read(Some(&run), None, 9).await, vec![10, 11, 12, 13]);
    assert_eq!(read(None, Some(&first), 0).await, vec![4, 5, 6, 9, 10]);
    assert_eq!(read(Some(&run), Some(&resumed), 0).await, vec![11, 12, 13]);
    assert_eq!(read(Some(&other), None, 0).await, vec![7, 8, 14]);
    assert_eq!(read(Some(&open_run), None, 0).await, vec![17, 19]);
    assert_eq!(read(Some(&untracked), None, 0).await, vec![18]);

    // Invocations that do not know their bounds: the run is every event tagged with it.
    let forget = "UPDATE invocations SET after_seq = NULL, end_seq = NULL WHERE account_id = ";
    let forgotten = match &b.raw {
        Raw::Sqlite(pool) => sqlx::query(&format!("{forget} ?"))
            .bind(&account)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()),
        Raw::Postgres(pool) => sqlx::query(&format!("{forget} $1"))
            .bind(&account)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()),
    };
    assert_eq!(forgotten.expect("forget bounds"), 4);
    assert_eq!(
        read(Some(&run), None, 0).await,
        vec![2, 4, 5, 6, 9, 10, 11, 12, 13, 15]
    );
}

async fn exactly_one_terminal_status_per_invocation(b: Backend) {
    let account = unique("acct");
    let session = unique("s");
    let run = unique("run");
    let invocation = unique("inv");
    let opened = b
        .store
        .append(&[
            status(&account, &session, &run, &invocation, RunStatus::InProgress),
            delta(&account, &session, "x").in_run(&run, &invocation),
        ])
        .await
        .unwrap();
    assert_eq!(seqs(&opened), vec![Some(1), Some(2)]);
    let open = b
        .store
        .invocation(&account, &invocation)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(open.status, RunStatus::InProgress);
    assert_eq!(open.ended_at, None);
    assert_eq!(
        (open.run_id.as_str(), open.session_id.as_str()),
        (run.as_str(), session.as_str())
    );

    // Two terminals in one batch: the first closes, the second is dropped and the event
    // after it takes the next seq.
    let closed = b
        .store
        .append(&[
            status(&account, &session, &run, &invocation, RunStatus::Completed),
            status(&account, &session, &run, &invocation, RunStatus::Cancelled),
            message(&account, &session, "assistant", "after"),
        ])
        .await
        .unwrap();
    assert_eq!(seqs(&closed), vec![Some(3), None, Some(4)]);
    let done = b
        .store
        .invocation(&account, &invocation)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(done.ended_at, closed[0].as_ref().map(|e| e.created_at));

    // A later terminal for the closed invocation, one for an invocation never opened, one
    // without an invocation id, and one naming the invocation from another session.
    let never = unique("inv");
    let mut no_invocation = status(&account, &session, &run, "", RunStatus::Failed);
    no_invocation.invocation_id = None;
    let other_session = unique("s");
    let late = b
        .store
        .append(&[
            status(
                &account,
                &session,
                &run,
                &invocation,
                RunStatus::Interrupted,
            ),
            status(&account, &session, &run, &never, RunStatus::Failed),
            no_invocation,
            status(
                &account,
                &other_session,
                &run,
                &invocation,
                RunStatus::Failed,
            ),
        ])
        .await
        .unwrap();
    assert_eq!(seqs(&late), vec![None, None, None, None]);
    assert_eq!(
        b.store.session(&account, &other_session).await.unwrap(),
        None
    );
    assert_eq!(b.store.invocation(&account, &never).await.unwrap(), None);

    // Opening and closing in one batch works; a terminal before the open is dropped.
    let quick = unique("inv");
    let same_batch = b
        .store
        .append(&[
            status(&account, &session, &run, &quick, RunStatus::Failed),
            status(&account, &session, &run, &quick, RunStatus::InProgress),
            status(&account, &session, &run, &quick, RunStatus::Failed),
            status(&account, &session, &run, &quick, RunStatus::Completed),
        ])
        .await
        .unwrap();
    assert_eq!(seqs(&same_batch), vec![None, Some(5), Some(6), None]);
    assert_eq!(
        b.store
            .invocation(&account, &quick)
            .await
            .unwrap()
            .unwrap()
            .status,
        RunStatus::Failed
    );

    let events = all_events(&*b.store, &account, &session).await;
    assert_eq!(
        events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5, 6]
    );
    for inv in [&invocation, &quick] {
        let terminals = events
            .iter()
            .filter(|e| e.invocation_id.as_ref() == Some(inv) && e.is_terminal())
            .count();
        assert_eq!(terminals, 1, "invocation {inv}");
    }
    assert_eq!(
        b.store
            .session(&account, &session)
            .await
            .unwrap()
            .unwrap()
            .last_seq,
        6
    );
}

/// A batch of a busy gateway: runs of different sessions starting and ending together,
/// with deltas between, each invocation named once. Each terminal is judged on its own.
async fn many_runs_start_and_end_in_one_batch(b: Backend) {
    let account = unique("acct");
    let run = unique("run");
    let (ending, closed, starting, other) = (unique("s"), unique("s"), unique("s"), unique("s"));
    let (a, c, x) = (unique("inv"), unique("inv"), unique("inv"));
    b.store
        .append(&[
            status(&account, &ending, &run, &a, RunStatus::InProgress),
            status(&account, &closed, &run, &c, RunStatus::InProgress),
            status(&account, &other, &run, &x, RunStatus::InProgress),
        ])
        .await
        .unwrap();
    b.store
        .append(&[status(&account, &closed, &run, &c, RunStatus::Completed)])
        .await
        .unwrap();

    let (new, never) = (unique("inv"), unique("inv"));
    let batch = b
        .store
        .append(&[
            delta(&account, &ending, "last").in_run(&run, &a),
            status(&account, &ending, &run, &a, RunStatus::Completed),
            status(&account, &starting, &run, &new, RunStatus::InProgress),
            delta(&account, &starting, "first").in_run(&run, &new),
            // Already closed, never opened, and open but in another session: all dropped.
            status(&account, &closed, &run, &c, RunStatus::Failed),
            status(&account, &ending, &run, &never, RunStatus::Failed),
            status(&account, &ending, &run, &x, RunStatus::Cancelled),
        ])
        .await
        .unwrap();
    assert_eq!(
        seqs(&batch),
        vec![Some(2), Some(3), Some(1), Some(2), None, None, None]
    );
    let state = |inv: String| {
        let store = b.store.clone();
        let account = account.clone();
        async move {
            store
                .invocation(&account, &inv)
                .await
                .unwrap()
                .map(|i| i.status)
        }
    };
    assert_eq!(state(a.clone()).await, Some(RunStatus::Completed));
    assert_eq!(state(c.clone()).await, Some(RunStatus::Completed));
    assert_eq!(state(new.clone()).await, Some(RunStatus::InProgress));
    assert_eq!(state(x.clone()).await, Some(RunStatus::InProgress));
    assert_eq!(state(never.clone()).await, None);
    let texts: Vec<(i64, String)> = all_events(&*b.store, &account, &starting)
        .await
        .iter()
        .map(|e| (e.seq, e.event_type.as_str().to_owned()))
        .collect();
    assert_eq!(
        texts,
        vec![(1, "run_status".to_owned()), (2, "text_delta".to_owned())]
    );
}

async fn racing_terminal_statuses_close_once(b: Backend) {
    let stores = b.replicas(3).await;
    let account = unique("acct");
    let session = unique("s");
    let run = unique("run");
    for _ in 0..5 {
        let invocation = unique("inv");
        b.store
            .append(&[status(
                &account,
                &session,
                &run,
                &invocation,
                RunStatus::InProgress,
            )])
            .await
            .unwrap();
        let closers = [
            RunStatus::Completed,
            RunStatus::Failed,
            RunStatus::Cancelled,
            RunStatus::Interrupted,
        ]
        .into_iter()
        .cycle()
        .take(12)
        .enumerate()
        .map(|(i, s)| {
            let store = stores[i % stores.len()].clone();
            let batch = vec![
                delta(&account, &session, "noise"),
                status(&account, &session, &run, &invocation, s),
            ];
            tokio::spawn(async move { store.append(&batch).await })
        })
        .collect::<Vec<_>>();
        let mut closed = 0;
        for closer in closers {
            let result = closer.await.expect("task").expect("append");
            assert!(result[0].is_some());
            closed += usize::from(result[1].is_some());
        }
        assert_eq!(closed, 1);
        let terminals = all_events(&*b.store, &account, &session)
            .await
            .into_iter()
            .filter(|e| e.invocation_id.as_ref() == Some(&invocation) && e.is_terminal())
            .count();
        assert_eq!(terminals, 1);
    }
}

async fn open_invocations_lists_only_unfinished_ones(b: Backend) {
    let (alice, bob) = (unique("alice"), unique("bob"));
    let session = unique("s");
    let (a1, a2, b1) = (unique("inv"), unique("inv"), unique("inv"));
    b.store
        .append(&[
            status(&alice, &session, "r1", &a1, RunStatus::InProgress),
            status(&alice, &session, "r2", &a2, RunStatus::InProgress),
            status(&bob, &session, "r1", &b1, RunStatus::InProgress),
            status(&alice, &session, "r2", &a2, RunStatus::Completed),
        ])
        .await
        .unwrap();
    let open: Vec<_> = b
        .store
        .open_invocations()
        .await
        .unwrap()
        .into_iter()
        .filter(|i| i.account_id == alice || i.account_id == bob)
        .map(|i| (i.account_id, i.invocation_id, i.status))
        .collect();
    assert_eq!(open.len(), 2, "{open:?}");
    assert!(open.contains(&(alice.clone(), a1.clone(), RunStatus::InProgress)));
    assert!(open.contains(&(bob.clone(), b1.clone(), RunStatus::InProgress)));

    // Closing what a dead gateway left open, as start-up does, empties the list.
    b.store
        .append(&[
            status(&alice, &session, "r1", &a1, RunStatus::Interrupted),
            status(&bob, &session, "r1", &b1, RunStatus::Interrupted),
        ])
        .await
        .unwrap();
    let still_open = b
        .store
        .open_invocations()
        .await
        .unwrap()
        .into_iter()
        .filter(|i| i.account_id == alice || i.account_id == bob)
        .count();
    assert_eq!(still_open, 0);
}

async fn run_returns_the_latest_invocation(b: Backend) {
    let account = unique("acct");
    let session = unique("s");
    let run = unique("run");
    let (first, second) = (unique("inv"), unique("inv"));
    b.store
        .append(&[
            status(&account, &session, &run, &first, RunStatus::InProgress),
            status(&account, &session, &run, &first, RunStatus::Interrupted),
        ])
        .await
        .unwrap();
    let latest = b.store.run(&account, &run).await.unwrap().unwrap();
    assert_eq!(
        (latest.invocation_id.as_str(), latest.status),
        (first.as_str(), RunStatus::Interrupted)
    );
    assert!(latest.ended_at.is_some());

    b.store
        .append(&[status(
            &account,
            &session,
            &run,
            &second,
            RunStatus::InProgress,
        )])
        .await
        .unwrap();
    let latest = b.store.run(&account, &run).await.unwrap().unwrap();
    assert_eq!(latest.invocation_id, second);
    assert_eq!(latest.status, RunStatus::InProgress);
    assert_eq!(latest.ended_at, None);
    assert_eq!(b.store.run(&account, "no-such-run").await.unwrap(), None);
}

async fn concurrent_appends_never_duplicate_or_skip_seqs(b: Backend) {
    const TASKS: usize = 16;
    const BATCHES: usize = 20;
    let stores = b.replicas(4).await;
    let account = unique("acct");
    let session = unique("s");
    let other = unique("s");
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let store = stores[task % stores.len()].clone();
            let (account, session, other) = (account.clone(), session.clone(), other.clone());
            tokio::spawn(async move {
                let mut mine = Vec::new();
                for batch_no in 0..BATCHES {
                    // Batches of varying size, some also touching a second session.
                    let size = 1 + (task + batch_no) % 4;
                    let mut batch: Vec<NewEvent> = (0..size)
                        .map(|i| delta(&account, &session, &format!("{task}:{batch_no}:{i}")))
                        .collect();
                    if batch_no % 3 == 0 {
                        batch.push(delta(&account, &other, "other"));
                    }
                    let committed = store.append(&batch).await.expect("append");
                    let committed: Vec<_> = committed.into_iter().map(Option::unwrap).collect();
                    // Seqs within one batch are consecutive for a session.
                    let in_session: Vec<i64> = committed
                        .iter()
                        .filter(|e| e.session_id == session)
                        .map(|e| e.seq)
                        .collect();
                    assert!(in_session.windows(2).all(|w| w[1] == w[0] + 1));
                    mine.extend(committed.into_iter().filter(|e| e.session_id == session));
                }
                mine
            })
        })
        .collect();
    let mut returned = Vec::new();
    for task in tasks {
        returned.extend(task.await.expect("task"));
    }
    let stored = all_events(&*b.store, &account, &session).await;
    let expected: Vec<i64> = (1..=returned.len() as i64).collect();
    assert_eq!(stored.iter().map(|e| e.seq).collect::<Vec<_>>(), expected);
    let mut returned_seqs: Vec<i64> = returned.iter().map(|e| e.seq).collect();
    returned_seqs.sort_unstable();
    assert_eq!(returned_seqs, expected);
    // Each append returned the seq its event is stored under (seqs the database computes
    // in one statement must agree with the ones the store hands back).
    for event in &returned {
        assert_eq!(
            stored[event.seq as usize - 1].text(),
            event.text(),
            "seq {}",
            event.seq
        );
    }
    // Each task's events keep their submission order.
    for task in 0..TASKS {
        let prefix = format!("{task}:");
        let texts: Vec<&str> = stored
            .iter()
            .map(|e| e.text())
            .filter(|t| t.starts_with(&prefix))
            .collect();
        let mut sorted = texts.clone();
        sorted.sort_by_key(|t| {
            let parts: Vec<usize> = t.split(':').map(|p| p.parse().unwrap()).collect();
            (parts[1], parts[2])
        });
        assert_eq!(texts, sorted);
    }
    let others = all_events(&*b.store, &account, &other).await;
    let expected_others = TASKS * BATCHES.div_ceil(3);
    assert_eq!(
        others.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=expected_others as i64).collect::<Vec<_>>()
    );
}

async fn list_sessions_most_recent_first_with_total_and_paging(b: Backend) {
    let account = unique("acct");
    let names: Vec<String> = (0..5).map(|i| format!("s{i}")).collect();
    for name in &names {
        b.store
            .append(&[message(&account, name, "user", name)])
            .await
            .unwrap();
    }
    // Touching s1 again makes it the most recent.
    b.store
        .append(&[message(&account, "s1", "user", "again")])
        .await
        .unwrap();
    let ids = |sessions: Vec<session_log::Session>| {
        sessions
            .into_iter()
            .map(|s| s.session_id)
            .collect::<Vec<_>>()
    };
    let (all, total) = b
        .store
        .list_sessions(&account, &Default::default(), 0, 100)
        .await
        .unwrap();
    assert_eq!(total, 5);
    assert_eq!(ids(all), vec!["s1", "s4", "s3", "s2", "s0"]);
    let (page, total) = b
        .store
        .list_sessions(&account, &Default::default(), 1, 2)
        .await
        .unwrap();
    assert_eq!(total, 5);
    assert_eq!(ids(page), vec!["s4", "s3"]);
    let (past_end, total) = b
        .store
        .list_sessions(&account, &Default::default(), 10, 2)
        .await
        .unwrap();
    assert_eq!((past_end.len(), total), (0, 5));
    let (none, total) = b
        .store
        .list_sessions(&account, &Default::default(), 0, 0)
        .await
        .unwrap();
    assert_eq!((none.len(), total), (0, 5));

    // Sessions written in one batch share updated_at; the id breaks the tie.
    let other = unique("acct");
    b.store
        .append(&[
            message(&other, "b", "user", "."),
            message(&other, "c", "user", "."),
            message(&other, "a", "user", "."),
        ])
        .await
        .unwrap();
    let (tied, _) = b
        .store
        .list_sessions(&other, &Default::default(), 0, 10)
        .await
        .unwrap();
    assert_eq!(ids(tied), vec!["a", "b", "c"]);
}

async fn readable_view_flattens_content(b: Backend) {
    let account = unique("acct");
    let session = unique("s");
    let (run, invocation) = (unique("run"), unique("inv"));
    let in_run = |e: NewEvent| e.in_run(&run, &invocation);
    let committed = b
        .store
        .append(&[
            in_run(status(&account, &session, &run, &invocation, RunStatus::InProgress)),
            in_run(message(&account, &session, "user", "What's the weather?")),
            in_run(
                NewEvent::new(
                    &account,
                    &session,
                    EventType::ToolCall,
                    json!({"call_id": "c1", "name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}),
                )
                .with_role("assistant"),
            ),
            in_run(
                NewEvent::new(
                    &account,
                    &session,
                    EventType::ToolResult,
                    json!({"call_id": "c1", "output": "rain", "name": "get_weather"}),
                )
                .with_role("tool"),
            ),
            in_run(delta(&account, &session, "It r")),
            in_run(NewEvent::new(
                &account,
                &session,
                EventType::Error,
                json!({"code": "upstream", "message": "boom"}),
            )),
            in_run(status(&account, &session, &run, &invocation, RunStatus::Completed)),
        ])
        .await
        .unwrap();
    assert!(committed.iter().all(Option::is_some));
    let rows = b.readable(&account, &session).await;
    let flat: Vec<_> = rows
        .iter()
        .map(|r| {
            (
                r.seq,
                r.event_type.as_str(),
                r.message_role.as_deref(),
                r.message_text.as_deref(),
                r.tool_name.as_deref(),
                r.lifecycle_status.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        flat,
        vec![
            (1, "run_status", None, None, None, Some("in_progress")),
            (
                2,
                "message",
                Some("user"),
                Some("What's the weather?"),
                None,
                None
            ),
            (
                3,
                "tool_call",
                Some("assistant"),
                None,
                Some("get_weather"),
                None
            ),
            (
                4,
                "tool_result",
                Some("tool"),
                Some("rain"),
                Some("get_weather"),
                None
            ),
            (5, "text_delta", None, Some("It r"), None, None),
            (6, "error", None, Some("boom"), None, None),
            (7, "run_status", None, None, None, Some("completed")),
        ]
    );
    assert!(rows.iter().all(|r| r.created_at.starts_with("20")));
}

async fn json_round_trips_exactly(b: Backend) {
    let account = unique("acct");
    let session = unique("s");
    let content = json!({
        "text": "Grüße, 世界! مرحبا 👋🏽 e\u{301} \"quoted\" back\\slash\nnew line\ttab \u{1}",
        "content": [
            {"type": "text", "text": "one"},
            {"type": "image", "image_url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"},
            {"type": "file", "filename": "ñ.pdf", "file_data": null}
        ],
        "nested": {"deep": {"deeper": [1, -2, 3.5, 1e-7, 12345678901234567_u64, u64::MAX, i64::MIN, true, false, null, [], {}]}},
        "": "empty key",
        "emoji key 🔑": {"a": []}
    });
    let metadata = json!({"exchange_id": "ex-1", "headers": {"x-trace": ["a", "b"]}, "n": 0.1});
    let scalars = [
        json!("just a string"),
        json!(42),
        json!(null),
        json!([1, "two", {"3": 4}]),
    ];
    let mut batch = vec![
        NewEvent::new(&account, &session, EventType::Message, content.clone())
            .with_role("user")
            .with_metadata(metadata.clone()),
    ];
    batch.extend(
        scalars
            .iter()
            .map(|c| NewEvent::new(&account, &session, EventType::Approval, c.clone())),
    );
    let committed: Vec<_> = b
        .store
        .append(&batch)
        .await
        .unwrap()
        .into_iter()
        .map(Option::unwrap)
        .collect();
    let stored = all_events(&*b.store, &account, &session).await;
    assert_eq!(stored, committed);
    assert_eq!(stored[0].content, content);
    assert_eq!(stored[0].metadata, metadata);
    for (event, scalar) in stored[1..].iter().zip(&scalars) {
        assert_eq!(&event.content, scalar);
        assert_eq!(event.metadata, json!({}));
    }
}

async fn nul_characters_do_not_fail_a_batch(b: Backend) {
    let account = unique("acct");
    let session = unique("s");
    let committed: Vec<_> = b
        .store
        .append(&[NewEvent::new(
            &account,
            &session,
            EventType::ToolResult,
            json!({"call_id": "c", "output": "binary\u{0}ish"}),
        )])
        .await
        .expect("a NUL in content must not fail the batch")
        .into_iter()
        .map(Option::unwrap)
        .collect();
    let stored = all_events(&*b.store, &account, &session).await;
    assert_eq!(stored, committed);
    let output = stored[0].content["output"].as_str().unwrap();
    assert!(output.starts_with("binary") && output.ends_with("ish"));

    // Through the writer, which hands its own batch on: a live subscriber and the caller
    // get what is stored too, not what was submitted.
    let hub = Hub::new();
    let writer = Writer::spawn(b.store.clone(), hub.clone(), WriterConfig::default());
    let mut live = Subscription::open(
        b.store.clone(),
        &hub,
        EventQuery {
            after_seq: 1,
            ..EventQuery::session(&account, &session)
        },
    );
    let returned = writer
        .append(vec![NewEvent::new(
            &account,
            &session,
            EventType::ToolResult,
            json!({"call_id": "d", "output": "more\u{0}"}),
        )])
        .await
        .unwrap();
    let published = tokio::time::timeout(Duration::from_secs(10), live.next())
        .await
        .expect("the live event")
        .unwrap()
        .unwrap();
    let stored = all_events(&*b.store, &account, &session).await;
    assert_eq!(stored.len(), 2);
    assert_eq!(returned, stored[1..]);
    assert_eq!(*published, stored[1]);
}

/// `open` picks the backend from the URL.
#[tokio::test]
async fn open_dispatches_on_the_url() {
    let dir = tempfile::tempdir().unwrap();
    for url in [
        format!("sqlite:{}/a/log.sqlite", dir.path().display()),
        format!("sqlite://{}/b/log.sqlite", dir.path().display()),
        format!("{}/c/log.sqlite", dir.path().display()),
    ] {
        let store = session_log::open(&url).await.expect(&url);
        assert_eq!(store.backend(), "sqlite");
        store.ping().await.unwrap();
    }
    let memory = session_log::open(":memory:").await.unwrap();
    let account = unique("acct");
    memory.append(&[delta(&account, "s", "x")]).await.unwrap();
    assert_eq!(memory.count_events(&account, "s").await.unwrap(), 1);

    if let Some(url) = database_url() {
        let store = session_log::open(&url).await.unwrap();
        assert_eq!(store.backend(), "postgres");
        store.ping().await.unwrap();
    }
}

/// Appends commit on a connection of their own: a burst of reads or claims holding every
/// pooled connection (many clients replaying long sessions, say) does not hold up the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_commits_do_not_wait_for_a_busy_pool() {
    let Some(url) = database_url() else { return };
    let store = PgStore::connect(&url).await.unwrap();
    let mut held = Vec::new();
    for _ in 0..store.pool().options().get_max_connections() {
        held.push(store.pool().acquire().await.unwrap());
    }
    let account = unique("acct");
    let batches = [
        vec![delta(&account, "s", "plain")],
        vec![
            message(&account, "s", "user", "hi"),
            status(&account, "s", "run-1", "inv-1", RunStatus::InProgress),
        ],
    ];
    for batch in batches {
        let committed = tokio::time::timeout(Duration::from_secs(5), store.append(&batch))
            .await
            .expect("the append waited for the busy pool")
            .unwrap();
        assert!(committed.iter().all(Option::is_some));
    }
    drop(held);
    let texts: Vec<String> = all_events(&store, &account, "s")
        .await
        .iter()
        .map(|e| format!("{}:{}", e.seq, e.event_type.as_str()))
        .collect();
    assert_eq!(texts, ["1:text_delta", "2:message", "3:run_status"]);
}

/// A commit its caller stops waiting for (the outage journal gives PostgreSQL 2 s) either
/// committed whole or not at all, and the next commit on the store's write connection goes
/// on from there: the seqs stay dense. Cut at several points, from before the first byte
/// is sent to the middle of the statement; a transaction's batch (a run starting twice)
/// and a one-statement batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_commit_cut_off_midway_leaves_the_next_right() {
    let Some(url) = database_url() else { return };
    let store = PgStore::connect(&url).await.unwrap();
    for (i, cut_after_us) in [0, 200, 500, 1_000, 2_000, 5_000].into_iter().enumerate() {
        let account = unique("acct");
        let mut batch: Vec<NewEvent> = (0..400)
            .map(|n| delta(&account, "s", &n.to_string()))
            .collect();
        if i % 2 == 1 {
            let start = || status(&account, "s", "run-1", "inv-1", RunStatus::InProgress);
            batch.extend([start(), start()]);
        }
        let cut = Duration::from_micros(cut_after_us);
        let _ = tokio::time::timeout(cut, store.append(&batch)).await;
        let next = store.append(&[delta(&account, "s", "next")]).await.unwrap();
        let stored = store.count_events(&account, "s").await.unwrap();
        assert!(
            stored == 1 || stored == batch.len() as i64 + 1,
            "cut after {cut_after_us} µs: {stored} events stored"
        );
        assert_eq!(
            seqs(&next),
            vec![Some(stored)],
            "cut after {cut_after_us} µs"
        );
    }
}

/// Closing a run is one decision: a terminal status that waited for another update of
/// its invocation's row (a lease renewal in flight, here held open in a transaction)
/// commits together with the row's close, so the lease sweeper, which closes only open
/// rows, finds nothing to close and the run ends with exactly one terminal status. (The
/// one-statement append once locked the row's newest version and then looked for it by
/// `ctid` with the statement's older snapshot: the event was inserted, the row stayed
/// open and the other replica's sweep added an `interrupted`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_terminal_status_racing_a_lease_renewal_closes_its_run_once() {
    let Some(url) = database_url() else { return };
    let store = Arc::new(PgStore::connect(&url).await.unwrap());
    let account = unique("acct");
    let claimed = store
        .claim(&session_log::Claim {
            account_id: &account,
            session_id: "s",
            run_id: "run",
            invocation_id: "inv",
            owner: "replica-a",
            lease: Duration::from_secs(60),
            fresh: false,
        })
        .await
        .unwrap();
    assert_eq!(claimed, session_log::Claimed::Granted);
    store
        .append(&[status(&account, "s", "run", "inv", RunStatus::InProgress)])
        .await
        .unwrap();

    // A renewal of the lease, not committed yet.
    let mut renewal = store.pool().begin().await.unwrap();
    sqlx::query(
        "UPDATE invocations SET lease_expires_at = now() + interval '60 seconds' \
         WHERE account_id = $1 AND invocation_id = 'inv'",
    )
    .bind(&account)
    .execute(&mut *renewal)
    .await
    .unwrap();
    let completing = tokio::spawn({
        let (store, account) = (store.clone(), account.clone());
        async move {
            store
                .append(&[status(&account, "s", "run", "inv", RunStatus::Completed)])
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!completing.is_finished(), "the close waits for the row");
    renewal.commit().await.unwrap();
    let completed = completing.await.unwrap().unwrap();
    assert_eq!(
        seqs(&completed),
        vec![Some(2)],
        "the owner's completed is kept"
    );
    let row = store.invocation(&account, "inv").await.unwrap().unwrap();
    assert_eq!(row.status, RunStatus::Completed, "the row closed with it");

    // The other replica's sweep finds the run closed: no second terminal status.
    let swept = store
        .abandoned_invocations(Some("replica-a"))
        .await
        .unwrap();
    assert!(!swept.iter().any(|i| i.account_id == account));
    let interrupted = store
        .append(&[status(&account, "s", "run", "inv", RunStatus::Interrupted)])
        .await
        .unwrap();
    assert_eq!(
        seqs(&interrupted),
        vec![None],
        "a closed run is not closed again"
    );
    let terminals: Vec<(i64, Option<RunStatus>)> = all_events(&*store, &account, "s")
        .await
        .iter()
        .filter(|e| e.is_terminal())
        .map(|e| (e.seq, e.run_status()))
        .collect();
    assert_eq!(terminals, vec![(2, Some(RunStatus::Completed))]);
}

/// A lease sweep's close (`run_owner_lost`) racing its owner's renewal: the sweep saw the
/// lease expired, the owner renewed it before the close landed. The close re-checks the
/// lease in its own statement and leaves the live run open, whichever way the append
/// settles it (one statement, a transaction closing one by one, or in bulk); a lease still
/// expired is closed once.
async fn a_sweep_closes_a_run_only_while_its_lease_is_still_expired(b: Backend) {
    let store = &*b.store;
    let account = unique("acct");
    let claimed = store
        .claim(&session_log::Claim {
            account_id: &account,
            session_id: "s",
            run_id: "run",
            invocation_id: "inv",
            owner: "replica-a",
            lease: Duration::from_millis(200),
            fresh: false,
        })
        .await
        .unwrap();
    assert_eq!(claimed, session_log::Claimed::Granted);
    store
        .append(&[status(&account, "s", "run", "inv", RunStatus::InProgress)])
        .await
        .unwrap();
    let sweep = || {
        NewEvent::new(
            &account,
            "s",
            EventType::RunStatus,
            run_status_content(
                RunStatus::Interrupted,
                Some(session_log::event::RUN_OWNER_LOST),
            ),
        )
        .in_run("run", "inv")
    };
    let abandoned = || async {
        store
            .abandoned_invocations(None)
            .await
            .unwrap()
            .iter()
            .any(|i| i.account_id == account)
    };
    tokio::time::sleep(Duration::from_millis(400)).await;
    // PostgreSQL: one statement; a transaction closing one by one (the invocation
    // twice); in bulk (more events than one statement inserts). SQLite: in bulk; one by
    // one.
    let many_deltas = |n: usize| (0..n).map(|i| delta(&account, "s", &format!("d{i}")));
    let batches: Vec<Vec<NewEvent>> = vec![
        vec![sweep()],
        vec![sweep(), sweep()],
        std::iter::once(sweep()).chain(many_deltas(5001)).collect(),
    ];
    for batch in &batches {
        assert!(abandoned().await, "the sweep sees the lease expired");
        // The owner's renewal lands between the sweep's look and its close.
        let renewed = store
            .renew_leases("replica-a", &["inv".to_owned()], Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(renewed.len(), 1);
        let closed = store.append(batch).await.unwrap();
        let terminals = batch
            .iter()
            .zip(&closed)
            .filter(|(e, c)| e.event_type == EventType::RunStatus && c.is_some())
            .count();
        assert_eq!(
            terminals,
            0,
            "the live run is not closed ({} events)",
            batch.len()
        );
        let row = store.invocation(&account, "inv").await.unwrap().unwrap();
        assert_eq!(row.status, RunStatus::InProgress);
        // The owner then stops renewing: expired again for the next try.
        store
            .renew_leases("replica-a", &["inv".to_owned()], Duration::from_millis(100))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(abandoned().await);
    let closed = store.append(&[sweep()]).await.unwrap();
    assert!(closed[0].is_some(), "a lease still expired is closed");
    let row = store.invocation(&account, "inv").await.unwrap().unwrap();
    assert_eq!(row.status, RunStatus::Interrupted);
    let terminals = all_events(store, &account, "s")
        .await
        .iter()
        .filter(|e| e.is_terminal())
        .count();
    assert_eq!(terminals, 1);
}

/// Reopening a SQLite file keeps its log and does not re-run migrations.
/// A log written before invocations recorded their stretch of seqs: the migration keeps
/// every event, the old run still reads whole (its bounds are unknown), and runs started
/// after it read by their stretch.
#[tokio::test]
async fn sqlite_runs_from_before_the_bounds_migration_still_read_whole() {
    use sqlx::Connection;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.sqlite");
    let old = dir.path().join("migrations");
    std::fs::create_dir(&old).unwrap();
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/sqlite");
    for entry in std::fs::read_dir(&here).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name().to_str().unwrap() < "0006" {
            std::fs::copy(entry.path(), old.join(entry.file_name())).unwrap();
        }
    }
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true);
    let mut conn = sqlx::SqliteConnection::connect_with(&options)
        .await
        .unwrap();
    sqlx::migrate::Migrator::new(old.as_path())
        .await
        .unwrap()
        .run(&mut conn)
        .await
        .unwrap();
    // Run `r1` as the schema of then stored it: an early tagged event, its start, a delta
    // and its end, with a message of no run between.
    let account = unique("acct");
    let at = "2026-01-01T00:00:00Z";
    sqlx::query("INSERT INTO sessions VALUES (?, 's', 5, ?, ?)")
        .bind(&account)
        .bind(at)
        .bind(at)
        .execute(&mut conn)
        .await
        .unwrap();
    for (seq, run, event_type, content) in [
        (1, Some("r1"), "text_delta", r#"{"delta":"early"}"#),
        (2, Some("r1"), "run_status", r#"{"status":"in_progress"}"#),
        (3, None, "message", r#"{"text":"aside"}"#),
        (4, Some("r1"), "text_delta", r#"{"delta":"a"}"#),
        (5, Some("r1"), "run_status", r#"{"status":"completed"}"#),
    ] {
        sqlx::query(
            "INSERT INTO events (account_id, session_id, seq, run_id, invocation_id, \
             event_type, content_json, metadata_json, created_at) \
             VALUES (?, 's', ?, ?, ?, ?, ?, '{}', ?)",
        )
        .bind(&account)
        .bind(seq)
        .bind(run)
        .bind(run.map(|_| "i1"))
        .bind(event_type)
        .bind(content)
        .bind(at)
        .execute(&mut conn)
        .await
        .unwrap();
    }
    sqlx::query(
        "INSERT INTO invocations (account_id, invocation_id, session_id, run_id, status, \
         started_at, ended_at) VALUES (?, 'i1', 's', 'r1', 'completed', ?, ?)",
    )
    .bind(&account)
    .bind(at)
    .bind(at)
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();

    let store = SqliteStore::open(path.to_str().unwrap()).await.unwrap();
    store
        .append(&[
            status(&account, "s", "r2", "i2", RunStatus::InProgress),
            delta(&account, "s", "b").in_run("r2", "i2"),
            status(&account, "s", "r2", "i2", RunStatus::Completed),
        ])
        .await
        .unwrap();
    store
        .append(&[delta(&account, "s", "late").in_run("r1", "i1")])
        .await
        .unwrap();
    let read = |run: &str| {
        let query = EventQuery {
            run_id: Some(run.to_owned()),
            ..EventQuery::session(&account, "s")
        };
        let store = &store;
        async move {
            let events = store.events(&query).await.unwrap();
            events.iter().map(|e| e.seq).collect::<Vec<_>>()
        }
    };
    assert_eq!(read("r1").await, vec![1, 2, 4, 5, 9]);
    assert_eq!(read("r2").await, vec![6, 7, 8]);
    assert_eq!(all_events(&store, &account, "s").await.len(), 9);
    let run = store.run(&account, "r1").await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Completed);
}

#[tokio::test]
async fn sqlite_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.sqlite");
    let path = path.to_str().unwrap();
    let account = unique("acct");
    {
        let store = SqliteStore::open(path).await.unwrap();
        store.append(&[delta(&account, "s", "1")]).await.unwrap();
        store.close().await;
    }
    let store = SqliteStore::open(path).await.unwrap();
    let next = store.append(&[delta(&account, "s", "2")]).await.unwrap();
    assert_eq!(seqs(&next), vec![Some(2)]);
    let seen: HashSet<String> = all_events(&store, &account, "s")
        .await
        .iter()
        .map(|e| e.text().to_owned())
        .collect();
    assert_eq!(seen, HashSet::from(["1".to_owned(), "2".to_owned()]));
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(mode, "wal");
}

async fn events_filtered_by_type(b: Backend) {
    let account = unique("acct");
    let session = unique("s");
    let batch = vec![
        message(&account, &session, "user", "hello"),   // 1
        delta(&account, &session, "a"),                 // 2
        message(&account, &session, "assistant", "hi"), // 3
        delta(&account, &session, "b"),                 // 4
    ];
    b.store.append(&batch).await.unwrap();
    let of_types = |types: Vec<EventType>, after_seq| EventQuery {
        event_types: Some(types),
        after_seq,
        ..EventQuery::session(&account, &session)
    };
    let seqs_of =
        |events: Vec<session_log::Event>| events.iter().map(|e| e.seq).collect::<Vec<_>>();
    let messages = b
        .store
        .events(&of_types(vec![EventType::Message], 0))
        .await
        .unwrap();
    assert_eq!(seqs_of(messages), vec![1, 3]);
    let both = b
        .store
        .events(&of_types(vec![EventType::TextDelta, EventType::Message], 1))
        .await
        .unwrap();
    assert_eq!(seqs_of(both), vec![2, 3, 4]);
    let none = b.store.events(&of_types(vec![], 0)).await.unwrap();
    assert!(none.is_empty());
}

/// Run ownership: one live claim per session; renewing keeps it; a lease that runs out (or
/// an invocation opened without a claim) is abandoned; a restarted owner finds its own;
/// a cancel request reaches the owner through its next renewal.
async fn leases_claim_renew_expire_and_carry_cancels(b: Backend) {
    use session_log::{Claim, Claimed};
    let store = &*b.store;
    let (account, session) = (unique("acct"), unique("sess"));
    let (owner_a, owner_b) = (unique("replica-a"), unique("replica-b"));
    let claim = |invocation: &'static str, owner: &str, lease_ms: u64| {
        let (account, session, owner) = (account.clone(), session.clone(), owner.to_owned());
        async move {
            store
                .claim(&Claim {
                    account_id: &account,
                    session_id: &session,
                    run_id: "run",
                    invocation_id: invocation,
                    owner: &owner,
                    lease: Duration::from_millis(lease_ms),
                    fresh: false,
                })
                .await
                .expect("claim")
        }
    };
    let mine = |open: Vec<session_log::Invocation>| -> Vec<String> {
        open.into_iter()
            .filter(|i| i.account_id == account)
            .map(|i| i.invocation_id)
            .collect()
    };

    assert_eq!(claim("inv-1", &owner_a, 60_000).await, Claimed::Granted);
    assert_eq!(
        claim("inv-2", &owner_b, 60_000).await,
        Claimed::Busy {
            run_id: "run".into(),
            invocation_id: "inv-1".into()
        },
        "a second live run in the session is refused"
    );
    // The in_progress event finds the claimed row.
    store
        .append(&[status(
            &account,
            &session,
            "run",
            "inv-1",
            RunStatus::InProgress,
        )])
        .await
        .expect("append");
    let lease = store
        .lease(&account, "inv-1")
        .await
        .expect("lease")
        .expect("exists");
    assert_eq!(
        (lease.owner.as_deref(), lease.live),
        (Some(owner_a.as_str()), true)
    );
    assert!(mine(store.abandoned_invocations(None).await.expect("abandoned")).is_empty());
    assert_eq!(
        mine(
            store
                .abandoned_invocations(Some(&owner_a))
                .await
                .expect("abandoned")
        ),
        ["inv-1"],
        "a restarted owner finds its own runs"
    );

    // Renewal: only the owner's, and it carries a cancel request.
    let ids = vec!["inv-1".to_owned()];
    assert!(store
        .renew_leases(&owner_b, &ids, Duration::from_secs(60))
        .await
        .expect("renew")
        .is_empty());
    assert!(store
        .request_cancel(&account, "inv-1")
        .await
        .expect("cancel"));
    let renewed = store
        .renew_leases(&owner_a, &ids, Duration::from_millis(300))
        .await
        .expect("renew");
    assert_eq!(renewed.len(), 1);
    assert!(renewed[0].cancel_requested);

    // Once the lease runs out the run is abandoned and the session free again (on
    // PostgreSQL, once it is out by more than the claimer's lease: its owner may be
    // renewing it after an outage).
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        mine(store.abandoned_invocations(None).await.expect("abandoned")),
        ["inv-1"]
    );
    assert_eq!(claim("inv-3", &owner_b, 100).await, Claimed::Granted);
    // Closed invocations are neither renewed nor cancellable.
    store
        .append(&[status(
            &account,
            &session,
            "run",
            "inv-1",
            RunStatus::Interrupted,
        )])
        .await
        .expect("append");
    assert!(store
        .renew_leases(&owner_a, &ids, Duration::from_secs(60))
        .await
        .expect("renew")
        .is_empty());
    assert!(!store
        .request_cancel(&account, "inv-1")
        .await
        .expect("cancel"));
    assert_eq!(
        store.lease(&account, "inv-nope").await.expect("lease"),
        None
    );
    // Opened without a claim: only a restart closes it (nobody can tell who drives it).
    let legacy = unique("sess");
    store
        .append(&[status(
            &account,
            &legacy,
            "run",
            "inv-legacy",
            RunStatus::InProgress,
        )])
        .await
        .expect("append");
    let lease = store
        .lease(&account, "inv-legacy")
        .await
        .expect("lease")
        .expect("exists");
    assert_eq!((lease.owner, lease.live), (None, false));
    assert!(
        !mine(store.abandoned_invocations(None).await.expect("abandoned"))
            .contains(&"inv-legacy".to_owned())
    );
    assert!(mine(
        store
            .abandoned_invocations(Some("anyone"))
            .await
            .expect("abandoned")
    )
    .contains(&"inv-legacy".to_owned()));
}

/// A new conversation's claim is only remembered: it is this owner's run from the start
/// (renewed, refusing a second run, keeping an agent handle), and whichever way the
/// batch that opens it commits, the row gets the claim's owner and lease.
async fn fresh_claims_are_written_by_the_append_that_opens_them(b: Backend) {
    use session_log::{Claim, Claimed};
    let store = &*b.store;
    let account = unique("acct");
    let owner = unique("replica");
    let claim = |session: &str, invocation: &str| {
        let (account, session, invocation, owner) = (
            account.clone(),
            session.to_owned(),
            invocation.to_owned(),
            owner.clone(),
        );
        async move {
            store
                .claim(&Claim {
                    account_id: &account,
                    session_id: &session,
                    run_id: "run",
                    invocation_id: &invocation,
                    owner: &owner,
                    lease: Duration::from_secs(60),
                    fresh: true,
                })
                .await
                .expect("claim")
        }
    };
    let start = |session: &str, invocation: &str| {
        vec![
            message(&account, session, "user", "hi"),
            status(&account, session, "run", invocation, RunStatus::InProgress),
        ]
    };
    // Three starts, one per way a batch commits: alone with a plain event of another
    // session, opened and ended in one batch, and with more events than one insert takes.
    let (s1, s2, s3) = (unique("sess"), unique("sess"), unique("sess"));
    for (session, invocation) in [(&s1, "inv-1"), (&s2, "inv-2"), (&s3, "inv-3")] {
        assert_eq!(claim(session, invocation).await, Claimed::Granted);
    }
    assert_eq!(
        claim(&s1, "inv-other").await,
        Claimed::Busy {
            run_id: "run".into(),
            invocation_id: "inv-1".into()
        },
        "a second run in the session is refused before the first is written"
    );
    let ids: Vec<String> = ["inv-1", "inv-2", "inv-3"].map(String::from).to_vec();
    let mut renewed: Vec<String> = store
        .renew_leases(&owner, &ids, Duration::from_secs(60))
        .await
        .expect("renew")
        .into_iter()
        .map(|r| r.invocation_id)
        .collect();
    renewed.sort();
    assert_eq!(renewed, ids, "a claim not written yet is its owner's run");
    assert!(store
        .renew_leases("someone-else", &ids, Duration::from_secs(60))
        .await
        .expect("renew")
        .is_empty());
    store
        .set_agent_ref(&account, "inv-1", "task-1")
        .await
        .expect("set agent ref");

    let mut first = start(&s1, "inv-1");
    first.push(delta(&account, &unique("sess"), "plain"));
    let mut second = start(&s2, "inv-2");
    second.push(status(&account, &s2, "run", "inv-2", RunStatus::Completed));
    let mut third = start(&s3, "inv-3");
    third.extend((0..5000).map(|i| delta(&account, &s3, &i.to_string())));
    for batch in [first, second, third] {
        let committed = store.append(&batch).await.expect("append");
        assert!(committed.iter().all(Option::is_some), "every event is kept");
    }

    for invocation in ["inv-1", "inv-2", "inv-3"] {
        let lease = store
            .lease(&account, invocation)
            .await
            .expect("lease")
            .expect("the open wrote the row");
        assert_eq!(
            (lease.owner.as_deref(), lease.live),
            (Some(owner.as_str()), true),
            "{invocation} carries the claim's owner and lease"
        );
    }
    let inv_1 = store
        .invocation(&account, "inv-1")
        .await
        .expect("invocation")
        .expect("exists");
    assert_eq!(inv_1.agent_ref.as_deref(), Some("task-1"));
    let inv_2 = store.invocation(&account, "inv-2").await.unwrap().unwrap();
    assert_eq!(inv_2.status, RunStatus::Completed);
    // Written now: renewed by the database, once, and no longer holding the session here.
    let renewed = store
        .renew_leases(&owner, &ids, Duration::from_secs(60))
        .await
        .expect("renew");
    assert_eq!(
        renewed.len(),
        2,
        "the open runs, once each (inv-2 ended): {renewed:?}"
    );
    assert_eq!(
        claim(&s2, "inv-4").await,
        Claimed::Granted,
        "the session of an ended run is free"
    );
}

/// Two processes sharing one SQLite file: each claims the same session before either has
/// written (claims are noted in memory until the run's first append), so both are
/// granted; the append decides — the second run's events are refused, and the first run
/// stays the session's only open invocation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_claims_race_across_processes_and_the_append_decides() {
    use session_log::{Claim, Claimed};
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.sqlite");
    let path = path.to_str().unwrap();
    let a = session_log::sqlite::SqliteStore::open(path).await.unwrap();
    let b = session_log::sqlite::SqliteStore::open(path).await.unwrap();
    let (account, session) = (unique("acct"), unique("sess"));
    let claim = |invocation: &'static str, owner: &'static str| Claim {
        account_id: &account,
        session_id: &session,
        run_id: invocation,
        invocation_id: invocation,
        owner,
        lease: Duration::from_secs(60),
        fresh: false,
    };
    assert_eq!(
        a.claim(&claim("inv-a", "replica-a")).await.unwrap(),
        Claimed::Granted
    );
    assert_eq!(
        b.claim(&claim("inv-b", "replica-b")).await.unwrap(),
        Claimed::Granted
    );

    let first = a
        .append(&[status(
            &account,
            &session,
            "inv-a",
            "inv-a",
            RunStatus::InProgress,
        )])
        .await
        .unwrap();
    assert!(first[0].is_some(), "the first append opens its run");
    let second = b
        .append(&[
            message(&account, &session, "user", "hello").in_run("inv-b", "inv-b"),
            status(&account, &session, "inv-b", "inv-b", RunStatus::InProgress),
        ])
        .await
        .unwrap();
    assert!(
        second.iter().all(Option::is_none),
        "the losing run writes nothing: {second:?}"
    );
    let open: Vec<String> = a
        .open_invocations()
        .await
        .unwrap()
        .into_iter()
        .filter(|i| i.account_id == account)
        .map(|i| i.invocation_id)
        .collect();
    assert_eq!(open, ["inv-a"]);
    // And a later claim through either process sees the live run.
    assert!(matches!(
        b.claim(&claim("inv-c", "replica-b")).await.unwrap(),
        Claimed::Busy { .. }
    ));
}

async fn agent_refs_find_the_latest_invocation_of_the_account(b: Backend) {
    use session_log::{Claim, Claimed};
    use std::time::Duration;
    let store = &*b.store;
    let (alice, bob) = (unique("alice"), unique("bob"));
    let (session, run) = (unique("s"), unique("run"));
    let (first, second) = (unique("inv"), unique("inv"));
    // Agent handles are the agent's, not unique across accounts: both use this one.
    let task = unique("task");

    store
        .append(&[status(
            &alice,
            &session,
            &run,
            &first,
            RunStatus::InProgress,
        )])
        .await
        .unwrap();
    assert_eq!(
        store.invocation_by_agent_ref(&alice, &task).await.unwrap(),
        None
    );
    store.set_agent_ref(&alice, &first, &task).await.unwrap();
    let found = store
        .invocation_by_agent_ref(&alice, &task)
        .await
        .unwrap()
        .expect("found by its agent handle");
    assert_eq!(
        (
            found.session_id.as_str(),
            found.run_id.as_str(),
            found.invocation_id.as_str(),
            found.status,
            found.agent_ref.as_deref(),
        ),
        (
            session.as_str(),
            run.as_str(),
            first.as_str(),
            RunStatus::InProgress,
            Some(task.as_str()),
        )
    );
    assert_eq!(
        store.invocation(&alice, &first).await.unwrap(),
        Some(found.clone()),
        "the handle is on the invocation row"
    );

    // Another account cannot find it, nor set a handle on it; unknown ids are no-ops.
    assert_eq!(
        store.invocation_by_agent_ref(&bob, &task).await.unwrap(),
        None
    );
    store.set_agent_ref(&bob, &first, "bobs").await.unwrap();
    store
        .set_agent_ref(&alice, "no-such-invocation", &task)
        .await
        .unwrap();
    assert_eq!(
        store.invocation_by_agent_ref(&bob, "bobs").await.unwrap(),
        None
    );
    assert_eq!(
        store.invocation_by_agent_ref(&alice, &task).await.unwrap(),
        Some(found.clone())
    );
    assert_eq!(
        store
            .invocation_by_agent_ref(&alice, &unique("task"))
            .await
            .unwrap(),
        None
    );

    // A resume that the agent answers under the same handle: the newest invocation wins,
    // whether open or not. Bob's invocation with the same handle stays his.
    store
        .append(&[status(
            &alice,
            &session,
            &run,
            &first,
            RunStatus::Interrupted,
        )])
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    store
        .append(&[
            status(&alice, &session, &run, &second, RunStatus::InProgress),
            status(&bob, &session, &run, &first, RunStatus::InProgress),
        ])
        .await
        .unwrap();
    store.set_agent_ref(&alice, &second, &task).await.unwrap();
    store.set_agent_ref(&bob, &first, &task).await.unwrap();
    let latest = store
        .invocation_by_agent_ref(&alice, &task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            latest.invocation_id.as_str(),
            latest.status,
            latest.account_id.as_str()
        ),
        (second.as_str(), RunStatus::InProgress, alice.as_str())
    );
    assert_eq!(latest.agent_ref.as_deref(), Some(task.as_str()));
    store
        .append(&[status(
            &alice,
            &session,
            &run,
            &second,
            RunStatus::Completed,
        )])
        .await
        .unwrap();
    let latest = store
        .invocation_by_agent_ref(&alice, &task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (latest.invocation_id.as_str(), latest.status),
        (second.as_str(), RunStatus::Completed)
    );
    let bobs = store
        .invocation_by_agent_ref(&bob, &task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (bobs.account_id, bobs.invocation_id),
        (bob.clone(), first.clone())
    );

    // A handle set between a claim and its `in_progress` append is kept (SQLite writes
    // the claimed row only with that append).
    let (claimed_session, claimed) = (unique("s"), unique("inv"));
    let other_task = unique("task");
    let granted = store
        .claim(&Claim {
            account_id: &alice,
            session_id: &claimed_session,
            run_id: &run,
            invocation_id: &claimed,
            owner: "replica",
            lease: Duration::from_secs(60),
            fresh: false,
        })
        .await
        .unwrap();
    assert_eq!(granted, Claimed::Granted);
    store
        .set_agent_ref(&alice, &claimed, &other_task)
        .await
        .unwrap();
    let opened = store
        .append(&[status(
            &alice,
            &claimed_session,
            &run,
            &claimed,
            RunStatus::InProgress,
        )])
        .await
        .unwrap();
    assert!(opened[0].is_some());
    let found = store
        .invocation_by_agent_ref(&alice, &other_task)
        .await
        .unwrap()
        .expect("the claimed invocation, by its handle");
    assert_eq!(
        (found.session_id, found.invocation_id),
        (claimed_session, claimed)
    );
}

async fn an_idempotency_key_names_one_run_per_account_within_its_window_until_released(b: Backend) {
    use chrono::{Duration, Utc};
    use session_log::IdempotentRun;
    let (account, other, key) = (unique("acct"), unique("acct"), unique("key"));
    let now = Utc::now();
    let record = |account: &str, run: &str, at| IdempotentRun {
        account_id: account.to_owned(),
        key: key.clone(),
        session_id: "s".to_owned(),
        run_id: run.to_owned(),
        created_at: at,
    };
    let window = now - Duration::hours(24);
    let first = record(&account, "run_1", now);
    assert_eq!(
        b.store
            .claim_idempotency_key(&first, window, None)
            .await
            .unwrap(),
        None,
        "a new key is claimed"
    );
    // A repeat finds the first run, and changes nothing.
    let found = b
        .store
        .claim_idempotency_key(&record(&account, "run_2", now), window, None)
        .await
        .unwrap()
        .expect("the first record");
    assert_eq!(found.run_id, "run_1");
    assert_eq!(found.created_at.timestamp_millis(), now.timestamp_millis());
    // Another account's key of the same name is its own.
    assert_eq!(
        b.store
            .claim_idempotency_key(&record(&other, "run_x", now), window, None)
            .await
            .unwrap(),
        None
    );
    // A retry of a failed first run takes the key over; a stale one is replaced too.
    let retry = record(&account, "run_3", now);
    assert_eq!(
        b.store
            .claim_idempotency_key(&retry, window, Some("run_1"))
            .await
            .unwrap(),
        None
    );
    let later = now + Duration::hours(25);
    let fresh = record(&account, "run_4", later);
    assert_eq!(
        b.store
            .claim_idempotency_key(&fresh, later - Duration::hours(24), None)
            .await
            .unwrap(),
        None,
        "past its window a key starts over"
    );
    let found = b
        .store
        .claim_idempotency_key(&record(&account, "run_5", later), later, Some("run_3"))
        .await
        .unwrap()
        .expect("run_4 holds the key");
    assert_eq!(found.run_id, "run_4");
    // Releasing a claim the key has moved on from leaves the key's run alone; releasing
    // its own makes the key free at once, within its window.
    b.store
        .release_idempotency_key(&account, &key, "run_3")
        .await
        .unwrap();
    let found = b
        .store
        .claim_idempotency_key(&record(&account, "run_6", later), later, None)
        .await
        .unwrap()
        .expect("run_4 still holds the key");
    assert_eq!(found.run_id, "run_4");
    b.store
        .release_idempotency_key(&account, &key, "run_4")
        .await
        .unwrap();
    assert_eq!(
        b.store
            .claim_idempotency_key(&record(&account, "run_6", later), later, None)
            .await
            .unwrap(),
        None,
        "a released key is claimed by the next request"
    );
    let found = b
        .store
        .claim_idempotency_key(&record(&other, "run_y", later), window, None)
        .await
        .unwrap()
        .expect("the other account's claim is untouched");
    assert_eq!(found.run_id, "run_x");
}

async fn feedback_is_listed_newest_first_per_account_and_session_and_readable(b: Backend) {
    let (account, other) = (unique("acct"), unique("acct"));
    let (s1, s2) = (unique("s"), unique("s"));
    let (run, invocation) = (unique("run"), unique("inv"));
    b.store
        .append(&[
            status(&account, &s1, &run, &invocation, RunStatus::InProgress),
            message(&account, &s1, "user", "hi").in_run(&run, &invocation),
            message(&account, &s1, "assistant", "first draft").in_run(&run, &invocation),
            message(&account, &s1, "assistant", "the answer").in_run(&run, &invocation),
            status(&account, &s1, &run, &invocation, RunStatus::Completed),
        ])
        .await
        .unwrap();
    let record = |n: u32, account: &str, session: &str, rating: Rating| Feedback {
        account_id: account.to_owned(),
        // Time-ordered like the gateway's ids: a later n sorts later.
        feedback_id: format!("fb_{n:04}_{}", uuid::Uuid::new_v4().simple()),
        session_id: session.to_owned(),
        run_id: run.clone(),
        invocation_id: Some(invocation.clone()),
        response_id: (n == 1).then(|| "resp_x".to_owned()),
        rating,
        comment: (n == 2).then(|| "caf\u{e9} \"quoted\"".to_owned()),
        created_at: chrono::DateTime::from_timestamp(1_796_000_000 + i64::from(n), 0).unwrap(),
    };
    let mine = [
        record(1, &account, &s1, Rating::Up),
        record(2, &account, &s1, Rating::Down),
        record(3, &account, &s2, Rating::Up),
    ];
    for f in &mine {
        b.store.put_feedback(f).await.unwrap();
    }
    b.store
        .put_feedback(&record(4, &other, &s1, Rating::Down))
        .await
        .unwrap();

    let (all, total) = b.store.list_feedback(&account, None, 0, 10).await.unwrap();
    assert_eq!(total, 3);
    assert_eq!(all, vec![mine[2].clone(), mine[1].clone(), mine[0].clone()]);
    let (page, total) = b
        .store
        .list_feedback(&account, Some(&s1), 1, 1)
        .await
        .unwrap();
    assert_eq!((page, total), (vec![mine[0].clone()], 2));
    let (theirs, total) = b
        .store
        .list_feedback(&other, Some(&s2), 0, 10)
        .await
        .unwrap();
    assert_eq!((theirs.len(), total), (0, 0));

    // The operators' view: each rating beside the run's last assistant answer.
    let sql = "SELECT rating, comment, answer_text FROM feedback_readable \
               WHERE account_id = $1 AND session_id = $2 ORDER BY feedback_id";
    let rows: Vec<(String, Option<String>, Option<String>)> = match &b.raw {
        Raw::Sqlite(pool) => sqlx::query_as(sql)
            .bind(&account)
            .bind(&s1)
            .fetch_all(pool)
            .await
            .unwrap(),
        Raw::Postgres(pool) => sqlx::query_as(sql)
            .bind(&account)
            .bind(&s1)
            .fetch_all(pool)
            .await
            .unwrap(),
    };
    let answer = Some("the answer".to_owned());
    assert_eq!(
        rows,
        vec![
            ("up".to_owned(), None, answer.clone()),
            (
                "down".to_owned(),
                Some("caf\u{e9} \"quoted\"".to_owned()),
                answer
            ),
        ]
    );
}

/// A session exported from one account (as another gateway's log would hold it) imported
/// into another: same seqs, times, content and runs; the next append continues after its
/// last seq; an id the account has already refuses the whole import.
async fn an_imported_session_keeps_its_seqs_and_nothing_existing_is_overwritten(b: Backend) {
    let store = &*b.store;
    let (from, to, other) = (unique("from"), unique("to"), unique("other"));
    let session = unique("s");
    let (run1, inv1, run2, inv2) = (unique("run"), unique("inv"), unique("run"), unique("inv"));
    let mut end = status(&from, &session, &run1, &inv1, RunStatus::Completed);
    end.metadata = json!({ "agent_ref": "task-7", "usage": { "input_tokens": 3 } });
    store
        .append(&[
            message(&from, &session, "user", "My project is zebra42.").in_run(&run1, &inv1),
            status(&from, &session, &run1, &inv1, RunStatus::InProgress),
            delta(&from, &session, "OK").in_run(&run1, &inv1),
            message(&from, &session, "assistant", "OK.\u{0}").in_run(&run1, &inv1),
            end,
            message(&from, &session, "user", "And then?").in_run(&run2, &inv2),
            status(&from, &session, &run2, &inv2, RunStatus::InProgress),
        ])
        .await
        .expect("append");
    let exported = all_events(store, &from, &session).await;
    let moved = |account: &str| -> Vec<session_log::Event> {
        exported
            .iter()
            .cloned()
            .map(|mut e| {
                e.account_id = account.to_owned();
                e
            })
            .collect()
    };

    let imported = store.import_session(&moved(&to)).await.expect("import");
    assert_eq!(imported, session_log::Imported::Created);
    let read = all_events(store, &to, &session).await;
    assert_eq!(read, moved(&to), "seqs, times, content and runs kept");
    let s = store
        .session(&to, &session)
        .await
        .unwrap()
        .expect("session");
    assert_eq!(s.last_seq, 7);
    assert_eq!(
        (s.created_at, s.updated_at),
        (exported[0].created_at, exported[6].created_at)
    );
    let done = store.invocation(&to, &inv1).await.unwrap().expect("inv1");
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(done.agent_ref.as_deref(), Some("task-7"));
    assert_eq!(
        store
            .invocation_by_agent_ref(&to, "task-7")
            .await
            .unwrap()
            .map(|i| i.invocation_id),
        Some(inv1.clone())
    );
    let open = store.invocation(&to, &inv2).await.unwrap().expect("inv2");
    assert_eq!(open.status, RunStatus::InProgress);
    assert_eq!(store.lease(&to, &inv2).await.unwrap().unwrap().owner, None);
    // The run reads back whole, and the session goes on after its last seq.
    let run = store
        .events(&EventQuery {
            run_id: Some(run1.clone()),
            ..EventQuery::session(&to, &session)
        })
        .await
        .unwrap();
    assert_eq!(
        run.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5]
    );
    let closed = store
        .append(&[status(&to, &session, &run2, &inv2, RunStatus::Interrupted)])
        .await
        .unwrap();
    assert_eq!(seqs(&closed), [Some(8)]);
    // The source account is untouched.
    assert_eq!(all_events(store, &from, &session).await, exported);

    // Again into the same account: the session exists, nothing changes.
    assert_eq!(
        store.import_session(&moved(&to)).await.unwrap(),
        session_log::Imported::SessionExists
    );
    assert_eq!(all_events(store, &to, &session).await.len(), 8);
    // Into an account that has one of its invocation ids (under another session): refused
    // whole, the session not created.
    store
        .append(&[status(
            &other,
            &unique("s"),
            &run2,
            &inv2,
            RunStatus::InProgress,
        )])
        .await
        .unwrap();
    assert_eq!(
        store.import_session(&moved(&other)).await.unwrap(),
        session_log::Imported::InvocationExists(inv2.clone())
    );
    assert_eq!(store.session(&other, &session).await.unwrap(), None);
    assert!(all_events(store, &other, &session).await.is_empty());

    // Which ids another account holds (what the gateway's ImportSession refuses): the
    // account's own are not counted, anyone else's are.
    let fresh = unique("inv");
    let known = |account: &str, ids: &[&String]| {
        let ids: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
        let account = account.to_owned();
        async move {
            store
                .invocation_known_elsewhere(&account, &ids)
                .await
                .unwrap()
        }
    };
    assert_eq!(known(&to, &[&fresh, &inv2]).await, Some(inv2.clone()));
    assert_eq!(known(&to, &[&fresh]).await, None);
    assert_eq!(known(&to, &[]).await, None);
    let alone = unique("acct");
    let own = unique("inv");
    store
        .append(&[status(
            &alone,
            &unique("s"),
            &unique("run"),
            &own,
            RunStatus::InProgress,
        )])
        .await
        .unwrap();
    assert_eq!(known(&alone, &[&own]).await, None);
    assert_eq!(known(&to, &[&own]).await, Some(own.clone()));
}

#[path = "store_suite/history.rs"]
mod history;
#[path = "store_suite/removal.rs"]
mod removal;
#[path = "store_suite/search.rs"]
mod search;
#[path = "store_suite/updates.rs"]
mod updates;
#[path = "store_suite/webhooks.rs"]
mod webhooks;

async fn approvals_are_pending_until_one_resolver_wins(b: Backend) {
    use session_log::{Approval, ApprovalFilter, Decision};
    let (account, other) = (unique("acct"), unique("acct"));
    let (s1, s2) = (unique("s"), unique("s"));
    // In the future: a gateway's timeout sweep on the same database (real time) leaves
    // these alone.
    let base = chrono::Utc::now().timestamp() + 10 * 86_400;
    let at = move |secs: i64| chrono::DateTime::from_timestamp(base + secs, 0).unwrap();
    let approval = |account: &str, session: &str, request: &str, n: i64| Approval {
        account_id: account.to_owned(),
        session_id: session.to_owned(),
        request_id: request.to_owned(),
        run_id: format!("run-{request}"),
        invocation_id: format!("inv-{request}"),
        agent_id: Some(if n == 3 { "other-agent" } else { "agent" }.to_owned()),
        kind: "approval".into(),
        action: json!({ "kind": "approval", "request_id": request, "tool": "deploy",
                        "arguments": {"env": "caf\u{e9}"} }),
        requested_at: at(n),
        expires_at: (n == 2).then(|| at(100)),
        decision: None,
        resolution: None,
        resolved_at: None,
    };
    let (r1, r2, r3) = (unique("r"), unique("r"), unique("r"));
    // Recorded out of order; listed oldest first. Recording again changes nothing.
    for a in [
        approval(&account, &s2, &r3, 3),
        approval(&account, &s1, &r1, 1),
        approval(&account, &s1, &r2, 2),
        approval(&account, &s1, &r1, 9),
        approval(&other, &s1, &unique("r"), 0),
    ] {
        b.store.put_approval(&a).await.unwrap();
    }
    let list = |filter: ApprovalFilter<'static>, offset, limit| {
        let (store, account) = (b.store.clone(), account.clone());
        async move {
            let (page, total) = store
                .list_pending_approvals(&account, filter, offset, limit)
                .await
                .unwrap();
            (
                page.into_iter().map(|a| a.request_id).collect::<Vec<_>>(),
                total,
            )
        }
    };
    assert_eq!(
        list(ApprovalFilter::default(), 0, 10).await,
        (vec![r1.clone(), r2.clone(), r3.clone()], 3)
    );
    assert_eq!(
        list(ApprovalFilter::default(), 1, 1).await,
        (vec![r2.clone()], 3)
    );
    let by_agent = ApprovalFilter {
        session_id: None,
        agent_id: Some("other-agent"),
    };
    assert_eq!(list(by_agent, 0, 10).await, (vec![r3.clone()], 1));
    let stored = b.store.approval(&account, &s1, &r1).await.unwrap().unwrap();
    assert_eq!(stored.action["arguments"], json!({"env": "caf\u{e9}"}));
    assert_eq!(stored.requested_at, at(1));
    assert!(b.store.approval(&other, &s1, &r1).await.unwrap().is_none());

    // Resolvers race: exactly one wins.
    let by = json!({ "by": { "credential": "key:a" }, "comment": "ok" });
    let attempts: Vec<_> = (0..8)
        .map(|i| {
            let (store, account, s1, r1, by) = (
                b.store.clone(),
                account.clone(),
                s1.clone(),
                r1.clone(),
                by.clone(),
            );
            tokio::spawn(async move {
                let decision = if i % 2 == 0 {
                    Decision::Approve
                } else {
                    Decision::Reject
                };
                store
                    .resolve_approval(&account, &s1, &r1, decision, &by, at(50))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut won = Vec::new();
    for a in attempts {
        if let Some(resolved) = a.await.unwrap() {
            won.push(resolved);
        }
    }
    assert_eq!(won.len(), 1, "{won:?}");
    assert_eq!(won[0].resolution, Some(by));
    assert_eq!(won[0].resolved_at, Some(at(50)));
    let now = b.store.approval(&account, &s1, &r1).await.unwrap().unwrap();
    assert_eq!(now.decision, won[0].decision);
    // Another account cannot resolve it.
    assert!(b
        .store
        .resolve_approval(&other, &s2, &r3, Decision::Approve, &json!({}), at(51))
        .await
        .unwrap()
        .is_none());

    // The timeout takes only what expired, once.
    let expired: Vec<String> = b
        .store
        .resolve_expired_approvals(at(99), Decision::Reject)
        .await
        .unwrap()
        .into_iter()
        .filter(|a| a.account_id == account)
        .map(|a| a.request_id)
        .collect();
    assert!(expired.is_empty());
    let expired: Vec<Approval> = b
        .store
        .resolve_expired_approvals(at(100), Decision::Reject)
        .await
        .unwrap()
        .into_iter()
        .filter(|a| a.account_id == account)
        .collect();
    assert_eq!(expired.len(), 1);
    assert_eq!(expired[0].request_id, r2);
    assert_eq!(expired[0].decision, Some(Decision::Reject));
    assert_eq!(expired[0].resolution, Some(json!({ "timeout": true })));
    assert!(b
        .store
        .resolve_expired_approvals(at(200), Decision::Reject)
        .await
        .unwrap()
        .iter()
        .all(|a| a.account_id != account));
    assert_eq!(list(ApprovalFilter::default(), 0, 10).await, (vec![r3], 1));
    // A session that went on drops what it left pending; resolved ones stay.
    assert_eq!(
        b.store.drop_pending_approvals(&account, &s1).await.unwrap(),
        0
    );
    assert_eq!(
        b.store.drop_pending_approvals(&account, &s2).await.unwrap(),
        1
    );
    assert_eq!(list(ApprovalFilter::default(), 0, 10).await, (vec![], 0));
    assert!(b
        .store
        .approval(&account, &s1, &r1)
        .await
        .unwrap()
        .is_some());
}
