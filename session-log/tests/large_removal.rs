//! Removals at sizes one transaction cannot take.
//!
//! - An account's erasure on PostgreSQL: a removal locks each session it purges (the lock
//!   a run's claim takes), and PostgreSQL's lock table holds `max_locks_per_transaction`
//!   × connections locks in all, so an account of 100,000 sessions removed in one
//!   transaction failed with `out of shared memory`. On a private cluster whose lock
//!   table is small (10 per transaction), 2,000 sessions are enough to show it; the
//!   removal purges a chunk of sessions per transaction instead.
//! - One session of very many events, on both stores: it is hidden, then emptied a
//!   bounded number of events per transaction (`removal::rows_per_step`, set low here,
//!   which only this binary's tests see), and removed whole last.

#[path = "support/pg_cluster.rs"]
mod pg_cluster;

use serde_json::json;
use session_log::event::{run_status_content, ForkPoint};
use session_log::postgres::PgStore;
use session_log::sqlite::SqliteStore;
use session_log::{
    ArchivedFilter, Deletion, EventType, Lineage, NewEvent, Removal, RunStatus, Scope,
    SessionFilter, Store,
};

const SESSIONS: usize = 2_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_erasure_takes_more_sessions_than_the_lock_table_holds() {
    let Some(cluster) = pg_cluster::Cluster::start_with(&[
        ("max_locks_per_transaction", "10"),
        ("max_connections", "20"),
    ]) else {
        return;
    };
    let store = PgStore::connect(&cluster.url()).await.expect("connect");
    let account = "big";
    let batch: Vec<NewEvent> = (0..SESSIONS)
        .map(|i| {
            NewEvent::new(
                account,
                &format!("s{i:05}"),
                EventType::Message,
                json!({ "text": "a private question" }),
            )
            .with_role("user")
        })
        .collect();
    store.append(&batch).await.expect("seed");
    let removal = Removal {
        deletion_id: "del-big".into(),
        account_id: account.into(),
        scope: Scope::Account,
        by: "test".into(),
    };
    let outcome = store.remove(&removal).await.expect("the erasure succeeds");
    let Deletion::Removed(removed) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(removed.session_ids.len(), SESSIONS);
    assert_eq!(removed.events, SESSIONS as i64);
    let (_, total) = store
        .list_sessions(account, &SessionFilter::default(), 0, 1)
        .await
        .expect("list");
    assert_eq!(total, 0);
    let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM events WHERE account_id = $1")
        .bind(account)
        .fetch_one(store.pool())
        .await
        .expect("count");
    assert_eq!(left, 0);
    let audit: i64 = sqlx::query_scalar("SELECT sessions FROM deletions WHERE deletion_id = $1")
        .bind("del-big")
        .fetch_one(store.pool())
        .await
        .expect("audit row");
    assert_eq!(audit, SESSIONS as i64);
}

/// Events of the large session; a step deletes `STEP` of them.
const EVENTS: i64 = 50;
const STEP: i64 = 10;

#[tokio::test]
async fn a_large_session_is_removed_in_steps_on_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("large.sqlite");
    let store = SqliteStore::open(path.to_str().expect("utf-8"))
        .await
        .expect("open");
    let raw = Raw::Sqlite(store.pool().clone());
    a_large_session_is_removed_in_steps(&store, &raw).await;
}

#[tokio::test]
async fn a_large_session_is_removed_in_steps_on_postgres() {
    let url = match std::env::var("TEST_DATABASE_URL") {
        Ok(url) if !url.is_empty() => url,
        _ if std::env::var_os("CI").is_some() => panic!("TEST_DATABASE_URL must be set in CI"),
        _ => return eprintln!("TEST_DATABASE_URL is not set: skipping"),
    };
    let store = PgStore::connect(&url).await.expect("connect");
    let raw = Raw::Postgres(store.pool().clone());
    a_large_session_is_removed_in_steps(&store, &raw).await;
}

enum Raw {
    Sqlite(sqlx::SqlitePool),
    Postgres(sqlx::PgPool),
}

impl Raw {
    async fn execute(&self, sql: &str) {
        match self {
            Raw::Sqlite(pool) => sqlx::raw_sql(sql).execute(pool).await.map(|_| ()),
            Raw::Postgres(pool) => sqlx::raw_sql(sql).execute(pool).await.map(|_| ()),
        }
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    async fn count(&self, sql: &str, account: &str) -> i64 {
        match self {
            Raw::Sqlite(pool) => sqlx::query_scalar(sql).bind(account).fetch_one(pool).await,
            Raw::Postgres(pool) => sqlx::query_scalar(sql).bind(account).fetch_one(pool).await,
        }
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Makes deleting the event `seq` of `account` fail (an interruption) until
    /// [`Raw::resume`].
    async fn interrupt(&self, name: &str, account: &str, seq: i64) {
        let condition = format!("old.account_id = '{account}' AND old.seq = {seq}");
        self.execute(&match self {
            Raw::Sqlite(_) => format!(
                "CREATE TRIGGER {name} BEFORE DELETE ON events WHEN {condition} \
                 BEGIN SELECT RAISE(ABORT, 'interrupted'); END"
            ),
            Raw::Postgres(_) => format!(
                "CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ \
                 BEGIN IF {condition} THEN RAISE EXCEPTION 'interrupted'; END IF; \
                 RETURN old; END $$; \
                 CREATE TRIGGER {name} BEFORE DELETE ON events \
                 FOR EACH ROW EXECUTE FUNCTION {name}()"
            ),
        })
        .await
    }

    async fn resume(&self, name: &str) {
        self.execute(&match self {
            Raw::Sqlite(_) => format!("DROP TRIGGER {name}"),
            Raw::Postgres(_) => format!("DROP TRIGGER {name} ON events; DROP FUNCTION {name}()"),
        })
        .await
    }
}

async fn a_large_session_is_removed_in_steps(store: &dyn Store, raw: &Raw) {
    session_log::removal::set_rows_per_step(STEP);
    let account = format!("large-{}", uuid::Uuid::new_v4().simple());
    let big = "big";
    let removal = |id: &str, scope: Scope| Removal {
        deletion_id: id.to_owned(),
        account_id: account.clone(),
        scope,
        by: "test".into(),
    };
    let session = || Scope::Session(big.into());
    let event = |kind, content| NewEvent::new(&account, big, kind, content).in_run("r1", "i1");
    // A run in progress that writes EVENTS events.
    let mut batch = vec![event(
        EventType::RunStatus,
        run_status_content(RunStatus::InProgress, None),
    )];
    for i in 1..EVENTS {
        batch.push(event(
            EventType::Message,
            json!({ "text": format!("private word {i}") }),
        ));
    }
    store.append(&batch).await.expect("seed");
    let events = |account: String| async move {
        raw.count(
            "SELECT COUNT(*) FROM events WHERE account_id = $1",
            &account,
        )
        .await
    };

    // A run in progress refuses it before anything changes (it is not even archived).
    let refused = store
        .remove(&removal("del-live", session()))
        .await
        .expect("remove");
    assert!(matches!(refused, Deletion::LiveRun { .. }), "{refused:?}");
    assert_eq!(events(account.clone()).await, EVENTS);
    assert_eq!(store.archived_at(&account, big).await.expect("read"), None);
    let end = event(
        EventType::RunStatus,
        run_status_content(RunStatus::Completed, None),
    );
    store.append(&[end]).await.expect("end the run");
    let total = EVENTS + 1;

    // A fork refuses it, naming the fork (as any delete of a forked session); then the
    // fork goes, and the fork's parent keeps working meanwhile.
    let point = ForkPoint {
        session_id: big.into(),
        seq: 3,
        checkpoint_id: "c".into(),
    };
    let fork = NewEvent::new(&account, "fork", EventType::SessionFork, point.content());
    store
        .create_session(&fork)
        .await
        .expect("fork")
        .expect("new");
    let refused = store
        .remove(&removal("del-forked", session()))
        .await
        .expect("remove");
    assert!(
        matches!(&refused, Deletion::Forked { forks, .. } if forks == &["fork".to_owned()]),
        "{refused:?}"
    );
    let read = Lineage::resolve(store, &account, "fork")
        .await
        .expect("read");
    assert_eq!(read.expect("the fork reads").links().len(), 2);
    let gone = store
        .remove(&removal("del-fork", Scope::Session("fork".into())))
        .await
        .expect("remove the fork");
    assert!(matches!(gone, Deletion::Removed(_)), "{gone:?}");

    // Interrupted on its third step: two steps' events are gone, and the session is found
    // by no reader and no listing, is archived (no run starts in it), has no audit row.
    raw.interrupt(
        &format!("stop_{}", &account[6..]),
        &account,
        total - 2 * STEP - 1,
    )
    .await;
    let first = store.remove(&removal("del-1", session())).await;
    assert!(first.is_err(), "interrupted: {first:?}");
    let left = events(account.clone()).await;
    assert_eq!(left, total - 2 * STEP, "two steps of {STEP} events went");
    let lineage = Lineage::resolve(store, &account, big).await.expect("read");
    assert!(lineage.is_none(), "a half-removed session reads as gone");
    let filter = SessionFilter {
        archived: ArchivedFilter::Include,
        ..Default::default()
    };
    let (_, listed) = store
        .list_sessions(&account, &filter, 0, 10)
        .await
        .expect("list");
    assert_eq!(listed, 0, "no listing names it");
    assert!(store
        .archived_at(&account, big)
        .await
        .expect("read")
        .is_some());
    let audit = "SELECT COUNT(*) FROM deletions WHERE account_id = $1";
    assert_eq!(
        raw.count(audit, &account).await,
        1,
        "the fork's alone: the session's audit row comes last"
    );

    // The same request finishes it: nothing of it is left, the audit row counts what this
    // run removed.
    raw.resume(&format!("stop_{}", &account[6..])).await;
    let again = store
        .remove(&removal("del-2", session()))
        .await
        .expect("rerun");
    let Deletion::Removed(removed) = again else {
        panic!("{again:?}")
    };
    assert_eq!(removed.events, left);
    assert_eq!(removed.session_ids, [big]);
    for table in ["sessions", "events", "invocations"] {
        let sql = format!("SELECT COUNT(*) FROM {table} WHERE account_id = $1");
        assert_eq!(raw.count(&sql, &account).await, 0, "{table}");
    }
    assert_eq!(
        raw.count(audit, &account).await,
        2,
        "the fork's and the session's"
    );
    let tombstones = "SELECT COUNT(*) FROM removed_sessions WHERE account_id = $1";
    assert_eq!(raw.count(tombstones, &account).await, 2);
}
